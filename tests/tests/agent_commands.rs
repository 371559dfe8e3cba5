//! The agent's command layer against real fail2ban servers: each test builds the command context
//! the way `banhub-agent run` does (from the agent's settings) and runs commands through
//! `commands::execute`, then checks the answer *and* what fail2ban and the files say.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use banhub_agent::config::{Fail2banSettings, Settings};
use banhub_agent::link::commands::{self, Context};
use banhub_proto::v1::command::Kind;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    BannedPage, Command, CommandError, ConfigChange, ErrorCode, FileEdit, GetIgnoreList,
    GetJailConfig, IgnoreList, JailConfig, JailToggle, ListBanned, ListFilters, ListJails, LogTail,
    Ping, Restart, RestartMode, SetBan, SetIgnoreList, SetJailsEnabled, StatusReport, TestFilter,
    WriteJailConfig, test_filter,
};
use banhub_tests::Fail2banSandbox;
use banhub_tests::wait::wait_for_async;
use tempfile::TempDir;

/// A fail2ban sandbox and the agent's command context for it.
struct Host {
    sandbox: Fail2banSandbox,
    context: Context,
    _state: TempDir,
}

fn client_path() -> PathBuf {
    ["/usr/bin/fail2ban-client", "/usr/local/bin/fail2ban-client"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("fail2ban-client"))
}

fn host_on(sandbox: Fail2banSandbox) -> Host {
    let state = tempfile::tempdir().expect("state dir");
    let settings = Settings {
        state_dir: state.path().to_owned(),
        fail2ban: Fail2banSettings {
            socket: sandbox.socket_path(),
            config_dir: sandbox.conf_dir(),
            client: client_path(),
            timeout_ms: 10_000,
            ..Fail2banSettings::default()
        },
        ..Settings::default()
    };
    Host {
        context: Context::new(&settings),
        sandbox,
        _state: state,
    }
}

fn host(name: &str) -> Host {
    host_on(Fail2banSandbox::start(name).expect("fail2ban sandbox"))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Host {
    async fn run(&self, kind: Kind) -> Outcome {
        let result = commands::execute(
            &self.context,
            Command {
                id: uuid::Uuid::new_v4().to_string(),
                deadline_unix_ms: now_ms() + 60_000,
                requested_by: "test".to_owned(),
                kind: Some(kind),
            },
        )
        .await;
        result.outcome.expect("an outcome")
    }

    async fn status(&self) -> StatusReport {
        match self.run(Kind::Status(Default::default())).await {
            Outcome::Status(status) => status,
            other => panic!("expected a status, got {other:?}"),
        }
    }

    async fn banned(&self, jail: &str, search: &str, offset: u32, limit: u32) -> BannedPage {
        let request = ListBanned {
            jail: jail.to_owned(),
            search: search.to_owned(),
            offset,
            limit,
        };
        match self.run(Kind::ListBanned(request)).await {
            Outcome::Banned(page) => page,
            other => panic!("expected a page, got {other:?}"),
        }
    }

    async fn set_ban(&self, jail: &str, ip: &str, ban: bool) -> (bool, Vec<String>) {
        let request = SetBan {
            jail: jail.to_owned(),
            ip: ip.to_owned(),
            ban,
            guard_override: false,
        };
        match self.run(Kind::SetBan(request)).await {
            Outcome::BanChange(change) => (change.changed, change.jails),
            other => panic!("expected a ban change, got {other:?}"),
        }
    }

    async fn jail_config(&self, jail: &str) -> JailConfig {
        let request = GetJailConfig {
            jail: jail.to_owned(),
        };
        match self.run(Kind::GetJailConfig(request)).await {
            Outcome::JailConfig(config) => config,
            other => panic!("expected a jail config, got {other:?}"),
        }
    }

    async fn write_override(&self, jail: &str, content: &str, expected: &str) -> Outcome {
        self.run(Kind::WriteJailConfig(WriteJailConfig {
            jail: jail.to_owned(),
            jail_override: Some(FileEdit {
                content: content.to_owned(),
                expected_version: expected.to_owned(),
            }),
            filter_local: None,
        }))
        .await
    }

    async fn set_enabled(&self, jail: &str, enabled: bool) -> Outcome {
        self.run(Kind::SetJailsEnabled(SetJailsEnabled {
            changes: vec![JailToggle {
                jail: jail.to_owned(),
                enabled,
            }],
        }))
        .await
    }

    async fn ignore_list(&self, jail: &str) -> IgnoreList {
        let request = GetIgnoreList {
            jail: jail.to_owned(),
        };
        match self.run(Kind::GetIgnoreList(request)).await {
            Outcome::IgnoreList(list) => list,
            other => panic!("expected an ignore list, got {other:?}"),
        }
    }

    async fn set_ignore_list(&self, jail: &str, entries: &[&str], expected: &str) -> Outcome {
        self.run(Kind::SetIgnoreList(SetIgnoreList {
            jail: jail.to_owned(),
            entries: entries.iter().map(|e| (*e).to_owned()).collect(),
            expected_version: expected.to_owned(),
        }))
        .await
    }

    fn client(&self, args: &[&str]) -> String {
        self.sandbox.client(args).expect("fail2ban-client")
    }

    /// `get <jail> banned` as a set, from fail2ban-client.
    fn banned_by_client(&self, jail: &str) -> BTreeSet<String> {
        let reply = self.client(&["get", jail, "banned"]);
        reply
            .trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .map(|s| s.trim_matches('\'').to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    }

    fn jail_list(&self) -> String {
        let status = self.client(&["status"]);
        status
            .lines()
            .find_map(|l| l.split_once("Jail list:\t").map(|(_, v)| v.to_owned()))
            .unwrap_or_default()
    }

    /// Every file under the config directory with its bytes (a temp file or any change shows).
    fn files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, out);
                } else {
                    out.insert(path.clone(), std::fs::read(&path).unwrap_or_default());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(&self.sandbox.conf_dir(), &mut files);
        files
    }
}

