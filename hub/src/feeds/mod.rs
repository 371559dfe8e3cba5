//! Blocklist feeds for edge firewalls: the feeds an admin defines, their read-only tokens, and the
//! bodies the firewalls fetch.
//!
//! Every replica keeps per feed and format the rendered body and its `ETag`, so a fetch is a hash
//! map look-up and a 304 costs nothing more. A worker ([`Feeds::run`]) follows the stored ban
//! events by id (from the shared database, so each replica computes the same from the events of
//! all of them), keeps the bans in memory ([`bans`]), and renders again when a ban or an unban
//! commits, a ban ends, the protected networks, the servers or the feeds change, and at least
//! every [`REFRESH`] (so maximum ages apply and the timeouts in the bodies stay close).
//!
//! A feed that names sharing policies lists the shared bans in force those policies recorded on
//! the feed's servers (read from the store each round while such a feed exists), not the hosts'
//! own bans.

mod bans;
pub mod cidr;
pub mod render;
pub mod select;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use ipnet::IpNet;
use subtle::ConstantTimeEq as _;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::domain::feeds::{FeedFormat, FeedRecord, FeedSpec, FeedTokenRecord, PolicyShare};
use crate::domain::{Guards, Server, sha256_hex};
use crate::events::Events;
use crate::store::feeds::FeedWrite;
use crate::store::{Store, StoreError};
use bans::BanIndex;

/// The prefix of a feed token: `bhf_<id>_<secret>`.
pub const FEED_TOKEN_PREFIX: &str = "bhf_";
/// How often the worker looks for changes when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);
/// The longest a rendered body is kept without rendering it again.
const REFRESH: TimeDelta = TimeDelta::seconds(30);
/// Ban changes read per query.
const PAGE: u64 = 10_000;
/// A token's last use is written at most this often.
const TOUCH_EVERY: TimeDelta = TimeDelta::seconds(60);
/// At most this many tokens per feed.
const MAX_TOKENS: usize = 100;
/// How long a replica answers from a token it read without reading it again.
const TOKEN_MEMORY: Duration = Duration::from_secs(2);
/// Tokens remembered before the stale ones are dropped.
const MAX_REMEMBERED_TOKENS: usize = 4096;

/// A feed's body in one format, as served.
#[derive(Debug)]
pub struct Rendered {
    pub body: String,
    pub etag: String,
    pub content_type: &'static str,
}

/// A feed and what it lists now.
#[derive(Debug, Clone)]
pub struct FeedView {
    pub record: FeedRecord,
    /// Entries listed at the last rendering; `None` before the first.
    pub entries: Option<usize>,
    pub rendered_at: Option<DateTime<Utc>>,
}

/// Why a feed could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub enum FeedsError {
    #[error("no feed named {0:?}")]
    UnknownFeed(String),
    #[error("a feed named {0:?} already exists")]
    NameTaken(String),
    #[error("no live token {0:?} of this feed")]
    UnknownToken(String),
    #[error("the feed already has {MAX_TOKENS} tokens; revoke one first")]
    TooManyTokens,
    /// No token, or one that is unknown, revoked or malformed.
    #[error(
        "a feed is read with its feed token: `Authorization: Bearer bhf_…` or `?token=bhf_…`; \
         this one is missing, unknown or revoked"
    )]
    Unauthenticated,
    #[error("this feed token reads another feed and nothing else")]
    OtherFeed,
    /// The hub has not rendered the feed yet (just created, or the hub just started).
    #[error("the feed is being prepared; try again in a second")]
    NotReady,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one feed lists, rendered.
#[derive(Debug, Default)]
struct FeedCache {
    entries: usize,
    rendered_at: Option<DateTime<Utc>>,
    bodies: HashMap<FeedFormat, Arc<Rendered>>,
}

#[derive(Debug, Default)]
struct Shared {
    feeds: HashMap<String, FeedRecord>,
    caches: HashMap<String, FeedCache>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    guards: Arc<Guards>,
    events: Events,
    shutdown: CancellationToken,
    shared: RwLock<Shared>,
    /// Feed tokens read lately, by id, with when they were read.
    tokens: Mutex<HashMap<String, (FeedTokenRecord, std::time::Instant)>>,
    wake: Notify,
}

/// The feeds service; cheap to clone.
#[derive(Debug, Clone)]
pub struct Feeds(Arc<Inner>);

impl Feeds {
    pub fn new(
        store: Store,
        guards: Arc<Guards>,
        events: Events,
        shutdown: CancellationToken,
    ) -> Self {
        Self(Arc::new(Inner {
            store,
            guards,
            events,
            shutdown,
            shared: RwLock::new(Shared::default()),
            tokens: Mutex::new(HashMap::new()),
            wake: Notify::new(),
        }))
    }

