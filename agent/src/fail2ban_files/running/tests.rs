//! The comparison of the files' values with fail2ban's, on small config directories.

use super::*;
use crate::fail2ban_files::ConfigReader;

/// Loads a config directory holding `jail.conf` (and `jail.d/x.local` when given).
fn load(jail_conf: &str, local: Option<&str>) -> (tempfile::TempDir, EffectiveConfig) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("jail.conf"), jail_conf).expect("jail.conf");
    if let Some(local) = local {
        std::fs::create_dir(dir.path().join("jail.d")).expect("jail.d");
        std::fs::write(dir.path().join("jail.d/x.local"), local).expect("x.local");
    }
    let config = ConfigReader::new(dir.path()).load().expect("load");
    (dir, config)
}

fn base(log: &Path) -> String {
    format!(
        "[DEFAULT]\nbantime = 1h\nfindtime = 10m\nmaxretry = 3\nbanaction = filelog\n\
         action = %(banaction)s\nignoreip = 127.0.0.1/8 ::1\n\n\
         [web]\nenabled = true\nfilter = web\nlogpath = {}\n         /nonexistent/x.log\n",
        log.display()
    )
}

fn running(log: &Path) -> RunningJail {
    RunningJail {
        actions: vec!["filelog".into()],
        ignore_ip: vec!["127.0.0.0/8".into(), "::1".into()],
        ignore_command: None,
        max_retry: 3,
        find_time: 600,
        ban_time: 3600,
        log_paths: vec![log.display().to_string()],
        fail_regex: vec![format!("^x {HOST}$")],
    }
}

/// Roughly what fail2ban puts in place of `<HOST>`.
const HOST: &str = r"(?:\[?(?:(?P<ip4>(?:\d{1,3}\.){3}\d{1,3})|(?P<dns>[\w\-.^_]*\w))\]?)";

fn settings(drift: &[Drift]) -> Vec<&'static str> {
    drift.iter().map(|d| d.setting).collect()
}

#[test]
fn a_jail_running_its_files_has_no_drift() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_dir, config) = load(&base(log.path()), None);
    let files = FileJail::from_config(&config, "web").expect("defined");
    assert_eq!(compare("web", &files, &running(log.path())), []);
}

#[test]
fn each_setting_that_differs_is_named_with_both_values() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_dir, config) = load(&base(log.path()), None);
    let files = FileJail::from_config(&config, "web").expect("defined");
    let mut run = running(log.path());
    run.actions = vec!["banhub".into()];
    run.ignore_command = Some("/bin/true".into());
    run.max_retry = 99;
    run.find_time = 1;
    run.ban_time = 2;
    run.ignore_ip.push("10.0.0.0/8".into());
    run.log_paths = vec!["/var/log/other.log".into()];
    let drift = compare("web", &files, &run);
    assert_eq!(
        settings(&drift),
        [
            ACTIONS,
            IGNORE_IP,
            IGNORE_COMMAND,
            MAX_RETRY,
            FIND_TIME,
            BAN_TIME,
            LOG_PATH
        ]
    );
    assert_eq!(drift[0].file, "filelog");
    assert_eq!(drift[0].running, "banhub");
    assert_eq!(drift[2].file, "");
    assert_eq!(drift[2].running, "/bin/true");
    assert_eq!(
        drift[3].to_string(),
        "jail web: maxretry is \"3\" in the files but fail2ban runs \"99\""
    );
}

#[test]
fn a_reverted_action_is_drift_while_fail2ban_runs_the_old_one() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let jail_conf = base(log.path());
    let (_dir, with_override) = load(&jail_conf, Some("[web]\naction = banhub\n"));
    let files = FileJail::from_config(&with_override, "web").expect("defined");
    let mut run = running(log.path());
    run.actions = vec!["banhub".into()];
    assert_eq!(compare("web", &files, &run), []);
    let (_dir, reverted) = load(&jail_conf, None);
    let files = FileJail::from_config(&reverted, "web").expect("defined");
    assert_eq!(settings(&compare("web", &files, &run)), [ACTIONS]);
}

#[test]
fn action_names_follow_fail2ban() {
    let check = |value: &str, expected: &[&str]| {
        let expected: BTreeSet<String> = expected.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(action_names(value), expected, "{value:?}");
    };
    check("", &[]);
    check("filelog", &["filelog"]);
    check(
        "iptables[name=SSH, port=\"ssh\", protocol=tcp]\n  sendmail[dest=root]",
        &["iptables", "sendmail"],
    );
    check(
        "iptables[actname=ipt-tcp, protocol=tcp]\niptables[actname='ipt-udp', protocol=udp]",
        &["ipt-tcp", "ipt-udp"],
    );
    check(
        "smtp.py[host=x] mail[a=\"x ] y\"][actname=m2]",
        &["smtp", "m2"],
    );
}

