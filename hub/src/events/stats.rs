//! Stats and insights from the rollups: choosing buckets for a range, and reading a range as whole
//! days from the daily table plus the hours at its edges from the hourly one, so the number of rows
//! read stays small however many events there are.

use std::collections::HashMap;
use std::hash::Hash;

use chrono::{DateTime, Utc};

use super::{EventsError, check_range};
use crate::domain::ServerId;
use crate::domain::events::{
    Counts, Insights, InsightsQuery, JailName, SeriesPoint, Stats, StatsQuery,
};
use crate::store::Store;
use crate::store::events::{CountRow, Grain};

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
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

/// A range widened to whole buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    from: i64,
    to: i64,
    bucket: i64,
}

fn floor(ms: i64, step: i64) -> i64 {
    ms.div_euclid(step) * step
}

fn ceil(ms: i64, step: i64) -> i64 {
    let f = floor(ms, step);
    if f == ms { ms } else { f + step }
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
    store: &Store,
    server: Option<ServerId>,
    jail: Option<&JailName>,
    from: i64,
    to: i64,
) -> Result<Vec<(ServerId, Counts)>, EventsError> {
    let mut rows = Vec::new();
    for (grain, a, b) in spans(from, to) {
        rows.extend(store.count_by_server(grain, jail, server, a, b).await?);
    }
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
    store: &Store,
    server: Option<ServerId>,
    jail: Option<&JailName>,
    from: i64,
    to: i64,
) -> Result<Vec<(String, Counts)>, EventsError> {
    let mut rows = Vec::new();
    for (grain, a, b) in spans(from, to) {
        rows.extend(store.count_by_jail(grain, server, jail, a, b).await?);
    }
    Ok(ranked(rows))
}

pub(super) async fn stats(
    store: &Store,
    query: &StatsQuery,
    now: DateTime<Utc>,
) -> Result<Stats, EventsError> {
    let (from, to) = range(query.from, query.to, now, STATS_DEFAULT_MS)?;
    let plan = plan(from, to);
    let jail = query.jail.as_ref();
    let grain = if plan.bucket < DAY_MS {
        Grain::Hour
    } else {
        Grain::Day
    };
    let series_rows = store.count_series(grain, query.server, jail, plan.from, plan.to);
    let servers = by_server(store, query.server, jail, plan.from, plan.to);
    let jails = by_jail(store, query.server, jail, plan.from, plan.to);
    let (series_rows, servers, jails) = tokio::try_join!(
        async { series_rows.await.map_err(EventsError::from) },
        servers,
        jails
    )?;

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
    query: &InsightsQuery,
    now: DateTime<Utc>,
) -> Result<Insights, EventsError> {
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
        by_jail(store, query.server, jail, from, to),
        by_server(store, query.server, jail, from, to),
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
