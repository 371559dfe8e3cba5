//! The policy's rules, one table per kind of write.

use std::path::PathBuf;

use super::*;
use crate::config::AllowCommands;
use crate::fail2ban_files::reader::ConfigReader;

const ACTIONS: [&str; 4] = ["iptables-multiport", "dummy", "banhub", "smtp.py"];

fn policy(settings: &PolicySettings) -> Policy<'_> {
    Policy::new(settings, ACTIONS.iter().map(|a| (*a).to_owned()).collect())
}

/// `Ok` or the refused key.
fn option(settings: &PolicySettings, key: &str, value: &str) -> Result<(), String> {
    policy(settings).option(key, value).map_err(|r| r.key)
}

#[test]
fn default_policy_on_single_options() {
    let d = PolicySettings::default();
    let cases: &[(&str, &str, Result<(), &str>)] = &[
        ("maxretry", "3", Ok(())),
        ("bantime", "1h", Ok(())),
        ("port", "ssh,http", Ok(())),
        ("port", "0:65535", Ok(())),
        ("chain", "<known/chain>", Ok(())),
        (
            "blocktype",
            "REJECT --reject-with icmp-port-unreachable",
            Ok(()),
        ),
        ("port", "22;touch /tmp/x", Err("port")),
        ("port", "$(id)", Err("port")),
        ("port", "`id`", Err("port")),
        ("protocol", "tcp|sh", Err("protocol")),
        ("chain", "INPUT\nx", Err("chain")),
        ("port", "22 -j ACCEPT", Err("port")),
        ("name", "<F-USER>", Err("name")),
        ("name", "<known/F-USER>", Err("name")),
        ("name", "<ipmatches>", Err("name")),
        ("chain", "<known/actionban>", Err("chain")),
        ("chain", "<_banhub_notify>", Err("chain")),
        ("ignoreip", "127.0.0.1/8 ::1", Ok(())),
        ("failregex", "^x <HOST>$|(y)", Ok(())),
        ("ignorecommand", "/usr/bin/true", Err("ignorecommand")),
        ("ignorecommand", "", Ok(())),
        ("actionban", "touch /tmp/x", Err("actionban")),
        ("action", "dummy", Ok(())),
        (
            "action",
            "iptables-multiport[port=\"ssh\", protocol=tcp, chain=\"<known/chain>\"]",
            Ok(()),
        ),
        ("action", "dummy\n  banhub", Ok(())),
        ("action", "smtp.py[dest=root@localhost]", Ok(())),
        (
            "action",
            "dummy[actionban=\"touch /tmp/x\"]",
            Err("actionban"),
        ),
        (
            "action",
            "dummy[ActionStart='touch /tmp/x']",
            Err("actionstart"),
        ),
        ("action", "dummy[x=1][actionstop=reboot]", Err("actionstop")),
        ("action", "dummy[actionban=\"\"]", Ok(())),
        ("action", "banhub[notify=\"/some/script\"]", Err("notify")),
        (
            "action",
            "banhub[relay_url=\"http://203.0.113.1\"]",
            Err("relay_url"),
        ),
        (
            "action",
            "banhub[secret_file=/etc/shadow]",
            Err("secret_file"),
        ),
        ("action", "banhub[server_id=web1]", Ok(())),
        ("action", "dummy[target=\"/tmp/x; reboot\"]", Err("target")),
        ("action", "dummy[target=\"%(actionban)s\"]", Err("target")),
        ("action", "record[port=22]", Err("action")),
        ("action", "dummy[port=22", Err("action")),
        ("action", "../../x[a=b]", Ok(())),
        ("action_", "dummy[actionban=x]", Err("actionban")),
        ("banaction", "iptables-multiport", Ok(())),
        ("banaction", "nosuchaction", Err("banaction")),
        (
            "banaction_allports",
            "dummy[actioncheck=x]",
            Err("actioncheck"),
        ),
        ("logpath", "/var/log/auth.log", Ok(())),
        (
            "logpath",
            "/var/log/nginx/*.log\n  /var/log/x.log tail",
            Ok(()),
        ),
        ("logpath", "/etc/shadow", Err("logpath")),
        ("logpath", "/var/log/../../etc/shadow", Err("logpath")),
        ("logpath", "/var/logs/x.log", Err("logpath")),
        ("logpath", "var/log/x.log", Err("logpath")),
        ("logpath", "/var/log/x.log\n/etc/shadow", Err("logpath")),
    ];
    for (key, value, expected) in cases {
        let expected = expected.map_err(str::to_owned);
        assert_eq!(option(&d, key, value), expected, "{key} = {value:?}");
    }
}