fn error(outcome: Outcome, code: ErrorCode) -> CommandError {
    match outcome {
        Outcome::Error(e) => {
            assert_eq!(
                ErrorCode::try_from(e.code),
                Ok(code),
                "{}: {:?}",
                e.message,
                e.details
            );
            e
        }
        other => panic!("expected {code:?}, got {other:?}"),
    }
}

fn change(outcome: Outcome) -> ConfigChange {
    match outcome {
        Outcome::ConfigChange(change) => change,
        Outcome::Error(e) => panic!("config change failed: {} {:?}", e.message, e.details),
        other => panic!("expected a config change, got {other:?}"),
    }
}

/// `Currently failed:\t3` and the like from `fail2ban-client status <jail>`.
fn client_count(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.split_once(&format!("{field}:\t")).map(|(_, v)| v.trim()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {status}"))
}

#[tokio::test]
async fn status_counts_match_fail2ban_client() {
    let h = host("cmd-status");
    h.client(&["set", "testauth", "banip", "198.51.100.1", "198.51.100.2"]);
    h.client(&["set", "dummyjail", "banip", "2001:db8::1"]);
    h.sandbox
        .append_failures(&h.sandbox.log_path("testauth"), "192.0.2.9", 1)
        .expect("log");
    let status = wait_for_async(
        Duration::from_secs(10),
        "the failure to be counted",
        || async {
            let status = h.status().await;
            let testauth = status.jails.iter().find(|j| j.name == "testauth")?;
            (testauth.total_failed == 1).then_some(status)
        },
    )
    .await
    .expect("status");
    assert_eq!(status.fail2ban_version, h.client(&["version"]));
    let names: Vec<&str> = status.jails.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["dummyjail", "testauth"]);
    for jail in &status.jails {
        let text = h.client(&["status", &jail.name]);
        assert_eq!(
            jail.currently_failed,
            client_count(&text, "Currently failed")
        );
        assert_eq!(jail.total_failed, client_count(&text, "Total failed"));
        assert_eq!(
            jail.currently_banned,
            client_count(&text, "Currently banned")
        );
        assert_eq!(jail.total_banned, client_count(&text, "Total banned"));
        let log = h.sandbox.log_path(&jail.name).display().to_string();
        assert_eq!(jail.file_list, [log]);
    }
    assert!(status.fail2ban_latency_us > 0);

    match h.run(Kind::Ping(Ping {})).await {
        Outcome::Pong(pong) => assert_eq!(pong.fail2ban_version, status.fail2ban_version),
        other => panic!("expected a pong, got {other:?}"),
    }
}

