//! Text search over the events' log lines on PostgreSQL, with an index that ingest never writes
//! (M0013): `event_text_pg` holds a copy of each event's log lines under a `pg_trgm` GIN index,
//! filled in the background by [`Store::index_event_text_pg`].
//!
//! PostgreSQL's ids commit out of order (a transaction that took lower ids may commit after one
//! that took higher ones), so a watermark of indexed ids, as SQLite keeps, could pass an event
//! that commits later and never index it. Instead each ingest transaction adds one row to
//! `event_text_pending`: the lowest and highest id it inserted ([`note_pending`]). The indexer
//! copies the events of committed pending rows and deletes those rows in one transaction, so in
//! any snapshot every event is either in `event_text_pg` or inside a pending range. A search reads
//! both from one statement (one snapshot): the index for the candidates it names, and the events
//! in the pending ranges directly. Every row is checked with the same `ILIKE` as a plain scan, so
//! the results are exactly the scan's.
//!
//! A range may include ids of other transactions (ids interleave): those events are copied by
//! whichever pass sees them committed first, at most once (`ON CONFLICT DO NOTHING` on the id), and
//! their own pending row keeps them searched until then.

use std::time::{Duration, Instant};

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend, Statement, TransactionTrait};
use tokio_util::sync::CancellationToken;

use super::super::sql::{Sql, get, to_u64};
use super::super::{Store, StoreError};
use super::query::{push_cursor, push_filter};
use super::row::{EVENT_COLUMNS, read_events};
use crate::domain::events::{Cursor, EventFilter, StoredEvent};

/// The transaction-level advisory lock of the text indexer ("banhub_t"): one replica indexes at a
/// time, the others skip their pass.
const TEXT_INDEXER_LOCK: i64 = 0x6261_6e68_7562_5f74;
/// Event ids covered per indexer transaction: a few hundred ms of GIN updates at most, so the
/// indexer's share of PostgreSQL stays small and its locks short.
pub const TEXT_INDEX_IDS: i64 = 2_000;
/// Pending rows read per indexer transaction (each is one ingest transaction's range).
const PENDING_ROWS_PER_PASS: i64 = 500;
/// Pause once caught up: what a search scans meanwhile is about this much ingest.
const IDLE: Duration = Duration::from_secs(1);
/// Least pause between passes while catching up; the pause is at least as long as the pass took,
/// so the indexer keeps at most about half of one PostgreSQL backend busy.
const BUSY: Duration = Duration::from_millis(10);
/// Growth of the backlog (event ids per second) above which ingest counts as in a burst.
const BURST_RATE: f64 = 1_000.0;
/// How far behind (event ids pending) the indexer lets a burst of ingest get before it indexes
/// anyway: a search scans the pending events one by one, so this bounds what that costs.
const BURST_BACKLOG: i64 = 50_000;
/// Pause while ingest is in a burst.
const BURST_WAIT: Duration = Duration::from_millis(500);
/// Pause after a failed pass.
const FAILED: Duration = Duration::from_secs(5);
/// The GIN index of M0013.
const INDEX_NAME: &str = "event_text_pg_trgm";

/// Adds the pending range of ids `first..=last` that a PostgreSQL ingest transaction inserted, in
/// that transaction: one small row, the only text-index work on the ingest path.
pub(super) async fn note_pending(
    txn: &DatabaseTransaction,
    first: i64,
    last: i64,
) -> Result<(), StoreError> {
    let mut sql = Sql::new(
        DbBackend::Postgres,
        "INSERT INTO event_text_pending (first_id, last_id) VALUES ",
    );
    sql.tuple([first.into(), last.into()]);
    txn.execute_raw(sql.build()).await?;
    Ok(())
}

/// Newest rows (matching every other filter) a text search reads before it asks the index: a
/// text common enough fills a page from these alone. Smaller than SQLite's
/// [`super::event_text::TEXT_WINDOW`]: PostgreSQL's `ILIKE` costs more per row, and its index
/// lookups are cheap (below).
const PG_TEXT_WINDOW: i64 = 1_500;
/// Words of the text the index is asked for at most (the longest).
const MAX_WORDS: usize = 3;

