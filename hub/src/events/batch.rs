//! An agent's batch on its way to one ingest transaction: created by [`Events::batch`], filled by
//! the agent's session as events arrive (each event's row is built right then, while the previous
//! transaction commits), and stored and published by [`EventBatch::commit`]. The one path from an
//! agent's events to the store.

use super::{Events, EventsError};
use crate::domain::events::NewEvent;
use crate::domain::{AgentId, ServerId};
use crate::store::events::PreparedBatch;

/// Events of one agent's spool epoch gathered for one ingest transaction.
pub struct EventBatch {
    events: Events,
    prepared: PreparedBatch,
}

impl Events {
    /// An empty batch of `agent`'s spool `epoch`, to add events to and then commit.
    pub fn batch(&self, server: ServerId, agent: AgentId, epoch: u64) -> EventBatch {
        EventBatch {
            events: self.clone(),
            prepared: self.store().prepare_batch(server, agent, epoch),
        }
    }
}

impl EventBatch {
    /// Adds one event at `seq` of the batch's epoch; a sequence number already in the batch is
    /// skipped.
    pub fn add(&mut self, seq: u64, event: NewEvent) -> Result<(), EventsError> {
        Ok(self.prepared.add(seq, event)?)
    }

    /// Events in the batch (repeats counted once).
    pub fn len(&self) -> usize {
        self.prepared.len()
    }

    pub fn is_empty(&self) -> bool {
        self.prepared.is_empty()
    }

    /// The spool epoch the batch belongs to.
    pub fn epoch(&self) -> u64 {
        self.prepared.epoch()
    }

    /// Stores the batch in one transaction (events already stored are skipped), publishes what it
    /// stored, and returns the highest committed sequence number of its epoch: the cumulative ack
    /// to send.
    #[tracing::instrument(skip_all, fields(epoch = self.epoch(), events = self.len()), err)]
    pub async fn commit(self) -> Result<u64, EventsError> {
        let outcome = self.events.store().ingest_prepared(self.prepared).await?;
        Ok(self.events.committed(outcome))
    }
}
