//! The `events` row: its columns (listed once, here), the values an event writes into them, and
//! the event read back from them. Reads go through the sea-orm model of `entities::event` by column
//! name; writes bind these values in hand-written inserts (see `ingest` and `sqlite_ingest`).

use sea_orm::{FromQueryResult, QueryResult, Value};

use super::super::entities::event;
use super::super::sql::{to_i64, to_u64};
use super::super::{StoreError, to_time};
use crate::domain::events::{
    BanDuration, BanFacts, EventBody, EventId, EventKind, EventSource, GapFacts, GapReason,
    IpOrCidr, JailName, Logs, NewEvent, SeqRange, SpoolPosition, StoredEvent, ip_key,
};
use crate::domain::{AgentId, ServerId};

/// The columns an event writes itself, in the order of [`EventRow`]'s fields: every column of
/// `events` but the id, the sequence number and those a batch shares. The other lists are made
/// from this one.
macro_rules! own_columns {
    () => {
        "kind, source, ip, ip_key, jail, hostname, failures, logs, ban_time, ban_duration, \
         ban_count, lost, detail, occurred_at"
    };
}

/// Every column of `events`, as a read selects them.
pub(in crate::store) const EVENT_COLUMNS: &str = concat!(
    "id, server_id, agent_id, epoch, seq, ",
    own_columns!(),
    ", stored_at"
);

/// The head of a multi-row insert of events with their positions, the values of each row in
/// [`event_values`]' order.
pub(super) const INSERT_EVENTS: &str = concat!(
    "INSERT INTO events (server_id, agent_id, epoch, seq, ",
    own_columns!(),
    ", stored_at) VALUES "
);

/// SQLite's insert head (see `sqlite_ingest`): explicit ids, the row's own values, then the
/// values the batch shares.
pub(super) const SQLITE_INSERT_EVENTS: &str = concat!(
    "INSERT OR FAIL INTO events (id, seq, ",
    own_columns!(),
    ", server_id, agent_id, epoch, stored_at) VALUES "
);

/// An event's own columns of its `events` row: all but the id and the columns a batch shares
/// (server, agent, epoch, time stored) and the sequence number. Built once per event.
#[derive(Debug)]
pub(super) struct EventRow {
    pub kind: &'static str,
    pub source: &'static str,
    pub ip: Option<String>,
    pub ip_key: Option<Vec<u8>>,
    pub jail: Option<String>,
    pub hostname: String,
    pub failures: i64,
    pub logs: String,
    pub ban_time: Option<i64>,
    pub ban_duration: Option<i64>,
    pub ban_count: Option<i64>,
    pub lost: Option<i64>,
    pub detail: Option<String>,
    pub occurred_at: i64,
}

impl EventRow {
    pub(super) fn new(event: &NewEvent) -> Result<Self, StoreError> {
        let facts = event.body.facts();
        let logs = match facts {
            Some(f) => serde_json::to_string(f.logs.lines())
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            None => "[]".to_owned(),
        };
        let (lost, detail) = match &event.body {
            EventBody::Gap(gap) => (
                Some(to_i64(gap.lost, "lost count")?),
                Some(
                    serde_json::json!({"reason": gap.reason.as_str(), "ranges": gap.ranges})
                        .to_string(),
                ),
            ),
            _ => (None, None),
        };
        Ok(Self {
            kind: event.kind().as_str(),
            source: event.source.as_str(),
            ip: facts.map(|f| f.ip.to_string()),
            ip_key: facts.map(|f| ip_key(&f.ip).to_vec()),
            jail: facts.map(|f| f.jail.as_str().to_owned()),
            hostname: facts.map(|f| f.hostname.clone()).unwrap_or_default(),
            failures: i64::from(facts.map(|f| f.failures).unwrap_or(0)),
            logs,
            ban_time: facts.and_then(|f| f.ban_time),
            ban_duration: facts
                .and_then(|f| f.ban_duration)
                .map(BanDuration::as_seconds),
            ban_count: facts.and_then(|f| f.ban_count).map(i64::from),
            lost,
            detail,
            occurred_at: event.occurred_at.timestamp_millis(),
        })
    }
}

