//! Reading events back: keyset-paged lists with every filter (through the text index when one
//! covers the search), and the events after an id for the alert worker and the live stream.
//! Hand-written SQL built with the events' query builder (`query`).

use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseTransaction, DbBackend, IsolationLevel, TransactionTrait,
};

use super::super::sql::{Sql, get, to_u64};
use super::super::{Store, StoreError};
use super::query::{push_cursor, push_filter, push_newest_of_keys, push_range, push_text};
use super::row::{EVENT_COLUMNS, read_events};
use super::text::{self, RARE_TRIGRAM_DOCS, TEXT_WINDOW};
use crate::domain::events::{
    Cursor, EventFilter, EventId, EventPage, IpOrCidr, StoredEvent, ip_key_range,
};

/// Newest events a network filter looks through before it falls back to the address index (see
/// `Store::list_events`): enough for a full page when ≥ 2.5 % of the events are in the network.
const NETWORK_WINDOW: i64 = 2_000;
/// The largest second window, sized from the matches in the first (≈ 0.1 % density for a page of 50).
const NETWORK_WINDOW_MAX: i64 = 80_000;

/// Distinct addresses of a network filter up to which each address's newest page is read and the
/// pages merged (one index seek per address); a network holding more (a busy /8, an IPv6 /32) is
/// read through a window of the newest events instead.
const NETWORK_ADDRESSES_MAX: i64 = 256;

impl Store {
    /// One page of events matching `filter`, newest first, strictly older than `after`.
    pub async fn list_events(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        limit: usize,
    ) -> Result<EventPage, StoreError> {
        // One more than asked tells whether there is a next page.
        let wanted = i64::try_from(limit.saturating_add(1)).unwrap_or(i64::MAX);
        // PostgreSQL's text index (M0013), when it can serve this search.
        let mut events = self.text_page_pg(filter, after, wanted).await?;
        if events.is_none()
            && let Some(query) = text::indexable(filter, self.backend())
            && let Some(indexed_to) = self.event_text_indexed_to().await?
        {
            events = Some(
                self.text_page(filter, after, wanted, &query, indexed_to)
                    .await?,
            );
        }
        if events.is_none()
            && let Some(net @ IpOrCidr::Net(_)) = &filter.ip
        {
            // A network of a few addresses (a /24 or /16 around a busy one): the newest page of
            // each address, from the address index in time order, merged.
            let (lo, hi) = ip_key_range(net);
            // The addresses and then their events, read from one snapshot: an event of an
            // address new to the network that commits in between is then in neither read (it is
            // newer than the page), not missing from the middle of it.
            let snapshot = self.read_snapshot().await?;
            if let Some(keys) =
                Self::addresses_in(&snapshot, &lo, &hi, NETWORK_ADDRESSES_MAX).await?
            {
                events = Some(Self::network_merge(&snapshot, filter, after, wanted, &keys).await?);
            }
            snapshot.commit().await?;
        }
        if events.is_none()
            && let Some(net @ IpOrCidr::Net(_)) = &filter.ip
        {
            // A network filter read through the address index collects every event of every
            // address in the network before it can sort them by time: seconds for a busy /8 or
            // an IPv6 /32 over millions of events. So the newest events matching the other
            // filters are read first, a bounded window in time order, and the network is
            // applied to those; when the window holds a full page, that page is exact (every
            // match outside the window is older). A network with fewer matches than a page in it
            // gets one larger window sized from what the first found; only a sparse one, for
            // which the address index is the fast plan, falls back to that.
            let rest = EventFilter {
                ip: None,
                ..filter.clone()
            };
            let (lo, hi) = ip_key_range(net);
            let mut window = NETWORK_WINDOW;
            loop {
                let mut sql = Sql::new(
                    self.backend(),
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT id FROM (SELECT \
                         id, occurred_at, ip_key FROM events WHERE 1 = 1"
                    ),
                );
                push_filter(&mut sql, &rest);
                push_cursor(&mut sql, after);
                sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
                    .bind(window)
                    .push(") w WHERE w.ip_key BETWEEN ")
                    .bind(lo.to_vec())
                    .push(" AND ")
                    .bind(hi.to_vec())
                    .push(" ORDER BY w.occurred_at DESC, w.id DESC LIMIT ")
                    .bind(wanted)
                    .push(") ORDER BY occurred_at DESC, id DESC");
                let found = read_events(self.db.query_all_raw(sql.build()).await?)?;
                let matched = i64::try_from(found.len()).unwrap_or(i64::MAX);
                if matched >= wanted {
                    events = Some(found);
                    break;
                }
                // Once more with a window sized from the density just seen (half again for
                // luck), if that stays bounded; otherwise the address index.
                if window > NETWORK_WINDOW || matched == 0 {
                    break;
                }
                let next = window.saturating_mul(wanted).saturating_mul(3) / (2 * matched);
                if next > NETWORK_WINDOW_MAX {
                    break;
                }
                window = next.max(window + 1);
            }
        }
        let mut events = match events {
            Some(events) => events,
            None => {
                let mut sql = Sql::new(
                    self.backend(),
                    &format!("SELECT {EVENT_COLUMNS} FROM events WHERE 1 = 1"),
                );
                push_filter(&mut sql, filter);
                push_cursor(&mut sql, after);
                sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
                    .bind(wanted);
                read_events(self.db.query_all_raw(sql.build()).await?)?
            }
        };
        let next = if events.len() > limit {
            events.truncate(limit);
            events.last().map(Cursor::after)
        } else {
            None
        };
        Ok(EventPage { events, next })
    }

