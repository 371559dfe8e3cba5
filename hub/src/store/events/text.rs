//! Text search over the events' log lines on a long history: the trigram index of M0009 (SQLite),
//! filled in the background by [`Store::index_event_text`], and the search that uses it.
//!
//! The index is only a way to find candidate rows: every row it names is checked again with the
//! same `LIKE` as a plain scan, so the results (and the case rules: ASCII case ignored) are exactly
//! those of the scan. It folds case more widely than `LIKE` and is asked for every three-character
//! sequence of the text, so it names a superset of the matching rows, never fewer.
//!
//! Ingest never writes it: the indexer catches up in batches and records the highest event id it
//! covers (`event_text_index.indexed_to`); a search asks the index for the rows up to there and
//! scans the rows after it, which are the last second or so of ingest.

use std::collections::HashSet;

use sea_orm::{ConnectionTrait, DbBackend};

use super::super::sql::{Sql, get, to_u64};
use super::super::{Store, StoreError};
use super::row::{EVENT_COLUMNS, read_events};
use crate::domain::events::{EventFilter, StoredEvent};

/// Newest rows (matching every other filter) a text search reads before it asks the index: a text
/// in at least ≈ 1 % of them fills a page from these alone, and then the index, which would name
/// a large share of the history, is not needed.
pub(super) const TEXT_WINDOW: i64 = 5_000;
/// Trigrams asked of the index at most: a longer text gets this many spread over it. Each one
/// only narrows the candidates; the `LIKE` decides.
const MAX_TRIGRAMS: usize = 12;

/// Documents (events) under which a trigram counts as rare: a search whose text has a trigram in
/// fewer events asks the index first, for the rarest of them only, and checks at most this many
/// candidates; otherwise (every trigram common) the newest rows are read first. Counting stops
/// here, so asking costs at most this many index entries per trigram.
pub(super) const RARE_TRIGRAM_DOCS: i64 = 2_000;
/// Rare trigrams asked of the index together at most: each one more narrows the candidates a
/// little and costs one more index lookup; the `LIKE` decides anyway.
const RARE_TRIGRAMS: usize = 3;

/// Every distinct three-character sequence of `needle` (the text as stored in `logs`, JSON-escaped),
/// in the order they first appear. Empty when the text is shorter than three characters, which
/// the trigram index cannot look up.
pub(super) fn trigrams(needle: &str) -> Vec<String> {
    let chars: Vec<char> = needle.chars().collect();
    let mut seen = HashSet::new();
    let mut grams: Vec<String> = Vec::new();
    for window in chars.windows(3) {
        // Case is folded by the index itself; lower-casing here only avoids asking twice.
        let folded: String = window.iter().flat_map(|c| c.to_lowercase()).collect();
        if seen.insert(folded) {
            grams.push(window.iter().collect());
        }
    }
    grams
}

/// One trigram as an FTS5 query term: quoted, inner quotes doubled.
pub(super) fn quoted(gram: &str) -> String {
    format!("\"{}\"", gram.replace('"', "\"\""))
}

