//! Fleet defence's tables (M0017, M0018): recidive rules, what each rule remembers of the addresses
//! it fired for, the storm breaker's pauses of source servers and its window (the origin bans that
//! shared, per source, written by the engine with its batch); and the read of an address's ban
//! events across the fleet within a window that recidive rules evaluate. Hand-written SQL built
//! with `sql::Sql` and run through sea-orm's pool: the firings' upsert and the pause that at most
//! one open row per server allows are conditional statements the entities do not express.

use std::collections::HashMap;

use banhub_proto::rules::IpOrCidr;
use chrono::{DateTime, Utc};
use sea_orm::{ConnectionTrait, QueryResult, TransactionTrait};

use super::servers::is_unique_violation;
use super::sql::{Sql, get, to_i64, to_u64};
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;
use crate::domain::breaker::{SourcePause, WINDOW, WindowCount};
use crate::domain::events::{EventId, ip_key};
use crate::domain::recidive::{
    NewFiring, PastFirings, RecidiveRule, RecidiveSpec, Sighting, StoredRule,
};

/// Values per `IN (…)` list.
const IN_CHUNK: usize = 500;
/// Most ban events of one address read for one evaluation (newest first).
const MAX_SIGHTINGS: i64 = 10_000;

/// What writing a rule came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuleWrite {
    Saved(Box<StoredRule>),
    /// Another rule has this name.
    NameTaken,
    NotFound,
}

fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Corrupt(what.into())
}

fn to_rule(row: &QueryResult) -> Result<StoredRule, StoreError> {
    let id: i64 = get(row, 0)?;
    let spec: String = get(row, 1)?;
    let spec: RecidiveSpec =
        serde_json::from_str(&spec).map_err(|e| corrupt(format!("recidive rule {id}: {e}")))?;
    let rule =
        RecidiveRule::parse(spec).map_err(|e| corrupt(format!("recidive rule {id}: {e}")))?;
    Ok(StoredRule {
        id,
        rule,
        created_at: to_time(get(row, 2)?),
        updated_at: to_time(get(row, 3)?),
    })
}

fn to_pause(row: &QueryResult) -> Result<SourcePause, StoreError> {
    let server: String = get(row, 1)?;
    Ok(SourcePause {
        id: get(row, 0)?,
        server: ServerId::parse(&server)
            .map_err(|_| corrupt(format!("sharing pause: server id {server:?}")))?,
        paused_at: to_time(get(row, 2)?),
        shared_bans: to_u64(get(row, 3)?),
        reason: get(row, 4)?,
        resumed_at: get::<Option<i64>>(row, 5)?.map(to_time),
        resumed_by: get(row, 6)?,
    })
}

fn spec_json(rule: &RecidiveRule) -> Result<String, StoreError> {
    serde_json::to_string(rule.spec()).map_err(|e| corrupt(format!("recidive rule: {e}")))
}

const RULE_COLUMNS: &str = "SELECT id, spec, created_at, updated_at FROM recidive_rules";
const PAUSE_COLUMNS: &str = "SELECT id, server_id, paused_at, shared_bans, reason, resumed_at, resumed_by FROM sharing_pauses";

impl Store {
    /// Every recidive rule, by name.
    pub async fn list_recidive_rules(&self) -> Result<Vec<StoredRule>, StoreError> {
        let sql = self.sql(&format!("{RULE_COLUMNS} ORDER BY name, id"));
        self.rows(sql).await?.iter().map(to_rule).collect()
    }

    pub async fn recidive_rule(&self, id: i64) -> Result<Option<StoredRule>, StoreError> {
        let mut sql = self.sql(&format!("{RULE_COLUMNS} WHERE id = "));
        sql.bind(id);
        self.rows(sql).await?.first().map(to_rule).transpose()
    }

    pub async fn create_recidive_rule(&self, rule: &RecidiveRule) -> Result<RuleWrite, StoreError> {
        let now = Utc::now().timestamp_millis();
        let mut sql =
            self.sql("INSERT INTO recidive_rules (name, spec, created_at, updated_at) VALUES (");
        sql.bind(rule.spec().name.clone())
            .push(", ")
            .bind(spec_json(rule)?)
            .push(", ")
            .bind(now)
            .push(", ")
            .bind(now)
            .push(") RETURNING id");
        let row = match self.db.query_one_raw(sql.build()).await {
            Ok(row) => row,
            Err(e) if is_unique_violation(&e) => return Ok(RuleWrite::NameTaken),
            Err(e) => return Err(e.into()),
        };
        let id: i64 = get(&row.ok_or_else(|| corrupt("insert returned no id"))?, 0)?;
        Ok(self
            .recidive_rule(id)
            .await?
            .map_or(RuleWrite::NotFound, |r| RuleWrite::Saved(Box::new(r))))
    }

