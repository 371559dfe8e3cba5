//! `WriteDefaults`: the fail2ban defaults the hub pushes (`bantime`, `findtime`, `maxretry`,
//! `ignoreip`, `bantime.increment`, `bantime.maxtime`), set in the `[DEFAULT]` section of the
//! agent's own defaults file (`jail.d/banhub-defaults.local`) through the safe editor, which has
//! fail2ban validate the result before it goes live and reloads every jail.
//!
//! Only these keys can be written, each value checked again here whatever the hub checked; every
//! other line of the file (a hand edit, the global ignore list's comment) is kept as it was.

use banhub_proto::v1::WriteDefaults;
use banhub_proto::v1::command_result::Outcome;

use super::Context;
use super::args;
use super::failure::{Failure, Reply};
use super::jails::config_change;
use crate::fail2ban_files::{EditableFile, ini};

/// The first line of a defaults file the agent creates.
const HEADER: &str = "# Managed by banhub: settings for every jail. Edit through banhub; \
                      hand edits are kept but may conflict.\n";
/// Longest ban, window or cap accepted: ten years, in seconds.
const MAX_SECONDS: u64 = 10 * 365 * 24 * 3600;
/// Stands in for an empty value while `ini::set_option` places the option (it takes non-empty
/// values only).
const PLACEHOLDER: &str = "banhub-defaults-empty-value";

/// The `(key, value)` pairs to write, checked.
fn pairs(request: &WriteDefaults) -> Result<Vec<(&'static str, String)>, Failure> {
    let mut out = Vec::new();
    if let Some(bantime) = request.bantime {
        if bantime != -1 && !(1..=MAX_SECONDS as i64).contains(&bantime) {
            return Err(Failure::invalid(format!(
                "bantime {bantime} is refused: it must be 1 to {MAX_SECONDS} seconds, or -1"
            )));
        }
        out.push(("bantime", bantime.to_string()));
    }
    if let Some(findtime) = request.findtime {
        if !(1..=MAX_SECONDS).contains(&findtime) {
            return Err(Failure::invalid(format!(
                "findtime {findtime} is refused: it must be 1 to {MAX_SECONDS} seconds"
            )));
        }
        out.push(("findtime", findtime.to_string()));
    }
    if let Some(maxretry) = request.maxretry {
        if !(1..=1000).contains(&maxretry) {
            return Err(Failure::invalid(format!(
                "maxretry {maxretry} is refused: it must be 1 to 1000"
            )));
        }
        out.push(("maxretry", maxretry.to_string()));
    }
    if request.set_ignoreip {
        if request.ignoreip.len() > args::MAX_IGNORE_ENTRIES {
            return Err(Failure::invalid(format!(
                "an ignore list holds at most {} entries",
                args::MAX_IGNORE_ENTRIES
            )));
        }
        let mut entries: Vec<String> = Vec::new();
        for raw in &request.ignoreip {
            let entry = args::ignore_entry(raw)?;
            if !entries.contains(&entry) {
                entries.push(entry);
            }
        }
        out.push(("ignoreip", entries.join(" ")));
    }
    if let Some(increment) = request.bantime_increment {
        out.push(("bantime.increment", increment.to_string()));
    }
    if let Some(maxtime) = request.bantime_maxtime {
        if !(1..=MAX_SECONDS).contains(&maxtime) {
            return Err(Failure::invalid(format!(
                "bantime.maxtime {maxtime} is refused: it must be 1 to {MAX_SECONDS} seconds"
            )));
        }
        out.push(("bantime.maxtime", maxtime.to_string()));
    }
    if out.is_empty() {
        return Err(Failure::invalid("no default to write was given"));
    }
    Ok(out)
}

