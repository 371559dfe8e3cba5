//! Shared bans: the bans the hub asks this host to hold on behalf of another host (a sharing
//! policy, a fleet recidive rule), enforced by fail2ban in the jail `banhub-shared` that
//! `install-action` adds (the host's own ban action, then `banhub`, `bantime = -1`).
//!
//! The agent owns their lifetime, not fail2ban: the set lives in `<state_dir>/shared-bans.json`
//! ([`state`]), which is written before fail2ban is told, and [`SharedBans::run`] lifts each ban at
//! its expiry and, at start and every few seconds, makes the jail's banned list equal to the file
//! (bans what is missing after fail2ban or the agent restarted, unbans what the file does not
//! hold). So a ban ends at its time across agent, fail2ban and hub restarts, even with the hub
//! down; a crash between the file and fail2ban is repaired by the next pass.
//!
//! Every change goes through fail2ban's socket; the machine's firewall is only ever touched by
//! fail2ban's own action. Each ban and unban reaches the hub once, as an event of the jail,
//! through its `banhub` action.

pub mod set;
pub mod state;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use banhub_proto::rules::{IpOrCidr, SHARED_JAIL};
use tokio::sync::{Mutex, Notify};
use tokio_util::sync::CancellationToken;

pub use set::{BanSet, Change, Held, Plan, Wanted};
pub use state::{STATE_FILE, StateError};

use crate::fail2ban::client::is_unknown_jail;
use crate::fail2ban::{Fail2banError, Fail2banSocket};

/// Why a sync or a pass did not complete. The file, once written, stays: the next pass applies it.
#[derive(Debug, thiserror::Error)]
pub enum SharedBanError {
    #[error(transparent)]
    State(#[from] StateError),
    #[error(
        "the shared-ban jail {SHARED_JAIL} is not running in fail2ban; run `banhub-agent \
         install-action` on this host (the bans are kept and applied once it runs)"
    )]
    JailMissing,
    #[error("{0}")]
    Fail2ban(Fail2banError),
}

impl From<Fail2banError> for SharedBanError {
    fn from(e: Fail2banError) -> Self {
        if is_unknown_jail(&e) {
            Self::JailMissing
        } else {
            Self::Fail2ban(e)
        }
    }
}

/// What one sync did, for the command's report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// Shared bans held afterwards.
    pub held: u32,
    /// Bans fail2ban did not hold before this sync.
    pub added: u32,
    pub lifted: u32,
    pub expired: u32,
}

/// Where the set lives and how fail2ban is reached.
#[derive(Debug, Clone)]
pub struct SharedBansConfig {
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// Bounds connecting and each socket call.
    pub timeout: Duration,
    /// Time between two comparisons of the jail with the file.
    pub reconcile_interval: Duration,
}

/// The set and its file; cloned handles share them.
#[derive(Debug, Clone)]
pub struct SharedBans {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: SharedBansConfig,
    path: PathBuf,
    /// The set as the file holds it; held across fail2ban calls, so a sync and a pass never
    /// interleave.
    set: Mutex<Locked>,
    /// Wakes the loop after a sync (a nearer expiry may have come in).
    changed: Notify,
}

#[derive(Debug)]
struct Locked {
    set: BanSet,
    /// A connection kept between calls; dropped when it fails.
    socket: Option<Fail2banSocket>,
}