    /// Replaces a rule; what it remembers of addresses stays (a changed ladder applies from the
    /// next firing).
    pub async fn update_recidive_rule(
        &self,
        id: i64,
        rule: &RecidiveRule,
    ) -> Result<RuleWrite, StoreError> {
        let mut sql = self.sql("UPDATE recidive_rules SET name = ");
        sql.bind(rule.spec().name.clone())
            .push(", spec = ")
            .bind(spec_json(rule)?)
            .push(", updated_at = ")
            .bind(Utc::now().timestamp_millis())
            .push(" WHERE id = ")
            .bind(id);
        match self.db.execute_raw(sql.build()).await {
            Ok(done) if done.rows_affected() == 1 => {}
            Ok(_) => return Ok(RuleWrite::NotFound),
            Err(e) if is_unique_violation(&e) => return Ok(RuleWrite::NameTaken),
            Err(e) => return Err(e.into()),
        }
        Ok(self
            .recidive_rule(id)
            .await?
            .map_or(RuleWrite::NotFound, |r| RuleWrite::Saved(Box::new(r))))
    }

    /// Deletes a rule and what it remembers; whether it existed.
    pub async fn delete_recidive_rule(&self, id: i64) -> Result<bool, StoreError> {
        let backend = self.backend();
        let txn = self.db.begin().await?;
        let mut sql =
            super::sql::Sql::new(backend, "DELETE FROM recidive_firings WHERE rule_id = ");
        sql.bind(id);
        txn.execute_raw(sql.build()).await?;
        let mut sql = super::sql::Sql::new(backend, "DELETE FROM recidive_rules WHERE id = ");
        sql.bind(id);
        let deleted = txn.execute_raw(sql.build()).await?.rows_affected();
        txn.commit().await?;
        Ok(deleted == 1)
    }

    /// What rule `rule_id` remembers of `ip`, with the event that made it fire last.
    pub async fn recidive_firings(
        &self,
        rule_id: i64,
        ip: &IpOrCidr,
    ) -> Result<Option<(PastFirings, EventId)>, StoreError> {
        let mut sql = self.sql(
            "SELECT count, last_fired_at, last_event_id FROM recidive_firings WHERE rule_id = ",
        );
        sql.bind(rule_id).push(" AND ip = ").bind(ip.to_string());
        let rows = self.rows(sql).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let count: i64 = get(row, 0)?;
        Ok(Some((
            PastFirings {
                count: u32::try_from(count).unwrap_or(u32::MAX),
                last_fired_at: to_time(get(row, 1)?),
            },
            EventId(get(row, 2)?),
        )))
    }

    /// Remembers `firing` (the engine remembers its firings with its batch; see `sharing::batch`).
    pub async fn record_recidive_firing(&self, firing: &NewFiring) -> Result<(), StoreError> {
        upsert_firing(&self.db, firing).await
    }