#[tokio::test]
async fn a_log_burst_bans_an_address_that_shows_with_its_times() {
    let h = host("cmd-burst");
    let before = chrono::Utc::now().timestamp();
    h.sandbox
        .append_failures(&h.sandbox.log_path("testauth"), "203.0.113.7", 3)
        .expect("log");
    wait_for_async(Duration::from_secs(10), "the ban in the status", || async {
        let status = h.status().await;
        let jail = status.jails.iter().find(|j| j.name == "testauth")?;
        (jail.currently_banned == 1).then_some(())
    })
    .await
    .expect("banned");
    let page = h.banned("testauth", "", 0, 0).await;
    assert_eq!((page.jail.as_str(), page.total), ("testauth", 1));
    let entry = &page.entries[0];
    assert_eq!(entry.ip, "203.0.113.7");
    let after = chrono::Utc::now().timestamp();
    assert!(
        (before - 1..=after + 1).contains(&entry.banned_at_unix),
        "banned at {} outside {before}..{after}",
        entry.banned_at_unix
    );
    assert_eq!(entry.expires_at_unix, entry.banned_at_unix + 600);
    // The same times as fail2ban-client prints them (local time).
    let with_time = h.client(&["get", "testauth", "banip", "--with-time"]);
    let printed = chrono::DateTime::from_timestamp(entry.banned_at_unix, 0)
        .expect("time")
        .with_timezone(&chrono::Local)
        .format("%Y-%m-%d %H:%M:%S")
        .to_string();
    assert!(with_time.contains(&printed), "{with_time} lacks {printed}");
}

#[tokio::test]
async fn ban_and_unban_are_reflected_in_fail2ban() {
    let h = host("cmd-ban");
    assert_eq!(
        h.set_ban("testauth", "198.51.100.7", true).await,
        (true, vec!["testauth".to_owned()])
    );
    assert!(h.banned_by_client("testauth").contains("198.51.100.7"));
    assert!(
        !h.set_ban("testauth", "198.51.100.7", true).await.0,
        "already banned"
    );
    // IPv6 in any spelling reaches fail2ban in canonical form; networks are banned whole.
    assert!(h.set_ban("testauth", "2001:DB8:0::5", true).await.0);
    assert!(h.set_ban("testauth", "198.18.0.0/24", true).await.0);
    let banned = h.banned_by_client("testauth");
    assert!(
        banned.contains("2001:db8::5") && banned.contains("198.18.0.0/24"),
        "{banned:?}"
    );
    // The page is fresh after a ban through the agent.
    assert_eq!(h.banned("testauth", "", 0, 0).await.total, 3);

    assert_eq!(
        h.set_ban("testauth", "198.51.100.7", false).await,
        (true, vec!["testauth".to_owned()])
    );
    assert!(!h.banned_by_client("testauth").contains("198.51.100.7"));
    assert!(
        !h.set_ban("testauth", "198.51.100.7", false).await.0,
        "not banned"
    );
    assert_eq!(h.banned("testauth", "", 0, 0).await.total, 2);

    // Unban everywhere.
    h.client(&["set", "dummyjail", "banip", "2001:db8::5"]);
    let (changed, mut jails) = h.set_ban("", "2001:db8::5", false).await;
    jails.sort();
    assert!(changed);
    assert_eq!(jails, ["dummyjail", "testauth"]);
    assert!(
        h.banned_by_client("testauth").len() == 1 && h.banned_by_client("dummyjail").is_empty()
    );
    assert_eq!(h.set_ban("", "2001:db8::5", false).await, (false, vec![]));

    // An unknown jail is NOT_FOUND, for bans and pages alike.
    error(
        h.run(Kind::SetBan(SetBan {
            jail: "nosuch".to_owned(),
            ip: "192.0.2.1".to_owned(),
            ban: true,
            guard_override: false,
        }))
        .await,
        ErrorCode::NotFound,
    );
    error(
        h.run(Kind::ListBanned(ListBanned {
            jail: "nosuch".to_owned(),
            ..Default::default()
        }))
        .await,
        ErrorCode::NotFound,
    );
}