/// The values of one `events` row, in [`EVENT_COLUMNS`] order without the id.
pub(super) fn event_values(
    server: &str,
    agent: Option<&str>,
    position: Option<(i64, i64)>,
    event: &NewEvent,
    stored_at: i64,
) -> Result<Vec<Value>, StoreError> {
    let row = EventRow::new(event)?;
    Ok(vec![
        server.to_owned().into(),
        agent.map(str::to_owned).into(),
        position.map(|p| p.0).into(),
        position.map(|p| p.1).into(),
        row.kind.into(),
        row.source.into(),
        row.ip.into(),
        row.ip_key.into(),
        row.jail.into(),
        row.hostname.into(),
        row.failures.into(),
        row.logs.into(),
        row.ban_time.into(),
        row.ban_duration.into(),
        row.ban_count.into(),
        row.lost.into(),
        row.detail.into(),
        row.occurred_at.into(),
        stored_at.into(),
    ])
}

fn to_event(row: event::Model) -> Result<StoredEvent, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("event {}: {what}", row.id));
    let kind = EventKind::parse(&row.kind).ok_or_else(|| corrupt("kind"))?;
    let source = EventSource::parse(&row.source).ok_or_else(|| corrupt("source"))?;
    let body = match kind {
        EventKind::Ban | EventKind::Unban => {
            let ip = row
                .ip
                .as_deref()
                .and_then(|ip| IpOrCidr::parse(ip).ok())
                .ok_or_else(|| corrupt("ip"))?;
            let jail = row
                .jail
                .as_deref()
                .and_then(|j| JailName::parse(j).ok())
                .ok_or_else(|| corrupt("jail"))?;
            let lines: Vec<String> =
                serde_json::from_str(&row.logs).map_err(|_| corrupt("logs"))?;
            let facts = BanFacts {
                ip,
                jail,
                hostname: row.hostname.clone(),
                failures: u32::try_from(row.failures).unwrap_or(0),
                logs: Logs::capped(lines),
                ban_time: row.ban_time,
                ban_duration: row.ban_duration.and_then(BanDuration::from_seconds),
                ban_count: row.ban_count.and_then(|c| u32::try_from(c).ok()),
            };
            if kind == EventKind::Ban {
                EventBody::Ban(facts)
            } else {
                EventBody::Unban(facts)
            }
        }
        EventKind::Gap => {
            #[derive(serde::Deserialize)]
            struct Detail {
                reason: String,
                ranges: Vec<SeqRange>,
            }
            let detail: Detail = row
                .detail
                .as_deref()
                .and_then(|d| serde_json::from_str(d).ok())
                .ok_or_else(|| corrupt("gap detail"))?;
            EventBody::Gap(GapFacts {
                reason: GapReason::parse(&detail.reason),
                lost: to_u64(row.lost.unwrap_or(0)),
                ranges: detail.ranges,
            })
        }
    };
    Ok(StoredEvent {
        id: EventId(row.id),
        server_id: ServerId::parse(&row.server_id).map_err(|_| corrupt("server id"))?,
        agent_id: row
            .agent_id
            .as_deref()
            .map(AgentId::parse)
            .transpose()
            .map_err(|_| corrupt("agent id"))?,
        position: match (row.epoch, row.seq) {
            (Some(epoch), Some(seq)) => Some(SpoolPosition {
                epoch: to_u64(epoch),
                seq: to_u64(seq),
            }),
            _ => None,
        },
        occurred_at: to_time(row.occurred_at),
        stored_at: to_time(row.stored_at),
        source,
        body,
    })
}

pub(in crate::store) fn read_events(
    rows: Vec<QueryResult>,
) -> Result<Vec<StoredEvent>, StoreError> {
    rows.iter()
        .map(|row| to_event(event::Model::from_query_result(row, "")?))
        .collect()
}

#[cfg(test)]
mod tests {
    use sea_orm::{IdenStatic, Iterable};

    use super::*;

    fn sorted(columns: &str) -> Vec<&str> {
        let mut columns: Vec<&str> = columns.split(", ").collect();
        columns.sort_unstable();
        columns
    }

    #[test]
    fn every_list_names_the_columns_of_the_entity() {
        let mut entity: Vec<&str> = event::Column::iter().map(|c| c.as_str()).collect();
        entity.sort_unstable();
        assert_eq!(sorted(EVENT_COLUMNS), entity);
        let inserted = |head: &'static str| {
            let start = head.find('(').expect("a column list") + 1;
            let end = head.find(')').expect("a column list");
            &head[start..end]
        };
        let without_id: Vec<&str> = entity.iter().copied().filter(|c| *c != "id").collect();
        assert_eq!(sorted(inserted(INSERT_EVENTS)), without_id);
        assert_eq!(sorted(inserted(SQLITE_INSERT_EVENTS)), entity);
    }
}
