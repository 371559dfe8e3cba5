//! Filter tests bounded per server: one runs on a host at a time and one more may wait its turn;
//! any beyond are refused, so clients cannot pile `fail2ban-regex` processes onto a host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::domain::ServerId;

/// Filter tests running on one server at once (the agent runs one at a time as well).
const RUNNING: usize = 1;
/// Filter tests waiting for their turn on one server; one more is refused.
const WAITING: usize = 1;
/// How long a refused client is told to wait before it tries again, in seconds.
pub const RETRY_AFTER_SECS: u64 = 5;

/// The running and waiting filter tests of every server on this hub.
#[derive(Debug, Default)]
pub(crate) struct FilterTestSlots(Mutex<HashMap<ServerId, Arc<Slots>>>);

#[derive(Debug)]
struct Slots {
    /// Running plus waiting tests.
    admitted: Arc<Semaphore>,
    running: Arc<Semaphore>,
}

/// A filter test's turn on its server, given back when dropped.
#[derive(Debug)]
pub(crate) struct Turn {
    _running: OwnedSemaphorePermit,
    _admitted: OwnedSemaphorePermit,
}

/// The server already runs a filter test and another one waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

impl FilterTestSlots {
    /// Waits for `server`'s turn, or refuses at once when the queue is full.
    pub(crate) async fn turn(&self, server: ServerId) -> Result<Turn, Busy> {
        let slots = self.slots(server);
        let admitted = Arc::clone(&slots.admitted)
            .try_acquire_owned()
            .map_err(|_| Busy)?;
        // The semaphore is never closed; were it, refusing would be the safe answer.
        let running = Arc::clone(&slots.running)
            .acquire_owned()
            .await
            .map_err(|_| Busy)?;
        Ok(Turn {
            _running: running,
            _admitted: admitted,
        })
    }

    /// Drops a deleted server's slots.
    pub(crate) fn forget(&self, server: ServerId) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&server);
    }

    fn slots(&self, server: ServerId) -> Arc<Slots> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(server).or_insert_with(|| {
            Arc::new(Slots {
                admitted: Arc::new(Semaphore::new(RUNNING + WAITING)),
                running: Arc::new(Semaphore::new(RUNNING)),
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_runs_one_waits_and_the_next_is_refused_per_server() {
        let slots = FilterTestSlots::default();
        let (web, db) = (ServerId::new(), ServerId::new());
        let first = slots.turn(web).await.expect("the first runs");

        let waiting = {
            let slots = &slots;
            async move { slots.turn(web).await }
        };
        tokio::pin!(waiting);
        // The second waits for the first's turn to end.
        assert!(
            futures::poll!(waiting.as_mut()).is_pending(),
            "the second test ran beside the first"
        );
        assert_eq!(slots.turn(web).await.map(|_| ()), Err(Busy));
        // Another server is not held up.
        let other = slots.turn(db).await.expect("another server's test runs");

        drop(first);
        let second = waiting
            .await
            .expect("the waiting test runs after the first");
        drop(second);
        drop(other);
        let again = slots.turn(web).await.expect("free again");
        drop(again);
    }
}