    /// Every feed with what it lists now, by name.
    pub async fn list(&self) -> Result<Vec<FeedView>, FeedsError> {
        let records = self.0.store.feeds().await?;
        Ok(records.into_iter().map(|r| self.view(r)).collect())
    }

    pub async fn get(&self, name: &str) -> Result<FeedView, FeedsError> {
        let record = self.record(name).await?;
        Ok(self.view(record))
    }

    fn view(&self, record: FeedRecord) -> FeedView {
        let shared = self.0.shared.read().unwrap_or_else(|e| e.into_inner());
        let cache = shared.caches.get(record.spec.name.as_str());
        FeedView {
            entries: cache.and_then(|c| c.rendered_at.map(|_| c.entries)),
            rendered_at: cache.and_then(|c| c.rendered_at),
            record,
        }
    }

    async fn record(&self, name: &str) -> Result<FeedRecord, FeedsError> {
        self.0
            .store
            .feed(name)
            .await?
            .ok_or_else(|| FeedsError::UnknownFeed(name.to_owned()))
    }

    pub async fn create(&self, spec: FeedSpec, by: &str) -> Result<FeedView, FeedsError> {
        let now = Utc::now();
        let record = FeedRecord {
            id: uuid::Uuid::now_v7().to_string(),
            spec,
            created_by: by.to_owned(),
            created_at: now,
            updated_at: now,
        };
        match self.0.store.insert_feed(&record).await? {
            FeedWrite::Done => {}
            _ => return Err(FeedsError::NameTaken(record.spec.name.to_string())),
        }
        self.0.wake.notify_one();
        Ok(self.view(record))
    }

    /// Replaces a feed's definition; its tokens stay.
    pub async fn update(&self, name: &str, spec: FeedSpec) -> Result<FeedView, FeedsError> {
        let new_name = spec.name.to_string();
        match self.0.store.update_feed(name, &spec).await? {
            FeedWrite::Done => {}
            FeedWrite::NotFound => return Err(FeedsError::UnknownFeed(name.to_owned())),
            FeedWrite::NameTaken => return Err(FeedsError::NameTaken(new_name)),
        }
        self.0.wake.notify_one();
        self.get(&new_name).await
    }

    pub async fn delete(&self, name: &str) -> Result<(), FeedsError> {
        let deleted = self.0.store.delete_feed(name).await?;
        self.forget_tokens(None);
        if !deleted {
            return Err(FeedsError::UnknownFeed(name.to_owned()));
        }
        self.0.wake.notify_one();
        Ok(())
    }

    pub async fn tokens(&self, feed: &str) -> Result<Vec<FeedTokenRecord>, FeedsError> {
        let record = self.record(feed).await?;
        Ok(self.0.store.feed_tokens(&record.id).await?)
    }

