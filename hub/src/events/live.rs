//! The live feed for one client: committed events from the broadcast, filtered, with catch-up from
//! the database after a reconnect (`Last-Event-ID`) or when the client fell too far behind.
//!
//! With several hub replicas on one database, the broadcast of each replica carries the events it
//! committed itself and, through the peer feed, those the others committed: their ids arrive by
//! `NOTIFY` (see `cluster`) and the events are read back from the database in id order. So a browser
//! on any replica sees every agent's events, and resumes on any replica by event id.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::sync::mpsc;

use super::{Events, EventsError};
use crate::domain::events::{EventFilter, EventId, StoredEvent};

/// Events replayed from the database per catch-up read.
const REPLAY_PAGE: usize = 500;
/// At most this many events are replayed for one client before it just goes on live.
const REPLAY_MAX: usize = 10_000;
/// Events read per query by the peer feed.
const PEER_PAGE: usize = 1000;

impl Events {
    /// From now on, tells the other replicas about every event committed here.
    pub fn attach_cluster(&self, cluster: crate::cluster::Cluster) {
        // Attached once at start-up; a second call changes nothing.
        let _ = self.0.cluster.set(cluster);
    }

    /// Publishes here the events other replicas committed, given as inclusive id ranges, in the
    /// order the notifications came and by id within each. Runs until the sender goes away.
    pub async fn run_peer_feed(self, mut ranges: mpsc::Receiver<Vec<(i64, i64)>>) {
        while let Some(batch) = ranges.recv().await {
            for (first, last) in batch {
                self.publish_peer_range(first, last).await;
            }
        }
    }

    async fn publish_peer_range(&self, first: i64, last: i64) {
        // Nobody here streams events: reading them back would only cost the database and this
        // replica (a stream opened later starts from the database anyway). Other subscribers
        // (alerts, probes) read the store themselves.
        if self.0.live_clients.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut after = first - 1;
        while after < last {
            let want = usize::try_from(last - after)
                .unwrap_or(PEER_PAGE)
                .min(PEER_PAGE);
            let page = match self.store().events_after(EventId(after), want).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, first, last, "cannot read another replica's events for live clients");
                    return;
                }
            };
            let Some(newest) = page.last().map(|e| e.id.0) else {
                return;
            };
            for event in page.into_iter().filter(|e| e.id.0 <= last) {
                // Nobody listening is not an error.
                let _ = self.0.live.send(Arc::new(event));
            }
            after = newest;
            if newest >= last {
                return;
            }
        }
    }
}

/// Counts a live stream for as long as it exists.
struct Client(Events);

impl Client {
    fn new(events: Events) -> Self {
        events.0.live_clients.fetch_add(1, Ordering::Relaxed);
        Self(events)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.0.0.live_clients.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Live {
    _client: Client,
    events: Events,
    rx: broadcast::Receiver<Arc<StoredEvent>>,
    filter: EventFilter,
    /// The newest id this client has passed (delivered or filtered out).
    last: Option<EventId>,
    backlog: VecDeque<Arc<StoredEvent>>,
    /// Ids delivered from the database that the broadcast may deliver again.
    replayed: HashSet<EventId>,
    /// Whether to read the database after `last` before taking from the broadcast again.
    catch_up: bool,
    replay_left: usize,
}

impl Live {
    async fn next(&mut self) -> Option<Arc<StoredEvent>> {
        loop {
            if let Some(event) = self.backlog.pop_front() {
                self.last = Some(self.last.map_or(event.id, |l| l.max(event.id)));
                self.replayed.insert(event.id);
                if self.filter.matches(&event) {
                    return Some(event);
                }
                continue;
            }
            if self.catch_up {
                self.catch_up = false;
                self.read_backlog().await;
                continue;
            }
            let received = tokio::select! {
                () = self.events.0.shutdown.cancelled() => return None,
                received = self.rx.recv() => received,
            };
            match received {
                Ok(event) => {
                    if self.replayed.remove(&event.id) {
                        continue;
                    }
                    self.last = Some(self.last.map_or(event.id, |l| l.max(event.id)));
                    if self.filter.matches(&event) {
                        return Some(event);
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(
                        missed,
                        "live client fell behind; catching up from the database"
                    );
                    self.catch_up = true;
                }
                Err(RecvError::Closed) => return None,
            }
        }
    }

    async fn read_backlog(&mut self) {
        let Some(after) = self.last else {
            return;
        };
        if self.replay_left == 0 {
            return;
        }
        let page = REPLAY_PAGE.min(self.replay_left);
        match self.events.store().events_after(after, page).await {
            Ok(events) => {
                self.replay_left -= events.len();
                // A full page may have more behind it.
                self.catch_up = events.len() == page;
                if self.replayed.len() > REPLAY_MAX {
                    self.replayed.clear();
                }
                self.backlog.extend(events.into_iter().map(Arc::new));
            }
            Err(e) => {
                tracing::warn!(error = %e, "live client: cannot read missed events; going on live");
            }
        }
    }
}

pub(super) async fn stream(
    events: Events,
    filter: EventFilter,
    last: Option<EventId>,
) -> Result<impl Stream<Item = Arc<StoredEvent>> + Send + 'static, EventsError> {
    // Subscribe before reading the database, so nothing committed in between is missed; what
    // arrives twice is dropped by id.
    let client = Client::new(events.clone());
    let rx = events.subscribe();
    let (last, catch_up) = match last {
        Some(last) => (Some(last), true),
        None => (events.store().last_event_id().await?, false),
    };
    let live = Live {
        _client: client,
        events,
        rx,
        filter,
        last,
        backlog: VecDeque::new(),
        replayed: HashSet::new(),
        catch_up,
        replay_left: REPLAY_MAX,
    };
    Ok(futures::stream::unfold(live, |mut live| async move {
        live.next().await.map(|event| (event, live))
    }))
}