#[tokio::test]
async fn banned_lists_page_and_search() {
    let h = host_on(
        Fail2banSandbox::builder()
            .name("cmd-paging")
            .extra_jails(1)
            .start()
            .expect("sandbox"),
    );
    let ips: Vec<String> = (0..250)
        .map(|i| format!("198.18.{}.{}", i / 100, i % 100))
        .collect();
    let mut args = vec!["set", "extra01", "banip"];
    args.extend(ips.iter().map(String::as_str));
    assert_eq!(h.client(&args), "250");

    let mut seen = BTreeSet::new();
    for offset in [0, 100, 200] {
        let page = h.banned("extra01", "", offset, 100).await;
        assert_eq!(page.total, 250);
        assert_eq!(page.entries.len(), if offset == 200 { 50 } else { 100 });
        for entry in &page.entries {
            assert!(
                entry.banned_at_unix > 0 && entry.expires_at_unix == entry.banned_at_unix + 600
            );
            assert!(seen.insert(entry.ip.clone()), "{} twice", entry.ip);
        }
    }
    assert_eq!(seen, ips.iter().cloned().collect::<BTreeSet<_>>());
    assert_eq!(h.banned("extra01", "", 300, 100).await.entries.len(), 0);
    assert_eq!(
        h.banned("extra01", "", 0, 0).await.entries.len(),
        50,
        "default page"
    );

    // Substring and network searches.
    let page = h.banned("extra01", "198.18.2.", 0, 1000).await;
    assert_eq!(page.total, 50);
    assert!(page.entries.iter().all(|e| e.ip.starts_with("198.18.2.")));
    assert_eq!(h.banned("extra01", "198.18.1.9", 0, 1000).await.total, 11); // .9 and .90-.99
    assert_eq!(
        h.banned("extra01", "198.18.0.0/25", 0, 1000).await.total,
        100
    );
    assert_eq!(
        h.banned("extra01", "198.18.1.64/26", 0, 1000).await.total,
        36
    ); // .64-.99
    assert_eq!(
        h.banned("extra01", "203.0.113.0/24", 0, 1000).await.total,
        0
    );

    // A ban from elsewhere (fail2ban-client) shows on the next page: the counters changed.
    h.client(&["set", "extra01", "banip", "198.18.9.9"]);
    assert_eq!(h.banned("extra01", "", 0, 10).await.total, 251);
    h.client(&["set", "extra01", "unbanip", "198.18.9.9", "198.18.0.0"]);
    let page = h.banned("extra01", "", 0, 1000).await;
    assert_eq!(page.total, 249);
    assert!(page.entries.iter().all(|e| e.ip != "198.18.0.0"));
}

#[tokio::test]
async fn jails_filters_and_their_config_are_listed() {
    let h = host("cmd-list");
    let jails = match h.run(Kind::ListJails(ListJails {})).await {
        Outcome::Jails(list) => list,
        other => panic!("expected jails, got {other:?}"),
    };
    let names: Vec<&str> = jails.jails.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["testauth", "dummyjail"]);
    let testauth = &jails.jails[0];
    assert!(testauth.enabled && testauth.running);
    assert_eq!(testauth.filter, "testauth");
    assert_eq!(testauth.backend, "auto");
    assert_eq!(
        testauth.log_paths,
        [h.sandbox.log_path("testauth").display().to_string()]
    );
    assert_eq!(testauth.actions, ["filelog"]);
    assert_eq!(testauth.settings["maxretry"], "3");
    assert_eq!(testauth.settings["ignoreip"], "127.0.0.1/8 ::1");
    assert_eq!(jails.jails[1].actions, ["dummy"]);

    let filters = match h.run(Kind::ListFilters(ListFilters {})).await {
        Outcome::Filters(list) => list.names,
        other => panic!("expected filters, got {other:?}"),
    };
    assert_eq!(filters, ["testauth"]);

    let config = h.jail_config("testauth").await;
    assert!(config.enabled && config.running);
    assert_eq!(config.filter, "testauth");
    let jail_override = config.jail_override.expect("override");
    assert_eq!(
        (
            jail_override.path.as_str(),
            jail_override.exists,
            jail_override.version.as_str()
        ),
        ("jail.d/testauth.local", false, "")
    );
    let filter_conf = config.filter_conf.expect("filter conf");
    assert!(filter_conf.exists && filter_conf.content.contains("Failed login"));
    assert_eq!(filter_conf.path, "filter.d/testauth.conf");
    assert!(!config.filter_local.expect("filter local").exists);
    assert_eq!(config.effective["bantime"], "600");

    error(
        h.run(Kind::GetJailConfig(GetJailConfig {
            jail: "nosuch".to_owned(),
        }))
        .await,
        ErrorCode::NotFound,
    );
}

