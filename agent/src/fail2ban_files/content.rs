//! What the editor accepts as the text of an override or filter file, checked before fail2ban
//! sees it: a size cap, no NUL, a file Python's parser accepts, and nothing that makes
//! fail2ban read files outside its config directory.
//!
//! These checks are about the file's shape; what its options may introduce (commands, log
//! paths) is the host policy's business (`fail2ban_files::policy`).

use banhub_proto::rules::check_name;

use super::ini::{self, IniFile};
use super::names::JailName;
use super::reader::{EffectiveConfig, FilterRef};

/// Largest file the editor writes by default (stock `jail.conf`, the largest stock file, is
/// 25 KB; an override or a filter is a fraction of that).
pub const DEFAULT_MAX_FILE_BYTES: usize = 64 * 1024;

/// The backends fail2ban 1.0 knows (`Unknown backend ...` otherwise, found only at reload).
const BACKENDS: [&str; 5] = ["auto", "pyinotify", "gamin", "polling", "systemd"];

/// Size and NUL checks shared by every text the editor or a filter test accepts.
pub(crate) fn check_text(text: &str, limit: usize) -> Result<(), String> {
    if text.len() > limit {
        return Err(format!("it is {} bytes; the limit is {limit}", text.len()));
    }
    if text.contains('\0') {
        return Err("it contains a NUL byte".to_owned());
    }
    Ok(())
}

/// A jail override may hold its own jail's section and nothing else: no `[DEFAULT]` (that
/// would change every jail), no other jail, no `[INCLUDES]` (that would read any file).
pub(crate) fn check_jail_override(jail: &JailName, text: &str) -> Result<IniFile, String> {
    // `JailName` refuses reserved section names, so the jail's own section is never one of them.
    let file = ini::parse(text).map_err(|e| e.to_string())?;
    for section in file.sections() {
        if section.name != jail.as_str() {
            return Err(format!(
                "line {}: only the [{jail}] section may be set in jail.d/{jail}.local, not [{}]",
                section.line, section.name
            ));
        }
    }
    Ok(file)
}

/// The agent's defaults file may hold a `[DEFAULT]` section and nothing else (no jail, no
/// `[INCLUDES]`).
pub(crate) fn check_defaults(text: &str) -> Result<IniFile, String> {
    let file = ini::parse(text).map_err(|e| e.to_string())?;
    for section in file.sections() {
        if section.name != ini::DEFAULT_SECTION {
            return Err(format!(
                "line {}: only the [DEFAULT] section may be set in the defaults file, not [{}]",
                section.line, section.name
            ));
        }
    }
    Ok(file)
}

/// A filter may include other files of `filter.d` by plain name only (`common.conf`), never
/// by a path.
pub(crate) fn check_filter(text: &str) -> Result<IniFile, String> {
    let file = ini::parse(text).map_err(|e| e.to_string())?;
    if let Some(includes) = file.section("INCLUDES") {
        for option in includes
            .options
            .iter()
            .filter(|o| o.key == "before" || o.key == "after")
        {
            for name in option.value.split('\n').filter(|n| !n.is_empty()) {
                if check_name(name).is_err() || name.contains('%') {
                    return Err(format!(
                        "line {}: [INCLUDES] {} may name files of filter.d only (like common.conf), \
                         not {name:?}",
                        option.first_line, option.key
                    ));
                }
            }
        }
    }
    Ok(file)
}

/// The names of the actions in an `action` value: each entry is `name` or `name[options]`,
/// entries separated by white space outside brackets and quotes.
pub fn action_names(value: &str) -> Vec<String> {
    action_entries(value)
        .iter()
        .filter_map(|entry| split_entry(entry).map(|(name, _)| name.to_owned()))
        .collect()
}

