//! Shared bans on a host: `SyncSharedBans`, the command that tells an agent which shared bans to
//! hold in its shared-ban jail (a whole set, or what changed), and the notice of every agent
//! session that starts on this replica, on which the sharing engine sends the whole set.

use banhub_proto::v1::{SharedBan, SyncSharedBans, command, command_result::Outcome};
use tokio::sync::broadcast;

use super::{Fleet, FleetError};
use crate::domain::ServerId;
use crate::domain::sharing::SharedBanSync;

/// Session starts kept for a slow listener; one that lags re-reads its work from the store.
pub(super) const SESSION_STARTS: usize = 1024;

/// What the agent said it did with a sync.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedBanReport {
    /// Shared bans it holds after the sync.
    pub held: u32,
    pub added: u32,
    pub lifted: u32,
    /// Bans of the sync it dropped because their expiry had passed.
    pub expired: u32,
    /// Entries its own checks refused, each "<ip>: <reason>".
    pub refused: Vec<String>,
}

impl Fleet {
    /// Tells `server`'s agent which shared bans to hold; the agent's session may be here or on
    /// another replica.
    pub async fn sync_shared_bans(
        &self,
        server: ServerId,
        sync: &SharedBanSync,
        by: &str,
    ) -> Result<SharedBanReport, FleetError> {
        let kind = command::Kind::SyncSharedBans(SyncSharedBans {
            full: sync.full,
            bans: sync
                .bans
                .iter()
                .map(|(ip, expires_unix_ms, reason)| SharedBan {
                    ip: ip.clone(),
                    expires_unix_ms: *expires_unix_ms,
                    reason: reason.clone(),
                })
                .collect(),
            lift: sync.lift.clone(),
        });
        match self.call(server, kind, "sync_shared_bans", by).await? {
            Outcome::SharedBans(report) => Ok(SharedBanReport {
                held: report.held,
                added: report.added,
                lifted: report.lifted,
                expired: report.expired,
                refused: report.refused,
            }),
            other => Err(FleetError::Protocol(format!(
                "expected a shared-ban report, got {other:?}"
            ))),
        }
    }

    /// The servers whose agent's session starts on this replica from now on.
    pub fn session_starts(&self) -> broadcast::Receiver<ServerId> {
        self.0.session_started.subscribe()
    }

    /// Whether this replica holds `server`'s agent's session.
    pub fn holds_session(&self, server: ServerId) -> bool {
        self.sessions().is_live(server)
    }

    /// Tells the listeners of [`Fleet::session_starts`] that `server`'s session started here.
    pub(super) fn session_started(&self, server: ServerId) {
        // No listener (sharing not started yet) is fine: its first pass reads every target.
        let _ = self.0.session_started.send(server);
    }
}
