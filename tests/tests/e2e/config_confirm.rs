//! Config sets with commit-confirm against real fail2ban: the agent's change record and its
//! revert at the deadline (also at a restart after the deadline), a confirmed change that stays,
//! a revert on request, a CONFLICT that leaves the files as they were; then through the hub, and
//! a change whose reload cuts its host off from the hub (`netcut`).

use std::path::PathBuf;
use std::time::Duration;

use banhub_agent::fail2ban_files::pending::{ChangeError, ConfigChanges, Phase, record};
use banhub_agent::fail2ban_files::{
    ConfigEditor, EditError, EditableFile, EditorSettings, JailName, SetFile, Version,
};
use banhub_tests::commands::client_path;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

mod hub;
mod netcut;

/// A sandbox, an editor of its files, and a state directory for the change record.
struct Host {
    sandbox: Fail2banSandbox,
    editor: ConfigEditor,
    state: TempDir,
}

impl Host {
    fn start(name: &str) -> Self {
        let sandbox = Fail2banSandbox::start(name).expect("sandbox");
        let state = tempfile::tempdir().expect("state dir");
        let mut settings = EditorSettings::new(
            sandbox.conf_dir(),
            sandbox.socket_path(),
            client_path(),
            state.path().join("config-backups"),
        );
        settings.policy.log_prefixes.push(std::env::temp_dir());
        let editor = ConfigEditor::new(settings).expect("editor");
        Self {
            sandbox,
            editor,
            state,
        }
    }

    fn changes(&self) -> ConfigChanges {
        ConfigChanges::new(self.editor.clone(), self.state.path())
    }

    fn override_path(&self) -> PathBuf {
        self.sandbox.conf_dir().join("jail.d/testauth.local")
    }

    /// `maxretry` of `testauth` as the running fail2ban has it.
    fn running_maxretry(&self) -> String {
        self.sandbox
            .client(&["get", "testauth", "maxretry"])
            .expect("get maxretry")
            .trim()
            .to_owned()
    }
}

fn testauth_set(maxretry: u32, expected: Version) -> Vec<SetFile> {
    vec![SetFile {
        file: EditableFile::JailOverride(JailName::parse("testauth").expect("name")),
        content: Some(format!("[testauth]\nmaxretry = {maxretry}\n")),
        expected,
    }]
}

#[tokio::test]
async fn a_confirmed_change_stays_and_an_unconfirmed_one_reverts_at_its_deadline() {
    let host = Host::start("cc-deadline");
    let changes = host.changes();
    let shutdown = CancellationToken::new();
    tokio::spawn(changes.clone().run(shutdown.clone()));

    let (record, report) = changes
        .apply("c1", testauth_set(7, Version::Absent), 10)
        .await
        .expect("apply");
    assert_eq!(record.phase, Phase::Pending);
    assert_eq!(report.changes.len(), 1);
    assert_eq!(host.running_maxretry(), "7");
    // The record holds what the file was (absent) before anything was written.
    let stored = record::load(&host.state.path().join(record::RECORD_FILE))
        .expect("load")
        .expect("record");
    assert_eq!(stored.previous.len(), 1);
    assert_eq!(stored.previous[0].content, None);
    // A second change while one is pending is refused, and nothing changes.
    let busy = changes
        .apply("c2", testauth_set(9, report.changes[0].current), 10)
        .await;
    assert!(matches!(busy, Err(ChangeError::Busy { .. })), "{busy:?}");
    assert_eq!(host.running_maxretry(), "7");

    let confirmed = changes.settle("c1", true).await.expect("confirm");
    assert_eq!(confirmed.phase, Phase::Confirmed);

    // The next change is not confirmed: the agent puts the confirmed one back by itself.
    let current = Version::of(Some(b"[testauth]\nmaxretry = 7\n"));
    changes
        .apply("c2", testauth_set(9, current), 10)
        .await
        .expect("apply c2");
    assert_eq!(host.running_maxretry(), "9");
    wait::wait_until_async(
        Duration::from_secs(40),
        "c2 reverted at its deadline",
        || {
            let changes = changes.clone();
            async move {
                changes
                    .status("c2")
                    .await
                    .is_ok_and(|r| r.phase == Phase::Reverted)
            }
        },
    )
    .await
    .expect("the deadline revert");
    assert_eq!(host.running_maxretry(), "7");
    assert_eq!(
        std::fs::read_to_string(host.override_path()).expect("override"),
        "[testauth]\nmaxretry = 7\n"
    );
    // A confirmation that comes too late answers the revert.
    let late = changes.settle("c2", true).await.expect("settle");
    assert_eq!(late.phase, Phase::Reverted);
    shutdown.cancel();
}

#[tokio::test]
async fn a_change_pending_when_the_agent_died_reverts_at_start_after_its_deadline() {
    let host = Host::start("cc-restart");
    {
        // No loop runs: the agent "dies" with the change pending.
        let changes = host.changes();
        changes
            .apply("c1", testauth_set(8, Version::Absent), 10)
            .await
            .expect("apply");
        assert_eq!(host.running_maxretry(), "8");
    }
    let path = host.state.path().join(record::RECORD_FILE);
    let mut stored = record::load(&path).expect("load").expect("record");
    assert_eq!(stored.phase, Phase::Pending);
    // The deadline passes while the agent is down.
    stored.deadline_unix_ms = 1;
    record::save(&path, &stored).expect("save");

    let changes = host.changes();
    let shutdown = CancellationToken::new();
    tokio::spawn(changes.clone().run(shutdown.clone()));
    wait::wait_until_async(Duration::from_secs(30), "c1 reverted at start", || {
        let changes = changes.clone();
        async move {
            changes
                .status("c1")
                .await
                .is_ok_and(|r| r.phase == Phase::Reverted)
        }
    })
    .await
    .expect("the revert at start");
    assert!(
        !host.override_path().exists(),
        "the override was created by c1"
    );
    assert_eq!(host.running_maxretry(), "3");
    shutdown.cancel();
}

#[tokio::test]
async fn a_revert_on_request_and_a_conflict_that_changes_nothing() {
    let host = Host::start("cc-revert");
    let changes = host.changes();
    std::fs::create_dir_all(host.sandbox.conf_dir().join("jail.d")).expect("jail.d");
    std::fs::write(host.override_path(), "[testauth]\nmaxretry = 4\n").expect("write");
    host.sandbox.client(&["reload"]).expect("reload");

    // A stale version: CONFLICT, the file and fail2ban stay as they were, no record pends.
    let stale = changes
        .apply("c0", testauth_set(6, Version::Absent), 10)
        .await;
    assert!(
        matches!(stale, Err(ChangeError::Edit(EditError::Conflict { .. }))),
        "{stale:?}"
    );
    assert_eq!(
        std::fs::read_to_string(host.override_path()).expect("override"),
        "[testauth]\nmaxretry = 4\n"
    );
    assert_eq!(host.running_maxretry(), "4");
    assert!(matches!(
        changes.status("c0").await,
        Err(ChangeError::Unknown(_))
    ));

    let current = Version::of(Some(b"[testauth]\nmaxretry = 4\n"));
    changes
        .apply("c1", testauth_set(6, current), 600)
        .await
        .expect("apply");
    assert_eq!(host.running_maxretry(), "6");
    let reverted = changes.settle("c1", false).await.expect("revert");
    assert_eq!(reverted.phase, Phase::Reverted);
    assert_eq!(host.running_maxretry(), "4");
    assert_eq!(
        std::fs::read_to_string(host.override_path()).expect("override"),
        "[testauth]\nmaxretry = 4\n"
    );
}
