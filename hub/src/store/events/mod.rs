//! Events in the store, one concern per module:
//! - `row`: the `events` row, its columns listed once;
//! - `ingest` and `sqlite_ingest`: storing agents' batches and direct events;
//! - `rollups` (pure counting), `rollup_writes`, `flusher` (what ingest defers) and `rollup_reads`;
//! - `query` (the filters' SQL), `reads` (pages of events), `text` and `text_pg` (text search);
//! - `retention`.
//!
//! Ways to the database, one per path: reads and PostgreSQL's ingest are hand-written SQL through
//! sea-orm's connection (`store::sql` builds it: multi-row statements, `ON CONFLICT … RETURNING`,
//! row-value comparisons, which sea-orm's builder does not make as both databases plan them well);
//! SQLite's ingest binds its rows through sqlx directly on the writer connection (`sqlite_ingest`);
//! single-row reads by key use the sea-orm entities.

mod flusher;
mod ingest;
mod query;
mod reads;
mod retention;
mod rollup_reads;
mod rollup_writes;
mod rollups;
mod row;
mod sqlite_ingest;
mod text;
mod text_pg;

pub(super) use flusher::DeferredRollups;
pub use ingest::{IngestOutcome, PreparedBatch};
pub use rollups::{CountRow, DAY_MS, Grain, HOUR_MS, PendingRollups, bucket_ceil, bucket_floor};