#[tokio::test]
async fn writes_apply_and_a_stale_version_conflicts() {
    let h = host("cmd-conflict");
    let first = "[testauth]\nmaxretry = 7\n";
    let written = change(h.write_override("testauth", first, "").await);
    assert_eq!(written.files.len(), 1);
    assert_eq!(written.files[0].path, "jail.d/testauth.local");
    let version = written.files[0].version.clone();
    assert_eq!(version.len(), 64);
    assert!(written.failed_jails.is_empty(), "{written:?}");
    assert_eq!(h.client(&["get", "testauth", "maxretry"]), "7");
    assert_eq!(
        h.jail_config("testauth")
            .await
            .jail_override
            .expect("file")
            .version,
        version
    );

    // Someone else's edit started from the old version ("" = no file): refused, nothing changed.
    let files = h.files();
    let conflict = error(
        h.write_override("testauth", "[testauth]\nmaxretry = 9\n", "")
            .await,
        ErrorCode::Conflict,
    );
    assert_eq!(conflict.current_version, version);
    assert_eq!(h.files(), files);
    assert_eq!(h.client(&["get", "testauth", "maxretry"]), "7");

    // With the current version the write goes through; an empty body removes the override.
    let second = change(
        h.write_override("testauth", "[testauth]\nmaxretry = 9\n", &version)
            .await,
    );
    assert_eq!(h.client(&["get", "testauth", "maxretry"]), "9");
    let removed = change(
        h.write_override("testauth", "  \n", &second.files[0].version)
            .await,
    );
    assert_eq!(removed.files[0].version, "");
    assert!(!h.sandbox.conf_dir().join("jail.d/testauth.local").exists());
    assert_eq!(h.client(&["get", "testauth", "maxretry"]), "3");

    // Two edits of the same file at once: the config gate runs them one after the other, so
    // exactly one finds the version it expects.
    let (a, b) = tokio::join!(
        h.write_override("testauth", "[testauth]\nmaxretry = 4\n", ""),
        h.set_ignore_list("testauth", &["192.0.2.44"], ""),
    );
    let conflicts = [&a, &b]
        .iter()
        .filter(|o| matches!(o, Outcome::Error(e) if e.code == i32::from(ErrorCode::Conflict)))
        .count();
    let applied = [&a, &b]
        .iter()
        .filter(|o| matches!(o, Outcome::ConfigChange(_)))
        .count();
    assert_eq!((conflicts, applied), (1, 1), "{a:?}\n{b:?}");
}

#[tokio::test]
async fn a_jail_with_a_broken_filter_is_refused_and_fail2ban_keeps_the_old_config() {
    let h = host("cmd-broken");
    change(h.set_enabled("dummyjail", false).await);
    assert_eq!(h.jail_list(), "testauth");
    // A broken filter, put there behind the agent's back, and the disabled jail pointed at it.
    std::fs::write(
        h.sandbox.conf_dir().join("filter.d/broken.conf"),
        "[Definition]\nfailregex = ^(unclosed <HOST>\n",
    )
    .expect("write filter");
    let version = h
        .jail_config("dummyjail")
        .await
        .jail_override
        .expect("file")
        .version;
    change(
        h.write_override(
            "dummyjail",
            "[dummyjail]\nenabled = false\nfilter = broken\n",
            &version,
        )
        .await,
    );

    let files = h.files();
    let refused = error(
        h.set_enabled("dummyjail", true).await,
        ErrorCode::ValidationFailed,
    );
    assert!(
        refused.message.contains("nothing was changed"),
        "{}",
        refused.message
    );
    assert!(
        refused
            .details
            .iter()
            .any(|d| d.contains("Unable to compile regular expression")),
        "{:?}",
        refused.details
    );
    assert_eq!(h.files(), files, "files changed");
    // fail2ban still answers, with the old configuration.
    assert!(matches!(h.run(Kind::Ping(Ping {})).await, Outcome::Pong(_)));
    assert_eq!(h.jail_list(), "testauth");
    let status = h.status().await;
    assert_eq!(status.jails.len(), 1);
}

