//! Ingest: an agent's batch stored idempotently on `(agent, epoch, seq)` in one transaction with
//! the agent's cursor and the batch's rollups, and the single events of hosts without an agent.
//! A batch is prepared as its events arrive ([`PreparedBatch`]) and stored by
//! [`Store::ingest_prepared`]. PostgreSQL inserts with hand-written multi-row SQL through sea-orm,
//! `ON CONFLICT DO NOTHING RETURNING` deciding what is new (replicas may race on one agent);
//! SQLite takes its own path on the writer connection (`sqlite_ingest`).

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend};

use super::super::entities::agent_cursor;
use super::super::sql::{Sql, fixed_chunks, get, to_i64, to_u64};
use super::super::writer::{IngestRunning, WriteGuard};
use super::super::{Store, StoreError, now_ms, to_time};
use super::flusher::hand_over;
use super::rollups::Rollups;
use super::row::{EventRow, INSERT_EVENTS, event_values};
use crate::domain::events::{EventId, NewEvent, SpoolPosition, StoredEvent};
use crate::domain::{AgentId, ServerId};

/// What one ingest transaction did.
#[derive(Debug, Clone)]
pub struct IngestOutcome {
    /// The highest sequence number committed for the agent's epoch, this batch included.
    pub committed_seq: u64,
    /// The events this batch stored, in id order; re-sent ones are not in it.
    pub stored: Vec<StoredEvent>,
}

/// An agent's batch made ready for its transaction (see [`Store::prepare_batch`]): events are
/// added as they arrive, and on SQLite each one's row values are built right then, so an agent's
/// session builds the rows of its next transaction while the previous one commits and the
/// transaction itself only binds them.
#[derive(Debug)]
pub struct PreparedBatch {
    pub(super) server: ServerId,
    pub(super) agent: AgentId,
    pub(super) epoch: u64,
    pub(super) server_text: String,
    pub(super) agent_text: String,
    /// When the batch's events count as stored: when its preparation started, a transaction's
    /// commit wait earlier than its commit.
    pub(super) stored_at: i64,
    /// Sequence number → event; a number repeated is stored once, the first wins.
    pub(super) slots: HashMap<u64, NewEvent>,
    /// The sequence numbers in arrival order, repeats left out.
    pub(super) order: Vec<u64>,
    /// SQLite: the rows of `order`'s events; empty on PostgreSQL, whose insert builds them itself.
    pub(super) rows: Vec<EventRow>,
    pub(super) build_rows: bool,
    pub(super) seqs: Option<(u64, u64)>,
}

impl PreparedBatch {
    /// Adds one event at `seq` of the batch's epoch; a sequence number already in the batch is
    /// skipped.
    pub fn add(&mut self, seq: u64, event: NewEvent) -> Result<(), StoreError> {
        let std::collections::hash_map::Entry::Vacant(slot) = self.slots.entry(seq) else {
            return Ok(());
        };
        to_i64(seq, "sequence number")?;
        if self.build_rows {
            self.rows.push(EventRow::new(&event)?);
        }
        slot.insert(event);
        self.order.push(seq);
        self.seqs = Some(match self.seqs {
            None => (seq, seq),
            Some((min, max)) => (min.min(seq), max.max(seq)),
        });
        Ok(())
    }

    /// Events in the batch (repeats counted once).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// The spool epoch the batch belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// The upsert of an agent's cursor for a batch of `epoch` up to `max_seq`; returns the cursor.
pub(super) fn cursor_upsert(
    backend: DbBackend,
    agent: &str,
    epoch: i64,
    max_seq: i64,
    stored_at: i64,
) -> Sql {
    let mut sql = Sql::new(
        backend,
        "INSERT INTO agent_cursors (agent_id, epoch, last_seq, updated_at) VALUES ",
    );
    sql.tuple([
        agent.to_owned().into(),
        epoch.into(),
        max_seq.into(),
        stored_at.into(),
    ])
    .push(
        " ON CONFLICT (agent_id, epoch) DO UPDATE SET \
         last_seq = CASE WHEN excluded.last_seq > agent_cursors.last_seq \
             THEN excluded.last_seq ELSE agent_cursors.last_seq END, \
         updated_at = excluded.updated_at \
         RETURNING last_seq",
    );
    sql
}

/// The events a batch stored, taken out of `slots`, from what its insert returned: `(id, seq)`
/// in id order.
pub(super) fn stored_events(
    (server, agent, epoch): (ServerId, AgentId, u64),
    stored_at: i64,
    slots: &mut HashMap<u64, NewEvent>,
    inserted: Vec<(i64, u64)>,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut stored = Vec::with_capacity(inserted.len());
    for (id, seq) in inserted {
        let event = slots.remove(&seq).ok_or_else(|| {
            StoreError::Corrupt(format!("the insert returned sequence number {seq} twice"))
        })?;
        stored.push(StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: Some(agent),
            position: Some(SpoolPosition { epoch, seq }),
            // As stored (milliseconds), so the live stream and the alert worker see what a read
            // returns, to the edge of a window.
            occurred_at: to_time(event.occurred_at.timestamp_millis()),
            stored_at: to_time(stored_at),
            source: event.source,
            body: event.body,
        });
    }
    Ok(stored)
}