/// `text` with `key = value` in `[DEFAULT]`, the rest kept.
fn set(text: &str, key: &str, value: &str) -> Result<String, Failure> {
    if value.is_empty() {
        if text.contains(PLACEHOLDER) {
            return Err(Failure::internal(format!(
                "the defaults file contains {PLACEHOLDER:?}; edit it by hand"
            )));
        }
        let placed = ini::set_option(text, ini::DEFAULT_SECTION, key, PLACEHOLDER)
            .map_err(|e| Failure::invalid(format!("cannot set {key} in the defaults file: {e}")))?;
        let line = format!("{key} = {PLACEHOLDER}");
        if placed.matches(&line).count() != 1 {
            return Err(Failure::internal(format!(
                "cannot set {key} in the defaults file; edit it by hand"
            )));
        }
        return Ok(placed.replacen(&line, &format!("{key} ="), 1));
    }
    ini::set_option(text, ini::DEFAULT_SECTION, key, value)
        .map_err(|e| Failure::invalid(format!("cannot set {key} in the defaults file: {e}")))
}

/// The new text of the defaults file.
fn new_text(current: Option<&str>, pairs: &[(&'static str, String)]) -> Result<String, Failure> {
    let mut text = match current {
        None | Some("") => HEADER.to_owned(),
        Some(text) => text.to_owned(),
    };
    for (key, value) in pairs {
        text = set(&text, key, value)?;
    }
    Ok(text)
}

/// `WriteDefaults`: sets the given keys in `[DEFAULT]`, validated by fail2ban, then reloads.
pub async fn write_defaults(context: &Context, request: WriteDefaults) -> Reply {
    let pairs = pairs(&request)?;
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let current = editor.read(|r| r.editable(&EditableFile::Defaults)).await?;
    let text = new_text(current.content.as_deref(), &pairs)?;
    let report = editor.write_defaults(&text, current.version).await?;
    context.bans.clear();
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| *k).collect();
    let change = config_change(
        context,
        &[report],
        &format!("fail2ban defaults ({})", keys.join(", ")),
    )
    .await;
    Ok(Outcome::ConfigChange(change))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> WriteDefaults {
        WriteDefaults::default()
    }

    #[test]
    fn values_are_checked_again() {
        let bad = [
            WriteDefaults {
                bantime: Some(-2),
                ..request()
            },
            WriteDefaults {
                maxretry: Some(0),
                ..request()
            },
            WriteDefaults {
                findtime: Some(0),
                ..request()
            },
            WriteDefaults {
                set_ignoreip: true,
                ignoreip: vec!["10.0.0.0/8 %(x)s".to_owned()],
                ..request()
            },
            request(),
        ];
        for r in bad {
            assert!(pairs(&r).is_err(), "{r:?}");
        }
    }

    #[test]
    fn keys_are_set_in_default_keeping_the_rest() {
        let r = WriteDefaults {
            bantime: Some(-1),
            findtime: Some(600),
            maxretry: Some(3),
            set_ignoreip: true,
            ignoreip: vec!["127.0.0.1/8".to_owned(), "::1".to_owned()],
            bantime_increment: Some(true),
            bantime_maxtime: None,
        };
        let text = new_text(None, &pairs(&r).expect("valid")).expect("text");
        assert!(text.starts_with("# Managed by banhub"), "{text}");
        for line in [
            "bantime = -1",
            "findtime = 600",
            "maxretry = 3",
            "ignoreip = 127.0.0.1/8 ::1",
            "bantime.increment = true",
        ] {
            assert!(text.contains(line), "{line} missing in\n{text}");
        }
        let hand = "[DEFAULT]\nignoreip = 10.0.0.1\n# a note\ndbpurgeage = 1d\n";
        let text = new_text(
            Some(hand),
            &pairs(&WriteDefaults {
                maxretry: Some(7),
                set_ignoreip: true,
                ..request()
            })
            .expect("valid"),
        )
        .expect("text");
        assert!(text.contains("maxretry = 7"), "{text}");
        assert!(text.contains("ignoreip =\n"), "{text}");
        assert!(text.contains("dbpurgeage = 1d"), "{text}");
        assert!(text.contains("# a note"), "{text}");
        assert!(!text.contains("10.0.0.1"), "{text}");
    }
}
