//! The agent's fail2ban socket client against a real `fail2ban-server` in a sandbox.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use banhub_agent::fail2ban::{Fail2banError, Fail2banSocket, JailStatus, Value};
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::wait_until_async;

const TIMEOUT: Duration = Duration::from_secs(10);
const BAN_DEADLINE: Duration = Duration::from_secs(10);

async fn connect(sandbox: &Fail2banSandbox) -> Fail2banSocket {
    Fail2banSocket::connect(&sandbox.socket_path(), TIMEOUT)
        .await
        .expect("connect to the sandbox socket")
}

/// The value after `label:\t` in `fail2ban-client` tree output (`|- Total failed:\t3`).
fn tree_field<'a>(text: &'a str, label: &str) -> &'a str {
    text.lines()
        .find_map(|line| line.split_once(&format!("{label}:\t")).map(|(_, v)| v))
        .unwrap_or_else(|| panic!("no {label:?} in {text}"))
}

#[tokio::test]
async fn ping_and_version() {
    let sandbox = Fail2banSandbox::start("ping").expect("sandbox");
    let mut socket = connect(&sandbox).await;
    socket.ping().await.expect("ping");
    let version = socket.version().await.expect("version");
    assert_eq!(
        version,
        sandbox.client(&["version"]).expect("client version")
    );
    assert!(version.starts_with("1."), "{version}");
    socket.close().await.expect("close");
}

#[tokio::test]
async fn jail_list_matches_config_and_client() {
    let sandbox = Fail2banSandbox::builder()
        .name("jails")
        .extra_jails(3)
        .start()
        .expect("sandbox");
    let mut socket = connect(&sandbox).await;
    let names = socket.jail_names().await.expect("jail names");
    let configured: BTreeSet<&str> = sandbox.jails().iter().map(String::as_str).collect();
    assert_eq!(
        names.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        configured
    );
    assert_eq!(names.len(), 5);

    let text = sandbox.client(&["status"]).expect("client status");
    assert_eq!(tree_field(&text, "Number of jail"), "5");
    assert_eq!(tree_field(&text, "Jail list"), names.join(", "));
}

