//! Dispatch, deadlines and argument checks of the command layer, against the stand-in fail2ban
//! (the real one is exercised by `tests/tests/e2e/agent_commands.rs`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_proto::v1::{
    GetIgnoreList, GetJailConfig, ListBanned, LogTail, Ping, Restart, SetBan, SetIgnoreList,
    SetJailsEnabled, TestFilter, WriteJailConfig, test_filter,
};

use super::*;
use crate::config::{Fail2banSettings, Settings};

fn command(deadline_unix_ms: i64) -> Command {
    with_kind(deadline_unix_ms, Kind::Ping(Ping {}))
}

fn with_kind(deadline_unix_ms: i64, kind: Kind) -> Command {
    Command {
        id: "c1".to_owned(),
        deadline_unix_ms,
        requested_by: "alice".to_owned(),
        kind: Some(kind),
    }
}

fn code(result: &CommandResult) -> Option<ErrorCode> {
    match &result.outcome {
        Some(Outcome::Error(e)) => ErrorCode::try_from(e.code).ok(),
        _ => None,
    }
}

/// A context on `socket` with an empty config directory and state directory under `dir`.
fn context(dir: &Path, socket: PathBuf) -> Context {
    let config_dir = dir.join("conf");
    std::fs::create_dir_all(&config_dir).expect("config dir");
    Context::new(&Settings {
        state_dir: dir.join("state"),
        fail2ban: Fail2banSettings {
            socket,
            config_dir,
            client: PathBuf::from("/nonexistent/fail2ban-client"),
            timeout_ms: 2_000,
            ..Fail2banSettings::default()
        },
        ..Settings::default()
    })
}

#[test]
fn deadline_in_the_past_is_refused() {
    let check = |deadline: i64, now: i64, refused: bool| {
        let result = refuse_if_expired(&command(deadline), now);
        assert_eq!(result.is_some(), refused, "deadline {deadline}, now {now}");
        if let Some(result) = result {
            assert_eq!(result.id, "c1");
            assert_eq!(code(&result), Some(ErrorCode::Expired));
        }
    };
    check(1_000, 999, false);
    check(1_000, 1_000, false);
    check(1_000, 1_001, true);
    check(0, 1_700_000_000_000, true);
}

#[tokio::test]
async fn ping_without_fail2ban_is_unavailable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = context(dir.path(), dir.path().join("missing.sock"));
    let result = execute(&ctx, command(i64::MAX)).await;
    assert_eq!(result.id, "c1");
    assert_eq!(code(&result), Some(ErrorCode::Fail2banUnavailable));
    assert_eq!(fail2ban_version(&ctx).await, None);
}

#[tokio::test]
async fn ping_reports_version_and_latency() {
    let (_f2b, socket) = fake_fail2ban::spawn(Duration::from_millis(5));
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = context(dir.path(), socket);
    for _ in 0..2 {
        // The second ping runs on the kept connection.
        let result = execute(&ctx, command(i64::MAX)).await;
        match result.outcome {
            Some(Outcome::Pong(pong)) => {
                assert!(pong.fail2ban_version.starts_with('1'), "{pong:?}");
                assert!(pong.fail2ban_latency_us >= 5_000, "{pong:?}");
                assert_eq!(pong.agent_version, crate::AGENT_VERSION);
            }
            other => panic!("expected a pong, got {other:?}"),
        }
    }
    assert!(fail2ban_version(&ctx).await.is_some());
}

#[tokio::test]
async fn unknown_kind_is_unsupported() {
    let mut unknown = command(i64::MAX);
    unknown.kind = None;
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = context(dir.path(), PathBuf::from("/nonexistent"));
    assert_eq!(kind_name(&unknown), "unknown");
    let result = execute(&ctx, unknown).await;
    assert_eq!(code(&result), Some(ErrorCode::Unsupported));
}

#[test]
fn every_kind_is_a_capability() {
    let kinds = [
        Kind::Ping(Ping {}),
        Kind::Status(Default::default()),
        Kind::ListBanned(Default::default()),
        Kind::SetBan(Default::default()),
        Kind::ListJails(Default::default()),
        Kind::SetJailsEnabled(Default::default()),
        Kind::GetJailConfig(Default::default()),
        Kind::WriteJailConfig(Default::default()),
        Kind::ListFilters(Default::default()),
        Kind::TestFilter(Default::default()),
        Kind::Restart(Default::default()),
        Kind::LogTail(Default::default()),
        Kind::GetIgnoreList(Default::default()),
        Kind::SetIgnoreList(Default::default()),
        Kind::WriteDefaults(Default::default()),
        Kind::GetDeliveryStatus(Default::default()),
        Kind::ProbeStep(Default::default()),
        Kind::SyncSharedBans(Default::default()),
        Kind::CreateJail(Default::default()),
        Kind::WriteFilter(Default::default()),
        Kind::DeleteConfig(Default::default()),
        Kind::PreviewFilter(Default::default()),
        Kind::GetConfigFiles(Default::default()),
        Kind::ValidateConfigSet(Default::default()),
        Kind::ApplyConfigSet(Default::default()),
        Kind::SettleConfigSet(Default::default()),
        Kind::ConfigSetStatus(Default::default()),
    ];
    let mut names: Vec<&str> = kinds
        .into_iter()
        .map(|kind| kind_name(&with_kind(0, kind)))
        .collect();
    names.extend(super::FEATURES);
    assert_eq!(names, CAPABILITIES);
}