    /// Creates a token of `feed`; returns its record and the token itself (shown once).
    pub async fn create_token(
        &self,
        feed: &str,
        name: &str,
        by: &str,
    ) -> Result<(FeedTokenRecord, String), FeedsError> {
        let record = self.record(feed).await?;
        let live = self.0.store.feed_tokens(&record.id).await?;
        if live.iter().filter(|t| t.revoked_at.is_none()).count() >= MAX_TOKENS {
            return Err(FeedsError::TooManyTokens);
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let secret = crate::pki::random_secret();
        let token = FeedTokenRecord {
            id: id.clone(),
            feed_id: record.id,
            name: name.to_owned(),
            secret_hash: sha256_hex(secret.as_bytes()),
            created_by: by.to_owned(),
            created_at: Utc::now(),
            last_used_at: None,
            revoked_at: None,
        };
        self.0.store.insert_feed_token(&token).await?;
        Ok((token, format!("{FEED_TOKEN_PREFIX}{id}_{secret}")))
    }

    pub async fn revoke_token(&self, feed: &str, id: &str) -> Result<(), FeedsError> {
        let record = self.record(feed).await?;
        let revoked = self.0.store.revoke_feed_token(&record.id, id).await?;
        self.forget_tokens(Some(&record.id));
        if revoked {
            Ok(())
        } else {
            Err(FeedsError::UnknownToken(id.to_owned()))
        }
    }

    /// The body of feed `name` in `format`, for the holder of `token`.
    pub async fn read(
        &self,
        name: &str,
        format: FeedFormat,
        token: Option<&str>,
    ) -> Result<Arc<Rendered>, FeedsError> {
        let token = self.check_token(token).await?;
        let shared = self.0.shared.read().unwrap_or_else(|e| e.into_inner());
        let Some(feed) = shared.feeds.get(name) else {
            return Err(FeedsError::UnknownFeed(name.to_owned()));
        };
        if feed.id != token.feed_id {
            return Err(FeedsError::OtherFeed);
        }
        shared
            .caches
            .get(name)
            .and_then(|c| c.bodies.get(&format))
            .cloned()
            .ok_or(FeedsError::NotReady)
    }

    /// A feed's body as a firewall would fetch it now, for an admin: in `format`, or the feed's
    /// default format.
    pub async fn preview(
        &self,
        name: &str,
        format: Option<FeedFormat>,
    ) -> Result<(FeedFormat, Arc<Rendered>), FeedsError> {
        let record = self.record(name).await?;
        let format = format.unwrap_or(record.spec.default_format);
        let shared = self.0.shared.read().unwrap_or_else(|e| e.into_inner());
        let rendered = shared
            .caches
            .get(name)
            .and_then(|c| c.bodies.get(&format))
            .cloned()
            .ok_or(FeedsError::NotReady)?;
        Ok((format, rendered))
    }

    async fn check_token(&self, token: Option<&str>) -> Result<FeedTokenRecord, FeedsError> {
        let Some((id, secret)) = token
            .and_then(|t| t.strip_prefix(FEED_TOKEN_PREFIX))
            .and_then(|rest| rest.split_once('_'))
        else {
            return Err(FeedsError::Unauthenticated);
        };
        let Some(mut record) = self.token_record(id).await? else {
            return Err(FeedsError::Unauthenticated);
        };
        let matches = bool::from(
            sha256_hex(secret.as_bytes())
                .as_bytes()
                .ct_eq(record.secret_hash.as_bytes()),
        );
        if !matches || record.revoked_at.is_some() {
            return Err(FeedsError::Unauthenticated);
        }
        let now = Utc::now();
        if record.last_used_at.is_none_or(|t| now - t > TOUCH_EVERY) {
            self.0.store.touch_feed_token(&record.id, now).await?;
            record.last_used_at = Some(now);
            self.remember_token(&record);
        }
        Ok(record)
    }

    /// A token's record, from this replica's memory when read less than [`TOKEN_MEMORY`] ago (a
    /// revocation on another replica takes effect here within that time), else from the store.
    async fn token_record(&self, id: &str) -> Result<Option<FeedTokenRecord>, FeedsError> {
        {
            let known = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((record, read_at)) = known.get(id)
                && read_at.elapsed() < TOKEN_MEMORY
            {
                return Ok(Some(record.clone()));
            }
        }
        let record = self.0.store.feed_token(id).await?;
        if let Some(record) = &record {
            self.remember_token(record);
        }
        Ok(record)
    }

    fn remember_token(&self, record: &FeedTokenRecord) {
        let mut known = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() >= MAX_REMEMBERED_TOKENS {
            known.retain(|_, (_, read_at)| read_at.elapsed() < TOKEN_MEMORY);
        }
        known.insert(
            record.id.clone(),
            (record.clone(), std::time::Instant::now()),
        );
    }

    /// Forgets the remembered tokens of one feed (`None`: of every feed) after a change here.
    fn forget_tokens(&self, feed_id: Option<&str>) {
        let mut known = self.0.tokens.lock().unwrap_or_else(|e| e.into_inner());
        known.retain(|_, (record, _)| feed_id.is_some_and(|f| record.feed_id != f));
    }

    /// Follows the stored bans and keeps every feed rendered, until the hub shuts down.
    pub async fn run(self) {
        let mut worker = Worker::default();
        let mut committed = self.0.events.subscribe();
        loop {
            if let Err(e) = worker.refresh(&self).await {
                tracing::warn!(error = %e, "cannot bring the blocklist feeds up to date");
            }
            tokio::select! {
                () = self.0.shutdown.cancelled() => return,
                () = tokio::time::sleep(TICK) => {}
                () = self.0.wake.notified() => { worker.dirty = true; }
                event = committed.recv() => match event {
                    Ok(_) | Err(RecvError::Lagged(_)) => {}
                    Err(RecvError::Closed) => return,
                },
            }
        }
    }
}

/// What the worker keeps between rounds.
#[derive(Debug, Default)]
struct Worker {
    index: BanIndex,
    version: Option<(i64, i64)>,
    feeds: Vec<FeedRecord>,
    protected: Vec<IpNet>,
    servers: Vec<Server>,
    /// The policies' shared bans in force, read while a feed names policies.
    shares: Vec<PolicyShare>,
    rendered_at: Option<DateTime<Utc>>,
    next_change: Option<DateTime<Utc>>,
    dirty: bool,
    /// Whether the index has been started from the bans in force.
    seeded: bool,
}

impl Worker {
    async fn refresh(&mut self, feeds: &Feeds) -> Result<(), FeedsError> {
        let store = &feeds.0.store;
        let version = store.feeds_version().await?;
        if self.version != Some(version) || self.dirty {
            self.feeds = store.feeds().await?;
            self.version = Some(version);
            self.dirty = true;
        }
        if self.feeds.is_empty() {
            if self.dirty {
                let mut shared = feeds.0.shared.write().unwrap_or_else(|e| e.into_inner());
                *shared = Shared::default();
                self.dirty = false;
            }
            return Ok(());
        }
        let mut changed = self.dirty;
        if !self.seeded {
            self.seed(store).await?;
            self.seeded = true;
            changed = true;
        }
        loop {
            let page = store.ban_changes_after(self.index.cursor, PAGE).await?;
            let unknown = self.index.unknown_in(&page);
            if !unknown.is_empty() {
                let history = store.ban_history(&unknown, self.index.cursor).await?;
                self.index.learn(&unknown, &history);
            }
            for change in &page {
                changed |= self.index.apply(change);
            }
            if (page.len() as u64) < PAGE {
                break;
            }
        }
        if self.feeds.iter().any(|f| !f.spec.policies.is_empty()) {
            let shares = store.policy_shares_in_force(Utc::now()).await?;
            if shares != self.shares {
                self.shares = shares;
                changed = true;
            }
        } else {
            self.shares.clear();
        }
        let protected = feeds.0.guards.protected_networks();
        if protected != self.protected {
            self.protected = protected;
            changed = true;
        }
        let servers = store.list_servers().await?;
        if servers
            .iter()
            .map(|s| (s.id, s.labels.as_map()))
            .ne(self.servers.iter().map(|s| (s.id, s.labels.as_map())))
        {
            self.servers = servers;
            changed = true;
        }
        let now = Utc::now();
        changed |= self.next_change.is_some_and(|t| t <= now);
        changed |= self.rendered_at.is_none_or(|t| now - t >= REFRESH);
        if changed {
            self.render_all(feeds, now);
        }
        self.dirty = false;
        Ok(())
    }

