//! What a simulated agent's host does with the hub's commands, as a real agent would with no
//! latency: bans, unbans and pings succeed; the host keeps its `.local` files in memory (a jail
//! override and a hand-kept `jail.local` to start with) and reports them; config sets are checked
//! (paths, expected versions, one pending change at a time), applied, confirmed, and reverted on
//! request or at their deadline; fail2ban's status shows its one jail running and its log is
//! clean. Anything else is "unsupported".

use std::collections::BTreeMap;

use banhub_proto::config_path::ConfigPath;
use banhub_proto::v1::{
    ApplyConfigSet, BanChange, CommandError, CommandResult, ConfigFile, ConfigFiles,
    ConfigSetPhase, ConfigSetState, ConfigSetValidation, ErrorCode, FileVersion,
    GetConfigSetStatus, JailEntry, JailList, JailStatus, LogLines, Pong, SettleConfigSet,
    SharedBanReport, StatusReport, command, command_result,
};

/// The commands a simulated agent announces in its hello (the real agent's names).
pub const CAPABILITIES: &[&str] = &[
    "ping",
    "status",
    "set_ban",
    "list_jails",
    "log_tail",
    "get_config_files",
    "validate_config_set",
    "apply_config_set",
    "settle_config_set",
    "config_set_status",
];

/// The jail every simulated host runs.
const JAIL: &str = "sshd";
/// Most files in one config set (the real agent's bound).
const MAX_SET_FILES: usize = 64;
/// The confirm windows a real agent accepts, besides 0.
const CONFIRM_WINDOW_SECS: std::ops::RangeInclusive<u32> = 10..=3600;
/// The text of an absent file's version.
const ABSENT: &str = "absent";

/// The jail override every simulated host has (`drift` profiles compare with it).
pub const SIMULATED_JAIL: &str =
    "[sshd]\nenabled = true\nmaxretry = 3\nfindtime = 600\nbantime = 3600\n";

/// One config set applied on the host, and what it replaced.
#[derive(Debug, Clone)]
struct Change {
    id: String,
    phase: ConfigSetPhase,
    reason: String,
    deadline_unix_ms: i64,
    /// Each file written, with its content before (`None`: it did not exist).
    previous: Vec<(String, Option<String>)>,
    applied: Vec<FileVersion>,
}

/// One simulated host's fail2ban files and its latest config change (the real agent keeps one
/// record too). Lives as long as the simulated agent, across its sessions, like a disk.
#[derive(Debug, Clone)]
pub struct SimHost {
    /// Logical path → content.
    files: BTreeMap<String, String>,
    latest: Option<Change>,
}

impl Default for SimHost {
    /// A jail override and a `jail.local` of about 2 KB, like a host's hand-kept defaults.
    fn default() -> Self {
        let jail_local: String = std::iter::once("[DEFAULT]\n".to_owned())
            .chain((0..60).map(|i| format!("# site note {i:02}: kept by hand on this host\n")))
            .collect();
        let files = BTreeMap::from([
            ("jail.d/sshd.local".to_owned(), SIMULATED_JAIL.to_owned()),
            ("jail.local".to_owned(), jail_local),
        ]);
        Self {
            files,
            latest: None,
        }
    }
}

type Outcome = command_result::Outcome;

fn error(code: ErrorCode, message: impl Into<String>) -> CommandError {
    CommandError {
        code: code.into(),
        message: message.into(),
        ..CommandError::default()
    }
}

