//! A realistic stream of ban events: many servers, jails and addresses, drawn with skewed
//! (power-law) weights as in real fail2ban logs, with log lines shaped like the daemons' own. The
//! same sample becomes a callback body (for the relay) or a store event (for seeding), so every
//! measurement inserts the same kind of rows.

use banhub::domain::events::{
    BanDuration, BanFacts, EventBody, EventSource, IpOrCidr, JailName, Logs, NewEvent,
};
use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

/// Jails, the common ones first (and drawn most often).
const JAILS: [&str; 40] = [
    "sshd",
    "nginx-http-auth",
    "nginx-botsearch",
    "postfix",
    "postfix-sasl",
    "dovecot",
    "recidive",
    "apache-auth",
    "vsftpd",
    "wordpress",
    "nginx-limit-req",
    "apache-badbots",
    "apache-noscript",
    "apache-overflows",
    "courier-auth",
    "exim",
    "exim-spam",
    "named-refused",
    "proftpd",
    "pure-ftpd",
    "roundcube-auth",
    "sogo-auth",
    "asterisk",
    "freeswitch",
    "mysqld-auth",
    "mongodb-auth",
    "grafana",
    "gitlab",
    "gitea",
    "nextcloud",
    "openvpn",
    "xrdp",
    "squid",
    "haproxy-http-auth",
    "traefik-auth",
    "monit",
    "webmin-auth",
    "phpmyadmin-syslog",
    "selinux-ssh",
    "portsentry",
];

/// One text in this many log lines is the rare marker that the text-search benchmarks look for.
pub const RARE_EVERY: u64 = 100_000;
/// The rare marker; a search for it finds about one event in [`RARE_EVERY`].
pub const RARE_TEXT: &str = "xz-backdoor-probe";
/// A text found in most sshd events.
pub const COMMON_TEXT: &str = "Failed password";

/// The shape of the fleet the events come from.
#[derive(Debug, Clone, Copy)]
pub struct Fleet {
    pub servers: usize,
    pub jails: usize,
    /// Distinct addresses to draw from; a few are drawn very often, most rarely.
    pub addresses: u64,
}

impl Default for Fleet {
    fn default() -> Self {
        Self {
            servers: 50,
            jails: JAILS.len(),
            addresses: 4_000_000,
        }
    }
}

/// One generated event.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Index of the server in `0..Fleet::servers`.
    pub server: usize,
    pub ip: IpOrCidr,
    pub jail: JailName,
    pub unban: bool,
    pub observed: bool,
    pub failures: u32,
    pub logs: Vec<String>,
    pub at_ms: i64,
    pub ban_count: u32,
}

impl Sample {
    /// The body fail2ban's action would post to the relay.
    pub fn callback_json(&self, hostname: &str) -> String {
        serde_json::json!({
            "ip": self.ip.to_string(),
            "jail": self.jail.as_str(),
            "hostname": hostname,
            "failures": self.failures,
            "logs": self.logs,
            "banTime": self.at_ms / 1000,
            "banDuration": 600,
            "banCount": self.ban_count,
        })
        .to_string()
    }

    /// The event as the hub stores it.
    pub fn new_event(&self, hostname: &str) -> NewEvent {
        let facts = BanFacts {
            ip: self.ip,
            jail: self.jail.clone(),
            hostname: hostname.to_owned(),
            failures: self.failures,
            logs: Logs::capped(&self.logs),
            ban_time: Some(self.at_ms / 1000),
            ban_duration: Some(BanDuration::Seconds(600)),
            ban_count: Some(self.ban_count),
        };
        NewEvent {
            occurred_at: DateTime::<Utc>::from_timestamp_millis(self.at_ms).unwrap_or_default(),
            source: if self.observed {
                EventSource::Observed
            } else {
                EventSource::Action
            },
            body: if self.unban {
                EventBody::Unban(facts)
            } else {
                EventBody::Ban(facts)
            },
        }
    }
}

/// A seeded, repeatable generator of [`Sample`]s.
#[derive(Debug)]
pub struct Generator {
    fleet: Fleet,
    rng: StdRng,
    drawn: u64,
}

impl Generator {
    pub fn new(fleet: Fleet, seed: u64) -> Self {
        Self {
            fleet,
            rng: StdRng::seed_from_u64(seed),
            drawn: 0,
        }
    }