#[test]
fn root_widens_the_policy() {
    let keys = PolicySettings {
        allow_commands: AllowCommands::Keys(vec!["actionban".into(), "ignorecommand".into()]),
        ..PolicySettings::default()
    };
    let all = PolicySettings {
        allow_commands: AllowCommands::All(true),
        ..PolicySettings::default()
    };
    let prefixes = PolicySettings {
        log_prefixes: vec![PathBuf::from("/var/log"), PathBuf::from("/srv/app/logs")],
        ..PolicySettings::default()
    };
    let restricted = PolicySettings {
        actions: vec!["dummy".into()],
        ..PolicySettings::default()
    };
    let cases: &[(&PolicySettings, &str, &str, Result<(), &str>)] = &[
        (&keys, "action", "dummy[actionban=\"touch /tmp/x\"]", Ok(())),
        (&keys, "ignorecommand", "/usr/bin/true", Ok(())),
        (&keys, "action", "dummy[actionstart=x]", Err("actionstart")),
        (&keys, "port", "22;x", Err("port")),
        (&all, "action", "banhub[notify=\"/some/script\"]", Ok(())),
        (&all, "port", "22;x", Ok(())),
        (&all, "logpath", "/etc/shadow", Err("logpath")),
        (&prefixes, "logpath", "/srv/app/logs/a.log", Ok(())),
        (&prefixes, "logpath", "/srv/app/other.log", Err("logpath")),
        (&restricted, "action", "dummy", Ok(())),
        (&restricted, "action", "iptables-multiport", Err("action")),
        (&restricted, "action", "nosuchaction", Err("action")),
    ];
    for (settings, key, value, expected) in cases {
        let expected = expected.map_err(str::to_owned);
        assert_eq!(option(settings, key, value), expected, "{key} = {value:?}");
    }
}

#[test]
fn refusals_name_the_setting_that_widens_them() {
    let d = PolicySettings::default();
    let p = policy(&d);
    let widen = |key: &str, value: &str| p.option(key, value).expect_err("refused").widen;
    assert!(widen("action", "dummy[actionban=x]").contains("policy.allow_commands"));
    assert!(widen("logpath", "/etc/shadow").contains("policy.log_prefixes"));
    assert!(widen("port", "22;x").contains("policy.allow_commands = true"));
}

/// Parameters as `(key, value)` pairs.
type Params<'a> = &'a [(&'a str, &'a str)];

#[test]
fn parameters_are_read_like_fail2ban() {
    let cases: &[(&str, Option<Params<'_>>)] = &[
        ("", Some(&[])),
        (
            "[a=1, b=\"x, y\", c='z]']",
            Some(&[("a", "1"), ("b", "x, y"), ("c", "z]")]),
        ),
        ("[a=1][b=2]", Some(&[("a", "1"), ("b", "2")])),
        ("[ a = 1 ,]", Some(&[("a", " 1 ")])),
        ("[a]", None),
        ("[a=\"1]", None),
        ("[a=\"1\" x]", None),
        ("junk", None),
    ];
    for (text, expected) in cases {
        let got = parse_params(text).ok();
        let expected = expected.map(|pairs| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Vec<_>>()
        });
        assert_eq!(got, expected, "{text:?}");
    }
}

#[test]
fn action_lists_split_into_entries() {
    assert_eq!(
        action_entries("a[x=\"1 2\"]\n  b  c[y=']']"),
        ["a[x=\"1 2\"]", "b", "c[y=']']"]
    );
}

/// A config dir with `jail.local` and one override, read before and after the override.
struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new(jail_local: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("jail.d")).expect("jail.d");
        std::fs::write(dir.path().join("jail.local"), jail_local).expect("jail.local");
        Self { dir }
    }

    fn load(&self) -> EffectiveConfig {
        ConfigReader::new(self.dir.path()).load().expect("load")
    }

    /// Checks writing `file` (under jail.d) with `text`.
    fn check(&self, settings: &PolicySettings, file: &str, text: &str) -> Result<(), String> {
        let live = self.load();
        let path = self.dir.path().join("jail.d").join(file);
        let old = std::fs::read_to_string(&path).ok();
        std::fs::write(&path, text).expect("write");
        let new = self.load();
        match &old {
            Some(old) => std::fs::write(&path, old).expect("restore"),
            None => std::fs::remove_file(&path).expect("remove"),
        }
        let written = [Written::Jails {
            old: old.as_deref(),
            new: text,
        }];
        policy(settings)
            .check(&written, &live, &new)
            .map_err(|r| r.key)
    }
}

const ROOT: &str = "[DEFAULT]\nbanaction = iptables-multiport\nport = 0:65535\n\
                    action_ = %(banaction)s[port=\"%(port)s\"]\naction = %(action_)s\n\
                    [web]\nenabled = true\nlogpath = /opt/web/access.log\n\
                    ignorecommand = /usr/local/bin/is-office <ip>\n";