#[tokio::test]
async fn filter_tests_report_matches() {
    let h = host("cmd-filtertest");
    let lines: Vec<String> = [
        "2026-11-22 10:00:00 Failed login for bob from 192.0.2.1",
        "2026-11-22 10:00:01 Accepted login for bob from 192.0.2.1",
        "2026-11-22 10:00:02 Failed login for eve from 2001:db8::7",
        "2026-11-22 10:00:03 Failed login for eve from 192.0.2.10",
    ]
    .map(str::to_owned)
    .to_vec();
    let report = match h
        .run(Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Name("testauth".to_owned())),
            lines: lines.clone(),
        }))
        .await
    {
        Outcome::FilterTest(report) => report,
        other => panic!("expected a report, got {other:?}"),
    };
    let matched: Vec<(u32, &str)> = report
        .matched
        .iter()
        .map(|m| (m.index, m.ip.as_str()))
        .collect();
    assert_eq!(
        matched,
        [(0, "192.0.2.1"), (2, "2001:db8::7"), (3, "192.0.2.10")]
    );
    assert_eq!(report.ips, ["192.0.2.1", "2001:db8::7", "192.0.2.10"]);
    assert_eq!(
        (report.lines, report.matched_count, report.missed),
        (4, 3, 1)
    );
    assert_eq!(report.regex_hits.len(), 1);
    assert_eq!(report.regex_hits[0].hits, 3);

    // A filter text being edited, never written to the configuration.
    let files = h.files();
    let text = "[Definition]\nfailregex = ^\\s*Accepted login for \\S+ from <HOST>$\n\
                datepattern = {^LN-BEG}%%Y-%%m-%%d %%H:%%M:%%S\n";
    let report = match h
        .run(Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Text(text.to_owned())),
            lines: lines.clone(),
        }))
        .await
    {
        Outcome::FilterTest(report) => report,
        other => panic!("expected a report, got {other:?}"),
    };
    assert_eq!(report.matched.len(), 1);
    assert_eq!(report.matched[0].index, 1);
    assert_eq!(h.files(), files);

    // A filter fail2ban-regex cannot compile, and one that does not exist.
    let refused = error(
        h.run(Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Text(
                "[Definition]\nfailregex = ^(unclosed <HOST>\n".to_owned(),
            )),
            lines: lines.clone(),
        }))
        .await,
        ErrorCode::ValidationFailed,
    );
    assert!(!refused.details.is_empty());
    error(
        h.run(Kind::TestFilter(TestFilter {
            filter: Some(test_filter::Filter::Name("nosuch".to_owned())),
            lines,
        }))
        .await,
        ErrorCode::NotFound,
    );
}

#[tokio::test]
async fn reload_and_restart_report_running_jails() {
    let h = host("cmd-restart");
    let pid = h.sandbox.pid();
    for mode in [RestartMode::Reload, RestartMode::Restart] {
        let report = match h.run(Kind::Restart(Restart { mode: mode.into() })).await {
            Outcome::Restart(report) => report,
            other => panic!("expected a restart report, got {other:?}"),
        };
        assert!(report.ok, "{mode:?}: {report:?}");
        assert_eq!(report.running_jails, ["dummyjail", "testauth"]);
        assert!(report.failed_jails.is_empty());
        // The server the host's init system owns is still the same process.
        assert_eq!(h.sandbox.pid(), pid);
        assert_eq!(h.client(&["ping"]), "Server replied: pong");
    }
    let log = std::fs::read_to_string(h.sandbox.server_log_path()).expect("log");
    assert!(log.contains("Reload all jails"), "{log}");
    assert!(
        log.contains("Stopping all jails"),
        "the restart stopped the jails: {log}"
    );

    // A jail that cannot start after a reload is reported (the file is broken behind the
    // agent's back; the restart command itself does not validate).
    std::fs::create_dir_all(h.sandbox.conf_dir().join("jail.d")).expect("mkdir");
    std::fs::write(
        h.sandbox.conf_dir().join("jail.d/dummyjail.local"),
        "[dummyjail]\nlogpath = /nonexistent/banhub/auth.log\n",
    )
    .expect("write");
    let report = match h
        .run(Kind::Restart(Restart {
            mode: RestartMode::Reload.into(),
        }))
        .await
    {
        Outcome::Restart(report) => report,
        other => panic!("expected a restart report, got {other:?}"),
    };
    assert!(!report.ok, "{report:?}");
    assert!(report.message.contains("dummyjail"), "{report:?}");
}