    /// The next event, at `at_ms`.
    pub fn sample(&mut self, at_ms: i64) -> Sample {
        self.drawn += 1;
        let rng = &mut self.rng;
        let k = skewed(rng, self.fleet.addresses, 3.0);
        let ip = address(k);
        let jail_index = skewed(rng, self.fleet.jails.min(JAILS.len()) as u64, 2.0) as usize;
        let jail = JAILS[jail_index];
        let server = skewed(rng, self.fleet.servers as u64, 1.5) as usize;
        let rare = self.drawn % RARE_EVERY == RARE_EVERY / 2;
        let logs = log_lines(rng, jail, &ip, at_ms, rare);
        Sample {
            server,
            ip,
            // Every name in JAILS passes the rule.
            jail: JailName::parse(jail).unwrap_or_else(|_| unreachable_jail()),
            unban: rng.random_bool(0.45),
            observed: rng.random_bool(0.03),
            failures: rng.random_range(3..12),
            logs,
            at_ms,
            ban_count: 1 + skewed(rng, 20, 4.0) as u32,
        }
    }
}

fn unreachable_jail() -> JailName {
    JailName::parse("sshd").unwrap_or_else(|_| panic!("the name rule refuses \"sshd\""))
}

/// A skewed pick in `0..n`: low numbers far more often (density falling as a power of the rank),
/// like offenders, jails and busy servers in real logs.
pub fn skewed(rng: &mut StdRng, n: u64, power: f64) -> u64 {
    let u: f64 = rng.random();
    ((n as f64) * u.powf(power)) as u64 % n.max(1)
}

/// Address number `k`: mostly IPv4 spread over the public space, one in ten IPv6 (in
/// `2001:db8::/32`). Rank 0 is the most often banned.
pub fn address(k: u64) -> IpOrCidr {
    let h = k.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    if k % 10 == 9 {
        let v6 = std::net::Ipv6Addr::new(
            0x2001,
            0x0db8,
            ((h >> 48) & 0xffff) as u16,
            ((h >> 32) & 0xffff) as u16,
            0,
            0,
            ((k >> 16) & 0xffff) as u16,
            (k & 0xffff) as u16 | 1,
        );
        return IpOrCidr::Ip(v6.into());
    }
    let v4 = (h >> 32) as u32;
    // First octet 11..=222 but 127: no loopback, private 10/8, multicast or reserved space.
    let first = match 11 + (v4 >> 24) % 212 {
        127 => 128,
        other => other as u8,
    };
    let v4 = std::net::Ipv4Addr::new(first, (v4 >> 16) as u8, (v4 >> 8) as u8, v4 as u8 | 1);
    IpOrCidr::Ip(v4.into())
}

fn log_lines(rng: &mut StdRng, jail: &str, ip: &IpOrCidr, at_ms: i64, rare: bool) -> Vec<String> {
    let when = DateTime::<Utc>::from_timestamp_millis(at_ms).unwrap_or_default();
    let stamp = when.format("%b %e %T");
    let pid = rng.random_range(1000..60000);
    let port = rng.random_range(1024..65535);
    const USERS: [&str; 8] = [
        "root", "admin", "test", "oracle", "ubuntu", "postgres", "git", "user",
    ];
    let user = USERS[skewed(rng, USERS.len() as u64, 2.0) as usize];
    let lines = rng.random_range(1..4);
    let mut out = Vec::with_capacity(lines);
    for _ in 0..lines {
        let line = match jail {
            "sshd" | "selinux-ssh" => format!(
                "{stamp} host sshd[{pid}]: Failed password for invalid user {user} from {ip} port {port} ssh2"
            ),
            j if j.starts_with("nginx") || j.starts_with("apache") => format!(
                "{ip} - - [{}] \"GET /wp-login.php HTTP/1.1\" 401 571 \"-\" \"Mozilla/5.0\"",
                when.format("%d/%b/%Y:%T +0000")
            ),
            j if j.starts_with("postfix") || j.starts_with("exim") => format!(
                "{stamp} mail postfix/smtpd[{pid}]: warning: unknown[{ip}]: SASL LOGIN authentication failed: UGFzc3dvcmQ6"
            ),
            "dovecot" | "courier-auth" => format!(
                "{stamp} mail dovecot: imap-login: Disconnected (auth failed, 1 attempts): user=<{user}>, rip={ip}"
            ),
            _ => format!("{stamp} host {jail}[{pid}]: authentication failure for {user} from {ip}"),
        };
        out.push(line);
    }
    if rare {
        out.push(format!(
            "{stamp} host sshd[{pid}]: {RARE_TEXT} banner from {ip} port {port}"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_valid_and_skewed() {
        let mut generator = Generator::new(Fleet::default(), 7);
        let mut sshd = 0;
        for i in 0..10_000 {
            let s = generator.sample(1_790_000_000_000 + i);
            assert!(!s.logs.is_empty());
            let event = s.new_event("web-1");
            assert!(event.body.facts().is_some());
            if s.jail.as_str() == "sshd" {
                sshd += 1;
            }
            let body: serde_json::Value =
                serde_json::from_str(&s.callback_json("web-1")).expect("json");
            assert_eq!(body["ip"], s.ip.to_string());
        }
        // The most common jail is drawn far more often than 1 in 40.
        assert!(sshd > 1000, "{sshd}");
    }
}
