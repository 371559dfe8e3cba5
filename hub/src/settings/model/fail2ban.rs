//! The `fail2ban` section: the `[DEFAULT]` keys pushed to every host, and their checks.

use banhub_proto::rules::IpOrCidr;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::{FieldError, host_ok, refuse};

/// Largest number of `ignoreip` entries pushed to fail2ban.
pub const MAX_IGNOREIP: usize = 512;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fail2banDocument {
    /// Written to each host's `[DEFAULT]` by `POST /api/settings/fail2ban-defaults/push`.
    #[serde(default)]
    pub defaults: DefaultsDocument,
}

/// fail2ban's defaults for every jail; `null` leaves a key as the host has it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultsDocument {
    /// Seconds an address stays banned; `-1` bans for good.
    #[serde(default)]
    pub bantime: Option<i64>,
    /// Seconds within which `maxretry` failures lead to a ban.
    #[serde(default)]
    pub findtime: Option<u64>,
    #[serde(default)]
    pub maxretry: Option<u32>,
    /// Addresses, networks or host names never banned.
    #[serde(default)]
    pub ignoreip: Option<Vec<String>>,
    /// Ban repeat offenders for longer each time (`bantime.increment`).
    #[serde(default)]
    pub bantime_increment: Option<bool>,
    /// Longest ban when `bantimeIncrement` is on, in seconds (`bantime.maxtime`).
    #[serde(default)]
    pub bantime_maxtime: Option<u64>,
}

/// fail2ban's `[DEFAULT]` keys banhub manages; `None` leaves a key alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fail2banDefaults {
    /// Seconds, or `-1` for permanent bans.
    pub bantime: Option<i64>,
    pub findtime: Option<u64>,
    pub maxretry: Option<u32>,
    pub ignoreip: Option<Vec<String>>,
    pub bantime_increment: Option<bool>,
    pub bantime_maxtime: Option<u64>,
}

impl Fail2banDefaults {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// A longest ban or window: ten years.
const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;

/// Checks fail2ban defaults; `prefix` is the path of the object (`fail2ban.defaults`).
pub fn validate_defaults(
    d: &DefaultsDocument,
    prefix: &str,
) -> Result<Fail2banDefaults, FieldError> {
    let at = |f: &str| format!("{prefix}.{f}");
    if let Some(bantime) = d.bantime
        && bantime != -1
        && !(1..=MAX_SECONDS as i64).contains(&bantime)
    {
        return refuse(
            at("bantime"),
            format!("must be 1 to {MAX_SECONDS} seconds, or -1 for permanent bans"),
        );
    }
    if let Some(findtime) = d.findtime
        && !(1..=MAX_SECONDS).contains(&findtime)
    {
        return refuse(
            at("findtime"),
            format!("must be 1 to {MAX_SECONDS} seconds"),
        );
    }
    if let Some(maxretry) = d.maxretry
        && !(1..=1000).contains(&maxretry)
    {
        return refuse(at("maxretry"), "must be between 1 and 1000");
    }
    if let Some(maxtime) = d.bantime_maxtime
        && !(1..=MAX_SECONDS).contains(&maxtime)
    {
        return refuse(
            at("bantimeMaxtime"),
            format!("must be 1 to {MAX_SECONDS} seconds"),
        );
    }
    let ignoreip = match &d.ignoreip {
        None => None,
        Some(list) => {
            if list.len() > MAX_IGNOREIP {
                return refuse(at("ignoreip"), format!("at most {MAX_IGNOREIP} entries"));
            }
            let mut out: Vec<String> = Vec::new();
            for (i, raw) in list.iter().enumerate() {
                let entry = raw.trim();
                let ok = IpOrCidr::parse(entry).is_ok()
                    || entry.parse::<ipnet::IpNet>().is_ok()
                    || entry.parse::<std::net::IpAddr>().is_ok()
                    || host_ok(entry) && entry.chars().any(|c| c.is_ascii_alphabetic());
                if !ok {
                    return refuse(
                        format!("{prefix}.ignoreip[{i}]"),
                        format!("{raw:?} is not an address, a network (CIDR) or a host name"),
                    );
                }
                if entry
                    .parse::<ipnet::IpNet>()
                    .is_ok_and(banhub_proto::rules::covers_everything)
                {
                    return refuse(
                        format!("{prefix}.ignoreip[{i}]"),
                        format!("{raw:?} covers every address: it would switch banning off"),
                    );
                }
                if !out.iter().any(|e| e == entry) {
                    out.push(entry.to_owned());
                }
            }
            Some(out)
        }
    };
    Ok(Fail2banDefaults {
        bantime: d.bantime,
        findtime: d.findtime,
        maxretry: d.maxretry,
        ignoreip,
        bantime_increment: d.bantime_increment,
        bantime_maxtime: d.bantime_maxtime,
    })
}