impl SharedBans {
    /// Loads the set from the state directory (none yet: empty).
    pub fn open(config: SharedBansConfig) -> Result<Self, SharedBanError> {
        let path = config.state_dir.join(STATE_FILE);
        let set = state::load(&path)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                path,
                set: Mutex::new(Locked { set, socket: None }),
                changed: Notify::new(),
            }),
        })
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Applies a sync at `now_ms`: the file first, then fail2ban.
    pub async fn sync(&self, change: Change, now_ms: i64) -> Result<SyncOutcome, SharedBanError> {
        let mut locked = self.inner.set.lock().await;
        let mut next = locked.set.clone();
        let plan = next.apply(change, now_ms);
        state::save(&self.inner.path, &next)?;
        locked.set = next;
        let held = u32::try_from(locked.set.len()).unwrap_or(u32::MAX);
        self.inner.changed.notify_one();
        let added = self.enforce(&mut locked, &plan.ban, &plan.unban).await?;
        Ok(SyncOutcome {
            held,
            added,
            lifted: plan.lifted,
            expired: plan.expired,
        })
    }

    /// Drops `ip` from the set without telling fail2ban: an operator's unban of it (in the shared
    /// jail or everywhere) follows and lifts it, and it is not put back. Whether it was held.
    pub async fn forget(&self, ip: &IpOrCidr) -> Result<bool, SharedBanError> {
        let mut locked = self.inner.set.lock().await;
        if !locked.set.contains(ip) {
            return Ok(false);
        }
        let mut next = locked.set.clone();
        next.apply(
            Change {
                full: false,
                bans: Vec::new(),
                lift: vec![*ip],
            },
            i64::MIN,
        );
        state::save(&self.inner.path, &next)?;
        locked.set = next;
        Ok(true)
    }

    /// One pass at `now_ms`: lifts what expired, then makes the jail's banned list equal to the
    /// set. The number of bans and unbans it had to make.
    pub async fn pass(&self, now_ms: i64) -> Result<(usize, usize), SharedBanError> {
        let mut locked = self.inner.set.lock().await;
        let mut next = locked.set.clone();
        let due = next.expire(now_ms);
        if !due.is_empty() {
            state::save(&self.inner.path, &next)?;
            for ip in &due {
                tracing::info!(%ip, "a shared ban reached its expiry; lifting it");
            }
            locked.set = next;
        }
        let banned = self.banned(&mut locked).await?;
        let missing: Vec<IpOrCidr> = locked
            .set
            .iter()
            .map(|(ip, _)| *ip)
            .filter(|ip| !banned.contains(ip))
            .collect();
        let extra: Vec<IpOrCidr> = banned
            .iter()
            .filter(|ip| !locked.set.contains(ip))
            .copied()
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            tracing::info!(
                ban = missing.len(),
                unban = extra.len(),
                "the shared-ban jail differs from the agent's set; bringing it in line"
            );
        }
        self.enforce(&mut locked, &missing, &extra).await?;
        Ok((missing.len(), extra.len()))
    }

    /// Passes at start, at each expiry and every `reconcile_interval`, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let interval = self.inner.config.reconcile_interval;
        loop {
            match self.pass(crate::spool::now_ms()).await {
                Ok(_) => {}
                Err(SharedBanError::JailMissing) => {
                    tracing::debug!("the shared-ban jail is not running; checking again later");
                }
                Err(e) => tracing::warn!(error = %e, "shared-ban pass failed; retrying"),
            }
            let next_expiry = self.inner.set.lock().await.set.next_expiry();
            let mut wait = interval;
            if let Some(at) = next_expiry {
                let until = at.saturating_sub(crate::spool::now_ms()).max(0);
                wait = wait.min(Duration::from_millis(until.unsigned_abs()));
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
                () = self.inner.changed.notified() => {}
            }
        }
    }

    /// fail2ban bans `ban` and lifts `unban` in the shared jail; how many of `ban` were new to it.
    async fn enforce(
        &self,
        locked: &mut Locked,
        ban: &[IpOrCidr],
        unban: &[IpOrCidr],
    ) -> Result<u32, SharedBanError> {
        let mut added = 0;
        for ip in unban {
            self.call(locked, false, ip).await?;
        }
        for ip in ban {
            if self.call(locked, true, ip).await? {
                added += 1;
            }
        }
        Ok(added)
    }

    /// The jail's banned addresses (entries that are no client address are left out).
    async fn banned(&self, locked: &mut Locked) -> Result<BTreeSet<IpOrCidr>, SharedBanError> {
        let reply = self.socket(locked).await?.banned(SHARED_JAIL).await;
        let list = keep_if_usable(locked, reply)?;
        Ok(list
            .iter()
            .filter_map(|raw| IpOrCidr::parse(raw).ok())
            .collect())
    }

    /// Bans (or unbans) `ip` in the shared jail; whether that changed fail2ban's list.
    async fn call(
        &self,
        locked: &mut Locked,
        ban: bool,
        ip: &IpOrCidr,
    ) -> Result<bool, SharedBanError> {
        let text = ip.to_string();
        let socket = self.socket(locked).await?;
        let reply = if ban {
            socket.ban(SHARED_JAIL, &text).await
        } else {
            socket.unban(SHARED_JAIL, &text).await
        };
        keep_if_usable(locked, reply)
    }

    async fn socket<'a>(
        &self,
        locked: &'a mut Locked,
    ) -> Result<&'a mut Fail2banSocket, SharedBanError> {
        let socket = match locked.socket.take() {
            Some(socket) => socket,
            None => {
                let config = &self.inner.config;
                Fail2banSocket::connect(&config.socket, config.timeout).await?
            }
        };
        Ok(locked.socket.insert(socket))
    }
}

/// Passes a reply on, dropping the connection unless fail2ban only refused the command (then the
/// connection is still in step).
fn keep_if_usable<T>(
    locked: &mut Locked,
    reply: Result<T, Fail2banError>,
) -> Result<T, SharedBanError> {
    reply.map_err(|e| {
        if !matches!(e, Fail2banError::Command { .. }) {
            locked.socket = None;
        }
        e.into()
    })
}