/// The words of `stored` (the text as stored, JSON-escaped) that the index is asked for: its runs
/// of at least three ASCII letters or digits, the longest [`MAX_WORDS`] (lower-cased, distinct),
/// longest first. `pg_trgm` takes trigrams from words only; a text without such a word cannot be
/// looked up (it would read the whole index). Each word is asked for as `%word%`, without the
/// padded trigrams of the word's edges that the whole pattern would add: those (`"or "` of
/// "backdoor", in every "… for …" line) are the common ones, and reading their long posting lists
/// would be most of a rare search. Every event holding the text holds each word, so the candidates are a superset.
fn index_words(stored: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for run in stored.split(|c: char| !c.is_ascii_alphanumeric()) {
        let word = run.to_ascii_lowercase();
        if word.len() >= 3 && !words.contains(&word) {
            words.push(word);
        }
    }
    // Longest first, the earliest on a tie (a stable sort).
    words.sort_by_key(|w| std::cmp::Reverse(w.len()));
    words.truncate(MAX_WORDS);
    words
}

/// One pass of the indexer: the ranges to copy and the pending rows they finish or shorten.
#[derive(Debug, Default, PartialEq, Eq)]
struct Pass {
    /// `(lo, hi)` id ranges to copy, inclusive.
    ranges: Vec<(i64, i64)>,
    /// Pending rows covered whole: deleted.
    done: Vec<i64>,
    /// A pending row covered in part: its new `first_id`.
    shortened: Option<(i64, i64)>,
}

/// Chooses the work of one pass from pending rows `(id, first, last)` in id order: whole rows while
/// their ids add up to at most `budget`, and the first part of a row too long for what is left
/// (the backfill of M0013 is one range of every older event).
fn plan(rows: &[(i64, i64, i64)], budget: i64) -> Pass {
    let mut pass = Pass::default();
    let mut left = budget.max(1);
    for &(id, first, last) in rows {
        let span = last.saturating_sub(first).saturating_add(1).max(1);
        if span <= left {
            pass.ranges.push((first, last));
            pass.done.push(id);
            left -= span;
        } else {
            if pass.ranges.is_empty() {
                let hi = first.saturating_add(left - 1);
                pass.ranges.push((first, hi));
                pass.shortened = Some((id, hi + 1));
            }
            break;
        }
    }
    pass
}

impl Store {
    /// Whether the `pg_trgm` index of M0013 exists (PostgreSQL with the extension). Once seen, the
    /// answer is kept: only a down migration removes the index, and every search asked (a round
    /// trip before each). Until then each call asks again, so an index that another replica's
    /// migration creates later is noticed.
    pub(in crate::store) async fn pg_text_index_exists(&self) -> Result<bool, StoreError> {
        use std::sync::atomic::Ordering;
        if self.pg_text_index_seen.load(Ordering::Relaxed) {
            return Ok(true);
        }
        let sql = Statement::from_string(
            DbBackend::Postgres,
            format!("SELECT to_regclass('{INDEX_NAME}') IS NOT NULL"),
        );
        let exists = match self.db.query_one_raw(sql).await? {
            Some(row) => get::<bool>(&row, 0)?,
            None => false,
        };
        if exists {
            self.pg_text_index_seen.store(true, Ordering::Relaxed);
        }
        Ok(exists)
    }

    /// Pending rows of the PostgreSQL text index (ingest transactions not yet indexed); 0 on
    /// SQLite.
    pub async fn event_text_pending(&self) -> Result<u64, StoreError> {
        if self.backend() != DbBackend::Postgres {
            return Ok(0);
        }
        let sql = Statement::from_string(
            DbBackend::Postgres,
            "SELECT COUNT(*) FROM event_text_pending",
        );
        Ok(match self.db.query_one_raw(sql).await? {
            Some(row) => to_u64(get::<i64>(&row, 0)?),
            None => 0,
        })
    }

    /// Event ids inside pending ranges (PostgreSQL; ids of other transactions that a range spans
    /// count too).
    async fn text_backlog_pg(&self) -> Result<i64, StoreError> {
        let sql = Statement::from_string(
            DbBackend::Postgres,
            "SELECT CAST(COALESCE(SUM(last_id - first_id + 1), 0) AS BIGINT) FROM \
             event_text_pending",
        );
        Ok(match self.db.query_one_raw(sql).await? {
            Some(row) => get::<i64>(&row, 0)?,
            None => 0,
        })
    }

