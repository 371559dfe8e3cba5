//! Reading events back: keyset-paged lists with every filter, and the rollup reads behind stats and
//! insights. Ingest, retention and callback secrets are in [`super::events`].

use sea_orm::{
    AccessMode, ConnectionTrait, DatabaseTransaction, DbBackend, IsolationLevel, QueryResult,
    TransactionTrait,
};

use super::event_text::{self, RARE_TRIGRAM_DOCS, TEXT_WINDOW};
use super::events::{
    CountRow, DISTINCT_IPS, EVENT_COLUMNS, Grain, HOT_IP_BANS, HOT_IP_SERVER_BANS, NETWORK_WINDOW,
    NETWORK_WINDOW_MAX, Sql, get, read_events, to_u64,
};

/// Distinct addresses of a network filter up to which each address's newest page is read and the
/// pages merged (one index seek per address); a network holding more (a busy /8, an IPv6 /32) is
/// read through a window of the newest events instead.
const NETWORK_ADDRESSES_MAX: i64 = 256;
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;
use crate::domain::events::{
    Cursor, EventFilter, EventId, EventKind, EventPage, IpOnServer, IpOrCidr, IpSummary, JailName,
    StoredEvent, ip_key, ip_key_range,
};
/// ` AND (occurred_at, id) < cursor`: strictly older than where the previous page ended.
pub(super) fn push_cursor(sql: &mut Sql, after: Option<Cursor>) {
    if let Some(cursor) = after {
        sql.push(" AND (occurred_at, id) < (")
            .bind(cursor.occurred_at_ms)
            .push(", ")
            .bind(cursor.id.0)
            .push(")");
    }
}

/// Appends `AND …` for every filter that is set.
pub(super) fn push_filter(sql: &mut Sql, filter: &EventFilter) {
    if let Some(server) = filter.server {
        sql.push(" AND server_id = ").bind(server.to_string());
    }
    if let Some(jail) = &filter.jail {
        sql.push(" AND jail = ").bind(jail.as_str().to_owned());
    } else {
        // The end-to-end probe's events only when asked for by their jail (gaps have no jail).
        sql.push(" AND (jail IS NULL OR jail <> ")
            .bind(banhub_proto::rules::PROBE_JAIL.to_owned())
            .push(")");
    }
    match &filter.ip {
        Some(ip @ IpOrCidr::Ip(_)) => {
            sql.push(" AND ip_key = ").bind(ip_key(ip).to_vec());
        }
        Some(net @ IpOrCidr::Net(_)) => {
            let (lo, hi) = ip_key_range(net);
            sql.push(" AND ip_key BETWEEN ")
                .bind(lo.to_vec())
                .push(" AND ")
                .bind(hi.to_vec());
        }
        None => {}
    }
    if !filter.kinds.is_empty() {
        // Literals, not bound values: only then can the database see that `kind = 'gap'` selects
        // the rows of the partial index made for it (M0008). The values are the enum's own names.
        let kinds: Vec<String> = filter
            .kinds
            .iter()
            .map(|k| format!("'{}'", k.as_str()))
            .collect();
        match kinds.as_slice() {
            [one] => sql.push(&format!(" AND kind = {one}")),
            many => sql.push(&format!(" AND kind IN ({})", many.join(", "))),
        };
    }
    if !filter.sources.is_empty() {
        sql.push(" AND source IN ")
            .tuple(filter.sources.iter().map(|s| s.as_str().into()));
    }
    push_range(sql, filter);
    if let Some(text) = &filter.text {
        push_text(sql, text.as_str());
    }
}