    /// Starts the index at the newest event with the histories of the addresses whose ban may be
    /// in force there: a read bounded by those bans, however many events the hub keeps.
    async fn seed(&mut self, store: &Store) -> Result<(), FeedsError> {
        let head = store.newest_event_id().await?;
        let nets = store.addresses_banned_at(head, Utc::now()).await?;
        let history = store.ban_history(&nets, head).await?;
        self.index = BanIndex::default();
        self.index.learn(&nets, &history);
        self.index.cursor = head;
        tracing::debug!(
            head,
            addresses = nets.len(),
            events = history.len(),
            "feeds start from the bans in force"
        );
        Ok(())
    }

    fn render_all(&mut self, feeds: &Feeds, now: DateTime<Utc>) {
        let mut caches = HashMap::new();
        let mut next_change: Option<DateTime<Utc>> = None;
        for feed in &self.feeds {
            let entries = if feed.spec.policies.is_empty() {
                select::select(&feed.spec, &self.index, &self.servers, &self.protected, now)
            } else {
                let shared = select::policy_index(&feed.spec, &self.shares);
                select::select(&feed.spec, &shared, &self.servers, &self.protected, now)
            };
            let feed_next = select::next_change(&entries, now);
            next_change = match (next_change, feed_next) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let bodies = FeedFormat::ALL
                .into_iter()
                .map(|format| {
                    let body = render::render(format, &feed.spec.name, &entries, now);
                    let rendered = Rendered {
                        body,
                        etag: render::etag(format, &entries),
                        content_type: render::content_type(format),
                    };
                    (format, Arc::new(rendered))
                })
                .collect();
            caches.insert(
                feed.spec.name.to_string(),
                FeedCache {
                    entries: entries.len(),
                    rendered_at: Some(now),
                    bodies,
                },
            );
        }
        let records = self
            .feeds
            .iter()
            .map(|f| (f.spec.name.to_string(), f.clone()))
            .collect();
        let mut shared = feeds.0.shared.write().unwrap_or_else(|e| e.into_inner());
        shared.feeds = records;
        shared.caches = caches;
        self.rendered_at = Some(now);
        self.next_change = next_change;
    }
}