fn refuse(code: ErrorCode, message: impl Into<String>) -> Outcome {
    Outcome::Error(error(code, message))
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A file's version: the SHA-256 of its bytes, or `absent`.
fn version_of(content: Option<&str>) -> String {
    content.map_or_else(
        || ABSENT.to_owned(),
        |c| banhub::domain::sha256_hex(c.as_bytes()),
    )
}

impl SimHost {
    /// The answer to one command.
    pub fn answer(&mut self, command: banhub_proto::v1::Command) -> CommandResult {
        self.revert_if_overdue();
        let outcome = match command.kind {
            Some(command::Kind::SetBan(ban)) => Outcome::BanChange(BanChange {
                changed: true,
                jails: vec![if ban.jail.is_empty() {
                    JAIL.into()
                } else {
                    ban.jail
                }],
            }),
            Some(command::Kind::SyncSharedBans(sync)) => Outcome::SharedBans(SharedBanReport {
                held: sync.bans.len() as u32,
                added: sync.bans.len() as u32,
                lifted: sync.lift.len() as u32,
                ..SharedBanReport::default()
            }),
            Some(command::Kind::Ping(_)) => Outcome::Pong(Pong {
                fail2ban_version: "1.0.2".into(),
                fail2ban_latency_us: 50,
                agent_version: "sim".into(),
            }),
            Some(command::Kind::Status(_)) => Outcome::Status(self.status()),
            Some(command::Kind::ListJails(_)) => Outcome::Jails(self.jails()),
            Some(command::Kind::LogTail(tail)) => Outcome::LogLines(LogLines {
                path: "/var/log/fail2ban.log".into(),
                lines: vec![format!(
                    "fail2ban.jail [1]: INFO Jail '{}' started",
                    if tail.jail.is_empty() {
                        JAIL
                    } else {
                        &tail.jail
                    }
                )],
            }),
            Some(command::Kind::GetConfigFiles(_)) => Outcome::ConfigFiles(self.config_files()),
            Some(command::Kind::ValidateConfigSet(set)) => match self.check_set(&set.files) {
                Ok(()) => Outcome::ConfigSetValidation(ConfigSetValidation::default()),
                Err(refusal) => Outcome::Error(refusal),
            },
            Some(command::Kind::ApplyConfigSet(apply)) => self.apply(apply),
            Some(command::Kind::SettleConfigSet(settle)) => self.settle(settle),
            Some(command::Kind::ConfigSetStatus(status)) => self.status_of(status),
            _ => refuse(
                ErrorCode::Unsupported,
                "the simulated agent does not simulate this command",
            ),
        };
        CommandResult {
            id: command.id,
            outcome: Some(outcome),
        }
    }

    fn status(&self) -> StatusReport {
        StatusReport {
            fail2ban_version: "1.0.2".into(),
            jails: vec![JailStatus {
                name: JAIL.into(),
                file_list: vec!["/var/log/auth.log".into()],
                ..JailStatus::default()
            }],
            fail2ban_latency_us: 50,
        }
    }

    fn jails(&self) -> JailList {
        JailList {
            jails: vec![JailEntry {
                name: JAIL.into(),
                enabled: true,
                running: true,
                filter: JAIL.into(),
                backend: "auto".into(),
                log_paths: vec!["/var/log/auth.log".into()],
                ..JailEntry::default()
            }],
            warnings: Vec::new(),
        }
    }

    fn config_files(&self) -> ConfigFiles {
        ConfigFiles {
            files: self
                .files
                .iter()
                .map(|(path, content)| ConfigFile {
                    path: path.clone(),
                    content: content.clone(),
                    version: version_of(Some(content)),
                    exists: true,
                })
                .collect(),
            ..ConfigFiles::default()
        }
    }

    /// The checks of a set the real agent makes before touching a file: the count, each logical
    /// path, a path named once, and each expected version against the file now.
    fn check_set(&self, files: &[ConfigFile]) -> Result<(), CommandError> {
        if files.is_empty() || files.len() > MAX_SET_FILES {
            return Err(error(
                ErrorCode::InvalidArgument,
                format!(
                    "a config set holds 1 to {MAX_SET_FILES} files, got {}",
                    files.len()
                ),
            ));
        }
        for (i, file) in files.iter().enumerate() {
            if let Err(e) = ConfigPath::parse(&file.path) {
                return Err(error(
                    ErrorCode::InvalidArgument,
                    format!("{}: {e}", file.path),
                ));
            }
            if files[..i].iter().any(|f| f.path == file.path) {
                return Err(error(
                    ErrorCode::InvalidArgument,
                    format!("{} is named twice in the set", file.path),
                ));
            }
        }
        Ok(())
    }

    /// A conflict when a file's expected version is not its version now ("" is `absent`).
    fn check_versions(&self, files: &[ConfigFile]) -> Result<(), CommandError> {
        for file in files {
            let current = version_of(self.files.get(&file.path).map(String::as_str));
            let expected = if file.version.is_empty() {
                ABSENT
            } else {
                file.version.as_str()
            };
            if !expected.eq_ignore_ascii_case(&current) {
                return Err(CommandError {
                    current_version: current,
                    ..error(
                        ErrorCode::Conflict,
                        format!("{} changed since it was read", file.path),
                    )
                });
            }
        }
        Ok(())
    }

    fn apply(&mut self, request: ApplyConfigSet) -> Outcome {
        if request.change_id.is_empty() {
            return refuse(ErrorCode::InvalidArgument, "a change id is required");
        }
        let window = request.confirm_within_secs;
        if window != 0 && !CONFIRM_WINDOW_SECS.contains(&window) {
            return refuse(
                ErrorCode::InvalidArgument,
                format!("a confirm window is 0 or 10 to 3600 seconds, got {window}"),
            );
        }
        if let Some(latest) = &self.latest {
            // The same change again answers what became of it.
            if latest.id == request.change_id {
                return state(latest);
            }
            if latest.phase == ConfigSetPhase::Pending {
                return refuse(
                    ErrorCode::Conflict,
                    format!(
                        "change {} is still pending; confirm or revert it first",
                        latest.id
                    ),
                );
            }
        }
        if let Err(refusal) = self
            .check_set(&request.files)
            .and_then(|()| self.check_versions(&request.files))
        {
            return Outcome::Error(refusal);
        }
        let mut previous = Vec::with_capacity(request.files.len());
        let mut applied = Vec::with_capacity(request.files.len());
        for file in request.files {
            let before = if file.exists {
                applied.push(FileVersion {
                    path: file.path.clone(),
                    version: version_of(Some(&file.content)),
                });
                self.files.insert(file.path.clone(), file.content)
            } else {
                applied.push(FileVersion {
                    path: file.path.clone(),
                    version: ABSENT.to_owned(),
                });
                self.files.remove(&file.path)
            };
            previous.push((file.path, before));
        }
        let (phase, reason, deadline_unix_ms) = if window == 0 {
            (
                ConfigSetPhase::Confirmed,
                "applied; no confirmation was asked for",
                0,
            )
        } else {
            (
                ConfigSetPhase::Pending,
                "applied; waiting for the hub's confirmation",
                now_ms() + i64::from(window) * 1000,
            )
        };
        let change = Change {
            id: request.change_id,
            phase,
            reason: reason.to_owned(),
            deadline_unix_ms,
            previous,
            applied,
        };
        let answer = state(&change);
        self.latest = Some(change);
        answer
    }

    fn settle(&mut self, request: SettleConfigSet) -> Outcome {
        let Some(change) = self.latest.as_mut().filter(|c| c.id == request.change_id) else {
            return refuse(
                ErrorCode::NotFound,
                format!("this host holds no record of change {}", request.change_id),
            );
        };
        match (change.phase, request.confirm) {
            (ConfigSetPhase::Pending, true) => {
                change.phase = ConfigSetPhase::Confirmed;
                change.reason = "confirmed by the hub".to_owned();
            }
            (ConfigSetPhase::Pending | ConfigSetPhase::Confirmed, false) => {
                self.revert("reverted at the hub's request");
            }
            _ => {}
        }
        self.latest.as_ref().map_or_else(
            || refuse(ErrorCode::Internal, "the change record vanished"),
            state,
        )
    }

    fn status_of(&self, request: GetConfigSetStatus) -> Outcome {
        match &self.latest {
            Some(change) if request.change_id.is_empty() || change.id == request.change_id => {
                state(change)
            }
            _ => Outcome::ConfigSet(ConfigSetState {
                change_id: request.change_id,
                phase: ConfigSetPhase::Unknown.into(),
                reason: "this host holds no record of the change".to_owned(),
                ..ConfigSetState::default()
            }),
        }
    }

    /// Puts back what the pending change replaced once its deadline has passed, as the agent's
    /// own timer does.
    fn revert_if_overdue(&mut self) {
        let overdue = self.latest.as_ref().is_some_and(|c| {
            c.phase == ConfigSetPhase::Pending
                && c.deadline_unix_ms > 0
                && now_ms() >= c.deadline_unix_ms
        });
        if overdue {
            self.revert("the hub did not confirm the change before its deadline");
        }
    }

    /// Restores the files the latest change replaced.
    fn revert(&mut self, why: &str) {
        let Some(change) = self.latest.as_mut() else {
            return;
        };
        for (path, before) in change.previous.drain(..) {
            match before {
                Some(content) => self.files.insert(path, content),
                None => self.files.remove(&path),
            };
        }
        change.phase = ConfigSetPhase::Reverted;
        change.reason = why.to_owned();
        change.deadline_unix_ms = 0;
    }
}

fn state(change: &Change) -> Outcome {
    Outcome::ConfigSet(ConfigSetState {
        change_id: change.id.clone(),
        phase: change.phase.into(),
        reason: change.reason.clone(),
        deadline_unix_ms: change.deadline_unix_ms,
        files: change.applied.clone(),
        warnings: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use banhub_proto::v1::Command;

    fn run(host: &mut SimHost, kind: command::Kind) -> Outcome {
        host.answer(Command {
            id: "c".into(),
            kind: Some(kind),
            ..Command::default()
        })
        .outcome
        .expect("an outcome")
    }

    fn apply(id: &str, path: &str, content: &str, version: &str, window: u32) -> command::Kind {
        command::Kind::ApplyConfigSet(ApplyConfigSet {
            change_id: id.into(),
            files: vec![ConfigFile {
                path: path.into(),
                content: content.into(),
                version: version.into(),
                exists: true,
            }],
            confirm_within_secs: window,
        })
    }

    fn phase(outcome: &Outcome) -> ConfigSetPhase {
        match outcome {
            Outcome::ConfigSet(s) => s.phase(),
            other => panic!("not a config set state: {other:?}"),
        }
    }

    fn error_code(outcome: &Outcome) -> ErrorCode {
        match outcome {
            Outcome::Error(e) => e.code(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn a_change_is_applied_pending_then_confirmed() {
        let mut host = SimHost::default();
        let current = version_of(Some(SIMULATED_JAIL));
        let applied = run(
            &mut host,
            apply("a1", "jail.d/sshd.local", "[sshd]\n", &current, 30),
        );
        assert_eq!(phase(&applied), ConfigSetPhase::Pending);
        let busy = run(&mut host, apply("a2", "jail.d/x.local", "[x]\n", "", 0));
        assert_eq!(error_code(&busy), ErrorCode::Conflict);
        let settled = run(
            &mut host,
            command::Kind::SettleConfigSet(SettleConfigSet {
                change_id: "a1".into(),
                confirm: true,
            }),
        );
        assert_eq!(phase(&settled), ConfigSetPhase::Confirmed);
        assert_eq!(host.files["jail.d/sshd.local"], "[sshd]\n");
    }

    #[test]
    fn a_revert_puts_the_files_back() {
        let mut host = SimHost::default();
        run(
            &mut host,
            apply("b1", "filter.d/web.local", "[Definition]\n", "", 10),
        );
        let reverted = run(
            &mut host,
            command::Kind::SettleConfigSet(SettleConfigSet {
                change_id: "b1".into(),
                confirm: false,
            }),
        );
        assert_eq!(phase(&reverted), ConfigSetPhase::Reverted);
        assert!(!host.files.contains_key("filter.d/web.local"));
    }

    #[test]
    fn an_overdue_change_reverts_by_itself() {
        let mut host = SimHost::default();
        run(
            &mut host,
            apply("d1", "jail.d/web.local", "[web]\n", "", 10),
        );
        if let Some(change) = host.latest.as_mut() {
            change.deadline_unix_ms = now_ms() - 1;
        }
        let status = run(
            &mut host,
            command::Kind::ConfigSetStatus(GetConfigSetStatus {
                change_id: "d1".into(),
            }),
        );
        assert_eq!(phase(&status), ConfigSetPhase::Reverted);
        assert!(!host.files.contains_key("jail.d/web.local"));
    }

    #[test]
    fn a_stale_version_or_a_bad_path_is_refused() {
        let mut host = SimHost::default();
        let stale = run(&mut host, apply("e1", "jail.d/sshd.local", "x", "", 0));
        assert_eq!(error_code(&stale), ErrorCode::Conflict);
        let path = run(&mut host, apply("e2", "/etc/passwd", "x", "", 0));
        assert_eq!(error_code(&path), ErrorCode::InvalidArgument);
        let unknown = run(
            &mut host,
            command::Kind::ConfigSetStatus(GetConfigSetStatus {
                change_id: "zz".into(),
            }),
        );
        assert_eq!(phase(&unknown), ConfigSetPhase::Unknown);
    }
}