    /// The first `wanted` events holding `text` among the newest `window` that match the rest of
    /// `filter` (after the cursor), when that fills the page: every other match is older, so the
    /// page is exact. `None` when the window holds fewer: a rare text, for the index.
    pub(in crate::store) async fn text_in_newest(
        &self,
        filter: &EventFilter,
        text: &str,
        after: Option<Cursor>,
        wanted: i64,
        window: i64,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        let rest = EventFilter {
            text: None,
            ..filter.clone()
        };
        let mut sql = Sql::new(
            self.backend(),
            &format!("SELECT {EVENT_COLUMNS} FROM (SELECT {EVENT_COLUMNS} FROM events WHERE 1 = 1"),
        );
        push_filter(&mut sql, &rest);
        push_cursor(&mut sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(window)
            .push(") w WHERE 1 = 1");
        push_text(&mut sql, text);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted);
        let found = read_events(self.db.query_all_raw(sql.build()).await?)?;
        Ok((i64::try_from(found.len()).unwrap_or(i64::MAX) >= wanted).then_some(found))
    }

    /// A read-only transaction whose statements all see one snapshot of the database: SQLite's
    /// (deferred, WAL) takes it at its first read; PostgreSQL's default level takes one per
    /// statement, so it is asked for repeatable read.
    async fn read_snapshot(&self) -> Result<DatabaseTransaction, StoreError> {
        Ok(match self.backend() {
            DbBackend::Postgres => {
                self.db
                    .begin_with_config(
                        Some(IsolationLevel::RepeatableRead),
                        Some(AccessMode::ReadOnly),
                    )
                    .await?
            }
            _ => self.db.begin().await?,
        })
    }

