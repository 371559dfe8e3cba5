//! Reconciliation: compares fail2ban's current bans (`get <jail> banned` for every jail) with what
//! the agent believes is banned ([`Belief`]: every event the relay accepted and every event this
//! module observed, kept in `<state_dir>/reconcile.json`), and appends to the spool, marked
//! [`Source::Observed`], a ban for every `(jail, ip)` the action never reported and an unban for
//! every one fail2ban no longer bans.
//!
//! It runs at start, every `reconcile.interval_secs`, and shortly after it notices that fail2ban
//! restarted (its connection broke or `ping` failed and then answered again, or the jail set
//! changed). A restart reports nothing by itself: bans restored from fail2ban's database are
//! banned again and so match the belief; only bans that really ended while fail2ban was down are
//! reported, once.
//!
//! Guards against reporting what is only in transit:
//! * no state file (first run): the current bans become the baseline and nothing is reported;
//! * a jail fail2ban did not list or answer for says nothing about its bans;
//! * differences are confirmed by a second look [`ReconcileConfig::confirm_delay`] later (a ban
//!   whose action callback is still on its way, or a ban fail2ban is still restoring, shows once);
//! * at most [`ReconcileConfig::max_events`] events per pass; the rest wait for the next pass.

pub mod belief;
pub mod diff;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use banhub_proto::rules::IpOrCidr;
use tokio_util::sync::CancellationToken;

pub use belief::{Belief, BeliefError, STATE_FILE};
pub use diff::{Diff, Key};

use crate::fail2ban::{Fail2banError, Fail2banSocket};
use crate::spool::{BanDuration, BanEvent, Event, JailName, Logs, Source, Spool, SpoolError};

/// Default cap on the events one pass appends.
pub const DEFAULT_MAX_EVENTS: usize = 10_000;

/// How reconciliation runs.
#[derive(Debug, Clone)]
pub struct ReconcileConfig {
    /// fail2ban's control socket.
    pub socket: PathBuf,
    /// Bounds connecting and each socket call.
    pub timeout: Duration,
    /// Time between periodic passes; `None`: only at start and after fail2ban restarts.
    pub interval: Option<Duration>,
    /// How often fail2ban is checked for a restart (`ping` and the jail list).
    pub watch_interval: Duration,
    /// Wait after fail2ban came back before comparing, so that it can restore its bans.
    pub settle_delay: Duration,
    /// Time between the two looks that must agree on a difference.
    pub confirm_delay: Duration,
    /// At most this many events per pass.
    pub max_events: usize,
    /// The host name put on observed events.
    pub hostname: String,
}

impl ReconcileConfig {
    /// Defaults for `socket`, with a periodic pass every `interval` (`None`: off).
    pub fn new(socket: PathBuf, interval: Option<Duration>) -> Self {
        let hostname = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        Self {
            socket,
            timeout: Duration::from_secs(5),
            interval,
            watch_interval: Duration::from_secs(5),
            settle_delay: Duration::from_secs(5),
            confirm_delay: Duration::from_secs(2),
            max_events: DEFAULT_MAX_EVENTS,
            hostname: crate::spool::clean_hostname(&hostname),
        }
    }
}

