//! The `[banhub-shared]` jail `install-action` adds for shared bans: a filter that never matches,
//! an empty log of the agent's, the host's own ban action for all ports followed by `banhub`, and
//! `bantime = -1` (the agent lifts each ban at its time; see `crate::shared_bans`).

use banhub_proto::rules::SHARED_JAIL;

use super::ACTION_NAME;
use crate::fail2ban_files::EffectiveConfig;

/// The shared-ban jail's log: an empty file of the agent's that nothing writes to.
pub const SHARED_LOG: &str = "shared.log";

/// `filter.d/banhub-shared.conf`.
pub const SHARED_FILTER_TEXT: &str = "\
# Written by `banhub-agent install-action`: the filter of banhub's shared-ban jail. It never
# matches a real log line; the agent bans through fail2ban's socket instead.
[Definition]
failregex = ^banhub-shared never-matches 9e4f2a61 <HOST>$
ignoreregex =
";

/// The jail's ban action: `configured` (the agent's `shared_bans.action`) when set, else the
/// host's own for all ports (`%(banaction_allports)s` when the configuration defines it, else
/// `%(banaction)s`).
pub fn ban_action(base: &EffectiveConfig, configured: &str) -> String {
    let configured = configured.trim();
    if !configured.is_empty() {
        return configured.to_owned();
    }
    if base.default_setting("banaction_allports").is_some() {
        "%(banaction_allports)s".to_owned()
    } else {
        "%(banaction)s".to_owned()
    }
}

/// The jail's section of the attachment file. `ignoreip` is left to the host's defaults, so what
/// the host never bans is never banned here either.
pub fn jail_text(ban_action: &str, log: &str) -> String {
    format!(
        "\n# Shared bans: bans the hub asks this host to hold on behalf of another one. The agent\n\
         # bans and unbans through fail2ban's socket and lifts each ban at its time itself, so\n\
         # fail2ban keeps them until then; the host's ban action enforces them and banhub reports\n\
         # them. Its filter never matches and its log is an empty file of the agent's.\n\
         [{SHARED_JAIL}]\n\
         enabled = true\n\
         filter = {SHARED_JAIL}\n\
         logpath = {log}\n\
         backend = polling\n\
         action = {ban_action}\n\
         \x20        {ACTION_NAME}\n\
         maxretry = 1\n\
         bantime = -1\n\
         bantime.increment = false\n\
         ignoreself = true\n"
    )
}

/// The `action =` value of the `[banhub-shared]` section in an attachment file's text, with its
/// continuation lines; `None` when the text has no such section.
fn section_action(text: &str) -> Option<Vec<&str>> {
    let header = format!("[{SHARED_JAIL}]");
    let mut lines = text.lines().skip_while(|l| l.trim() != header).skip(1);
    let mut action = Vec::new();
    let mut reading = false;
    for line in lines.by_ref() {
        if line.starts_with('[') {
            break;
        }
        if let Some(value) = line.strip_prefix("action =") {
            reading = true;
            action.push(value.trim());
        } else if reading && line.starts_with(char::is_whitespace) && !line.trim().is_empty() {
            action.push(line.trim());
        } else {
            reading = false;
        }
    }
    text.lines().any(|l| l.trim() == header).then_some(action)
}

/// Whether installing `new` over `old` (the attachment file's texts) changes the shared jail's
/// actions, so a running `[banhub-shared]` must be restarted to run them: a plain reload does not
/// replace a running jail's actions.
pub fn action_changed(old: Option<&str>, new: &str) -> bool {
    match old.and_then(section_action) {
        Some(old) => section_action(new) != Some(old),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jail_runs_the_given_action_then_banhub_and_never_expires_on_its_own() {
        let text = jail_text("%(banaction_allports)s", "/var/lib/x/shared.log");
        assert!(text.contains("[banhub-shared]\nenabled = true\nfilter = banhub-shared\n"));
        assert!(text.contains("logpath = /var/lib/x/shared.log\n"));
        assert!(text.contains("action = %(banaction_allports)s\n         banhub\n"));
        assert!(text.contains("bantime = -1\nbantime.increment = false\nignoreself = true\n"));
        assert!(!text.contains("ignoreip"), "the host's defaults apply");
    }

    #[test]
    fn a_changed_action_is_seen_and_nothing_else_is() {
        let file = |action: &str| format!("[sshd]\naction = x\n{}", jail_text(action, "/l"));
        let old = file("%(banaction)s");
        assert!(!action_changed(Some(&old), &old));
        assert!(action_changed(Some(&old), &file("nftables-allports")));
        assert!(!action_changed(
            Some(&old),
            &old.replace("maxretry = 1", "maxretry = 2")
        ));
        // Nothing installed yet: nothing runs to restart.
        assert!(!action_changed(None, &old));
        assert!(!action_changed(Some("[sshd]\naction = x\n"), &old));
    }
}
