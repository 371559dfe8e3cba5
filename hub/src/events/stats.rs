//! Stats and insights from the rollups: choosing buckets for a range, and reading a range as whole
//! days from the daily table plus the hours at its edges from the hourly one, so the number of rows
//! read stays small however many events there are.
//!
//! What is read for days before today is kept in a [`DayCache`]: over 90 days that is tens of
//! thousands of rollup rows per request (see `bench/README.md`), and those days change only
//! when an event of a past day arrives late (an agent's spool replayed), which empties the cache,
//! or retention drops them. Today's part is always read.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use super::{EventsError, check_range};
use crate::domain::ServerId;
use crate::domain::events::{
    Counts, Insights, InsightsQuery, JailName, SeriesPoint, Stats, StatsQuery,
};
use crate::store::Store;
use crate::store::events::{
    CountRow, DAY_MS, Grain, HOUR_MS, bucket_ceil as ceil, bucket_floor as floor,
};

/// Bucket sizes for the series, smallest first; the first that gives at most [`MAX_POINTS`] wins.
const BUCKETS_MS: [i64; 7] = [
    HOUR_MS,
    3 * HOUR_MS,
    6 * HOUR_MS,
    12 * HOUR_MS,
    DAY_MS,
    7 * DAY_MS,
    28 * DAY_MS,
];
const MAX_POINTS: i64 = 200;
/// Longest range accepted: about twenty years.
const MAX_RANGE_MS: i64 = 20 * 365 * DAY_MS;
/// Default ranges when `from` is not given.
const STATS_DEFAULT_MS: i64 = DAY_MS;
const INSIGHTS_DEFAULT_MS: i64 = 30 * DAY_MS;

/// Cached reads at most; beyond, the cache starts again empty (a few dozen are in use at a time).
const CACHE_ENTRIES: usize = 512;

/// Which rollup read a cache entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Read {
    Series,
    ByServer,
    ByJail,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    read: Read,
    grain: Grain,
    server: Option<String>,
    jail: Option<String>,
    from: i64,
    to: i64,
}

#[derive(Debug, Default)]
struct CacheState {
    /// Moves on every change that empties the cache, so a read that started before it is not
    /// stored after it.
    generation: u64,
    series: HashMap<Key, Arc<Vec<CountRow<i64>>>>,
    grouped: HashMap<Key, Arc<Vec<CountRow<String>>>>,
}

/// Rollup reads of ranges that end before today, kept until an event of a day before today is
/// stored or the rollups are pruned. Only for a hub that sees every stored event itself (SQLite):
/// with several replicas the others' events would not empty it.
#[derive(Debug, Default)]
pub(super) struct DayCache {
    state: Mutex<CacheState>,
}

impl DayCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Events were stored, the oldest of them at `oldest_ms`: one of a day before today's (by
    /// `now_ms`) changes cached days.
    pub(super) fn stored(&self, oldest_ms: i64, now_ms: i64) {
        if oldest_ms < floor(now_ms, DAY_MS) {
            self.clear();
        }
    }

    /// Forgets everything (retention pruned rollups).
    pub(super) fn clear(&self) {
        let mut state = self.lock();
        state.generation += 1;
        state.series.clear();
        state.grouped.clear();
    }

    fn generation(&self) -> u64 {
        self.lock().generation
    }

    fn put<T>(
        map: impl FnOnce(&mut CacheState) -> &mut HashMap<Key, Arc<Vec<T>>>,
        state: &mut CacheState,
        key: Key,
        rows: Arc<Vec<T>>,
    ) {
        let m = map(state);
        if m.len() >= CACHE_ENTRIES {
            m.clear();
        }
        m.insert(key, rows);
    }

    /// The rows cached under `key` in `map`, or `read`'s, kept unless the cache was emptied
    /// while they were read.
    async fn through<T, F>(
        &self,
        map: fn(&mut CacheState) -> &mut HashMap<Key, Arc<Vec<T>>>,
        key: Key,
        read: F,
    ) -> Result<Arc<Vec<T>>, EventsError>
    where
        F: Future<Output = Result<Vec<T>, EventsError>>,
    {
        if let Some(hit) = map(&mut self.lock()).get(&key).cloned() {
            return Ok(hit);
        }
        let generation = self.generation();
        let rows = Arc::new(read.await?);
        let mut state = self.lock();
        if state.generation == generation {
            Self::put(map, &mut state, key, Arc::clone(&rows));
        }
        Ok(rows)
    }
}