#[tokio::test]
async fn ignore_lists_round_trip() {
    let h = host("cmd-ignore");
    let global = h.ignore_list("").await;
    assert_eq!(global.entries, ["127.0.0.1/8", "::1"]);
    assert_eq!(global.path, "jail.d/banhub-defaults.local");
    assert_eq!(global.version, "");

    let set = change(
        h.set_ignore_list("", &["127.0.0.1/8", "::1", "192.0.2.0/24", "localhost"], "")
            .await,
    );
    assert_eq!(set.files[0].path, "jail.d/banhub-defaults.local");
    let global = h.ignore_list("").await;
    assert_eq!(
        global.entries,
        ["127.0.0.1/8", "::1", "192.0.2.0/24", "localhost"]
    );
    assert_eq!(global.version, set.files[0].version);
    let live = h.client(&["get", "testauth", "ignoreip"]);
    assert!(
        live.contains("192.0.2.0/24") && live.contains("localhost"),
        "{live}"
    );

    // A jail's own list adds to the global one.
    let testauth = h.ignore_list("testauth").await;
    assert!(testauth.entries.is_empty());
    assert!(
        testauth.effective.contains(&"192.0.2.0/24".to_owned()),
        "{testauth:?}"
    );
    change(
        h.set_ignore_list("testauth", &["198.51.100.7"], &testauth.version)
            .await,
    );
    let testauth = h.ignore_list("testauth").await;
    assert_eq!(testauth.entries, ["198.51.100.7"]);
    assert_eq!(testauth.path, "jail.d/testauth.local");
    for expected in ["192.0.2.0/24", "198.51.100.7", "127.0.0.0/8"] {
        assert!(
            testauth.effective.contains(&expected.to_owned()),
            "{testauth:?}"
        );
    }
    let dummy = h.ignore_list("dummyjail").await;
    assert!(!dummy.effective.contains(&"198.51.100.7".to_owned()));
    let text = std::fs::read_to_string(h.sandbox.conf_dir().join("jail.d/testauth.local"))
        .expect("override");
    assert!(
        text.contains("ignoreip = %(default/ignoreip)s 198.51.100.7"),
        "{text}"
    );

    // The global list can be emptied; a stale version conflicts.
    error(h.set_ignore_list("", &[], "").await, ErrorCode::Conflict);
    change(h.set_ignore_list("", &[], &global.version).await);
    assert_eq!(h.ignore_list("").await.entries, Vec::<String>::new());
    assert_eq!(h.ignore_list("testauth").await.effective, ["198.51.100.7"]);
}