#[test]
fn ignore_entries_are_compared_as_fail2ban_normalizes_them() {
    let check = |entry: &str, expected: &str| assert_eq!(normalize_ip(entry), expected, "{entry}");
    check("127.0.0.1/8", "127.0.0.0/8");
    check("10.1.2.3/32", "10.1.2.3");
    check("::1", "::1");
    check("2001:db8::1/32", "2001:db8::/32");
    check("2001:0db8:0000::1", "2001:db8::1");
    check("example.org", "example.org");
    assert_eq!(
        ignore_entries("file:/etc/fail2ban/ignore.txt 10.0.0.1"),
        None
    );
    assert_eq!(
        ignore_entries("127.0.0.1/8, ::1"),
        Some(["127.0.0.0/8".to_owned(), "::1".to_owned()].into())
    );
}

#[test]
fn times_are_read_as_str2seconds_reads_them() {
    let check = |text: &str, expected: Option<i64>| assert_eq!(seconds(text), expected, "{text}");
    check("600", Some(600));
    check("-1", Some(-1));
    check("10m", Some(600));
    check("1h 30m", Some(5400));
    check("1d+2h", Some(93_600));
    check("1w", Some(604_800));
    check("2mo", Some(5_259_600));
    check("1.5h", Some(5400));
    check("1h*2", None);
    check("soon", None);
}

#[test]
fn what_cannot_be_evaluated_is_not_compared() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let conf = "[DEFAULT]\nbantime = 1h*2\naction = %(nosuch)s\n\n\
                [web]\nenabled = true\nlogpath = /var/log/*.log\n";
    let (_dir, config) = load(conf, None);
    let files = FileJail::from_config(&config, "web").expect("defined");
    assert_eq!(files.ban_time, None);
    assert_eq!(files.actions, None);
    assert_eq!(files.log_paths, None);
    assert_eq!(
        settings(&compare("web", &files, &running(log.path()))),
        [IGNORE_IP],
        "unset thresholds are fail2ban's defaults; an unset ignoreip is empty"
    );
}

#[test]
fn the_systemd_backend_watches_no_files() {
    let conf = "[web]\nenabled = true\nbackend = systemd\nlogpath = /var/log/x.log\n";
    let (_dir, config) = load(conf, None);
    let files = FileJail::from_config(&config, "web").expect("defined");
    assert_eq!(files.log_paths, Some(BTreeSet::new()));
}

#[test]
fn failure_expressions_match_with_their_tags_expanded() {
    let check = |expected: &str, running: &str, same: bool| {
        assert_eq!(
            regex_matches(expected, running),
            same,
            "{expected:?} vs {running:?}"
        );
    };
    let host = HOST;
    check("^x <HOST>$", &format!("^x {host}$"), true);
    check("^y <HOST>$", &format!("^x {host}$"), false);
    check("^x <HOST>$", &format!("^x {host}"), false);
    check("^x <HOST> from$", &format!("^x {host}$"), false);
    check(
        "^for <F-USER>.+</F-USER> from <HOST>( port \\d+)?$",
        &format!("^for (?P<fid_user>.+) from {host}( port \\d+)?$"),
        true,
    );
    check(
        "{^LN-BEG}Failed <HOST>",
        &format!("^(?:\\s*)?Failed {host}"),
        true,
    );
    check("(?P<name>a)<HOST>", &format!("(?P<name>a){host}"), true);
    check("", "", true);
}

#[test]
fn a_filter_running_other_expressions_is_drift() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let (_dir, config) = load(&base(log.path()), None);
    let mut files = FileJail::from_config(&config, "web").expect("defined");
    files.fail_regex = Some(vec!["^x <HOST>$".into()]);
    let mut run = running(log.path());
    assert_eq!(compare("web", &files, &run), []);
    run.fail_regex.push(format!("^y {HOST}$"));
    assert_eq!(settings(&compare("web", &files, &run)), [FAIL_REGEX]);
    run.fail_regex = vec![format!("^y {HOST}$")];
    assert_eq!(settings(&compare("web", &files, &run)), [FAIL_REGEX]);
    files.fail_regex = None;
    assert_eq!(
        compare("web", &files, &run),
        [],
        "not compared when unknown"
    );
}