#[tokio::test]
async fn log_burst_bans_and_banned_shows_it() {
    let sandbox = Fail2banSandbox::start("burst").expect("sandbox");
    let mut socket = connect(&sandbox).await;
    let log = sandbox.log_path("testauth");
    // Below maxretry (3) nothing happens; ignoreip covers 127.0.0.1.
    sandbox
        .append_failures(&log, "203.0.113.7", 2)
        .expect("append");
    sandbox
        .append_failures(&log, "127.0.0.1", 5)
        .expect("append");
    sandbox
        .append_failures(&log, "203.0.113.7", 1)
        .expect("append");

    let deadline = Instant::now() + BAN_DEADLINE;
    loop {
        let banned = socket.banned("testauth").await.expect("banned");
        if !banned.is_empty() {
            assert_eq!(banned, ["203.0.113.7"]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no ban after {BAN_DEADLINE:?}\n{}",
            sandbox.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let status = socket.jail_status("testauth").await.expect("status");
    assert_eq!(
        status,
        JailStatus {
            currently_failed: 0,
            total_failed: 3,
            file_list: vec![log.display().to_string()],
            journal_matches: vec![],
            currently_banned: 1,
            total_banned: 1,
        }
    );
    assert!(socket.banned("dummyjail").await.expect("banned").is_empty());

    // `--with-time` is the one listing that comes back as plain strings.
    let with_time = socket
        .call(&["get", "testauth", "banip", "--with-time"])
        .await
        .expect("banip --with-time");
    let rows = with_time.as_list().expect("a list");
    assert_eq!(rows.len(), 1);
    let row = rows[0].as_str().expect("a str");
    assert!(
        row.starts_with("203.0.113.7 \t") && row.contains(" + 600 = "),
        "{row:?}"
    );

    let client = sandbox
        .client(&["get", "testauth", "banned"])
        .expect("client");
    assert_eq!(client, "['203.0.113.7']");
    // fail2ban lists a ban as soon as it took it; the action's command may still be writing.
    wait_for_lines(
        &sandbox.actions_path(),
        &["ban testauth 203.0.113.7 failures=3 bantime=600"],
    )
    .await;
}

/// Waits (up to [`BAN_DEADLINE`]) until the file that a jail's action writes holds every one of
/// `lines`; fails with what it holds.
async fn wait_for_lines(path: &std::path::Path, lines: &[&str]) {
    let read = || std::fs::read_to_string(path).unwrap_or_default();
    let written = wait_until_async(BAN_DEADLINE, "the action's lines", || async {
        let text = read();
        lines.iter().all(|line| text.contains(line))
    })
    .await;
    assert!(written.is_ok(), "{}: {:?}", path.display(), read());
}

#[tokio::test]
async fn ten_thousand_bans_decode_correctly() {
    let sandbox = Fail2banSandbox::builder()
        .name("bulk")
        .extra_jails(1)
        .start()
        .expect("sandbox");
    let mut socket = connect(&sandbox).await;
    socket.set_timeout(Duration::from_secs(120));
    let mut ips: Vec<String> = (0..9_000u32)
        .map(|i| format!("198.18.{}.{}", i / 256, i % 256))
        .collect();
    // Canonical forms only: fail2ban rewrites `2001:db8::0` as `2001:db8::` (see below).
    ips.extend((1..=1_000u32).map(|i| format!("2001:db8::{i:x}")));
    let mut args = vec!["set", "extra01", "banip"];
    args.extend(ips.iter().map(String::as_str));

    let newly_banned = socket.call(&args).await.expect("banip");
    assert_eq!(newly_banned, Value::Int(10_000));
    let again = socket.call(&args[..4]).await.expect("banip again");
    assert_eq!(
        again,
        Value::Int(0),
        "an address already banned is not counted"
    );

    let started = Instant::now();
    let banned = socket.banned("extra01").await.expect("banned");
    eprintln!(
        "get extra01 banned: 10,000 addresses in {:?}",
        started.elapsed()
    );
    assert_eq!(banned.len(), 10_000);
    let banned: BTreeSet<String> = banned.into_iter().collect();
    let sent: BTreeSet<String> = ips.into_iter().collect();
    let missing: Vec<_> = sent.difference(&banned).take(5).collect();
    let extra: Vec<_> = banned.difference(&sent).take(5).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, unexpected {extra:?}"
    );

    let status = socket.jail_status("extra01").await.expect("status");
    assert_eq!(
        (status.currently_banned, status.total_banned),
        (10_000, 10_000)
    );
}

/// fail2ban stores addresses in its own canonical form and accepts anything: callers must
/// validate and canonicalize before banning, or unban/lookups by the original text miss.
#[tokio::test]
async fn fail2ban_rewrites_and_accepts_addresses() {
    let sandbox = Fail2banSandbox::builder()
        .name("canon")
        .extra_jails(1)
        .start()
        .expect("sandbox");
    let mut socket = connect(&sandbox).await;
    let sent = [
        "2001:db8::0",
        "2001:DB8:0:0::0001",
        "::ffff:192.0.2.9",
        "192.0.2.010",
        "10.0.0.0/24",
        "not-an-ip",
    ];
    let mut args = vec!["set", "extra01", "banip"];
    args.extend(sent);
    assert_eq!(socket.call(&args).await.expect("banip"), Value::Int(6));
    let mut banned = socket.banned("extra01").await.expect("banned");
    banned.sort();
    let mut expected = [
        "2001:db8::",
        "2001:db8::1",
        "192.0.2.9",
        "192.0.2.010",
        "10.0.0.0/24",
        "not-an-ip",
    ];
    expected.sort_unstable();
    assert_eq!(banned, expected);
}

#[tokio::test]
async fn unknown_jail_is_a_readable_command_error() {
    let sandbox = Fail2banSandbox::start("unknown").expect("sandbox");
    let mut socket = connect(&sandbox).await;
    for args in [
        &["status", "nosuch"][..],
        &["status", "nosuch", "short"],
        &["get", "nosuch", "banned"],
        &["set", "nosuch", "banip", "192.0.2.1"],
    ] {
        match socket.call(args).await {
            Err(Fail2banError::Command { message }) => {
                assert_eq!(message, "UnknownJailException: nosuch", "for {args:?}");
            }
            other => panic!("{args:?}: expected a command error, got {other:?}"),
        }
    }
    let err = socket
        .jail_status("nosuch")
        .await
        .expect_err("unknown jail");
    assert_eq!(
        err.to_string(),
        "fail2ban rejected the command: UnknownJailException: nosuch"
    );
    match socket.call(&["frobnicate"]).await {
        Err(Fail2banError::Command { message }) => {
            assert_eq!(message, "Exception: Invalid command")
        }
        other => panic!("expected a command error, got {other:?}"),
    }
    // Errors leave the connection usable.
    socket.ping().await.expect("ping after errors");
}

#[tokio::test]
async fn fifty_one_commands_over_one_connection() {
    let sandbox = Fail2banSandbox::builder()
        .name("many")
        .extra_jails(49)
        .start()
        .expect("sandbox");
    let mut socket = connect(&sandbox).await;
    // Ban a different number of addresses per jail so that mixed-up replies would show.
    for (n, jail) in sandbox.jails().iter().skip(2).enumerate().take(5) {
        let ips: Vec<String> = (0..=n).map(|i| format!("192.0.2.{i}")).collect();
        let mut args = vec!["set", jail.as_str(), "banip"];
        args.extend(ips.iter().map(String::as_str));
        assert_eq!(
            socket.call(&args).await.expect("banip"),
            Value::Int(i64::try_from(n + 1).expect("small"))
        );
    }

    let started = Instant::now();
    let names = socket.jail_names().await.expect("status");
    assert_eq!(names.len(), 51);
    let mut statuses = Vec::new();
    for name in &names {
        statuses.push((
            name.clone(),
            socket.jail_status(name).await.expect("jail status"),
        ));
    }
    eprintln!(
        "status + 51 x status <jail> short over one connection: {:?}",
        started.elapsed()
    );

    for (name, status) in &statuses {
        let expected_banned = match name.strip_prefix("extra") {
            Some(n) => match n.parse::<u64>().expect("extra jail number") {
                i @ 1..=5 => i,
                _ => 0,
            },
            None => 0,
        };
        assert_eq!(status.currently_banned, expected_banned, "{name}");
        assert_eq!(
            status.file_list,
            [sandbox.log_path(name).display().to_string()],
            "{name}"
        );
    }
    socket.ping().await.expect("still usable");
    socket.close().await.expect("close");
}

#[tokio::test]
async fn status_short_agrees_with_fail2ban_client() {
    let sandbox = Fail2banSandbox::start("agree").expect("sandbox");
    let mut socket = connect(&sandbox).await;
    sandbox
        .append_failures(&sandbox.log_path("dummyjail"), "198.51.100.9", 2)
        .expect("append");
    socket
        .call(&["set", "dummyjail", "banip", "198.51.100.1", "2001:db8::1"])
        .await
        .expect("banip");
    // Wait until the filter has counted both failures.
    let deadline = Instant::now() + BAN_DEADLINE;
    let status = loop {
        let status = socket.jail_status("dummyjail").await.expect("status");
        if status.total_failed == 2 {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "failures not counted: {status:?}\n{}",
            sandbox.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let text = sandbox
        .client(&["status", "dummyjail"])
        .expect("client status");
    assert_eq!(
        tree_field(&text, "Currently failed"),
        status.currently_failed.to_string()
    );
    assert_eq!(
        tree_field(&text, "Total failed"),
        status.total_failed.to_string()
    );
    assert_eq!(tree_field(&text, "File list"), status.file_list.join(" "));
    assert_eq!(
        tree_field(&text, "Currently banned"),
        status.currently_banned.to_string()
    );
    assert_eq!(
        tree_field(&text, "Total banned"),
        status.total_banned.to_string()
    );
    assert_eq!((status.currently_failed, status.currently_banned), (1, 2));

    let mut banned = socket.banned("dummyjail").await.expect("banned");
    banned.sort();
    assert_eq!(banned, ["198.51.100.1", "2001:db8::1"]);
    wait_for_lines(
        &sandbox.dir().join("dummy.txt"),
        &["+198.51.100.1", "+2001:db8::1"],
    )
    .await;
}

#[tokio::test]
async fn missing_socket_is_unavailable() {
    let mut sandbox = Fail2banSandbox::start("gone").expect("sandbox");
    let path = sandbox.socket_path();
    let mut socket = connect(&sandbox).await;
    socket.ping().await.expect("ping");
    sandbox.stop().expect("stop");

    // The open connection notices the server is gone...
    let err = socket.ping().await.expect_err("server stopped");
    assert!(matches!(err, Fail2banError::Io { .. }), "{err}");
    // ... and a new one cannot be made: the server removed its socket.
    let err = Fail2banSocket::connect(&path, TIMEOUT)
        .await
        .expect_err("no socket");
    match &err {
        Fail2banError::Unavailable { path: p, source } => {
            assert_eq!(p, &path);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&path.display().to_string()) && message.contains("may not be running"),
        "{message}"
    );
}