/// Where the cached part of a read ends: the start of today (UTC).
fn today(now_ms: i64) -> i64 {
    floor(now_ms, DAY_MS)
}

/// A range of bucket starts, `[from, to)` in ms.
type Range = (i64, i64);

/// `[from, to)` cut at `edge`: the part before it and the part from it, each when not empty.
fn cut(from: i64, to: i64, edge: i64) -> (Option<Range>, Option<Range>) {
    let before = (from < edge.min(to)).then(|| (from, edge.min(to)));
    let after = (edge.max(from) < to).then(|| (edge.max(from), to));
    (before, after)
}

/// The rollup reads of stats and insights, through the cache for days before today.
struct Reader<'a> {
    store: &'a Store,
    cache: Option<&'a DayCache>,
    today: i64,
}

impl Reader<'_> {
    fn key(
        read: Read,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        (from, to): (i64, i64),
    ) -> Key {
        Key {
            read,
            grain,
            server: server.map(|s| s.to_string()),
            jail: jail.map(|j| j.as_str().to_owned()),
            from,
            to,
        }
    }

    async fn series(
        &self,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        from: i64,
        to: i64,
    ) -> Result<Vec<CountRow<i64>>, EventsError> {
        let (past, live) = match self.cache {
            Some(_) => cut(from, to, self.today),
            None => (None, Some((from, to))),
        };
        let mut rows = Vec::new();
        if let (Some(range), Some(cache)) = (past, self.cache) {
            let key = Self::key(Read::Series, grain, server, jail, range);
            let read = async {
                Ok(self
                    .store
                    .count_series(grain, server, jail, range.0, range.1)
                    .await?)
            };
            let part = cache.through(|s| &mut s.series, key, read).await?;
            rows.extend(part.iter().cloned());
        }
        if let Some((a, b)) = live {
            rows.extend(self.store.count_series(grain, server, jail, a, b).await?);
        }
        Ok(rows)
    }

    /// Rows per server (`Read::ByServer`) or per jail (`Read::ByJail`) over `[from, to)`, read as
    /// days and edge hours.
    async fn grouped(
        &self,
        read: Read,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        from: i64,
        to: i64,
    ) -> Result<Vec<CountRow<String>>, EventsError> {
        let mut rows = Vec::new();
        for (grain, a, b) in spans(from, to) {
            let (past, live) = match self.cache {
                Some(_) => cut(a, b, self.today),
                None => (None, Some((a, b))),
            };
            if let (Some(range), Some(cache)) = (past, self.cache) {
                let key = Self::key(read, grain, server, jail, range);
                let part = cache
                    .through(
                        |s| &mut s.grouped,
                        key,
                        self.read_grouped(read, grain, server, jail, range),
                    )
                    .await?;
                rows.extend(part.iter().cloned());
            }
            if let Some(range) = live {
                rows.extend(self.read_grouped(read, grain, server, jail, range).await?);
            }
        }
        Ok(rows)
    }

    async fn read_grouped(
        &self,
        read: Read,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        (from, to): (i64, i64),
    ) -> Result<Vec<CountRow<String>>, EventsError> {
        Ok(match read {
            Read::ByJail => {
                self.store
                    .count_by_jail(grain, server, jail, from, to)
                    .await?
            }
            _ => {
                self.store
                    .count_by_server(grain, jail, server, from, to)
                    .await?
            }
        })
    }
}

/// A range widened to whole buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    from: i64,
    to: i64,
    bucket: i64,
}

/// Picks the bucket size for `[from, to)` and widens the range to whole buckets.
fn plan(from: i64, to: i64) -> Plan {
    let span = to - from;
    let bucket = BUCKETS_MS
        .into_iter()
        .find(|b| span.div_euclid(*b) < MAX_POINTS)
        .unwrap_or(BUCKETS_MS[BUCKETS_MS.len() - 1]);
    Plan {
        from: floor(from, bucket),
        to: ceil(to, bucket),
        bucket,
    }
}