    /// The distinct address keys stored in `[lo, hi]`, lowest first, when there are at most
    /// `max`; `None` when there are more. One index seek per address (a loose index scan), so a
    /// busy address costs no more than a quiet one.
    async fn addresses_in(
        db: &impl ConnectionTrait,
        lo: &[u8; 16],
        hi: &[u8; 16],
        max: i64,
    ) -> Result<Option<Vec<Vec<u8>>>, StoreError> {
        let mut sql = Sql::new(
            db.get_database_backend(),
            // `ORDER BY … LIMIT 1`, not `MIN`: PostgreSQL has no `MIN` of bytes.
            "WITH RECURSIVE k(ip_key, n) AS (SELECT (SELECT ip_key FROM events WHERE ip_key >= ",
        );
        sql.bind(lo.to_vec())
            .push(" AND ip_key <= ")
            .bind(hi.to_vec())
            .push(
                " ORDER BY ip_key LIMIT 1), 1 UNION ALL SELECT (SELECT e.ip_key FROM events e \
                 WHERE e.ip_key > k.ip_key AND e.ip_key <= ",
            )
            .bind(hi.to_vec())
            // One more than `max` tells that there are more.
            .push(" ORDER BY e.ip_key LIMIT 1), k.n + 1 FROM k WHERE k.ip_key IS NOT NULL AND k.n <= ")
            .bind(max)
            .push(") SELECT ip_key FROM k WHERE ip_key IS NOT NULL");
        let keys = db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get::<Vec<u8>>(row, 0))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((i64::try_from(keys.len()).unwrap_or(i64::MAX) <= max).then_some(keys))
    }

    /// A page of a network filter over the addresses `keys` (every stored address of the
    /// network): the newest `wanted` events of each address that match the other filters, merged
    /// newest first. Exact: the page's events are each among the newest `wanted` of their address.
    /// With no filter but times, the addresses' pages come from the address index alone (no row
    /// read per event), and only the page's rows are read.
    async fn network_merge(
        db: &impl ConnectionTrait,
        filter: &EventFilter,
        after: Option<Cursor>,
        wanted: i64,
        keys: &[Vec<u8>],
    ) -> Result<Vec<StoredEvent>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let rest = EventFilter {
            ip: None,
            ..filter.clone()
        };
        let in_index = rest.server.is_none()
            && rest.jail.is_none()
            && rest.kinds.is_empty()
            && rest.sources.is_empty()
            && rest.text.is_none();
        if in_index {
            // Only times besides the network (and the probe's events left out): the newest
            // `wanted` of the network are read from the address index alone, then their rows.
            // When none of those is a probe's event, they are the page; otherwise the rows are
            // checked as they are read, below.
            let mut sql = Sql::new(db.get_database_backend(), "SELECT id FROM (");
            push_newest_of_keys(&mut sql, keys, |sql| push_range(sql, &rest), after, wanted);
            let ids = db
                .query_all_raw(sql.build())
                .await?
                .iter()
                .map(|row| get::<i64>(row, 0))
                .collect::<Result<Vec<_>, _>>()?;
            if ids.is_empty() {
                return Ok(Vec::new());
            }
            let mut sql = Sql::new(
                db.get_database_backend(),
                &format!("SELECT {EVENT_COLUMNS} FROM events WHERE id IN "),
            );
            sql.tuple(ids.iter().map(|id| (*id).into()));
            push_filter(&mut sql, &rest);
            sql.push(" ORDER BY occurred_at DESC, id DESC");
            let found = read_events(db.query_all_raw(sql.build()).await?)?;
            if found.len() == ids.len() {
                return Ok(found);
            }
        }
        let mut sql = Sql::new(
            db.get_database_backend(),
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE id IN (SELECT id FROM ("),
        );
        push_newest_of_keys(&mut sql, keys, |sql| push_filter(sql, &rest), after, wanted);
        sql.push(") ORDER BY occurred_at DESC, id DESC");
        read_events(db.query_all_raw(sql.build()).await?)
    }

    /// A page of a text search with the trigram index (SQLite). When a trigram of the text is in
    /// few events, the index is asked for the rarest trigrams only and names the candidates up to
    /// `indexed_to`; the rows after it are scanned. Otherwise the newest rows matching the other
    /// filters are read first and searched directly: a common text fills the page from them, and
    /// that page is exact (every other match is older); if they do not, the index (`query`) names
    /// the candidates. Every candidate is checked with the plain `LIKE`.
    async fn text_page(
        &self,
        filter: &EventFilter,
        after: Option<Cursor>,
        wanted: i64,
        query: &str,
        indexed_to: i64,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let Some(text) = &filter.text else {
            return Ok(Vec::new());
        };
        let push_rest = |sql: &mut Sql| {
            push_filter(sql, filter);
            push_cursor(sql, after);
        };
        // A text with a rare trigram: the index, asked for the rarest few only, names fewer
        // candidates than the window below would read, and is not slowed by common trigrams
        // (whose lists of events are long).
        let grams = text::trigrams(&text::stored_form(text.as_str()));
        let counted = self.trigram_docs(&grams, RARE_TRIGRAM_DOCS).await?;
        if let Some(rare) = text::rarest_trigrams(&counted, to_u64(RARE_TRIGRAM_DOCS)) {
            return self
                .text_search_indexed(&text::match_all(&rare), indexed_to, wanted, push_rest)
                .await;
        }
        if let Some(found) = self
            .text_in_newest(filter, text.as_str(), after, wanted, TEXT_WINDOW)
            .await?
        {
            return Ok(found);
        }
        self.text_search_indexed(query, indexed_to, wanted, push_rest)
            .await
    }

    /// Events stored after `after` in id order, for a live stream catching up.
    pub async fn events_after(
        &self,
        after: EventId,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            &format!("SELECT {EVENT_COLUMNS} FROM events WHERE id > "),
        );
        sql.bind(after.0)
            .push(" ORDER BY id LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        read_events(self.db.query_all_raw(sql.build()).await?)
    }

    /// The newest event id, if any.
    pub async fn last_event_id(&self) -> Result<Option<EventId>, StoreError> {
        let sql = Sql::new(self.backend(), "SELECT MAX(id) FROM events");
        match self.db.query_one_raw(sql.build()).await? {
            Some(row) => Ok(get::<Option<i64>>(&row, 0)?.map(EventId)),
            None => Ok(None),
        }
    }
}
