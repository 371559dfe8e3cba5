//! Profiles and drift: `GetConfigFiles`, the `.local` files a host's profile is compared with,
//! and `ValidateConfigSet`, a config set checked exactly as an edit of it would be, with nothing
//! written (the hub refuses a profile fail2ban rejects at save).

use std::collections::BTreeSet;

use banhub_proto::config_path::ConfigPath;
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{ConfigFile, ConfigFiles, ConfigSetValidation, ValidateConfigSet};

use super::Context;
use super::args;
use super::failure::{Failure, Reply, version_text};
use crate::fail2ban_files::EditableFile;
use crate::fail2ban_files::local_files::read_local_files;

/// The most files one config set may hold.
pub const MAX_SET_FILES: usize = 64;

/// `GetConfigFiles`: `jail.local`, `jail.d/*.local` and `filter.d/*.local`, bounded.
pub async fn get_config_files(context: &Context) -> Reply {
    let dir = context.config_dir().clone();
    let found = tokio::task::spawn_blocking(move || read_local_files(&dir))
        .await
        .map_err(|e| Failure::internal(format!("reading fail2ban's files failed: {e}")))?;
    Ok(Outcome::ConfigFiles(ConfigFiles {
        files: found
            .files
            .into_iter()
            .map(|f| ConfigFile {
                path: f.path,
                version: version_text(f.version),
                exists: f.content.is_some(),
                content: f.content.unwrap_or_default(),
            })
            .collect(),
        warnings: found.warnings,
        truncated: found.truncated,
    }))
}

/// `ValidateConfigSet`: the host policy, `fail2ban-client -t` and the filters' expressions on a
/// shadow holding the set; fail2ban's messages come back as the failure's details.
pub async fn validate_config_set(context: &Context, request: ValidateConfigSet) -> Reply {
    if request.files.is_empty() || request.files.len() > MAX_SET_FILES {
        return Err(Failure::invalid(format!(
            "a config set holds 1 to {MAX_SET_FILES} files"
        )));
    }
    let mut seen = BTreeSet::new();
    let mut files = Vec::new();
    for file in request.files {
        let editable = editable_file(&file.path)?;
        if !seen.insert(editable.clone()) {
            return Err(Failure::invalid(format!(
                "{} is named twice in the config set",
                args::quoted(&file.path)
            )));
        }
        files.push((editable, file.exists.then_some(file.content)));
    }
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let warnings = editor.validate_set(files).await?;
    Ok(Outcome::ConfigSetValidation(ConfigSetValidation {
        warnings,
    }))
}

/// The editable file of a logical path, through the rule the hub checked it with.
pub fn editable_file(raw: &str) -> Result<EditableFile, Failure> {
    let path = ConfigPath::parse(raw)
        .map_err(|e| Failure::invalid(format!("path {} is refused: it {e}", args::quoted(raw))))?;
    Ok(match path {
        ConfigPath::Jail(jail) => EditableFile::JailOverride(jail),
        ConfigPath::Filter(filter) => EditableFile::FilterLocal(filter),
        ConfigPath::Defaults => EditableFile::Defaults,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_paths_name_editable_files_only() {
        assert_eq!(
            editable_file("jail.d/sshd.local").map(|f| f.to_string()),
            Ok("jail.d/sshd.local".to_owned())
        );
        assert_eq!(
            editable_file("jail.d/banhub-defaults.local"),
            Ok(EditableFile::Defaults)
        );
        for bad in [
            "jail.local",
            "../x.local",
            "jail.d/zz-banhub.local",
            "/etc/passwd",
        ] {
            assert!(editable_file(bad).is_err(), "{bad:?} accepted");
        }
    }
}