/// `[from, to)` (whole hours) as hourly edges around whole days.
fn spans(from: i64, to: i64) -> Vec<(Grain, i64, i64)> {
    let first_day = ceil(from, DAY_MS);
    let last_day = floor(to, DAY_MS);
    if first_day >= last_day {
        return vec![(Grain::Hour, from, to)];
    }
    let mut spans = Vec::with_capacity(3);
    if from < first_day {
        spans.push((Grain::Hour, from, first_day));
    }
    spans.push((Grain::Day, first_day, last_day));
    if last_day < to {
        spans.push((Grain::Hour, last_day, to));
    }
    spans
}

/// The requested range in ms, with defaults and checks.
fn range(
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    default_span: i64,
) -> Result<(i64, i64), EventsError> {
    check_range(from, to)?;
    let to = to.unwrap_or(now).timestamp_millis();
    let from = from.map_or(to - default_span, |f| f.timestamp_millis());
    if to - from > MAX_RANGE_MS {
        return Err(EventsError::invalid(
            "from",
            "the range may span at most 20 years",
        ));
    }
    Ok((from, to))
}

fn to_time(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Adds rows up per key, most events first (ties by key).
fn ranked<K: Hash + Eq + Ord + Clone>(
    rows: impl IntoIterator<Item = CountRow<K>>,
) -> Vec<(K, Counts)> {
    let mut by_key: HashMap<K, Counts> = HashMap::new();
    for row in rows {
        by_key.entry(row.key).or_default().add(row.kind, row.count);
    }
    let mut out: Vec<_> = by_key.into_iter().collect();
    out.sort_by(|a, b| {
        (b.1.bans, b.1.total())
            .cmp(&(a.1.bans, a.1.total()))
            .then_with(|| a.0.cmp(&b.0))
    });
    out
}

async fn by_server(
    reader: &Reader<'_>,
    server: Option<ServerId>,
    jail: Option<&JailName>,
    from: i64,
    to: i64,
) -> Result<Vec<(ServerId, Counts)>, EventsError> {
    let rows = reader
        .grouped(Read::ByServer, server, jail, from, to)
        .await?;
    // Rows of a server id that does not parse cannot come from this hub's writes; skip them.
    Ok(ranked(rows.into_iter().filter_map(|r| {
        ServerId::parse(&r.key).ok().map(|key| CountRow {
            key,
            kind: r.kind,
            count: r.count,
        })
    })))
}

async fn by_jail(
    reader: &Reader<'_>,
    server: Option<ServerId>,
    jail: Option<&JailName>,
    from: i64,
    to: i64,
) -> Result<Vec<(String, Counts)>, EventsError> {
    Ok(ranked(
        reader.grouped(Read::ByJail, server, jail, from, to).await?,
    ))
}

pub(super) async fn stats(
    store: &Store,
    cache: Option<&DayCache>,
    query: &StatsQuery,
    now: DateTime<Utc>,
) -> Result<Stats, EventsError> {
    let reader = Reader {
        store,
        cache,
        today: today(now.timestamp_millis()),
    };
    let (from, to) = range(query.from, query.to, now, STATS_DEFAULT_MS)?;
    let plan = plan(from, to);
    let jail = query.jail.as_ref();
    let grain = if plan.bucket < DAY_MS {
        Grain::Hour
    } else {
        Grain::Day
    };
    let series_rows = reader.series(grain, query.server, jail, plan.from, plan.to);
    let servers = by_server(&reader, query.server, jail, plan.from, plan.to);
    let jails = by_jail(&reader, query.server, jail, plan.from, plan.to);
    let (series_rows, servers, jails) = tokio::try_join!(series_rows, servers, jails)?;

    let points = usize::try_from((plan.to - plan.from) / plan.bucket).unwrap_or(0);
    let mut series: Vec<SeriesPoint> = (0..points)
        .map(|i| SeriesPoint {
            start: to_time(plan.from + plan.bucket * i64::try_from(i).unwrap_or(0)),
            counts: Counts::default(),
        })
        .collect();
    let mut totals = Counts::default();
    for row in series_rows {
        let index = usize::try_from((row.key - plan.from) / plan.bucket).ok();
        if let Some(point) = index.and_then(|i| series.get_mut(i)) {
            point.counts.add(row.kind, row.count);
            totals.add(row.kind, row.count);
        }
    }
    Ok(Stats {
        from: to_time(plan.from),
        to: to_time(plan.to),
        bucket: chrono::Duration::milliseconds(plan.bucket),
        series,
        servers,
        jails,
        totals,
    })
}

pub(super) async fn insights(
    store: &Store,
    cache: Option<&DayCache>,
    query: &InsightsQuery,
    now: DateTime<Utc>,
) -> Result<Insights, EventsError> {
    let reader = Reader {
        store,
        cache,
        today: today(now.timestamp_millis()),
    };
    let (from, to) = range(query.from, query.to, now, INSIGHTS_DEFAULT_MS)?;
    let (from, to) = (floor(from, HOUR_MS), ceil(to, HOUR_MS));
    let jail = query.jail.as_ref();
    let limit = query.limit;
    let (top_ips, repeat_offenders, mut top_jails, mut top_servers, distinct_ips, ip) = tokio::try_join!(
        async {
            store
                .top_ips(query.server, limit)
                .await
                .map_err(EventsError::from)
        },
        async {
            store
                .repeat_offenders(limit)
                .await
                .map_err(EventsError::from)
        },
        by_jail(&reader, query.server, jail, from, to),
        by_server(&reader, query.server, jail, from, to),
        async { store.distinct_ips().await.map_err(EventsError::from) },
        async {
            match &query.ip {
                Some(ip) => store.ip_details(ip).await.map_err(EventsError::from),
                None => Ok(None),
            }
        },
    )?;
    top_jails.truncate(limit);
    top_servers.truncate(limit);
    Ok(Insights {
        from: to_time(from),
        to: to_time(to),
        top_ips,
        repeat_offenders,
        top_jails,
        top_servers,
        distinct_ips,
        ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_plan(span_hours: i64, bucket_hours: i64) {
        let from = 1_790_000_123_456;
        let to = from + span_hours * HOUR_MS;
        let p = plan(from, to);
        assert_eq!(p.bucket, bucket_hours * HOUR_MS, "span {span_hours}h");
        assert!(p.from <= from && p.to >= to);
        assert_eq!((p.to - p.from) % p.bucket, 0);
        // The largest bucket caps twenty years at 261 points.
        assert!((p.to - p.from) / p.bucket <= 270);
    }

    #[test]
    fn buckets_fit_the_range() {
        check_plan(1, 1);
        check_plan(24, 1);
        check_plan(7 * 24, 1);
        check_plan(14 * 24, 3);
        check_plan(30 * 24, 6);
        check_plan(90 * 24, 12);
        check_plan(180 * 24, 24);
        check_plan(365 * 24, 7 * 24);
        check_plan(20 * 365 * 24, 28 * 24);
    }

    #[test]
    fn ranges_are_cut_at_today() {
        assert_eq!(cut(0, 10, 5), (Some((0, 5)), Some((5, 10))));
        assert_eq!(cut(0, 10, 10), (Some((0, 10)), None));
        assert_eq!(cut(0, 10, 20), (Some((0, 10)), None));
        assert_eq!(cut(5, 10, 0), (None, Some((5, 10))));
        assert_eq!(cut(5, 10, 5), (None, Some((5, 10))));
    }

    #[test]
    fn ranges_split_into_days_and_edge_hours() {
        let d = 20_000 * DAY_MS;
        assert_eq!(
            spans(d + HOUR_MS, d + 5 * HOUR_MS),
            [(Grain::Hour, d + HOUR_MS, d + 5 * HOUR_MS)]
        );
        assert_eq!(spans(d, d + 2 * DAY_MS), [(Grain::Day, d, d + 2 * DAY_MS)]);
        assert_eq!(
            spans(d - 2 * HOUR_MS, d + DAY_MS + 3 * HOUR_MS),
            [
                (Grain::Hour, d - 2 * HOUR_MS, d),
                (Grain::Day, d, d + DAY_MS),
                (Grain::Hour, d + DAY_MS, d + DAY_MS + 3 * HOUR_MS),
            ]
        );
        assert_eq!(
            spans(d - 2 * HOUR_MS, d + 3 * HOUR_MS),
            [(Grain::Hour, d - 2 * HOUR_MS, d + 3 * HOUR_MS)]
        );
    }
}