    /// The ban events of `ip` (on any server, in any jail) that occurred from `from` to `to`,
    /// newest first, at most [`MAX_SIGHTINGS`].
    pub async fn ban_sightings(
        &self,
        ip: &IpOrCidr,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> Result<Vec<Sighting>, StoreError> {
        let mut sql =
            self.sql("SELECT server_id, jail, failures, occurred_at FROM events WHERE ip_key = ");
        sql.bind(ip_key(ip).to_vec())
            .push(" AND occurred_at >= ")
            .bind(from.timestamp_millis())
            .push(" AND occurred_at <= ")
            .bind(to.timestamp_millis())
            .push(" AND kind = 'ban' ORDER BY occurred_at DESC LIMIT ")
            .bind(MAX_SIGHTINGS);
        self.rows(sql)
            .await?
            .iter()
            .map(|row| {
                let server: String = get(row, 0)?;
                let failures: i64 = get(row, 2)?;
                Ok(Sighting {
                    server: ServerId::parse(&server)
                        .map_err(|_| corrupt(format!("event: server id {server:?}")))?,
                    jail: get::<Option<String>>(row, 1)?.unwrap_or_default(),
                    failures: u32::try_from(failures).unwrap_or(u32::MAX),
                    at: to_time(get(row, 3)?),
                })
            })
            .collect()
    }

    /// Pauses sharing from `server`; false when it already was.
    pub async fn pause_source(
        &self,
        server: ServerId,
        at: DateTime<Utc>,
        shared_bans: u64,
        reason: &str,
    ) -> Result<bool, StoreError> {
        insert_pause(&self.db, server, at.timestamp_millis(), shared_bans, reason).await
    }

    /// What each of `servers` shared within the breaker's window ending at `now_ms`: its origin
    /// bans that shared and the shared bans they caused, counted since its last resume if that
    /// is later (a resumed source starts from an empty window).
    pub async fn storm_counts(
        &self,
        servers: &[ServerId],
        now_ms: i64,
    ) -> Result<HashMap<ServerId, WindowCount>, StoreError> {
        let mut counts = HashMap::new();
        let since = now_ms - WINDOW.num_milliseconds();
        for chunk in servers.chunks(IN_CHUNK) {
            let mut sql = self.sql(
                "SELECT o.origin_server, COUNT(*), CAST(SUM(o.shared_bans) AS BIGINT) \
                 FROM sharing_origins o WHERE o.shared_at > ",
            );
            sql.bind(since).push(" AND o.origin_server IN ");
            sql.tuple(chunk.iter().map(|s| s.to_string().into()));
            sql.push(
                " AND NOT EXISTS (SELECT 1 FROM sharing_pauses p WHERE p.server_id = \
                 o.origin_server AND p.resumed_at IS NOT NULL AND p.resumed_at >= o.shared_at) \
                 GROUP BY o.origin_server",
            );
            for row in self.rows(sql).await? {
                let server: String = get(&row, 0)?;
                let server = ServerId::parse(&server)
                    .map_err(|_| corrupt(format!("sharing origin: server id {server:?}")))?;
                let origin_bans: i64 = get(&row, 1)?;
                let shared_bans: Option<i64> = get(&row, 2)?;
                counts.insert(
                    server,
                    WindowCount {
                        origin_bans: to_u64(origin_bans),
                        shared_bans: to_u64(shared_bans.unwrap_or(0)),
                    },
                );
            }
        }
        Ok(counts)
    }

    /// Forgets the origin bans that shared before `before_ms` (out of every breaker's window).
    pub async fn prune_origin_shares(&self, before_ms: i64) -> Result<u64, StoreError> {
        let mut sql = self.sql("DELETE FROM sharing_origins WHERE shared_at < ");
        sql.bind(before_ms);
        self.exec(sql).await
    }

    /// The sources paused now, oldest pause first.
    pub async fn open_pauses(&self) -> Result<Vec<SourcePause>, StoreError> {
        let sql = self.sql(&format!(
            "{PAUSE_COLUMNS} WHERE resumed_at IS NULL ORDER BY paused_at, id"
        ));
        self.rows(sql).await?.iter().map(to_pause).collect()
    }

    /// Ends the pause of `server`; the ended pause, `None` when it was not paused.
    pub async fn resume_source(
        &self,
        server: ServerId,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<Option<SourcePause>, StoreError> {
        let mut sql = self.sql("UPDATE sharing_pauses SET resumed_at = ");
        sql.bind(at.timestamp_millis())
            .push(", resumed_by = ")
            .bind(by.to_owned())
            .push(" WHERE server_id = ")
            .bind(server.to_string())
            .push(" AND resumed_at IS NULL RETURNING id, server_id, paused_at, shared_bans, reason, resumed_at, resumed_by");
        self.rows(sql).await?.first().map(to_pause).transpose()
    }
}

/// Remembers `firing` on `conn`: the rule's row for the address, replaced.
pub(super) async fn upsert_firing(
    conn: &impl ConnectionTrait,
    firing: &NewFiring,
) -> Result<(), StoreError> {
    let mut sql = Sql::new(
        conn.get_database_backend(),
        "INSERT INTO recidive_firings \
         (rule_id, ip, count, last_fired_at, last_duration_secs, last_event_id) VALUES (",
    );
    sql.bind(firing.rule_id)
        .push(", ")
        .bind(firing.ip.to_string())
        .push(", ")
        .bind(i64::from(firing.count))
        .push(", ")
        .bind(firing.at.timestamp_millis())
        .push(", ")
        .bind(i64::from(firing.duration_secs))
        .push(", ")
        .bind(firing.event.0)
        .push(
            ") ON CONFLICT (rule_id, ip) DO UPDATE SET count = excluded.count, \
             last_fired_at = excluded.last_fired_at, \
             last_duration_secs = excluded.last_duration_secs, \
             last_event_id = excluded.last_event_id",
        );
    conn.execute_raw(sql.build()).await?;
    Ok(())
}

/// Opens a pause of `server` on `conn`; false when one is open already.
pub(super) async fn insert_pause(
    conn: &impl ConnectionTrait,
    server: ServerId,
    at_ms: i64,
    shared_bans: u64,
    reason: &str,
) -> Result<bool, StoreError> {
    let mut sql = Sql::new(
        conn.get_database_backend(),
        "INSERT INTO sharing_pauses (server_id, paused_at, shared_bans, reason) VALUES (",
    );
    sql.bind(server.to_string())
        .push(", ")
        .bind(at_ms)
        .push(", ")
        .bind(to_i64(shared_bans, "shared bans")?)
        .push(", ")
        .bind(reason.to_owned())
        .push(") ON CONFLICT DO NOTHING");
    Ok(conn.execute_raw(sql.build()).await?.rows_affected() == 1)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::TimeDelta;

    use banhub_proto::event::Logs;
    use banhub_proto::rules::JailName;

    use super::*;
    use crate::domain::events::{BanFacts, EventBody, EventKind, EventSource, NewEvent};
    use crate::domain::recidive::ScopeSpec;
    use crate::domain::{Labels, NewServer, ServerName};

    fn firing(
        rule_id: i64,
        ip: &IpOrCidr,
        (count, duration_secs): (u32, u32),
        at: DateTime<Utc>,
        event: EventId,
    ) -> NewFiring {
        NewFiring {
            rule_id,
            ip: *ip,
            count,
            duration_secs,
            at,
            event,
        }
    }

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        (dir, store)
    }

    fn rule(name: &str) -> RecidiveRule {
        let all = ScopeSpec {
            all: true,
            labels: BTreeMap::new(),
        };
        RecidiveRule::parse(RecidiveSpec {
            name: name.to_owned(),
            enabled: true,
            sources: all.clone(),
            jails: vec!["ssh*".to_owned()],
            min_servers: Some(2),
            min_failures: None,
            window_secs: 600,
            targets: all,
            ladder_secs: vec![60, 600],
            lookback_secs: 3600,
            cooldown_secs: 60,
        })
        .expect("valid")
    }

    async fn server(store: &Store, name: &str) -> ServerId {
        store
            .create_server(NewServer {
                name: ServerName::parse(name).expect("name"),
                description: String::new(),
                labels: Labels::default(),
            })
            .await
            .expect("db")
            .id
    }

    fn event(ip: &str, jail: &str, kind: EventKind, failures: u32, at: DateTime<Utc>) -> NewEvent {
        let facts = BanFacts {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse(jail).expect("jail"),
            hostname: String::new(),
            failures,
            logs: Logs::default(),
            ban_time: None,
            ban_duration: None,
            ban_count: None,
        };
        NewEvent {
            occurred_at: at,
            source: EventSource::Direct,
            body: match kind {
                EventKind::Ban => EventBody::Ban(facts),
                _ => EventBody::Unban(facts),
            },
        }
    }

    #[tokio::test]
    async fn an_addresss_ban_sightings_are_read_across_servers_within_the_window() {
        let (_dir, store) = store().await;
        let (a, b) = (server(&store, "a").await, server(&store, "b").await);
        let at = DateTime::from_timestamp_millis(1_800_000_000_000).expect("time");
        let s = TimeDelta::seconds;
        for (server, ip, jail, kind, failures, when) in [
            (a, "192.0.2.7", "sshd", EventKind::Ban, 5, at),
            (b, "192.0.2.7", "nginx", EventKind::Ban, 3, at + s(10)),
            // Not a ban, another address, and outside the window.
            (b, "192.0.2.7", "nginx", EventKind::Unban, 0, at + s(20)),
            (a, "192.0.2.8", "sshd", EventKind::Ban, 5, at + s(10)),
            (a, "192.0.2.7", "sshd", EventKind::Ban, 5, at - s(601)),
            (a, "192.0.2.7", "sshd", EventKind::Ban, 5, at + s(31)),
        ] {
            store
                .insert_direct_event(server, event(ip, jail, kind, failures, when))
                .await
                .expect("db");
        }
        let ip = IpOrCidr::parse("192.0.2.7").expect("ip");
        let seen = store
            .ban_sightings(&ip, at - s(600), at + s(30))
            .await
            .expect("db");
        let seen: Vec<(ServerId, &str, u32, DateTime<Utc>)> = seen
            .iter()
            .map(|s| (s.server, s.jail.as_str(), s.failures, s.at))
            .collect();
        assert_eq!(seen, [(b, "nginx", 3, at + s(10)), (a, "sshd", 5, at)]);
    }

    #[tokio::test]
    async fn rules_are_created_listed_updated_and_deleted_with_unique_names() {
        let (_dir, store) = store().await;
        let RuleWrite::Saved(a) = store.create_recidive_rule(&rule("a")).await.expect("db") else {
            panic!("saved");
        };
        assert_eq!(a.rule, rule("a"));
        assert_eq!(
            store.create_recidive_rule(&rule("a")).await.expect("db"),
            RuleWrite::NameTaken
        );
        let RuleWrite::Saved(b) = store.create_recidive_rule(&rule("b")).await.expect("db") else {
            panic!("saved");
        };
        assert_eq!(
            store
                .update_recidive_rule(b.id, &rule("a"))
                .await
                .expect("db"),
            RuleWrite::NameTaken
        );
        assert_eq!(
            store
                .update_recidive_rule(9999, &rule("c"))
                .await
                .expect("db"),
            RuleWrite::NotFound
        );
        let RuleWrite::Saved(c) = store
            .update_recidive_rule(b.id, &rule("c"))
            .await
            .expect("db")
        else {
            panic!("saved");
        };
        assert_eq!((c.id, c.rule.spec().name.as_str()), (b.id, "c"));
        let names: Vec<String> = store
            .list_recidive_rules()
            .await
            .expect("db")
            .into_iter()
            .map(|r| r.rule.spec().name.clone())
            .collect();
        assert_eq!(names, ["a", "c"]);
        let ip = IpOrCidr::parse("192.0.2.7").expect("ip");
        store
            .record_recidive_firing(&firing(a.id, &ip, (1, 60), Utc::now(), EventId(1)))
            .await
            .expect("db");
        assert!(store.delete_recidive_rule(a.id).await.expect("db"));
        assert!(!store.delete_recidive_rule(a.id).await.expect("db"));
        assert_eq!(store.recidive_rule(a.id).await.expect("db"), None);
        assert_eq!(store.recidive_firings(a.id, &ip).await.expect("db"), None);
    }

    #[tokio::test]
    async fn firings_are_remembered_per_rule_and_address() {
        let (_dir, store) = store().await;
        let ip = IpOrCidr::parse("192.0.2.7").expect("ip");
        let other = IpOrCidr::parse("2001:db8::1").expect("ip");
        let at = DateTime::from_timestamp_millis(1_800_000_000_000).expect("time");
        store
            .record_recidive_firing(&firing(1, &ip, (1, 60), at, EventId(3)))
            .await
            .expect("db");
        store
            .record_recidive_firing(&firing(
                1,
                &ip,
                (2, 600),
                at + TimeDelta::seconds(5),
                EventId(4),
            ))
            .await
            .expect("db");
        assert_eq!(
            store.recidive_firings(1, &ip).await.expect("db"),
            Some((
                PastFirings {
                    count: 2,
                    last_fired_at: at + TimeDelta::seconds(5)
                },
                EventId(4)
            ))
        );
        assert_eq!(store.recidive_firings(1, &other).await.expect("db"), None);
        assert_eq!(store.recidive_firings(2, &ip).await.expect("db"), None);
    }

    #[tokio::test]
    async fn a_source_has_one_open_pause_until_resumed() {
        let (_dir, store) = store().await;
        let server = server(&store, "a").await;
        let at = DateTime::from_timestamp_millis(1_800_000_000_000).expect("time");
        assert!(
            store
                .pause_source(server, at, 11, "storm")
                .await
                .expect("db")
        );
        assert!(
            !store
                .pause_source(server, at, 12, "storm")
                .await
                .expect("db")
        );
        let open = store.open_pauses().await.expect("db");
        assert_eq!(open.len(), 1);
        assert_eq!((open[0].server, open[0].shared_bans), (server, 11));
        let resumed = store
            .resume_source(server, "admin", at + TimeDelta::seconds(1))
            .await
            .expect("db")
            .expect("was paused");
        assert_eq!(resumed.resumed_by.as_deref(), Some("admin"));
        assert_eq!(
            store.resume_source(server, "admin", at).await.expect("db"),
            None
        );
        assert!(store.open_pauses().await.expect("db").is_empty());
        assert!(
            store
                .pause_source(server, at, 13, "storm")
                .await
                .expect("db")
        );
    }
}
