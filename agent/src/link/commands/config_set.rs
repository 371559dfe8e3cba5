//! `ApplyConfigSet`, `SettleConfigSet` and `GetConfigSetStatus`: a set of files applied with
//! commit-confirm. Every path, text and version is checked again here; the change itself, its
//! durable record and the revert at the deadline belong to
//! [`ConfigChanges`](crate::fail2ban_files::pending::ConfigChanges).

use banhub_proto::rules::check_name;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{
    ApplyConfigSet, ConfigSetPhase, ConfigSetState, ErrorCode, FileVersion, GetConfigSetStatus,
    SettleConfigSet,
};

use super::Context;
use super::args::quoted;
use super::failure::{Failure, Reply, parse_version};
use crate::fail2ban_files::SetFile;
use crate::fail2ban_files::pending::{ChangeError, MAX_SET_FILES, Phase, Record, logical_file};

/// `ApplyConfigSet`.
pub async fn apply_config_set(context: &Context, request: ApplyConfigSet) -> Reply {
    let change_id = change_id(&request.change_id)?;
    let set = checked_set(context, request.files)?;
    let _gate = context.config_gate.lock().await;
    let (record, report) = context
        .config_changes()?
        .apply(&change_id, set, request.confirm_within_secs)
        .await
        .map_err(failure)?;
    context.bans.clear();
    Ok(outcome(&record, report.warnings))
}

/// `SettleConfigSet`.
pub async fn settle_config_set(context: &Context, request: SettleConfigSet) -> Reply {
    let change_id = change_id(&request.change_id)?;
    let _gate = context.config_gate.lock().await;
    let record = context
        .config_changes()?
        .settle(&change_id, request.confirm)
        .await
        .map_err(failure)?;
    Ok(outcome(&record, Vec::new()))
}

/// `GetConfigSetStatus`: an unknown change answers the phase `UNKNOWN`.
pub async fn config_set_status(context: &Context, request: GetConfigSetStatus) -> Reply {
    if !request.change_id.is_empty() {
        change_id(&request.change_id)?;
    }
    match context.config_changes()?.status(&request.change_id).await {
        Ok(record) => Ok(outcome(&record, Vec::new())),
        Err(ChangeError::Unknown(_)) => Ok(Outcome::ConfigSet(ConfigSetState {
            change_id: request.change_id,
            phase: ConfigSetPhase::Unknown.into(),
            reason: "this host holds no record of the change".to_owned(),
            ..ConfigSetState::default()
        })),
        Err(e) => Err(failure(e)),
    }
}

fn change_id(raw: &str) -> Result<String, Failure> {
    check_name(raw)
        .map(|()| raw.to_owned())
        .map_err(|e| Failure::invalid(format!("change id {} is refused: {e}", quoted(raw))))
}

/// Each file by logical path, its text checked by its kind's rule, its version parsed; a path
/// named twice is refused.
fn checked_set(
    context: &Context,
    files: Vec<banhub_proto::v1::ConfigFile>,
) -> Result<Vec<SetFile>, Failure> {
    if files.is_empty() || files.len() > MAX_SET_FILES {
        return Err(Failure::invalid(format!(
            "a config set holds 1 to {MAX_SET_FILES} files, got {}",
            files.len()
        )));
    }
    let editor = context.editor()?;
    let mut set: Vec<SetFile> = Vec::with_capacity(files.len());
    for file in files {
        let name = logical_file(&file.path).map_err(Failure::invalid)?;
        if set.iter().any(|s| s.file == name) {
            return Err(Failure::invalid(format!(
                "{name} is named twice in the set"
            )));
        }
        let expected = parse_version(&file.version, &name.to_string())?;
        let content = if file.exists {
            editor.check_set_file(&name, &file.content)?;
            Some(file.content)
        } else {
            None
        };
        set.push(SetFile {
            file: name,
            content,
            expected,
        });
    }
    Ok(set)
}

fn failure(e: ChangeError) -> Failure {
    match e {
        ChangeError::Busy { .. } | ChangeError::ChangedSince { .. } => {
            Failure::new(ErrorCode::Conflict, e.to_string())
        }
        ChangeError::Unknown(_) => Failure::not_found(e.to_string()),
        ChangeError::Window(_) => Failure::invalid(e.to_string()),
        ChangeError::Edit(e) => Failure::from(e),
        ChangeError::Record(e) => Failure::internal(e.to_string()),
    }
}

fn outcome(record: &Record, warnings: Vec<String>) -> Outcome {
    let phase = match record.phase {
        Phase::Pending => ConfigSetPhase::Pending,
        Phase::Confirmed => ConfigSetPhase::Confirmed,
        Phase::Reverted => ConfigSetPhase::Reverted,
    };
    Outcome::ConfigSet(ConfigSetState {
        change_id: record.change_id.clone(),
        phase: phase.into(),
        reason: record.reason.clone(),
        deadline_unix_ms: record.deadline_unix_ms,
        files: record
            .applied
            .iter()
            .map(|(path, version)| FileVersion {
                path: path.clone(),
                version: version.clone(),
            })
            .collect(),
        warnings,
    })
}