    /// Events copied into the PostgreSQL text index so far; 0 on SQLite.
    pub async fn event_text_indexed_pg(&self) -> Result<u64, StoreError> {
        if self.backend() != DbBackend::Postgres {
            return Ok(0);
        }
        let sql = Statement::from_string(DbBackend::Postgres, "SELECT COUNT(*) FROM event_text_pg");
        Ok(match self.db.query_one_raw(sql).await? {
            Some(row) => to_u64(get::<i64>(&row, 0)?),
            None => 0,
        })
    }

    /// One pass of the PostgreSQL text indexer: copies the events of committed pending ranges (up
    /// to `ids` ids) into `event_text_pg` and deletes or shortens those pending rows, in one
    /// transaction, under an advisory lock so that one replica indexes at a time. Returns the
    /// events copied, and whether pending work was left; `None` when another replica holds the
    /// lock. Without `pg_trgm` the pending rows are only deleted (a search then scans anyway).
    pub async fn index_event_text_pg(&self, ids: i64) -> Result<Option<(u64, bool)>, StoreError> {
        if self.backend() != DbBackend::Postgres {
            return Ok(Some((0, false)));
        }
        let copy = self.pg_text_index_exists().await?;
        let txn = self.db.begin().await?;
        let mut lock = Sql::new(DbBackend::Postgres, "SELECT pg_try_advisory_xact_lock(");
        lock.bind(TEXT_INDEXER_LOCK).push(")");
        let locked = match txn.query_one_raw(lock.build()).await? {
            Some(row) => get::<bool>(&row, 0)?,
            None => false,
        };
        if !locked {
            txn.commit().await?;
            return Ok(None);
        }
        // Only committed rows are seen, and each one's events were committed with it: every
        // event of a range read here is visible to the copy below.
        let mut pending = Sql::new(
            DbBackend::Postgres,
            "SELECT id, first_id, last_id FROM event_text_pending ORDER BY id LIMIT ",
        );
        pending.bind(PENDING_ROWS_PER_PASS + 1);
        let rows = txn
            .query_all_raw(pending.build())
            .await?
            .iter()
            .map(|row| {
                Ok((
                    get::<i64>(row, 0)?,
                    get::<i64>(row, 1)?,
                    get::<i64>(row, 2)?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        if rows.is_empty() {
            // Caught up: entries of events that retention removed (the oldest ids) go too.
            if copy {
                txn.execute_unprepared(
                    "DELETE FROM event_text_pg WHERE id < (SELECT MIN(id) FROM events)",
                )
                .await?;
            }
            txn.commit().await?;
            return Ok(Some((0, false)));
        }
        let limit = usize::try_from(PENDING_ROWS_PER_PASS).unwrap_or(usize::MAX);
        let pass = plan(&rows[..rows.len().min(limit)], ids);
        let mut copied = 0;
        if copy {
            // Ids are numbers read from the database: written as literals, not bound one by one.
            let values: Vec<String> = pass
                .ranges
                .iter()
                .map(|(lo, hi)| format!("({lo}::bigint, {hi}::bigint)"))
                .collect();
            copied = txn
                .execute_unprepared(&format!(
                    "INSERT INTO event_text_pg (id, logs) SELECT e.id, e.logs FROM (VALUES {}) \
                     AS r(lo, hi) JOIN events e ON e.id BETWEEN r.lo AND r.hi \
                     ON CONFLICT (id) DO NOTHING",
                    values.join(", ")
                ))
                .await?
                .rows_affected();
        }
        if !pass.done.is_empty() {
            let list: Vec<String> = pass.done.iter().map(i64::to_string).collect();
            txn.execute_unprepared(&format!(
                "DELETE FROM event_text_pending WHERE id IN ({})",
                list.join(", ")
            ))
            .await?;
        }
        if let Some((id, first)) = pass.shortened {
            let mut shorten = Sql::new(
                DbBackend::Postgres,
                "UPDATE event_text_pending SET first_id = ",
            );
            shorten.bind(first).push(" WHERE id = ").bind(id);
            txn.execute_raw(shorten.build()).await?;
        }
        txn.commit().await?;
        let more = pass.shortened.is_some() || rows.len() > pass.done.len();
        Ok(Some((copied, more)))
    }

    /// Indexes every pending range at once (loading a large history, as the benchmark does): the
    /// GIN index is dropped, the events copied and the index built again, in one transaction,
    /// which is much faster than adding millions of rows to a GIN index one pass at a time.
    /// Searches wait for it. Returns the events copied.
    pub async fn index_event_text_pg_bulk(&self) -> Result<u64, StoreError> {
        if self.backend() != DbBackend::Postgres || !self.pg_text_index_exists().await? {
            return Ok(0);
        }
        let txn = self.db.begin().await?;
        let mut lock = Sql::new(DbBackend::Postgres, "SELECT pg_advisory_xact_lock(");
        lock.bind(TEXT_INDEXER_LOCK).push(")");
        txn.execute_raw(lock.build()).await?;
        txn.execute_unprepared("SET LOCAL maintenance_work_mem = '512MB'")
            .await?;
        txn.execute_unprepared(&format!("DROP INDEX {INDEX_NAME}"))
            .await?;
        let copied = txn
            .execute_unprepared(
                "INSERT INTO event_text_pg (id, logs) SELECT e.id, e.logs FROM event_text_pending \
                 p JOIN events e ON e.id BETWEEN p.first_id AND p.last_id \
                 ON CONFLICT (id) DO NOTHING",
            )
            .await?
            .rows_affected();
        txn.execute_unprepared("DELETE FROM event_text_pending")
            .await?;
        txn.execute_unprepared(&format!(
            "CREATE INDEX {INDEX_NAME} ON event_text_pg USING gin (logs gin_trgm_ops)"
        ))
        .await?;
        txn.commit().await?;
        self.db.execute_unprepared("ANALYZE event_text_pg").await?;
        Ok(copied)
    }

    /// The PostgreSQL text indexer of this replica, until `shutdown`: a pass, then a pause of at
    /// least as long as the pass took while there is more (ingest keeps most of PostgreSQL), and
    /// of [`IDLE`] once caught up or while another replica holds the lock.
    pub async fn run_text_indexer_pg(&self, shutdown: CancellationToken) {
        if self.backend() != DbBackend::Postgres {
            return;
        }
        // The backlog (ids in pending ranges) at the last look, and when, less what this replica
        // indexed since: its growth is what every replica's ingest added meanwhile.
        let mut last: Option<(i64, Instant)> = None;
        loop {
            let started = Instant::now();
            // A burst of ingest anywhere (the backlog growing faster than BURST_RATE): the
            // indexer stays out of its way, up to BURST_BACKLOG behind, and catches up after.
            let burst = match self.text_backlog_pg().await {
                Ok(backlog) => {
                    let burst = last.is_some_and(|(before, at)| {
                        let secs = at.elapsed().as_secs_f64().max(1e-3);
                        ((backlog - before) as f64 / secs) > BURST_RATE
                    }) && backlog < BURST_BACKLOG;
                    last = Some((backlog, Instant::now()));
                    burst
                }
                Err(_) => false,
            };
            if burst {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(BURST_WAIT) => {}
                }
                continue;
            }
            let wait = match self.index_event_text_pg(TEXT_INDEX_IDS).await {
                Ok(Some((copied, true))) => {
                    if let Some((before, _)) = &mut last {
                        *before -= i64::try_from(copied).unwrap_or(0);
                    }
                    BUSY.max(started.elapsed())
                }
                Ok(_) => IDLE,
                Err(e) => {
                    tracing::warn!(error = %e, "indexing log lines failed; trying again");
                    FAILED
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Up to `wanted` events matching `filter` (its text included) after `after`, newest first,
    /// when PostgreSQL's text index can serve the search; `None` otherwise (no `pg_trgm`, no text,
    /// or a text without a three-letter word), and the caller scans.
    ///
    /// The newest rows matching the other filters are read first, as on SQLite: a common text
    /// fills its page from them, exact. Otherwise one statement reads the candidates the index
    /// names and the events of the pending ranges, from one snapshot.
    pub(in crate::store) async fn text_page_pg(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        wanted: i64,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        if self.backend() != DbBackend::Postgres {
            return Ok(None);
        }
        let Some(text) = &filter.text else {
            return Ok(None);
        };
        let words = index_words(&super::text::stored_form(text.as_str()));
        if words.is_empty() || !self.pg_text_index_exists().await? {
            return Ok(None);
        }
        if let Some(found) = self
            .text_in_newest(filter, text.as_str(), after, wanted, PG_TEXT_WINDOW)
            .await?
        {
            return Ok(Some(found));
        }

        // The index part names candidates by their copied log lines; the pending part reads each
        // pending range's events directly (by id). `UNION` drops an event in both (indexed
        // through another transaction's pass while its range is still pending).
        let mut sql = Sql::new(
            DbBackend::Postgres,
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT id FROM ((SELECT id, \
                 occurred_at FROM events WHERE id IN (SELECT id FROM event_text_pg WHERE 1 = 1"
            ),
        );
        for word in &words {
            // Literals (ASCII letters and digits only), so the planner sees them (see `push_text`).
            sql.push(&format!(" AND logs ILIKE '%{word}%'"));
        }
        sql.push(")");
        push_filter(&mut sql, filter);
        push_cursor(&mut sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(
                ") UNION (SELECT x.id, x.occurred_at FROM event_text_pending p CROSS JOIN LATERAL \
                 (SELECT id, occurred_at FROM events WHERE id BETWEEN p.first_id AND p.last_id",
            );
        push_filter(&mut sql, filter);
        push_cursor(&mut sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(") x)) u ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(") ORDER BY occurred_at DESC, id DESC");
        Ok(Some(read_events(
            self.db.query_all_raw(sql.build()).await?,
        )?))
    }
}

/// Which text index a PostgreSQL search uses, for [`Store::text_index`].
pub(super) const INDEX_DESCRIPTION: &str =
    "pg_trgm GIN index event_text_pg_trgm on event_text_pg (filled in the background)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_words_of_three_letters_are_looked_up() {
        assert_eq!(index_words("xz-backdoor-probe"), ["backdoor", "probe"]);
        assert_eq!(index_words("abc"), ["abc"]);
        assert!(index_words("ab-cd").is_empty());
        assert!(index_words("é€ü").is_empty());
        assert!(index_words("").is_empty());
        // Distinct whatever the case, at most three, longest first, ties in text order.
        assert_eq!(
            index_words("Failed password for ROOT root from 203.0.113.9 port"),
            ["password", "failed", "root"]
        );
        assert_eq!(index_words(r#"user=\"oracle\""#), ["oracle", "user"]);
    }

    #[test]
    fn a_pass_takes_whole_ranges_within_its_budget() {
        let rows = [(1, 10, 19), (2, 20, 24), (3, 25, 40)];
        assert_eq!(
            plan(&rows, 15),
            Pass {
                ranges: vec![(10, 19), (20, 24)],
                done: vec![1, 2],
                shortened: None,
            }
        );
    }

    #[test]
    fn a_long_range_is_indexed_in_parts() {
        let rows = [(7, 1, 10_000), (8, 10_001, 10_002)];
        assert_eq!(
            plan(&rows, 2_000),
            Pass {
                ranges: vec![(1, 2_000)],
                done: vec![],
                shortened: Some((7, 2_001)),
            }
        );
        // The last part finishes the row.
        assert_eq!(
            plan(&[(7, 8_001, 10_000)], 2_000),
            Pass {
                ranges: vec![(8_001, 10_000)],
                done: vec![7],
                shortened: None,
            }
        );
    }

    #[test]
    fn interleaved_ranges_are_each_taken() {
        // Two transactions whose ids interleave: overlapping ranges, both covered.
        let rows = [(1, 5, 9), (2, 4, 8)];
        let pass = plan(&rows, 100);
        assert_eq!(pass.ranges, vec![(5, 9), (4, 8)]);
        assert_eq!(pass.done, vec![1, 2]);
    }
}