/// Why a pass did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("cannot read fail2ban's bans: {0}")]
    Fail2ban(#[from] Fail2banError),
    #[error("cannot store an observed event: {0}")]
    Spool(#[from] SpoolError),
    #[error(transparent)]
    Belief(#[from] BeliefError),
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassOutcome {
    /// No state file existed: the current bans were recorded without reporting them.
    pub baseline: bool,
    /// Observed bans appended.
    pub bans: usize,
    /// Observed unbans appended.
    pub unbans: usize,
    /// More differences than the cap were found.
    pub capped: bool,
}

/// fail2ban's bans at one moment.
#[derive(Debug, Default)]
struct Snapshot {
    /// Jails that answered.
    jails: BTreeSet<String>,
    bans: BTreeSet<Key>,
}

/// Compares and reports; see the module documentation.
#[derive(Debug)]
pub struct Reconciler {
    config: ReconcileConfig,
    spool: Spool,
    belief: Belief,
    socket: Option<Fail2banSocket>,
}

impl Reconciler {
    pub fn new(config: ReconcileConfig, spool: Spool, belief: Belief) -> Self {
        Self {
            config,
            spool,
            belief,
            socket: None,
        }
    }

    /// The belief this reconciler keeps (share it with the relay).
    pub fn belief(&self) -> &Belief {
        &self.belief
    }

    /// Runs passes at start, periodically and after fail2ban restarts, until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        // Start-up: compare as soon as fail2ban answers.
        let mut due = Some(tokio::time::Instant::now());
        let mut last_jails = match self.jail_names().await {
            Ok(mut jails) => {
                jails.sort();
                Some(jails)
            }
            Err(e) => {
                tracing::debug!(error = %e, "fail2ban does not answer at start; reconciling once it does");
                None
            }
        };
        let mut up = last_jails.is_some();
        let mut next_periodic = self
            .config
            .interval
            .map(|i| tokio::time::Instant::now() + i);
        let mut watch = tokio::time::interval(self.config.watch_interval);
        watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let wake = [due, next_periodic].into_iter().flatten().min();
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = watch.tick() => {
                    // What the relay recorded since the last save survives a restart.
                    if let Err(e) = self.belief.save_if_dirty().await {
                        tracing::warn!(error = %e, "cannot save the reconciliation state");
                    }
                    match self.jail_names().await {
                        Ok(mut jails) => {
                            jails.sort();
                            let restarted = !up;
                            let changed = last_jails.as_ref().is_some_and(|last| *last != jails);
                            if restarted || changed {
                                tracing::info!(
                                    restarted, jails_changed = changed,
                                    "fail2ban restarted or its jails changed; reconciling soon"
                                );
                                // Without a baseline there is nothing to compare yet: take it
                                // at once, so that what fail2ban bans from now on (with or
                                // without the action) is compared against it, even if the agent
                                // stops again within the settle delay.
                                let settle = if self.belief.has_baseline() {
                                    self.config.settle_delay
                                } else {
                                    Duration::ZERO
                                };
                                let at = tokio::time::Instant::now() + settle;
                                due = Some(due.map_or(at, |d| d.max(at)));
                            }
                            up = true;
                            last_jails = Some(jails);
                        }
                        Err(e) => {
                            if up {
                                tracing::info!(error = %e, "fail2ban does not answer; reconciling after it is back");
                            }
                            up = false;
                        }
                    }
                }
                () = sleep_until(wake) => {
                    let now = tokio::time::Instant::now();
                    if next_periodic.is_some_and(|t| t <= now) {
                        next_periodic = self.config.interval.map(|i| now + i);
                    }
                    due = None;
                    if !up {
                        // Not now: the watch schedules a pass when fail2ban answers again.
                        continue;
                    }
                    match self.pass().await {
                        Ok(outcome) => tracing::debug!(?outcome, "reconciliation pass done"),
                        Err(e) => {
                            tracing::warn!(error = %e, "reconciliation pass failed; retrying later");
                            self.socket = None;
                        }
                    }
                }
            }
        }
        if let Err(e) = self.belief.save_if_dirty().await {
            tracing::warn!(error = %e, "cannot save the reconciliation state");
        }
    }

    /// One comparison: reads fail2ban's bans, compares, confirms, appends the observed events and
    /// saves the belief.
    #[tracing::instrument(skip_all, err)]
    pub async fn pass(&mut self) -> Result<PassOutcome, ReconcileError> {
        let first = self.snapshot().await?;
        if !self.belief.has_baseline() {
            let n = first.bans.len();
            self.belief.set_baseline(first.bans);
            self.belief.save_if_dirty().await?;
            tracing::info!(
                bans = n,
                "no reconciliation state yet: recorded fail2ban's current bans as the baseline \
                 without reporting them"
            );
            return Ok(PassOutcome {
                baseline: true,
                ..PassOutcome::default()
            });
        }
        let cap = self.config.max_events;
        let found = diff::diff(&self.belief.snapshot(), &first.bans, &first.jails, cap);
        let found = if found.is_empty() {
            found
        } else {
            tokio::time::sleep(self.config.confirm_delay).await;
            let second = self.snapshot().await?;
            let again = diff::diff(&self.belief.snapshot(), &second.bans, &second.jails, cap);
            diff::confirmed(&found, &again)
        };
        let mut outcome = PassOutcome {
            capped: found.capped,
            ..PassOutcome::default()
        };
        let times = self.ban_times(&found.bans).await;
        for (jail, ip) in &found.bans {
            if let Some(mut event) = self.event(jail, ip, true) {
                if let (Event::Ban(ban), Some(&(at, duration))) =
                    (&mut event, times.get(&(jail.clone(), ip.clone())))
                {
                    ban.ban_time = Some(at);
                    ban.ban_duration = BanDuration::from_seconds(duration);
                }
                self.append(event).await?;
                outcome.bans += 1;
            }
        }
        for (jail, ip) in &found.unbans {
            if let Some(event) = self.event(jail, ip, false) {
                self.append(event).await?;
                outcome.unbans += 1;
            }
        }
        self.belief.save_if_dirty().await?;
        if found.capped {
            tracing::warn!(
                max = cap,
                "reconciliation found more differences than it reports in one pass; the rest \
                 follow in the next passes"
            );
        }
        if outcome.bans + outcome.unbans > 0 {
            tracing::info!(
                bans = outcome.bans,
                unbans = outcome.unbans,
                "reported bans and unbans the action missed, as observed"
            );
        }
        Ok(outcome)
    }

    /// When fail2ban banned each of `bans` and for how long (`get <jail> banip --with-time`, read
    /// in this host's time zone, as fail2ban prints it), so observed bans carry their times. A
    /// jail that does not answer leaves its bans without times.
    async fn ban_times(&mut self, bans: &[Key]) -> HashMap<Key, (i64, i64)> {
        let jails: BTreeSet<&str> = bans.iter().map(|(jail, _)| jail.as_str()).collect();
        let mut times = HashMap::new();
        for jail in jails {
            let records = match self.socket().await {
                Ok(socket) => socket.banned_with_time(jail).await,
                Err(e) => Err(e),
            };
            match records {
                Ok(records) => {
                    for record in records {
                        let Ok(ip) = IpOrCidr::parse(&record.ip) else {
                            continue;
                        };
                        if let Some((start, _)) = record.unix_times(&chrono::Local) {
                            times.insert(
                                (jail.to_owned(), ip.to_string()),
                                (start, record.duration_secs),
                            );
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(%jail, error = %e, "no ban times for observed bans");
                    self.socket = None;
                }
            }
        }
        times
    }

    async fn append(&mut self, event: Event) -> Result<(), SpoolError> {
        self.spool.append(event.clone()).await?;
        self.belief.record(&event);
        Ok(())
    }

    fn event(&self, jail: &str, ip: &str, ban: bool) -> Option<Event> {
        let jail = JailName::parse(jail).ok()?;
        let ip = IpOrCidr::parse(ip).ok()?;
        let event = BanEvent {
            ip,
            jail,
            hostname: self.config.hostname.clone(),
            failures: 0,
            logs: Logs::default(),
            ban_time: None,
            ban_duration: None,
            ban_count: None,
            received_at_ms: crate::spool::now_ms(),
            source: Source::Observed,
        };
        Some(if ban {
            Event::Ban(event)
        } else {
            Event::Unban(event)
        })
    }

    /// A connection, kept between calls so that a fail2ban restart shows as a broken one.
    async fn socket(&mut self) -> Result<&mut Fail2banSocket, Fail2banError> {
        let socket = match self.socket.take() {
            Some(socket) => socket,
            None => Fail2banSocket::connect(&self.config.socket, self.config.timeout).await?,
        };
        Ok(self.socket.insert(socket))
    }

    async fn jail_names(&mut self) -> Result<Vec<String>, Fail2banError> {
        let result = self.socket().await?.jail_names().await;
        if result.is_err() {
            self.socket = None;
        }
        result
    }

    /// Every jail's bans. A jail that fails to answer (it may be stopping or starting) is left
    /// out; a failing connection fails the snapshot.
    async fn snapshot(&mut self) -> Result<Snapshot, Fail2banError> {
        let jails = self.jail_names().await?;
        let mut snapshot = Snapshot::default();
        for jail in jails {
            let socket = self.socket().await?;
            match socket.banned(&jail).await {
                Ok(ips) => {
                    for raw in ips {
                        // The same spelling the relay's events use (IPv6 in particular).
                        match IpOrCidr::parse(&raw) {
                            Ok(ip) => {
                                snapshot.bans.insert((jail.clone(), ip.to_string()));
                            }
                            Err(e) => {
                                tracing::debug!(%jail, ip = %raw, error = %e, "ignoring a ban that is not a client address");
                            }
                        }
                    }
                    snapshot.jails.insert(jail);
                }
                Err(e) if crate::fail2ban::client::is_unknown_jail(&e) => {
                    tracing::debug!(%jail, "jail went away during reconciliation");
                }
                Err(e) => {
                    self.socket = None;
                    return Err(e);
                }
            }
        }
        Ok(snapshot)
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
