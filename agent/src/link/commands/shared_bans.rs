//! `SyncSharedBans`: checks every entry again with the rules of a manual ban (a refused entry is
//! reported, the others still apply), then hands the change to the agent's shared-ban set, which
//! writes its file and tells fail2ban.

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{ErrorCode, SharedBanReport, SyncSharedBans};

use super::Context;
use super::args::quoted;
use super::failure::{Failure, Reply};
use crate::shared_bans::{Change, SharedBanError, Wanted, set};

/// Most entries (bans and lifts together) of one sync.
pub const MAX_ENTRIES: usize = 100_000;

/// The change a sync asks for, and the entries refused ("<ip>: <reason>").
pub fn checked(request: SyncSharedBans) -> Result<(Change, Vec<String>), Failure> {
    if request.bans.len() + request.lift.len() > MAX_ENTRIES {
        return Err(Failure::invalid(format!(
            "a shared-ban sync holds at most {MAX_ENTRIES} entries, got {}",
            request.bans.len() + request.lift.len()
        )));
    }
    let mut refused = Vec::new();
    let mut change = Change {
        full: request.full,
        ..Change::default()
    };
    for ban in &request.bans {
        match Wanted::parse(&ban.ip, ban.expires_unix_ms, &ban.reason) {
            Ok(wanted) => change.bans.push(wanted),
            Err(why) => refused.push(format!("{}: {why}", quoted(&ban.ip))),
        }
    }
    if !request.full {
        for raw in &request.lift {
            match set::lift_address(raw) {
                Ok(ip) => change.lift.push(ip),
                Err(why) => refused.push(format!("{}: {why}", quoted(raw))),
            }
        }
    }
    Ok((change, refused))
}

/// `SyncSharedBans`.
pub async fn sync_shared_bans(context: &Context, request: SyncSharedBans) -> Reply {
    let shared = context.shared_bans()?;
    let (change, refused) = checked(request)?;
    if !refused.is_empty() {
        tracing::warn!(?refused, "refused shared bans");
    }
    let outcome = shared
        .sync(change, crate::spool::now_ms())
        .await
        .map_err(|e| match e {
            SharedBanError::JailMissing => Failure::new(ErrorCode::NotFound, e.to_string()),
            SharedBanError::Fail2ban(e) => Failure::from_fail2ban(&e)
                .prefixed("the shared bans are kept and applied once fail2ban answers; "),
            SharedBanError::State(e) => Failure::internal(e.to_string()),
        })?;
    tracing::info!(
        held = outcome.held,
        added = outcome.added,
        lifted = outcome.lifted,
        expired = outcome.expired,
        refused = refused.len(),
        "shared bans synced"
    );
    Ok(Outcome::SharedBans(SharedBanReport {
        held: outcome.held,
        added: outcome.added,
        lifted: outcome.lifted,
        expired: outcome.expired,
        refused,
    }))
}

#[cfg(test)]
mod tests {
    use banhub_proto::v1::SharedBan;

    use super::*;

    fn ban(ip: &str) -> SharedBan {
        SharedBan {
            ip: ip.to_owned(),
            expires_unix_ms: 0,
            reason: "policy".to_owned(),
        }
    }

    #[test]
    fn refused_entries_are_reported_and_the_others_kept() {
        let (change, refused) = checked(SyncSharedBans {
            full: false,
            bans: vec![
                ban("0.0.0.0/0"),
                ban("198.51.100.1"),
                ban("255.255.255.255"),
            ],
            lift: vec!["nonsense".to_owned(), "203.0.113.0/24".to_owned()],
        })
        .expect("checked");
        let kept: Vec<String> = change.bans.iter().map(|w| w.ip.to_string()).collect();
        assert_eq!(kept, ["198.51.100.1"]);
        let lifted: Vec<String> = change.lift.iter().map(ToString::to_string).collect();
        assert_eq!(lifted, ["203.0.113.0/24"]);
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert!(refused[0].starts_with("\"0.0.0.0/0\": "), "{refused:?}");
        assert!(refused[0].contains("every address"), "{refused:?}");
        assert!(refused[1].contains("broadcast"), "{refused:?}");
        assert!(refused[2].starts_with("\"nonsense\": "), "{refused:?}");
    }

    #[test]
    fn a_full_set_ignores_lift_and_a_huge_sync_is_refused() {
        let (change, refused) = checked(SyncSharedBans {
            full: true,
            bans: vec![ban("198.51.100.1")],
            lift: vec!["nonsense".to_owned()],
        })
        .expect("checked");
        assert!(change.full && change.lift.is_empty() && refused.is_empty());
        let huge = SyncSharedBans {
            full: true,
            bans: vec![ban("198.51.100.1"); MAX_ENTRIES + 1],
            lift: Vec::new(),
        };
        assert!(checked(huge).is_err());
    }
}