/// The index query (FTS5 syntax) for `grams`: each quoted, joined with AND. A row holding the
/// text holds every one of them, so any subset names a superset of the matches.
pub(super) fn match_all(grams: &[String]) -> String {
    grams
        .iter()
        .map(|g| quoted(g))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// The index query for `needle` when nothing is known of its trigrams: every distinct trigram,
/// at most [`MAX_TRIGRAMS`] spread over the text, first and last included. `None` when the text is
/// shorter than three characters.
pub(super) fn trigram_query(needle: &str) -> Option<String> {
    let mut grams = trigrams(needle);
    if grams.is_empty() {
        return None;
    }
    if grams.len() > MAX_TRIGRAMS {
        let last = grams.len() - 1;
        grams = (0..MAX_TRIGRAMS)
            .map(|i| grams[i * last / (MAX_TRIGRAMS - 1)].clone())
            .collect();
    }
    Some(match_all(&grams))
}

/// The trigrams to ask the index for, given how many events each is in (counted up to `cap`):
/// the rarest, and up to [`RARE_TRIGRAMS`] in all of those under `cap`, rarest first (the first in
/// the text on a tie). `None` when every trigram is in `cap` events or more: the text is common,
/// or made of common pieces, and the index would name too many candidates to check first.
pub(super) fn rarest_trigrams(counted: &[(String, u64)], cap: u64) -> Option<Vec<String>> {
    let mut rare: Vec<(usize, &(String, u64))> = counted
        .iter()
        .enumerate()
        .filter(|(_, (_, docs))| *docs < cap)
        .collect();
    // A stable order: fewest events first, then the earliest in the text.
    rare.sort_by_key(|(i, (_, docs))| (*docs, *i));
    if rare.is_empty() {
        return None;
    }
    Some(
        rare.into_iter()
            .take(RARE_TRIGRAMS)
            .map(|(_, (gram, _))| gram.clone())
            .collect(),
    )
}

impl Store {
    /// Adds up to `batch` events not yet in the text index (SQLite; nothing to do elsewhere).
    /// Returns how many it indexed: fewer than `batch` means it has caught up. Entries of events
    /// retention removed stay in the index (ids are never reused, and a search reads only rows
    /// that still exist); they cost space, not results.
    pub async fn index_event_text(&self, batch: usize) -> Result<u64, StoreError> {
        if self.backend() != DbBackend::Sqlite {
            return Ok(0);
        }
        let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
        // Behind ingest's writers, not racing them for SQLite's lock (see `Store::write_gate`),
        // with the writers' settings (a large batch of FTS5 inserts journals many pages).
        let (txn, _gate) = self.begin_writer().await?;
        // The insert comes first so the transaction holds the write lock before it reads anything:
        // what it indexes and the mark it moves to are then read from the same state.
        let mut sql = Sql::new(
            DbBackend::Sqlite,
            "INSERT INTO event_text (rowid, logs) SELECT id, logs FROM events WHERE id > \
             (SELECT indexed_to FROM event_text_index WHERE id = 1) ORDER BY id LIMIT ",
        );
        sql.bind(batch);
        let indexed = txn.execute_raw(sql.build()).await?.rows_affected();
        if indexed > 0 {
            let mut sql = Sql::new(
                DbBackend::Sqlite,
                "UPDATE event_text_index SET indexed_to = (SELECT MAX(id) FROM (SELECT id FROM \
                 events WHERE id > (SELECT indexed_to FROM event_text_index WHERE id = 1) \
                 ORDER BY id LIMIT ",
            );
            sql.bind(batch).push(")) WHERE id = 1");
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(indexed)
    }

    /// Events stored but not in the text index yet (SQLite; 0 elsewhere): what a text search
    /// scans instead of asking the index.
    pub async fn event_text_backlog(&self) -> Result<u64, StoreError> {
        if self.backend() != DbBackend::Sqlite {
            return Ok(0);
        }
        let sql = Sql::new(
            DbBackend::Sqlite,
            "SELECT COALESCE((SELECT MAX(id) FROM events), 0) - \
             COALESCE((SELECT indexed_to FROM event_text_index WHERE id = 1), 0)",
        );
        Ok(match self.db.query_one_raw(sql.build()).await? {
            Some(row) => to_u64(get::<i64>(&row, 0)?),
            None => 0,
        })
    }

    /// In how many indexed events each of `grams` occurs, counted up to `cap` (a trigram in `cap`
    /// or more events counts `cap`), in one statement: at most `cap` index entries read per
    /// trigram, however common it is. Entries of events retention removed are counted too: the
    /// figures only choose which trigrams to ask for, never what a search finds.
    pub(in crate::store) async fn trigram_docs(
        &self,
        grams: &[String],
        cap: i64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        if grams.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = Sql::new(DbBackend::Sqlite, "SELECT ");
        for (i, gram) in grams.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.push("(SELECT COUNT(*) FROM (SELECT rowid FROM event_text WHERE event_text MATCH ")
                .bind(quoted(gram))
                .push(" LIMIT ")
                .bind(cap)
                .push("))");
        }
        let Some(row) = self.db.query_one_raw(sql.build()).await? else {
            return Ok(grams.iter().map(|g| (g.clone(), to_u64(cap))).collect());
        };
        grams
            .iter()
            .enumerate()
            .map(|(i, gram)| Ok((gram.clone(), to_u64(get::<i64>(&row, i)?))))
            .collect()
    }

    /// Which index of log lines text search can use: the FTS5 table of M0009 (SQLite), the
    /// `pg_trgm` GIN index of M0013 on `event_text_pg` (PostgreSQL, when the extension could be
    /// installed), or none.
    pub async fn text_index(&self) -> Result<Option<&'static str>, StoreError> {
        if self.backend() == DbBackend::Sqlite {
            return Ok(Some("FTS5 trigram table event_text"));
        }
        // PostgreSQL: M0013's index, off the ingest path (see `text_pg`).
        Ok(self
            .pg_text_index_exists()
            .await?
            .then_some(super::text_pg::INDEX_DESCRIPTION))
    }

    /// The highest event id the text index covers; `None` where there is no index (PostgreSQL).
    pub async fn event_text_indexed_to(&self) -> Result<Option<i64>, StoreError> {
        if self.backend() != DbBackend::Sqlite {
            return Ok(None);
        }
        let sql = Sql::new(
            DbBackend::Sqlite,
            "SELECT indexed_to FROM event_text_index WHERE id = 1",
        );
        Ok(match self.db.query_one_raw(sql.build()).await? {
            Some(row) => Some(get::<i64>(&row, 0)?),
            None => None,
        })
    }

    /// Up to `wanted` events matching `filter` (its text included) and the cursor, newest first,
    /// found through the text index for ids up to `indexed_to` and by a scan of the rows after it.
    /// `push_rest` appends every filter and the cursor to a `WHERE`.
    pub(in crate::store) async fn text_search_indexed(
        &self,
        query: &str,
        indexed_to: i64,
        wanted: i64,
        push_rest: impl Fn(&mut Sql),
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // `NOT INDEXED`: only the id (the rowid) may be used to find rows, never an index in time
        // order, which with a `LIMIT` the planner may prefer and then read the whole table.
        let mut indexed = Sql::new(
            DbBackend::Sqlite,
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events NOT INDEXED WHERE id IN (SELECT rowid FROM \
                 event_text WHERE event_text MATCH "
            ),
        );
        indexed.bind(query.to_owned()).push(" AND rowid <= ");
        indexed.bind(indexed_to).push(")");
        push_rest(&mut indexed);
        indexed
            .push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted);
        let mut tail = Sql::new(
            DbBackend::Sqlite,
            &format!("SELECT {EVENT_COLUMNS} FROM events NOT INDEXED WHERE id > "),
        );
        tail.bind(indexed_to);
        push_rest(&mut tail);
        tail.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted);
        let mut events = read_events(self.db.query_all_raw(indexed.build()).await?)?;
        events.extend(read_events(self.db.query_all_raw(tail.build()).await?)?);
        events.sort_by_key(|e| std::cmp::Reverse((e.occurred_at, e.id.0)));
        events.dedup_by_key(|e| e.id);
        events.truncate(usize::try_from(wanted).unwrap_or(usize::MAX));
        Ok(events)
    }
}