#[tokio::test]
async fn log_tail_shows_fail2bans_log() {
    let h = host("cmd-logtail");
    h.sandbox
        .append_failures(&h.sandbox.log_path("testauth"), "203.0.113.9", 3)
        .expect("log");
    let lines = wait_for_async(
        Duration::from_secs(10),
        "the ban in fail2ban's log",
        || async {
            match h
                .run(Kind::LogTail(LogTail {
                    jail: "testauth".to_owned(),
                    lines: 50,
                }))
                .await
            {
                Outcome::LogLines(log) => log
                    .lines
                    .iter()
                    .any(|l| l.contains("Ban 203.0.113.9"))
                    .then_some(log),
                _ => None,
            }
        },
    )
    .await
    .expect("log lines");
    assert_eq!(
        lines.path,
        h.sandbox.server_log_path().display().to_string()
    );
    assert!(
        lines.lines.iter().all(|l| l.contains("[testauth]")),
        "{lines:?}"
    );
    let all = match h
        .run(Kind::LogTail(LogTail {
            jail: String::new(),
            lines: 3,
        }))
        .await
    {
        Outcome::LogLines(log) => log.lines,
        other => panic!("expected log lines, got {other:?}"),
    };
    assert_eq!(all.len(), 3);
    let text = std::fs::read_to_string(h.sandbox.server_log_path()).expect("log");
    let last: Vec<&str> = text.lines().rev().take(3).collect();
    assert_eq!(
        all.iter().rev().map(String::as_str).collect::<Vec<_>>(),
        last
    );
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let h = host("cmd-bad");
    h.client(&["set", "testauth", "banip", "198.51.100.1"]);
    let files = h.files();
    let banned = h.banned_by_client("testauth");
    let mut kinds = Vec::new();
    for jail in [
        "../x",
        "/etc/passwd",
        "a\nb",
        "[DEFAULT]",
        "DEFAULT",
        "INCLUDES",
        "jail.d/x",
    ] {
        kinds.push(Kind::WriteJailConfig(WriteJailConfig {
            jail: jail.to_owned(),
            jail_override: Some(FileEdit {
                content: "[DEFAULT]\nbantime = 1\n".to_owned(),
                expected_version: String::new(),
            }),
            filter_local: None,
        }));
        kinds.push(Kind::SetJailsEnabled(SetJailsEnabled {
            changes: vec![JailToggle {
                jail: jail.to_owned(),
                enabled: true,
            }],
        }));
        kinds.push(Kind::SetBan(SetBan {
            jail: jail.to_owned(),
            ip: "192.0.2.1".to_owned(),
            ban: true,
            guard_override: false,
        }));
        kinds.push(Kind::SetIgnoreList(SetIgnoreList {
            jail: jail.to_owned(),
            entries: vec!["192.0.2.1".to_owned()],
            expected_version: String::new(),
        }));
        if !jail.eq_ignore_ascii_case("default") && !jail.eq_ignore_ascii_case("includes") {
            // Legal filter names (only jail names reserve these section names).
            kinds.push(Kind::TestFilter(TestFilter {
                filter: Some(test_filter::Filter::Name(jail.to_owned())),
                lines: vec!["x".to_owned()],
            }));
        }
    }
    for ip in [
        "not-an-ip",
        "198.51.100.1; rm -rf /",
        "198.51.100.1\n",
        "0.0.0.0/0",
        "::1",
    ] {
        for ban in [true, false] {
            kinds.push(Kind::SetBan(SetBan {
                jail: "testauth".to_owned(),
                ip: ip.to_owned(),
                ban,
                guard_override: false,
            }));
        }
    }
    let injections = [
        "[testauth]\nmaxretry = 1\n[DEFAULT]\nbantime = 1\n",
        "[testauth]\nmaxretry = 1\n[INCLUDES]\nbefore = /etc/shadow\n",
        "[INCLUDES]\nbefore = /etc/shadow\n",
        "maxretry = 1\n",
    ];
    for content in injections {
        kinds.push(Kind::WriteJailConfig(WriteJailConfig {
            jail: "testauth".to_owned(),
            jail_override: Some(FileEdit {
                content: content.to_owned(),
                expected_version: String::new(),
            }),
            filter_local: None,
        }));
    }
    for entry in [
        "192.0.2.1\n[DEFAULT]",
        "192.0.2.1 192.0.2.2",
        "%(x)s",
        "file:/etc/shadow",
    ] {
        kinds.push(Kind::SetIgnoreList(SetIgnoreList {
            jail: "testauth".to_owned(),
            entries: vec![entry.to_owned()],
            expected_version: String::new(),
        }));
    }
    // Oversized: an override, a filter text, log lines, an ignore list, a page.
    kinds.push(Kind::WriteJailConfig(WriteJailConfig {
        jail: "testauth".to_owned(),
        jail_override: Some(FileEdit {
            content: format!("[testauth]\n# {}\n", "x".repeat(100_000)),
            expected_version: String::new(),
        }),
        filter_local: None,
    }));
    kinds.push(Kind::WriteJailConfig(WriteJailConfig {
        jail: "testauth".to_owned(),
        jail_override: None,
        filter_local: Some(FileEdit {
            content: format!("[Definition]\n# {}\n", "x".repeat(100_000)),
            expected_version: String::new(),
        }),
    }));
    kinds.push(Kind::TestFilter(TestFilter {
        filter: Some(test_filter::Filter::Name("testauth".to_owned())),
        lines: vec!["2026-11-22 10:00:00 Failed login for bob from 192.0.2.1".to_owned(); 10_001],
    }));
    kinds.push(Kind::TestFilter(TestFilter {
        filter: Some(test_filter::Filter::Name("testauth".to_owned())),
        lines: vec!["x".repeat(4_000); 300],
    }));
    kinds.push(Kind::TestFilter(TestFilter {
        filter: Some(test_filter::Filter::Text("#".repeat(2 << 20))),
        lines: vec!["x".to_owned()],
    }));
    kinds.push(Kind::SetIgnoreList(SetIgnoreList {
        jail: String::new(),
        entries: (0..600)
            .map(|i| format!("10.0.{}.{}", i / 250, i % 250))
            .collect(),
        expected_version: String::new(),
    }));
    kinds.push(Kind::ListBanned(ListBanned {
        jail: "testauth".to_owned(),
        limit: 5_000,
        ..Default::default()
    }));
    kinds.push(Kind::LogTail(LogTail {
        jail: String::new(),
        lines: 5_000,
    }));
    for kind in kinds {
        let described: String = format!("{kind:?}").chars().take(160).collect();
        let outcome = h.run(kind).await;
        match outcome {
            Outcome::Error(e) if e.code == i32::from(ErrorCode::InvalidArgument) => {
                assert!(!e.message.is_empty());
            }
            other => panic!("{described}: expected INVALID_ARGUMENT, got {other:?}"),
        }
    }
    assert_eq!(h.files(), files, "files changed");
    assert_eq!(h.banned_by_client("testauth"), banned);
    assert_eq!(h.jail_list(), "dummyjail, testauth");
}