#[test]
fn writes_are_checked_on_what_they_introduce() {
    let d = PolicySettings::default();
    let dir = Dir::new(ROOT);
    let cases: &[(&str, &str, Result<(), &str>)] = &[
        // Root's own ignorecommand and log path do not make every edit of the jail fail.
        ("web.local", "[web]\nmaxretry = 2\n", Ok(())),
        ("web.local", "[web]\nport = ssh\n", Ok(())),
        // A jail value that reaches an action through root's action list is checked there.
        ("web.local", "[web]\nport = ssh;id\n", Err("port")),
        (
            "web.local",
            "[web]\nmyport = 1;id\nport = %(myport)s\n",
            Err("port"),
        ),
        ("web.local", "[web]\nbanaction = dummy\n", Ok(())),
        (
            "web.local",
            "[web]\nignorecommand = /bin/sh -c id\n",
            Err("ignorecommand"),
        ),
        (
            "web.local",
            "[web]\nlogpath = /etc/shadow\n",
            Err("logpath"),
        ),
        ("web.local", "[web]\nlogpath = /var/log/web.log\n", Ok(())),
        (
            "web.local",
            "[web]\nbackend = systemd\njournalmatch = _SYSTEMD_UNIT=web.service\n",
            Ok(()),
        ),
        // Root's log path stays root's when the hub changes how the jail reads it.
        ("web.local", "[web]\nbackend = polling\n", Ok(())),
        (
            "web.local",
            "[web]\naction = dummy[actionban=\"touch /tmp/x\"]\n",
            Err("actionban"),
        ),
        // A [DEFAULT] write is checked for every jail it reaches.
        (
            "banhub-defaults.local",
            "[DEFAULT]\nignoreip = 192.0.2.1\n",
            Ok(()),
        ),
        (
            "banhub-defaults.local",
            "[DEFAULT]\nbanaction = dummy[actionstart=id]\n",
            Err("actionstart"),
        ),
        (
            "banhub-defaults.local",
            "[DEFAULT]\nignorecommand = id\n",
            Err("ignorecommand"),
        ),
    ];
    for (file, text, expected) in cases {
        let expected = expected.map_err(str::to_owned);
        assert_eq!(dir.check(&d, file, text), expected, "{file}: {text:?}");
    }
}

#[test]
fn unchanged_lines_of_an_existing_override_are_not_checked_again() {
    let d = PolicySettings::default();
    let dir = Dir::new(ROOT);
    let existing = "[web]\nlogpath = /opt/web/other.log\n";
    std::fs::write(dir.dir.path().join("jail.d/web.local"), existing).expect("root's override");
    assert_eq!(
        dir.check(
            &d,
            "web.local",
            "[web]\nlogpath = /opt/web/other.log\nenabled = false\n"
        ),
        Ok(())
    );
    assert_eq!(
        dir.check(&d, "web.local", "[web]\nlogpath = /opt/web/third.log\n"),
        Err("logpath".to_owned())
    );
}

#[test]
fn leaving_the_journal_checks_the_log_paths_it_starts_reading() {
    let d = PolicySettings::default();
    let dir = Dir::new("[web]\nenabled = true\nbackend = systemd\nlogpath = /opt/web/access.log\n");
    assert_eq!(dir.check(&d, "web.local", "[web]\nmaxretry = 2\n"), Ok(()));
    assert_eq!(
        dir.check(&d, "web.local", "[web]\nbackend = polling\n"),
        Err("logpath".to_owned())
    );
}

#[test]
fn filters_define_no_commands() {
    let d = PolicySettings::default();
    let p = policy(&d);
    let live = Dir::new("").load();
    let check = |text: &str| {
        p.check(
            &[Written::Filter {
                old: None,
                new: text,
            }],
            &live,
            &live,
        )
        .map_err(|r| r.key)
    };
    assert_eq!(check("[Definition]\nfailregex = ^x <HOST>$\n"), Ok(()));
    assert_eq!(
        check("[Definition]\nfailregex = x\nactionban = touch /tmp/x\n"),
        Err("actionban".to_owned())
    );
    assert_eq!(
        check("[Init]\nignorecommand = id\n"),
        Err("ignorecommand".to_owned())
    );
}

#[test]
fn available_actions_are_the_files_of_action_d() {
    let dir = tempfile::tempdir().expect("tempdir");
    let action_d = dir.path().join("action.d");
    std::fs::create_dir_all(&action_d).expect("action.d");
    for file in [
        "a.conf", "a.local", "b.local", "smtp.py", "README", "helper",
    ] {
        std::fs::write(action_d.join(file), "").expect("file");
    }
    let names: Vec<String> = available_actions(dir.path()).into_iter().collect();
    assert_eq!(names, ["a", "b", "smtp.py"]);
}