/// Whether a text search can use the index: SQLite, and at least three characters.
pub(super) fn indexable(filter: &EventFilter, backend: DbBackend) -> Option<String> {
    if backend != DbBackend::Sqlite {
        return None;
    }
    let text = filter.text.as_ref()?;
    trigram_query(&stored_form(text.as_str()))
}

/// The text as it appears inside the JSON-encoded `logs` column (quotes and backslashes escaped).
pub(super) fn stored_form(text: &str) -> String {
    let json = serde_json::Value::String(text.to_owned()).to_string();
    json.get(1..json.len().saturating_sub(1))
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_texts_have_no_trigram_query() {
        assert_eq!(trigram_query("ab"), None);
        assert_eq!(trigram_query(""), None);
        assert_eq!(trigram_query("abc").as_deref(), Some("\"abc\""));
    }

    #[test]
    fn trigrams_are_distinct_quoted_and_bounded() {
        assert_eq!(
            trigram_query("abcab").as_deref(),
            Some("\"abc\" AND \"bca\" AND \"cab\"")
        );
        // Case-insensitive duplicates are asked once.
        assert_eq!(trigram_query("aaaAAA").as_deref(), Some("\"aaa\""));
        assert_eq!(
            trigram_query("a\"bc").as_deref(),
            Some("\"a\"\"b\" AND \"\"\"bc\"")
        );
        let long = trigram_query("0123456789abcdefghijklmnopqrstuvwxyz").unwrap_or_default();
        assert_eq!(long.matches(" AND ").count(), MAX_TRIGRAMS - 1);
        assert!(long.starts_with("\"012\"") && long.ends_with("\"xyz\""));
    }

    fn counted(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
        pairs.iter().map(|(g, n)| ((*g).to_owned(), *n)).collect()
    }

    #[test]
    fn trigrams_are_distinct_in_text_order() {
        assert_eq!(trigrams("abcab"), ["abc", "bca", "cab"]);
        assert_eq!(trigrams("aaAAaa"), ["aaA"]);
        assert_eq!(trigrams("ab"), Vec::<String>::new());
        assert_eq!(trigrams("écol"), ["éco", "col"]);
    }

    #[test]
    fn the_rarest_trigrams_under_the_cap_are_asked_for() {
        let grams = counted(&[
            ("xz-", 10),
            ("pro", 2_000),
            ("bac", 105),
            ("ack", 7),
            ("z-b", 10),
        ]);
        // Fewest first, ties in text order, at most RARE_TRIGRAMS, never one at the cap.
        assert_eq!(
            rarest_trigrams(&grams, 2_000),
            Some(vec!["ack".to_owned(), "xz-".to_owned(), "z-b".to_owned()])
        );
        let two = counted(&[("pro", 5_000), ("obe", 40), ("rob", 1_999)]);
        assert_eq!(
            rarest_trigrams(&two, 2_000),
            Some(vec!["obe".to_owned(), "rob".to_owned()])
        );
    }

    #[test]
    fn a_trigram_in_no_event_is_the_rarest() {
        let grams = counted(&[("ext", 1_500), ("no-", 0), ("tex", 900)]);
        assert_eq!(
            rarest_trigrams(&grams, 2_000).and_then(|g| g.first().cloned()),
            Some("no-".to_owned())
        );
    }

    #[test]
    fn a_text_of_common_trigrams_has_no_rare_choice() {
        let grams = counted(&[("fai", 2_000), ("ail", 2_000), ("ile", 2_000)]);
        assert_eq!(rarest_trigrams(&grams, 2_000), None);
        assert_eq!(rarest_trigrams(&[], 2_000), None);
    }

    #[test]
    fn every_trigram_is_anded_and_quoted() {
        let grams = vec!["a\"b".to_owned(), "xyz".to_owned()];
        assert_eq!(match_all(&grams), "\"a\"\"b\" AND \"xyz\"");
    }

    #[test]
    fn the_stored_form_is_json_escaped() {
        assert_eq!(stored_form(r#"say "hi"\"#), r#"say \"hi\"\\"#);
        assert_eq!(stored_form("école"), "école");
    }
}
