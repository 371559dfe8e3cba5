//! Alerts on ban events: rules matched by a background worker that follows committed events by id
//! (never in the ingest path), groups each rule's matches into digests, and delivers them by e-mail
//! and webhooks with retries; delivery status is kept for the API.
//!
//! Three steps, each durable in the store:
//! 1. *Match*: events after the worker's cursor are matched against the rules in id order; the
//!    matches go into each rule's open digest and the cursor moves past them in the same
//!    transaction, so a restart neither loses nor repeats an alert. The events are those of the
//!    live broadcast when it holds every id right after the cursor (the common case: no read back),
//!    else they are read from the store; the cursor alone, while nothing matches, is written at
//!    most once a second. While no rule can match (alerts off, or no rule enabled), events are
//!    neither kept nor read: the cursor moves past them by id.
//! 2. *Close*: a digest whose window has passed is closed and gets one delivery per channel.
//! 3. *Deliver*: due deliveries are sent; a failure worth retrying is retried with exponential
//!    backoff until `alerts.maxAttempts`, then reported failed.

pub mod geoip;
pub mod insights;
pub mod mail;
pub mod notice;
pub mod places;
pub mod preview;
pub mod render;
pub mod templates;
pub mod test_alert;
pub mod test_mail;
pub mod webhook;

mod matcher;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::domain::alerts::{
    AttemptOutcome, Channel, Delivery, DeliveryFilter, Digest, NewDelivery, RuleMatches,
};
use crate::domain::events::{EventFilter, EventId, EventKind, StoredEvent};
use crate::events::Events;
use crate::settings::SettingsService;
use crate::settings::model::Alerts as AlertSettings;
use crate::store::{Cursor, Store, StoreError};

/// Events read per step.
const BATCH: usize = 500;
/// Events heard on the live broadcast matched per step.
const HEARD_BATCH: usize = 5_000;
/// Most events heard on the live broadcast kept while waiting to be matched.
const HEARD_MAX: usize = 50_000;
/// How often the cursor is written while events match nothing (it is written with every match).
const CURSOR_WRITE_EVERY: Duration = Duration::from_secs(1);
/// How often the worker looks even when nothing woke it.
const TICK: Duration = Duration::from_millis(500);
/// A hole in the event ids younger than this may be a transaction still committing (PostgreSQL
/// hands out ids before commit); the worker waits for it rather than skip it.
const GAP_GRACE_MS: i64 = 5_000;
/// Most stored bans read to rebuild the spike windows at start (newest first).
const SEED_MAX_EVENTS: usize = 50_000;
/// Deliveries attempted at once.
const PARALLEL_SENDS: usize = 4;
/// Longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);

struct Inner {
    store: Store,
    settings: SettingsService,
    events: Events,
    http: reqwest::Client,
    /// Wakes the sender when deliveries were created.
    deliveries_due: Notify,
    geoip: geoip::GeoIpCache,
    /// Bans per country and network, for the insights.
    places: Arc<places::PlacesCache>,
    shutdown: CancellationToken,
}

/// The alert service; cheap to clone.
#[derive(Clone)]
pub struct Alerts(Arc<Inner>);

impl std::fmt::Debug for Alerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alerts").finish_non_exhaustive()
    }
}

impl Alerts {
    pub fn new(
        store: Store,
        settings: SettingsService,
        events: Events,
        shutdown: CancellationToken,
    ) -> Self {
        Self(Arc::new(Inner {
            store,
            settings,
            events,
            http: webhook::client(),
            deliveries_due: Notify::new(),
            geoip: geoip::GeoIpCache::default(),
            places: Arc::default(),
            shutdown,
        }))
    }

