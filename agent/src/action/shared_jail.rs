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
}