/// The body of `… FROM (<here>`: for each address key, the newest `wanted` events after the cursor
/// that pass `filter` (which appends `AND …` conditions), merged into `… ) m` and cut to the newest
/// `wanted`; the outer select names `id` (and may order by `occurred_at`).
fn push_newest_of_keys(
    sql: &mut Sql,
    keys: &[Vec<u8>],
    filter: impl Fn(&mut Sql),
    after: Option<Cursor>,
    wanted: i64,
) {
    if sql.backend() == DbBackend::Postgres {
        // One lateral subquery over a list of the keys: PostgreSQL plans a `UNION ALL` of one
        // branch per address anew every time, and planning a long union costs more than reading
        // it; this form plans fast (SQLite has no `LATERAL`, and plans the union fast).
        sql.push("SELECT x.id, x.occurred_at FROM (VALUES ");
        for (i, key) in keys.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.push("(").bind(key.clone()).push("::bytea)");
        }
        sql.push(
            ") k(key) CROSS JOIN LATERAL (SELECT id, occurred_at FROM events WHERE ip_key = k.key",
        );
        filter(sql);
        push_cursor(sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(") x) m ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted);
        return;
    }
    for (i, key) in keys.iter().enumerate() {
        if i > 0 {
            sql.push(" UNION ALL ");
        }
        sql.push("SELECT id, occurred_at FROM (SELECT id, occurred_at FROM events WHERE ip_key = ")
            .bind(key.clone());
        filter(sql);
        push_cursor(sql, after);
        sql.push(" ORDER BY occurred_at DESC, id DESC LIMIT ")
            .bind(wanted)
            .push(&format!(") a{i}"));
    }
    sql.push(") m ORDER BY occurred_at DESC, id DESC LIMIT ")
        .bind(wanted);
}

/// ` AND occurred_at …` for the time range of `filter`, if any.
fn push_range(sql: &mut Sql, filter: &EventFilter) {
    if let Some(from) = filter.from {
        sql.push(" AND occurred_at >= ")
            .bind(from.timestamp_millis());
    }
    if let Some(to) = filter.to {
        sql.push(" AND occurred_at < ").bind(to.timestamp_millis());
    }
}

/// ` AND logs LIKE '%text%'`: the text anywhere in an event's log lines, ASCII case ignored
/// (SQLite's `LIKE`; PostgreSQL's `ILIKE` ignores all case).
fn push_text(sql: &mut Sql, text: &str) {
    // Logs are stored as a JSON list, so the text is searched in its JSON-escaped form.
    let inner = event_text::stored_form(text);
    let mut pattern = String::with_capacity(inner.len() + 2);
    pattern.push('%');
    for c in inner.chars() {
        if matches!(c, '\\' | '%' | '_') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    if sql.backend() == DbBackend::Postgres {
        // A literal, not a bound value: PostgreSQL plans a prepared statement once for any value
        // after a few runs, and a plan made without the pattern cannot judge how rare the text
        // is (with a trigram index, as M0010 made and M0012 dropped, the choice between it and
        // the newest rows first depends on that). An `E''` string with its quotes and
        // backslashes escaped holds any text.
        let literal = pattern.replace('\\', "\\\\").replace('\'', "''");
        sql.push(&format!(" AND logs ILIKE E'{literal}' ESCAPE '\\'"));
    } else {
        sql.push(" AND logs LIKE ")
            .bind(pattern)
            .push(" ESCAPE '\\'");
    }
}

fn kind_of(raw: &str) -> Result<EventKind, StoreError> {
    EventKind::parse(raw).ok_or_else(|| StoreError::Corrupt(format!("rollup kind {raw:?}")))
}

fn ip_summary(row: &QueryResult) -> Result<IpSummary, StoreError> {
    let last_server: String = get(row, 6)?;
    Ok(IpSummary {
        ip: get(row, 0)?,
        bans: to_u64(get(row, 1)?),
        servers: to_u64(get(row, 2)?),
        first_seen: to_time(get(row, 3)?),
        last_seen: to_time(get(row, 4)?),
        last_jail: Some(get::<String>(row, 5)?).filter(|j| !j.is_empty()),
        last_server: ServerId::parse(&last_server).ok(),
    })
}

const IP_SUMMARY_COLUMNS: &str =
    "ip, bans, servers, first_seen, last_seen, last_jail, last_server_id";

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
            && let Some(query) = event_text::indexable(filter, self.backend())
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
    pub(super) async fn text_in_newest(
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
        let grams = event_text::trigrams(&event_text::stored_form(text.as_str()));
        let counted = self.trigram_docs(&grams, RARE_TRIGRAM_DOCS).await?;
        if let Some(rare) = event_text::rarest_trigrams(&counted, to_u64(RARE_TRIGRAM_DOCS)) {
            return self
                .text_search_indexed(&event_text::match_all(&rare), indexed_to, wanted, push_rest)
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

    /// Counts per bucket and kind for one server (or all) and one jail (or all), buckets in
    /// `[from_ms, to_ms)`.
    pub async fn count_series(
        &self,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<CountRow<i64>>, StoreError> {
        // PostgreSQL: the fleet-wide counts may be pending (store::events).
        self.flush_counts().await?;
        let mut sql = Sql::new(
            self.backend(),
            &format!(
                "SELECT bucket, kind, count FROM {} WHERE server_id = ",
                grain.table()
            ),
        );
        sql.bind(server.map(|s| s.to_string()).unwrap_or_default())
            .push(" AND jail = ")
            .bind(jail.map(|j| j.as_str().to_owned()).unwrap_or_default())
            .push(" AND bucket >= ")
            .bind(from_ms)
            .push(" AND bucket < ")
            .bind(to_ms);
        self.count_rows(sql).await
    }

    /// Counts per server and kind in `[from_ms, to_ms)`, of one jail (or all), of one server (or
    /// every server).
    pub async fn count_by_server(
        &self,
        grain: Grain,
        jail: Option<&JailName>,
        server: Option<ServerId>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<CountRow<String>>, StoreError> {
        let jail = jail.map(|j| j.as_str().to_owned()).unwrap_or_default();
        let server = server.map(|s| s.to_string());
        self.count_by(
            grain,
            ("server_id", server),
            ("jail", jail),
            (from_ms, to_ms),
        )
        .await
    }

    /// Counts per jail and kind in `[from_ms, to_ms)`, on one server (or all), of one jail (or
    /// every jail).
    pub async fn count_by_jail(
        &self,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<CountRow<String>>, StoreError> {
        // PostgreSQL: the fleet-wide counts may be pending (store::events).
        self.flush_counts().await?;
        let server = server.map(|s| s.to_string()).unwrap_or_default();
        let jail = jail.map(|j| j.as_str().to_owned());
        self.count_by(
            grain,
            ("jail", jail),
            ("server_id", server),
            (from_ms, to_ms),
        )
        .await
    }

    /// Counts per value of the `group` column and kind in `[from, to)`: of one value (`Some`) or
    /// of every value but the all-values rows (`''`), within the rows of `fixed`'s column whose
    /// value is given (`''`: all of them). The columns are this module's literals, never input.
    async fn count_by(
        &self,
        grain: Grain,
        (group, only): (&'static str, Option<String>),
        (fixed, value): (&'static str, String),
        (from, to): (i64, i64),
    ) -> Result<Vec<CountRow<String>>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            &format!(
                "SELECT {group}, kind, CAST(SUM(count) AS BIGINT) FROM {} WHERE {fixed} = ",
                grain.table()
            ),
        );
        sql.bind(value);
        match only {
            Some(only) => sql.push(&format!(" AND {group} = ")).bind(only),
            None => sql.push(&format!(" AND {group} <> ''")),
        };
        sql.push(" AND bucket >= ")
            .bind(from)
            .push(" AND bucket < ")
            .bind(to)
            .push(&format!(" GROUP BY {group}, kind"));
        self.count_rows(sql).await
    }

    /// `(key, kind, count)` rows.
    async fn count_rows<K: sea_orm::TryGetable>(
        &self,
        sql: Sql,
    ) -> Result<Vec<CountRow<K>>, StoreError> {
        self.db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                Ok(CountRow {
                    key: get(row, 0)?,
                    kind: kind_of(&get::<String>(row, 1)?)?,
                    count: to_u64(get(row, 2)?),
                })
            })
            .collect()
    }

    /// The most banned addresses, over every server or on one. Read from the partial index of
    /// often-banned addresses; only when it holds fewer than `limit` (a young or very spread
    /// history) is the whole table ranked.
    pub async fn top_ips(
        &self,
        server: Option<ServerId>,
        limit: usize,
    ) -> Result<Vec<IpSummary>, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let hot = self.ranked_ips(server, limit, true).await?;
        if hot.len() >= limit {
            return Ok(hot);
        }
        self.ranked_ips(server, limit, false).await
    }

    async fn ranked_ips(
        &self,
        server: Option<ServerId>,
        limit: usize,
        hot_only: bool,
    ) -> Result<Vec<IpSummary>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = match server {
            None => {
                let mut sql = Sql::new(
                    self.backend(),
                    &format!("SELECT {IP_SUMMARY_COLUMNS} FROM ip_stats WHERE 1 = 1"),
                );
                if hot_only {
                    sql.push(&format!(" AND bans >= {HOT_IP_BANS}"));
                }
                sql.push(" ORDER BY bans DESC, ip DESC LIMIT ").bind(limit);
                sql
            }
            Some(server) => {
                let mut sql = Sql::new(
                    self.backend(),
                    "SELECT s.ip, s.bans, t.servers, s.first_seen, s.last_seen, t.last_jail, \
                     t.last_server_id FROM ip_servers s JOIN ip_stats t ON t.ip = s.ip \
                     WHERE s.server_id = ",
                );
                sql.bind(server.to_string());
                if hot_only {
                    sql.push(&format!(" AND s.bans >= {HOT_IP_SERVER_BANS}"));
                }
                sql.push(" ORDER BY s.bans DESC, s.ip DESC LIMIT ")
                    .bind(limit);
                sql
            }
        };
        self.db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(ip_summary)
            .collect()
    }

    /// Addresses banned on more than one server, most servers first, then most bans.
    pub async fn repeat_offenders(&self, limit: usize) -> Result<Vec<IpSummary>, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let mut sql = Sql::new(
            self.backend(),
            &format!(
                "SELECT {IP_SUMMARY_COLUMNS} FROM ip_stats WHERE servers >= 2 \
                 ORDER BY servers DESC, bans DESC, ip DESC LIMIT "
            ),
        );
        sql.bind(i64::try_from(limit).unwrap_or(i64::MAX));
        self.db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(ip_summary)
            .collect()
    }

    /// One address: its summary and its bans per server, if it was ever banned.
    pub async fn ip_details(
        &self,
        ip: &IpOrCidr,
    ) -> Result<Option<(IpSummary, Vec<IpOnServer>)>, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let text = ip.to_string();
        let mut sql = Sql::new(
            self.backend(),
            &format!("SELECT {IP_SUMMARY_COLUMNS} FROM ip_stats WHERE ip = "),
        );
        sql.bind(text.clone());
        let Some(row) = self.db.query_one_raw(sql.build()).await? else {
            return Ok(None);
        };
        let summary = ip_summary(&row)?;
        let mut sql = Sql::new(
            self.backend(),
            "SELECT server_id, bans, first_seen, last_seen FROM ip_servers WHERE ip = ",
        );
        sql.bind(text).push(" ORDER BY bans DESC, server_id");
        let servers = self
            .db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                let server: String = get(row, 0)?;
                Ok(IpOnServer {
                    server: ServerId::parse(&server)
                        .map_err(|_| StoreError::Corrupt(format!("ip_servers: {server:?}")))?,
                    bans: to_u64(get(row, 1)?),
                    first_seen: to_time(get(row, 2)?),
                    last_seen: to_time(get(row, 3)?),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Some((summary, servers)))
    }

    /// How many distinct addresses the per-address rollup holds.
    pub async fn distinct_ips(&self) -> Result<u64, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let mut sql = Sql::new(
            self.backend(),
            "SELECT value FROM event_totals WHERE name = ",
        );
        sql.bind(DISTINCT_IPS);
        Ok(match self.db.query_one_raw(sql.build()).await? {
            Some(row) => to_u64(get(&row, 0)?),
            None => 0,
        })
    }
}