    /// Runs the worker until shutdown. Spawn it once.
    pub async fn run(self) {
        match self.0.store.reset_sending_deliveries().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                deliveries = n,
                "deliveries interrupted by a stop will be sent again"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot reset interrupted deliveries"),
        }
        let sender = tokio::spawn(tracing::Instrument::in_current_span(
            self.clone().send_loop(),
        ));
        self.match_loop().await;
        let _ = sender.await;
    }

    async fn match_loop(self) {
        let mut wake = self.0.events.subscribe();
        let cursor = loop {
            match self.start_cursor().await {
                Ok(cursor) => break cursor,
                Err(e) => {
                    tracing::warn!(error = %e, "alerts: cannot read the event cursor; retrying");
                    tokio::select! {
                        () = self.0.shutdown.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    }
                }
            }
        };
        let mut state = self.seeded_state(cursor).await;
        let mut position = Position {
            cursor,
            stored: cursor,
            written_at: tokio::time::Instant::now(),
        };
        let mut heard = Heard::default();
        loop {
            if let Err(e) = self.match_step(&mut position, &mut state, &mut heard).await {
                tracing::warn!(error = %e, "alerts: matching events failed; retrying");
            }
            if let Err(e) = self.close_due().await {
                tracing::warn!(error = %e, "alerts: closing digests failed; retrying");
            }
            // Events are kept only while a rule may match them; otherwise the next step passes
            // over them by id. Should a rule appear meanwhile, what was not kept is read from the
            // store.
            heard.keeping = matcher::can_match(&self.0.settings.current().settings.alerts);
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                // The broadcast carries one message per committed event: the ones already queued
                // are taken with this one. A message lost to a lag is read from the store.
                first = wake.recv() => hear(first, &mut wake, &mut heard),
                () = tokio::time::sleep(TICK) => {}
            }
        }
    }

    /// Where matching resumes: the stored cursor, or (first start) the newest event, so history is
    /// not alerted on.
    async fn start_cursor(&self) -> Result<i64, StoreError> {
        if let Some(cursor) = self.0.store.cursor(Cursor::Alerts).await? {
            return Ok(cursor);
        }
        let newest = self.0.store.last_event_id().await?.map_or(0, |id| id.0);
        self.0.store.init_cursor(Cursor::Alerts, newest).await
    }

    /// The spike windows as they stood after event `cursor`, rebuilt from the stored bans (the
    /// windows live in memory; a restart or another hub's matching must not lose a spike that
    /// was under way). A failure is logged and starts from empty windows.
    async fn seeded_state(&self, cursor: i64) -> matcher::State {
        match self.seed_state(cursor).await {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(error = %e, "alerts: cannot rebuild the spike windows; they start empty");
                matcher::State::default()
            }
        }
    }

    async fn seed_state(&self, cursor: i64) -> Result<matcher::State, StoreError> {
        let snapshot = self.0.settings.current();
        let alerts = &snapshot.settings.alerts;
        let Some(span) = matcher::State::longest_window(alerts).filter(|_| alerts.enabled) else {
            return Ok(matcher::State::default());
        };
        // The window reaches back from the next event to match, which is no later than now and
        // (for a backlog an agent sends after an outage) may be as old as the last one matched.
        let now = Utc::now();
        let last_at = self
            .0
            .store
            .events_after(EventId(cursor.saturating_sub(1)), 1)
            .await?
            .first()
            .map_or(now, |e| e.occurred_at.min(now));
        let span = chrono::Duration::from_std(span).unwrap_or(chrono::Duration::days(1));
        let filter = EventFilter {
            kinds: vec![EventKind::Ban],
            from: Some(last_at - span),
            ..EventFilter::default()
        };
        let mut events = Vec::new();
        let mut after = None;
        while events.len() < SEED_MAX_EVENTS {
            let page = self.0.store.list_events(&filter, after, BATCH).await?;
            events.extend(page.events.into_iter().filter(|e| e.id.0 <= cursor));
            match page.next {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let geoip = self.geoip(snapshot.settings.geoip_path.as_deref());
        let servers = self.servers_by_id(alerts).await?;
        let state = matcher::State::seed(alerts, &events, cursor, geoip.as_deref(), &servers);
        tracing::debug!(
            events = events.len(),
            cursor,
            "alerts: spike windows rebuilt from the stored bans"
        );
        Ok(state)
    }

    /// The servers by id when a rule selects servers by their labels; else none are read.
    async fn servers_by_id(
        &self,
        alerts: &AlertSettings,
    ) -> Result<matcher::ServersById, StoreError> {
        if !matcher::needs_servers(alerts) {
            return Ok(matcher::ServersById::new());
        }
        Ok(self
            .0
            .store
            .list_servers()
            .await?
            .into_iter()
            .map(|s| (s.id, s))
            .collect())
    }

    /// Matches every event after the cursor that can be matched now. The events come from the
    /// live broadcast when it holds the ones right after the cursor, without holes; otherwise
    /// (a lag, a start, events another hub stored, PostgreSQL's ids committed out of order) they
    /// are read from the store.
    async fn match_step(
        &self,
        position: &mut Position,
        state: &mut matcher::State,
        heard: &mut Heard,
    ) -> Result<(), StoreError> {
        loop {
            let now_set = self.0.settings.current();
            if !matcher::can_match(&now_set.settings.alerts) {
                return self
                    .pass_over(position, state, heard, &now_set.settings.alerts)
                    .await;
            }
            // What was heard up to the cursor is matched already.
            heard.events = heard.events.split_off(&(position.cursor + 1));
            let mut events: Vec<Arc<StoredEvent>> = Vec::new();
            let mut next = position.cursor + 1;
            while events.len() < HEARD_BATCH {
                let Some(event) = heard.events.get(&next) else {
                    break;
                };
                events.push(Arc::clone(event));
                next += 1;
            }
            let from_store = events.is_empty();
            let ready = if from_store {
                events = self
                    .0
                    .store
                    .events_after(EventId(position.cursor), BATCH)
                    .await?
                    .into_iter()
                    .map(Arc::new)
                    .collect();
                if events.is_empty() {
                    return Ok(());
                }
                let now = Utc::now().timestamp_millis();
                matcher::ready_prefix(position.cursor, &events, now, GAP_GRACE_MS)
            } else {
                events.len()
            };
            if ready == 0 {
                return Ok(());
            }
            let batch = &events[..ready];
            let upto = batch.last().map_or(position.cursor, |e| e.id.0);
            let snapshot = self.0.settings.current();
            let geoip = self.geoip(snapshot.settings.geoip_path.as_deref());
            let alerts = &snapshot.settings.alerts;
            let counts =
                if alerts.enabled && alerts.rules.iter().any(|r| r.repeat_offender.is_some()) {
                    let ips = matcher::ban_ips(batch);
                    self.0.store.ip_ban_counts(&ips).await?
                } else {
                    HashMap::new()
                };
            let servers = self.servers_by_id(alerts).await?;
            let matches =
                matcher::evaluate(alerts, batch, state, geoip.as_deref(), &counts, &servers);
            self.record(position, state, upto, matches).await?;
            if from_store && (ready < events.len() || events.len() < BATCH) {
                return Ok(());
            }
            if !from_store && !heard.events.contains_key(&(position.cursor + 1)) {
                // What the broadcast brought is matched; the store is read at the next tick if
                // an event's message was lost.
                return Ok(());
            }
        }
    }

    /// The step while no rule can match (alerts off, or no rule enabled): the cursor moves past
    /// every committed event, by id, without reading or matching one, which would match nothing.
    /// The newest id heard on the broadcast is committed; when nothing new was heard (a start,
    /// events another hub stored), the store says which is the newest. A hole in the ids is not
    /// waited for: whatever fills it would match nothing either.
    async fn pass_over(
        &self,
        position: &mut Position,
        state: &mut matcher::State,
        heard: &mut Heard,
        alerts: &AlertSettings,
    ) -> Result<(), StoreError> {
        state.forget_removed_rules(alerts);
        heard.events.clear();
        let newest = if heard.newest > position.cursor {
            heard.newest
        } else {
            self.0
                .store
                .last_event_id()
                .await?
                .map_or(position.cursor, |id| id.0)
        };
        if newest > position.cursor {
            self.record(position, state, newest, Vec::new()).await?;
        }
        Ok(())
    }

    /// Moves the cursor to `upto`, past events matched into `matches`: written with the matches,
    /// or (nothing matched) at most once every [`CURSOR_WRITE_EVERY`].
    async fn record(
        &self,
        position: &mut Position,
        state: &mut matcher::State,
        upto: i64,
        matches: Vec<RuleMatches>,
    ) -> Result<(), StoreError> {
        let found: usize = matches.iter().map(|m| m.matches.len()).sum();
        if found == 0 && position.written_at.elapsed() < CURSOR_WRITE_EVERY {
            // Nothing to record: the cursor is written with the next match, or within a
            // second. A stop meanwhile matches these events again after the start, which
            // records nothing twice (they matched nothing, from the same windows: the windows
            // are rebuilt from the stored bans up to the stored cursor).
            position.cursor = upto;
            return Ok(());
        }
        let now = Utc::now().timestamp_millis();
        if self
            .0
            .store
            .record_alert_matches(position.stored, upto, matches, now)
            .await?
        {
            if found > 0 {
                tracing::debug!(matches = found, upto, "alert rules matched");
            }
            position.cursor = upto;
        } else {
            // Another hub moved the cursor: follow it, with the spike windows as that hub
            // left them (it matched events this one never saw).
            position.cursor = self.0.store.cursor(Cursor::Alerts).await?.unwrap_or(upto);
            *state = self.seeded_state(position.cursor).await;
        }
        position.stored = position.cursor;
        position.written_at = tokio::time::Instant::now();
        Ok(())
    }

    /// The GeoIP database of `path`, opened once per path (and again when the file changes).
    fn geoip(&self, path: Option<&std::path::Path>) -> Option<Arc<geoip::GeoIp>> {
        self.0.geoip.get(path)
    }

    /// The country (ISO 3166 code) of `ip` by the GeoIP database of the settings; `None` when no
    /// database is set or it does not know the address.
    pub fn country(&self, ip: std::net::IpAddr) -> Option<String> {
        let snapshot = self.0.settings.current();
        self.geoip(snapshot.settings.geoip_path.as_deref())?
            .country_of(ip)
    }

    /// Bans and addresses per country and network of `server` (or the fleet), and when they were
    /// counted; see [`places`] for how fresh they are.
    pub async fn places(
        &self,
        server: Option<crate::domain::ServerId>,
    ) -> Result<(places::Places, Option<chrono::DateTime<Utc>>), StoreError> {
        let snapshot = self.0.settings.current();
        let geoip = self.geoip(snapshot.settings.geoip_path.as_deref());
        let tally = self.0.places.get(&self.0.store, geoip).await?;
        Ok(tally.map_or_else(Default::default, |t| (t.scope(server), t.counted_at)))
    }

    /// Closes the digests whose window passed and plans their deliveries.
    async fn close_due(&self) -> Result<(), StoreError> {
        let now = Utc::now().timestamp_millis();
        let due = self.0.store.due_digests(now).await?;
        if due.is_empty() {
            return Ok(());
        }
        let snapshot = self.0.settings.current();
        let alerts = &snapshot.settings.alerts;
        for digest in due {
            let mut deliveries = Vec::new();
            match alerts
                .rules
                .iter()
                .find(|r| r.id.to_string() == digest.rule_id)
            {
                Some(rule) => {
                    if rule.email && !alerts.recipients.is_empty() {
                        deliveries.push(NewDelivery {
                            channel: Channel::Email,
                            target: "email".to_owned(),
                            max_attempts: alerts.max_attempts,
                        });
                    }
                    for name in &rule.webhooks {
                        deliveries.push(NewDelivery {
                            channel: Channel::Webhook,
                            target: name.clone(),
                            max_attempts: alerts.max_attempts,
                        });
                    }
                }
                None => tracing::info!(
                    digest = digest.id,
                    rule = %digest.rule_name,
                    "alerts: the rule of a digest was removed; nothing is sent"
                ),
            }
            if self.0.store.close_digest(&digest, &deliveries, now).await? {
                tracing::info!(
                    digest = digest.id,
                    rule = %digest.rule_name,
                    events = digest.events,
                    deliveries = deliveries.len(),
                    "alert digest closed"
                );
            }
        }
        self.0.deliveries_due.notify_one();
        Ok(())
    }

    async fn send_loop(self) {
        loop {
            let wait = match self.send_due().await {
                Ok(wait) => wait,
                Err(e) => {
                    tracing::warn!(error = %e, "alerts: sending failed; retrying");
                    TICK
                }
            };
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                () = self.0.deliveries_due.notified() => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Sends what is due; returns how long until the next delivery is due (at most a tick).
    async fn send_due(&self) -> Result<Duration, StoreError> {
        loop {
            let now = Utc::now().timestamp_millis();
            let due = self
                .0
                .store
                .due_deliveries(now, PARALLEL_SENDS as u64)
                .await?;
            if due.is_empty() {
                break;
            }
            let attempts = due.into_iter().map(|d| self.attempt(d));
            for result in futures::future::join_all(attempts).await {
                result?;
            }
        }
        let now = Utc::now().timestamp_millis();
        Ok(match self.0.store.next_delivery_due().await? {
            Some(at) => Duration::from_millis(u64::try_from(at - now).unwrap_or(0)).min(TICK),
            None => TICK,
        })
    }

    async fn attempt(&self, delivery: Delivery) -> Result<(), StoreError> {
        let now = Utc::now().timestamp_millis();
        if !self.0.store.claim_delivery(delivery.id, now).await? {
            return Ok(());
        }
        let result = self.deliver(&delivery).await;
        let attempts = delivery.attempts + 1;
        let outcome = match result {
            Ok(response) => AttemptOutcome::Delivered { response },
            Err((error, transient)) if transient && attempts < delivery.max_attempts => {
                let retry_initial = self.0.settings.current().settings.alerts.retry_initial;
                let backoff = retry_initial
                    .saturating_mul(1u32 << (attempts - 1).min(16))
                    .min(MAX_BACKOFF);
                AttemptOutcome::Retry {
                    error,
                    next: Utc::now().timestamp_millis()
                        + i64::try_from(backoff.as_millis()).unwrap_or(i64::MAX / 2),
                }
            }
            Err((error, _)) => AttemptOutcome::Failed { error },
        };
        match &outcome {
            AttemptOutcome::Delivered { response } => tracing::info!(
                delivery = delivery.id, channel = delivery.channel.as_str(), target = %delivery.target,
                attempts, response = %response, "alert delivered"
            ),
            AttemptOutcome::Retry { error, .. } => tracing::warn!(
                delivery = delivery.id, channel = delivery.channel.as_str(), target = %delivery.target,
                attempts, error = %error, "alert delivery failed; will retry"
            ),
            AttemptOutcome::Failed { error } => tracing::warn!(
                delivery = delivery.id, channel = delivery.channel.as_str(), target = %delivery.target,
                attempts, error = %error, "alert delivery failed for good"
            ),
        }
        self.0
            .store
            .finish_delivery(delivery.id, &outcome, Utc::now().timestamp_millis())
            .await
    }

    /// One attempt: the reply on success, or the error and whether it is worth retrying.
    async fn deliver(&self, delivery: &Delivery) -> Result<String, (String, bool)> {
        let store_err = |e: StoreError| (format!("the hub's store failed: {e}"), true);
        let digest = self
            .0
            .store
            .digest(delivery.digest_id)
            .await
            .map_err(store_err)?
            .ok_or_else(|| ("the digest is gone".to_owned(), false))?;
        let servers: HashMap<String, String> = self
            .0
            .store
            .list_servers()
            .await
            .map_err(store_err)?
            .into_iter()
            .map(|s| (s.id.to_string(), s.name.to_string()))
            .collect();
        let snapshot = self.0.settings.current();
        let rendered = render::render(&digest, &servers, snapshot.settings.alerts.language);
        let secret_err = |e: crate::settings::CryptoError| (e.to_string(), false);
        match delivery.channel {
            Channel::Email => {
                let alerts = &snapshot.settings.alerts;
                let Some(smtp) = &snapshot.settings.smtp else {
                    return Err((
                        "no SMTP server is configured (settings: smtp)".to_owned(),
                        false,
                    ));
                };
                if alerts.recipients.is_empty() {
                    return Err((
                        "no recipients are configured (alerts.recipients)".to_owned(),
                        false,
                    ));
                }
                let password = self
                    .0
                    .settings
                    .smtp_password(&snapshot)
                    .map_err(secret_err)?;
                let mail = mail::Mail {
                    to: alerts.recipients.clone(),
                    subject: rendered.subject.clone(),
                    text: rendered.text.clone(),
                    html: Some(rendered.html.clone()),
                };
                mail::send(smtp, password.as_ref(), &mail)
                    .await
                    .map(|accepted| accepted.reply)
                    .map_err(|e| (e.to_string(), e.is_transient()))
            }
            Channel::Webhook => {
                let Some(hook) = snapshot
                    .settings
                    .alerts
                    .webhooks
                    .iter()
                    .find(|w| w.name == delivery.target)
                else {
                    return Err((format!("webhook {:?} was removed", delivery.target), false));
                };
                let (url, token) = self
                    .0
                    .settings
                    .webhook_secrets(&snapshot, &hook.name)
                    .map_err(secret_err)?;
                let Some(url) = url else {
                    return Err((format!("webhook {:?} has no URL", hook.name), false));
                };
                webhook::post(&self.0.http, hook.format, &url, token.as_ref(), &rendered)
                    .await
                    .map_err(|e| (e.message, e.transient))
            }
        }
    }

    /// Deliveries, newest first.
    pub async fn deliveries(&self, filter: &DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        self.0.store.list_deliveries(filter).await
    }

    /// Digests, newest first.
    pub async fn digests(&self, limit: u64) -> Result<Vec<Digest>, StoreError> {
        self.0.store.list_digests(limit).await
    }

    pub async fn digest(&self, id: i64) -> Result<Option<Digest>, StoreError> {
        self.0.store.digest(id).await
    }
}

/// Committed events heard on the live broadcast and not matched yet.
#[derive(Default)]
struct Heard {
    /// The events, by id, heard while [`Heard::keeping`].
    events: std::collections::BTreeMap<i64, Arc<StoredEvent>>,
    /// The highest id heard.
    newest: i64,
    /// Whether events are kept: only while a rule may match them (see [`matcher::can_match`]).
    keeping: bool,
}

/// Where matching stands.
struct Position {
    /// The last event matched.
    cursor: i64,
    /// The cursor as stored (behind `cursor` while only events without matches were matched).
    stored: i64,
    /// When the cursor was last written.
    written_at: tokio::time::Instant,
}

/// Keeps the event received and those queued behind it. A lag loses messages, not events: the
/// matching reads what is missing from the store.
fn hear(
    first: Result<Arc<StoredEvent>, tokio::sync::broadcast::error::RecvError>,
    wake: &mut tokio::sync::broadcast::Receiver<Arc<StoredEvent>>,
    heard: &mut Heard,
) {
    use tokio::sync::broadcast::error::TryRecvError;
    if let Ok(event) = first {
        keep(heard, event);
    }
    loop {
        match wake.try_recv() {
            Ok(event) => keep(heard, event),
            Err(TryRecvError::Lagged(_)) => {}
            Err(TryRecvError::Empty | TryRecvError::Closed) => return,
        }
    }
}

fn keep(heard: &mut Heard, event: Arc<StoredEvent>) {
    heard.newest = heard.newest.max(event.id.0);
    // Bounded: beyond this the worker is far behind and reads from the store anyway.
    if heard.keeping && heard.events.len() < HEARD_MAX {
        heard.events.insert(event.id.0, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ServerId;

    fn event(id: i64) -> Arc<StoredEvent> {
        Arc::new(matcher::tests::ban(
            id,
            ServerId::new(),
            "sshd",
            "192.0.2.7",
            1_700_000_000_000,
        ))
    }

    #[tokio::test]
    async fn events_are_kept_only_while_a_rule_may_match_them() {
        let (live, mut wake) = tokio::sync::broadcast::channel(16);
        let mut heard = Heard::default();
        for id in [3, 1, 2] {
            live.send(event(id)).expect("a subscriber");
        }
        let first = wake.recv().await;
        hear(first, &mut wake, &mut heard);
        assert_eq!(heard.newest, 3);
        assert!(heard.events.is_empty(), "kept while no rule can match");

        heard.keeping = true;
        for id in [5, 4] {
            live.send(event(id)).expect("a subscriber");
        }
        let first = wake.recv().await;
        hear(first, &mut wake, &mut heard);
        assert_eq!(heard.newest, 5);
        assert_eq!(heard.events.keys().copied().collect::<Vec<_>>(), [4, 5]);
    }
}
