//! The fleet's jails in one view: per jail name, the servers that run it, whether each has it
//! enabled, and how many addresses each bans and sees failing now; and one jail switched on or off
//! across chosen servers. The view fans out to the online agents with a deadline, at most a few at
//! a time, and keeps each server's answer for a short while: a view asked again within that time
//! is answered from memory, and a server that does not answer in time (or is offline) shows its
//! last answer with its age, or none.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use banhub_proto::rules::{JailName, is_banhub_jail};
use chrono::{DateTime, Utc};
use futures::StreamExt as _;

use crate::domain::{ServerId, ServerStatus};
use crate::fleet::{Fleet, FleetError, ServerView};

/// An answer younger than this is served from memory.
const FRESH_FOR: Duration = Duration::from_secs(5);
/// How long the view waits for one server's answer.
const DEADLINE: Duration = Duration::from_secs(4);
/// Servers asked at once.
const FAN_OUT: usize = 32;

/// One jail on one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailOnServer {
    pub enabled: bool,
    pub running: bool,
    pub currently_banned: u64,
    pub currently_failed: u64,
}

/// What one server last said about its jails.
#[derive(Debug, Clone)]
pub struct ServerJails {
    pub server: ServerId,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub status: ServerStatus,
    /// When its agent answered (none: never, since this replica started).
    pub answered_at: Option<DateTime<Utc>>,
    /// Why the last attempt gave no answer, when it did not.
    pub error: Option<String>,
    pub jails: BTreeMap<String, JailOnServer>,
}

/// One server's outcome of switching a jail.
#[derive(Debug)]
pub struct SwitchResult {
    pub server: ServerId,
    pub name: String,
    pub result: Result<Vec<String>, FleetError>,
}

#[derive(Debug, Clone)]
struct Cached {
    answered_at: DateTime<Utc>,
    jails: BTreeMap<String, JailOnServer>,
}

/// The fleet jail view's service.
#[derive(Debug, Clone)]
pub struct FleetJails(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    fleet: Fleet,
    cache: Mutex<HashMap<ServerId, Cached>>,
}

impl FleetJails {
    pub fn new(fleet: Fleet) -> Self {
        Self(Arc::new(Inner {
            fleet,
            cache: Mutex::new(HashMap::new()),
        }))
    }

    /// Every server carrying all of `labels`, with its jails: fresh answers from memory, the
    /// others asked now within the deadline.
    pub async fn view(
        &self,
        labels: &BTreeMap<String, String>,
        by: &str,
    ) -> Result<Vec<ServerJails>, FleetError> {
        let servers: Vec<ServerView> = self
            .0
            .fleet
            .list()
            .await?
            .into_iter()
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.server.labels.as_map().get(k) == Some(v))
            })
            .collect();
        let answers = futures::stream::iter(servers.into_iter().map(|s| self.server_jails(s, by)))
            .buffered(FAN_OUT)
            .collect::<Vec<_>>()
            .await;
        Ok(answers)
    }

    async fn server_jails(&self, view: ServerView, by: &str) -> ServerJails {
        let id = view.server.id;
        let cached = self.cached(id);
        let mut error = None;
        let fresh = cached
            .as_ref()
            .is_some_and(|c| (Utc::now() - c.answered_at).to_std().unwrap_or_default() < FRESH_FOR);
        let known = if fresh || view.status != ServerStatus::Online {
            if view.status != ServerStatus::Online {
                error = Some("the server's agent is offline".to_owned());
            }
            cached
        } else {
            match tokio::time::timeout(DEADLINE, self.ask(id, by)).await {
                Ok(Ok(jails)) => {
                    let entry = Cached {
                        answered_at: Utc::now(),
                        jails,
                    };
                    self.store(id, entry.clone());
                    Some(entry)
                }
                Ok(Err(e)) => {
                    error = Some(e.to_string());
                    cached
                }
                Err(_) => {
                    error = Some(format!("no answer within {} s", DEADLINE.as_secs()));
                    cached
                }
            }
        };
        ServerJails {
            server: id,
            name: view.server.name.to_string(),
            labels: view.server.labels.as_map().clone(),
            status: view.status,
            answered_at: known.as_ref().map(|c| c.answered_at),
            error,
            jails: known.map(|c| c.jails).unwrap_or_default(),
        }
    }

    /// One server's jails: the configuration's (enabled or not) with the running ones' counters.
    async fn ask(
        &self,
        server: ServerId,
        by: &str,
    ) -> Result<BTreeMap<String, JailOnServer>, FleetError> {
        let fleet = &self.0.fleet;
        let (list, status) = tokio::try_join!(fleet.jails(server, by), fleet.status(server, by))?;
        let mut jails: BTreeMap<String, JailOnServer> = list
            .jails
            .into_iter()
            .filter(|j| !is_banhub_jail(&j.name))
            .map(|j| {
                (
                    j.name,
                    JailOnServer {
                        enabled: j.enabled,
                        running: j.running,
                        currently_banned: 0,
                        currently_failed: 0,
                    },
                )
            })
            .collect();
        for counters in status.jails {
            if is_banhub_jail(&counters.name) {
                continue;
            }
            let jail = jails.entry(counters.name).or_insert(JailOnServer {
                enabled: true,
                running: true,
                currently_banned: 0,
                currently_failed: 0,
            });
            jail.running = true;
            jail.currently_banned = counters.currently_banned;
            jail.currently_failed = counters.currently_failed;
        }
        Ok(jails)
    }

    /// Enables or disables `jail` on each of `servers` at once, each through its agent's
    /// validated editor; one result per server. Their answers in memory are dropped.
    pub async fn set_enabled(
        &self,
        jail: &JailName,
        enabled: bool,
        servers: Vec<(ServerId, String)>,
        by: &str,
    ) -> Vec<SwitchResult> {
        let change = [(jail.clone(), enabled)];
        let results = futures::stream::iter(servers.into_iter().map(|(server, name)| {
            let change = &change;
            async move {
                let result = self
                    .0
                    .fleet
                    .set_jails_enabled(server, change, by)
                    .await
                    .map(|c| c.failed_jails);
                self.forget(server);
                SwitchResult {
                    server,
                    name,
                    result,
                }
            }
        }))
        .buffered(FAN_OUT)
        .collect::<Vec<_>>()
        .await;
        tracing::info!(%jail, enabled, servers = results.len(), %by, "jail switched across servers");
        results
    }

    fn cached(&self, server: ServerId) -> Option<Cached> {
        self.0
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(&server).cloned())
    }

    fn store(&self, server: ServerId, entry: Cached) {
        if let Ok(mut cache) = self.0.cache.lock() {
            cache.insert(server, entry);
        }
    }

    fn forget(&self, server: ServerId) {
        if let Ok(mut cache) = self.0.cache.lock() {
            cache.remove(&server);
        }
    }
}