/// The entries of an action list, split on white space outside brackets and quotes.
pub(crate) fn action_entries(value: &str) -> Vec<String> {
    let mut entries = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    for c in value.chars() {
        if let Some(q) = quote {
            current.push(c);
            if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            '"' | '\'' if depth > 0 => quote = Some(c),
            c if c.is_whitespace() && depth == 0 => {
                if !current.is_empty() {
                    entries.push(std::mem::take(&mut current));
                }
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        entries.push(current);
    }
    entries
}

/// `name[…][…]` → the name and the text after it.
pub(crate) fn split_entry(entry: &str) -> Option<(&str, &str)> {
    let end = entry.find('[').unwrap_or(entry.len());
    let name = entry[..end].trim();
    (!name.is_empty()).then(|| (name, &entry[end..]))
}

/// Checks what a jail would make fail2ban read or start, as resolved in the new config: its
/// filter and actions are plain names (so `filter.d/<name>.conf`, never a path), and its
/// backend is one fail2ban knows. `-t` does not check the backend; a reload would fail on it.
pub(crate) fn check_jail_references(config: &EffectiveConfig, jail: &str) -> Vec<String> {
    let Some(info) = config.jail(jail) else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    if let Some(filter) = &info.filter
        && filter.filter_name().is_err()
    {
        problems.push(format!(
            "jail {jail}: filter {:?} is not a plain filter name",
            filter.name
        ));
    }
    if let Some(Ok(action)) = info.settings.get("action").map(|s| &s.value) {
        for name in action_names(action) {
            if check_name(&name).is_err() {
                problems.push(format!(
                    "jail {jail}: action {name:?} is not a plain action name"
                ));
            }
        }
    }
    if info.enabled {
        let backend = FilterRef::parse(&info.backend)
            .map(|b| b.name)
            .unwrap_or_else(|_| info.backend.clone());
        if !BACKENDS.contains(&backend.as_str()) {
            problems.push(format!(
                "jail {jail}: unknown backend {backend:?}; fail2ban knows {}",
                BACKENDS.join(", ")
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_limits() {
        assert_eq!(check_text("abc", 3), Ok(()));
        assert!(check_text("abcd", 3).is_err());
        assert!(check_text("a\0b", 10).is_err());
    }

    #[test]
    fn jail_overrides_hold_their_own_section_only() {
        let jail = JailName::parse("sshd").expect("name");
        for good in [
            "",
            "# nothing\n",
            "[sshd]\nmaxretry = 2\n",
            "[sshd]\nlogpath = /a\n  /b\n",
        ] {
            assert!(check_jail_override(&jail, good).is_ok(), "{good:?}");
        }
        for bad in [
            "[DEFAULT]\nbantime = 1\n",
            "[sshd]\nx = 1\n[recidive]\nenabled = true\n",
            "[INCLUDES]\nbefore = /etc/shadow\n",
            "[sshd]\nx = 1\n\n[sshd ]\n",
            "[sshd]\nbad line\n",
            "maxretry = 1\n",
        ] {
            assert!(check_jail_override(&jail, bad).is_err(), "{bad:?}");
        }
        // A value that looks like a section, indented, stays part of the value.
        assert!(check_jail_override(&jail, "[sshd]\nignoreip = 1.2.3.4\n  [DEFAULT]\n").is_ok());
        let err = check_jail_override(&jail, "[sshd]\nx = 1\n[other]\n").expect_err("other");
        assert!(err.contains("line 3") && err.contains("[other]"), "{err}");
    }

    #[test]
    fn the_defaults_file_holds_default_only() {
        for good in ["", "[DEFAULT]\nignoreip = 192.0.2.1\n"] {
            assert!(check_defaults(good).is_ok(), "{good:?}");
        }
        for bad in [
            "[sshd]\nenabled = true\n",
            "[DEFAULT]\nx = 1\n[INCLUDES]\nbefore = /etc/shadow\n",
            "ignoreip = 1\n",
        ] {
            assert!(check_defaults(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn filters_include_by_plain_name_only() {
        for good in [
            "[INCLUDES]\nbefore = common.conf\nafter = x.local\n[Definition]\nfailregex = a\n",
            "[Definition]\nfailregex = <HOST>\n",
            "[lt_file]\n_daemon = x\n",
        ] {
            assert!(check_filter(good).is_ok(), "{good:?}");
        }
        for bad in [
            "[INCLUDES]\nbefore = /etc/shadow\n",
            "[INCLUDES]\nbefore = ../jail.conf\n",
            "[INCLUDES]\nafter = common.conf\n  ../../x.conf\n",
            "[INCLUDES]\nbefore = %(x)s.conf\n",
            "[Definition]\nfailregex\n",
        ] {
            assert!(check_filter(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn action_entries_are_split_outside_brackets() {
        let cases: [(&str, &[&str]); 6] = [
            ("iptables-multiport", &["iptables-multiport"]),
            (
                "iptables-multiport[port=\"ssh\", protocol=\"tcp\", chain=\"<known/chain>\"]",
                &["iptables-multiport"],
            ),
            (
                "a[x=\"1 2\"]\n  sendmail-whois[dest=\"root@localhost\", x=']']  smtp.py",
                &["a", "sendmail-whois", "smtp.py"],
            ),
            (
                "dummy[target=/tmp/x] ../../evil[a=b]",
                &["dummy", "../../evil"],
            ),
            ("", &[]),
            ("a[b=c][d=e]", &["a"]),
        ];
        for (value, expected) in cases {
            assert_eq!(action_names(value), expected, "{value:?}");
        }
    }
}