/// Bad arguments are refused before fail2ban is asked (the socket here does not exist, so
/// anything that reached it would be FAIL2BAN_UNAVAILABLE instead) and before any file is
/// touched.
#[tokio::test]
async fn bad_arguments_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ctx = context(dir.path(), dir.path().join("missing.sock"));
    let bad_jails = [
        "../x",
        "/etc/passwd",
        "a\nb",
        "[DEFAULT]",
        "DEFAULT",
        "INCLUDES",
        "",
    ];
    let mut commands = Vec::new();
    for jail in bad_jails {
        commands.push(Kind::ListBanned(ListBanned {
            jail: jail.to_owned(),
            ..Default::default()
        }));
        commands.push(Kind::GetJailConfig(GetJailConfig {
            jail: jail.to_owned(),
        }));
        commands.push(Kind::WriteJailConfig(WriteJailConfig {
            jail: jail.to_owned(),
            jail_override: Some(Default::default()),
            filter_local: None,
        }));
        commands.push(Kind::SetJailsEnabled(SetJailsEnabled {
            changes: vec![banhub_proto::v1::JailToggle {
                jail: jail.to_owned(),
                enabled: true,
            }],
        }));
        if !jail.is_empty() {
            commands.push(Kind::SetBan(SetBan {
                jail: jail.to_owned(),
                ip: "192.0.2.1".to_owned(),
                ban: true,
                guard_override: false,
            }));
            commands.push(Kind::LogTail(LogTail {
                jail: jail.to_owned(),
                lines: 10,
            }));
            commands.push(Kind::GetIgnoreList(GetIgnoreList {
                jail: jail.to_owned(),
            }));
            commands.push(Kind::SetIgnoreList(SetIgnoreList {
                jail: jail.to_owned(),
                entries: vec![],
                expected_version: String::new(),
            }));
        }
    }
    for ip in ["not-an-ip", "192.0.2.1\n", "0.0.0.0/0", "127.0.0.1", ""] {
        commands.push(Kind::SetBan(SetBan {
            jail: "sshd".to_owned(),
            ip: ip.to_owned(),
            ban: false,
            guard_override: false,
        }));
    }
    for entries in [
        vec!["192.0.2.1 192.0.2.2".to_owned()],
        vec!["a\nb".to_owned()],
        vec!["%(x)s".to_owned()],
        vec!["file:/etc/shadow".to_owned()],
        vec!["192.0.2.1".to_owned(); args::MAX_IGNORE_ENTRIES + 1],
    ] {
        commands.push(Kind::SetIgnoreList(SetIgnoreList {
            jail: String::new(),
            entries,
            expected_version: String::new(),
        }));
    }
    commands.extend([
        Kind::SetBan(SetBan {
            jail: String::new(),
            ip: "192.0.2.1".to_owned(),
            ban: true,
            guard_override: false,
        }),
        Kind::ListBanned(ListBanned {
            jail: "sshd".to_owned(),
            search: "x; rm".to_owned(),
            ..Default::default()
        }),
        Kind::ListBanned(ListBanned {
            jail: "sshd".to_owned(),
            limit: 1_000_000,
            ..Default::default()
        }),
        Kind::LogTail(LogTail {
            jail: String::new(),
            lines: 100_000,
        }),
        Kind::SetJailsEnabled(SetJailsEnabled { changes: vec![] }),
        Kind::WriteJailConfig(WriteJailConfig {
            jail: "sshd".to_owned(),
            jail_override: None,
            filter_local: None,
        }),
        Kind::WriteJailConfig(WriteJailConfig {
            jail: "sshd".to_owned(),
            jail_override: Some(banhub_proto::v1::FileEdit {
                content: "[sshd]\nmaxretry = 1\n".to_owned(),
                expected_version: "not-a-version".to_owned(),
            }),
            filter_local: None,
        }),
        Kind::WriteJailConfig(WriteJailConfig {
            jail: "sshd".to_owned(),
            jail_override: Some(banhub_proto::v1::FileEdit {
                content: "[DEFAULT]\nbantime = 1\n".to_owned(),
                expected_version: String::new(),
            }),
            filter_local: None,
        }),
        Kind::WriteJailConfig(WriteJailConfig {
            jail: "sshd".to_owned(),
            jail_override: Some(banhub_proto::v1::FileEdit {
                content: format!("[sshd]\n#{}\n", "x".repeat(70_000)),
                expected_version: String::new(),
            }),
            filter_local: None,
        }),
        Kind::TestFilter(TestFilter {
            filter: None,
            lines: vec!["x".to_owned()],
        }),
        Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Name("../sshd".to_owned())),
            lines: vec!["x".to_owned()],
        }),
        Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Name("sshd".to_owned())),
            lines: vec!["x".to_owned(); 10_001],
        }),
        Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Text("x".repeat(2 << 20))),
            lines: vec!["x".to_owned()],
        }),
        Kind::Restart(Restart { mode: 0 }),
        Kind::Restart(Restart { mode: 99 }),
    ]);
    for kind in commands {
        let described = format!("{kind:?}");
        let described: String = described.chars().take(200).collect();
        let result = execute(&ctx, with_kind(i64::MAX, kind)).await;
        assert_eq!(
            code(&result),
            Some(ErrorCode::InvalidArgument),
            "{described} -> {result:?}"
        );
    }
    // Nothing was written: the config directory is still empty.
    let written: Vec<_> = std::fs::read_dir(dir.path().join("conf"))
        .expect("read")
        .collect();
    assert!(written.is_empty(), "{written:?}");
}