impl Store {
    /// An empty batch of `agent`'s spool `epoch` to add events to, then store with
    /// [`Store::ingest_prepared`].
    pub fn prepare_batch(&self, server: ServerId, agent: AgentId, epoch: u64) -> PreparedBatch {
        PreparedBatch {
            server,
            agent,
            epoch,
            server_text: server.to_string(),
            agent_text: agent.to_string(),
            stored_at: now_ms(),
            slots: HashMap::new(),
            order: Vec::new(),
            rows: Vec::new(),
            build_rows: self.backend() == DbBackend::Sqlite,
            seqs: None,
        }
    }

    fn prepared(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<PreparedBatch, StoreError> {
        let mut batch = self.prepare_batch(server, agent, epoch);
        batch.slots.reserve(events.len());
        for (seq, event) in events {
            batch.add(seq, event)?;
        }
        Ok(batch)
    }

    /// Stores an agent's batch in one transaction: events already stored (same agent, epoch and
    /// sequence number) are skipped, the rollups count only the new ones, and the agent's cursor
    /// moves to the highest sequence number seen.
    pub async fn ingest_batch(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<IngestOutcome, StoreError> {
        let batch = self.prepared(server, agent, epoch, events)?;
        self.ingest_prepared(batch).await
    }

    /// [`Store::ingest_batch`] of a batch prepared ahead (see [`PreparedBatch`]).
    pub async fn ingest_prepared(&self, batch: PreparedBatch) -> Result<IngestOutcome, StoreError> {
        let _running = IngestRunning::start(&self.ingest_activity);
        // The limit is never closed; an error here would be a bug, reported rather than panicked on.
        let _slot = self
            .ingest_slots
            .acquire()
            .await
            .map_err(|_| StoreError::Corrupt("the ingest limit was closed".to_owned()))?;
        let stored = self.store_batch(batch, true).await;
        self.noting(stored)
    }

    /// [`Store::ingest_batch`] without the rollups: for loading a large history, whose rollups the
    /// caller adds up in [`PendingRollups`] and writes once with [`Store::apply_rollups`]. Until
    /// then stats and insights do not count these events.
    pub async fn import_batch(
        &self,
        server: ServerId,
        agent: AgentId,
        epoch: u64,
        events: Vec<(u64, NewEvent)>,
    ) -> Result<IngestOutcome, StoreError> {
        let batch = self.prepared(server, agent, epoch, events)?;
        self.store_batch(batch, false).await
    }

    async fn store_batch(
        &self,
        batch: PreparedBatch,
        rollups: bool,
    ) -> Result<IngestOutcome, StoreError> {
        if self.backend() == DbBackend::Sqlite {
            return self.store_batch_sqlite(batch, rollups).await;
        }
        let PreparedBatch {
            server,
            agent,
            epoch,
            server_text,
            agent_text,
            stored_at,
            mut slots,
            order,
            rows: _,
            build_rows: _,
            seqs,
        } = batch;
        let epoch_db = to_i64(epoch, "epoch")?;
        let Some((_, max_seq)) = seqs else {
            return self.nothing_stored(agent, epoch).await;
        };
        let max_seq_db = to_i64(max_seq, "sequence number")?;

        let (txn, gate) = self.begin_writer().await?;
        // The cursor first: its row lock orders two transactions of one agent.
        let sql = cursor_upsert(self.backend(), &agent_text, epoch_db, max_seq_db, stored_at);
        let committed: i64 = match txn.query_one_raw(sql.build()).await? {
            Some(row) => get(&row, 0)?,
            None => max_seq_db,
        };
        let inserted = self
            .insert_batch_returning(
                &txn,
                &slots,
                &order,
                (&server_text, &agent_text, epoch_db),
                stored_at,
            )
            .await?;
        // The text index's pending range of this transaction (see `text_pg`).
        if let (Some(first), Some(last)) = (inserted.first(), inserted.last()) {
            super::text_pg::note_pending(&txn, first.0, last.0).await?;
        }
        let stored = stored_events((server, agent, epoch), stored_at, &mut slots, inserted)?;
        if rollups {
            self.commit_with_rollups(txn, gate, Rollups::of(&stored))
                .await?;
        } else {
            txn.commit().await?;
        }
        Ok(IngestOutcome {
            committed_seq: to_u64(committed),
            stored,
        })
    }

    /// The outcome of a batch without events.
    pub(super) async fn nothing_stored(
        &self,
        agent: AgentId,
        epoch: u64,
    ) -> Result<IngestOutcome, StoreError> {
        Ok(IngestOutcome {
            committed_seq: self.committed_seq(agent, epoch).await?,
            stored: Vec::new(),
        })
    }

    /// Writes `rollups` in `txn` and commits it; on SQLite the per-address part is only added to
    /// the pending rollups, once committed (see [`DeferredRollups`]).
    async fn commit_with_rollups(
        &self,
        txn: DatabaseTransaction,
        gate: WriteGuard,
        mut rollups: Rollups,
    ) -> Result<(), StoreError> {
        let Some(deferred) = &self.deferred else {
            rollups.apply(&txn).await?;
            txn.commit().await?;
            return Ok(());
        };
        if deferred.rows {
            // PostgreSQL: only rows of this agent's server are updated; what is shared goes into
            // a row of its own.
            let shared = rollups.take_shared();
            rollups.apply(&txn).await?;
            if !shared.counts.is_empty() || !shared.ip_servers.is_empty() {
                let mut sql = Sql::new(self.backend(), "INSERT INTO rollup_pending (body) VALUES ");
                sql.tuple([shared.to_body()?.into()]);
                txn.execute_raw(sql.build()).await?;
            }
            txn.commit().await?;
            return Ok(());
        }
        let addresses = Rollups {
            ip_servers: std::mem::take(&mut rollups.ip_servers),
            upto: rollups.upto,
            ..Rollups::default()
        };
        rollups.apply(&txn).await?;
        let commit = async move { txn.commit().await.map_err(StoreError::from) };
        hand_over(deferred, commit, gate, addresses).await
    }

    /// PostgreSQL: inserts the batch, skipping events already stored, and returns the `(id, seq)`
    /// of those inserted in id order. Two replicas may race on one agent's batch (a lease moving),
    /// so the insert itself decides what is new.
    async fn insert_batch_returning(
        &self,
        txn: &DatabaseTransaction,
        slots: &HashMap<u64, NewEvent>,
        order: &[u64],
        (server, agent, epoch): (&str, &str, i64),
        stored_at: i64,
    ) -> Result<Vec<(i64, u64)>, StoreError> {
        let mut inserted: Vec<(i64, u64)> = Vec::with_capacity(order.len());
        for chunk in fixed_chunks(order) {
            let mut sql = Sql::new(self.backend(), INSERT_EVENTS);
            for (i, seq) in chunk.iter().enumerate() {
                let event = slots.get(seq).ok_or_else(|| {
                    StoreError::Corrupt(format!("sequence number {seq} is not in the batch"))
                })?;
                if i > 0 {
                    sql.push(", ");
                }
                sql.tuple(event_values(
                    server,
                    Some(agent),
                    Some((epoch, to_i64(*seq, "sequence number")?)),
                    event,
                    stored_at,
                )?);
            }
            sql.push(" ON CONFLICT (agent_id, epoch, seq) DO NOTHING RETURNING id, seq");
            for row in txn.query_all_raw(sql.build()).await? {
                inserted.push((get(&row, 0)?, to_u64(get(&row, 1)?)));
            }
        }
        inserted.sort_unstable();
        Ok(inserted)
    }

    /// Stores one event that a host without an agent sent to the hub, with its rollups; returns
    /// once it is committed.
    pub async fn insert_direct_event(
        &self,
        server: ServerId,
        event: NewEvent,
    ) -> Result<StoredEvent, StoreError> {
        let stored = self.store_direct_event(server, event).await;
        self.noting(stored)
    }

    async fn store_direct_event(
        &self,
        server: ServerId,
        event: NewEvent,
    ) -> Result<StoredEvent, StoreError> {
        let stored_at = now_ms();
        let mut sql = Sql::new(self.backend(), INSERT_EVENTS);
        sql.tuple(event_values(
            &server.to_string(),
            None,
            None,
            &event,
            stored_at,
        )?)
        .push(" RETURNING id");
        let (txn, gate) = self.begin_writer().await?;
        let row = txn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| StoreError::Corrupt("the insert returned no id".to_owned()))?;
        let id: i64 = get(&row, 0)?;
        if self.backend() == DbBackend::Postgres {
            // The text index's pending range (see `text_pg`).
            super::text_pg::note_pending(&txn, id, id).await?;
        }
        let stored = StoredEvent {
            id: EventId(id),
            server_id: server,
            agent_id: None,
            position: None,
            // As stored (milliseconds): see `ingest_prepared`.
            occurred_at: to_time(event.occurred_at.timestamp_millis()),
            stored_at: to_time(stored_at),
            source: event.source,
            body: event.body,
        };
        self.commit_with_rollups(txn, gate, Rollups::of(std::slice::from_ref(&stored)))
            .await?;
        Ok(stored)
    }

    /// The highest sequence number committed for `agent`'s spool `epoch` (0 before the first).
    pub async fn committed_seq(&self, agent: AgentId, epoch: u64) -> Result<u64, StoreError> {
        use sea_orm::EntityTrait as _;
        let row = agent_cursor::Entity::find_by_id((agent.to_string(), to_i64(epoch, "epoch")?))
            .one(&self.db)
            .await?;
        Ok(row.map_or(0, |r| to_u64(r.last_seq)))
    }
}
