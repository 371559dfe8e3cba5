//! Repository functions of blocklist feeds: the feeds and their read-only tokens through sea-orm's
//! entities, and the ban changes the feeds follow (hand-written SQL over `events`, a lean read of
//! the few columns they need, in id order: the bans that may be in force through the ban end index,
//! the histories of their addresses, the newer changes), and the policies' shared bans in force.

use std::collections::HashSet;

use chrono::{DateTime, TimeDelta, Utc};
use ipnet::IpNet;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set, TransactionTrait,
};

use super::entities::{feed, feed_token};
use super::migration::m0019_guard::BAN_END;
use super::servers::is_unique_violation;
use super::sql::get;
use super::{Store, StoreError, now_ms, to_time};
use crate::domain::ServerId;
use crate::domain::events::{IpOrCidr, ip_key};
use crate::domain::feeds::{
    BanChange, FeedDraft, FeedRecord, FeedSpec, FeedTokenRecord, PolicyShare,
};

/// What a write of a feed came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedWrite {
    Done,
    /// Another feed has this name.
    NameTaken,
    /// No feed with this name.
    NotFound,
}

fn to_feed(row: feed::Model) -> Result<FeedRecord, StoreError> {
    let corrupt = |what: String| StoreError::Corrupt(format!("feed {}: {what}", row.id));
    let draft: FeedDraft = serde_json::from_str(&row.spec).map_err(|e| corrupt(e.to_string()))?;
    let spec = FeedSpec::parse(draft).map_err(|e| corrupt(e.to_string()))?;
    Ok(FeedRecord {
        id: row.id,
        spec,
        created_by: row.created_by,
        created_at: to_time(row.created_at),
        updated_at: to_time(row.updated_at),
    })
}

fn to_token(row: feed_token::Model) -> FeedTokenRecord {
    FeedTokenRecord {
        id: row.id,
        feed_id: row.feed_id,
        name: row.name,
        secret_hash: row.secret_hash,
        created_by: row.created_by,
        created_at: to_time(row.created_at),
        last_used_at: row.last_used_at.map(to_time),
        revoked_at: row.revoked_at.map(to_time),
    }
}

fn spec_json(spec: &FeedSpec) -> Result<String, StoreError> {
    serde_json::to_string(&spec.to_draft()).map_err(|e| StoreError::Corrupt(e.to_string()))
}

impl Store {
    /// Every feed, by name.
    pub async fn feeds(&self) -> Result<Vec<FeedRecord>, StoreError> {
        feed::Entity::find()
            .order_by_asc(feed::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_feed)
            .collect()
    }

    pub async fn feed(&self, name: &str) -> Result<Option<FeedRecord>, StoreError> {
        feed::Entity::find()
            .filter(feed::Column::Name.eq(name.to_owned()))
            .one(&self.db)
            .await?
            .map(to_feed)
            .transpose()
    }

    pub async fn insert_feed(&self, record: &FeedRecord) -> Result<FeedWrite, StoreError> {
        let row = feed::ActiveModel {
            id: Set(record.id.clone()),
            name: Set(record.spec.name.to_string()),
            spec: Set(spec_json(&record.spec)?),
            created_by: Set(record.created_by.clone()),
            created_at: Set(record.created_at.timestamp_millis()),
            updated_at: Set(record.updated_at.timestamp_millis()),
        };
        match row.insert(&self.db).await {
            Ok(_) => Ok(FeedWrite::Done),
            Err(e) if is_unique_violation(&e) => Ok(FeedWrite::NameTaken),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the definition of the feed named `name` (which may rename it).
    pub async fn update_feed(&self, name: &str, spec: &FeedSpec) -> Result<FeedWrite, StoreError> {
        let result = feed::Entity::update_many()
            .col_expr(feed::Column::Name, Expr::value(spec.name.to_string()))
            .col_expr(feed::Column::Spec, Expr::value(spec_json(spec)?))
            .col_expr(feed::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(feed::Column::Name.eq(name.to_owned()))
            .exec(&self.db)
            .await;
        match result {
            Ok(r) if r.rows_affected == 0 => Ok(FeedWrite::NotFound),
            Ok(_) => Ok(FeedWrite::Done),
            Err(e) if is_unique_violation(&e) => Ok(FeedWrite::NameTaken),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes a feed and its tokens; `false` if there was no such feed.
    pub async fn delete_feed(&self, name: &str) -> Result<bool, StoreError> {
        let tx = self.db.begin().await?;
        let Some(row) = feed::Entity::find()
            .filter(feed::Column::Name.eq(name.to_owned()))
            .one(&tx)
            .await?
        else {
            return Ok(false);
        };
        feed_token::Entity::delete_many()
            .filter(feed_token::Column::FeedId.eq(row.id.clone()))
            .exec(&tx)
            .await?;
        feed::Entity::delete_by_id(row.id).exec(&tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The newest change of any feed's definition (Unix ms) and the number of feeds, which tell
    /// a replica that its copy of the definitions is stale.
    pub async fn feeds_version(&self) -> Result<(i64, i64), StoreError> {
        let sql = self.sql("SELECT COALESCE(MAX(updated_at), 0), COUNT(*) FROM feeds");
        let rows = self.rows(sql).await?;
        match rows.first() {
            Some(row) => Ok((get::<i64>(row, 0)?, get::<i64>(row, 1)?)),
            None => Ok((0, 0)),
        }
    }

    pub async fn insert_feed_token(&self, record: &FeedTokenRecord) -> Result<(), StoreError> {
        feed_token::ActiveModel {
            id: Set(record.id.clone()),
            feed_id: Set(record.feed_id.clone()),
            name: Set(record.name.clone()),
            secret_hash: Set(record.secret_hash.clone()),
            created_by: Set(record.created_by.clone()),
            created_at: Set(record.created_at.timestamp_millis()),
            last_used_at: Set(None),
            revoked_at: Set(None),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    pub async fn feed_token(&self, id: &str) -> Result<Option<FeedTokenRecord>, StoreError> {
        Ok(feed_token::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .map(to_token))
    }

    /// A feed's tokens, revoked ones included, newest first.
    pub async fn feed_tokens(&self, feed_id: &str) -> Result<Vec<FeedTokenRecord>, StoreError> {
        Ok(feed_token::Entity::find()
            .filter(feed_token::Column::FeedId.eq(feed_id.to_owned()))
            .order_by_desc(feed_token::Column::CreatedAt)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_token)
            .collect())
    }

    /// Revokes a token of a feed; `false` if the feed has no such unrevoked token.
    pub async fn revoke_feed_token(&self, feed_id: &str, id: &str) -> Result<bool, StoreError> {
        let result = feed_token::Entity::update_many()
            .col_expr(feed_token::Column::RevokedAt, Expr::value(now_ms()))
            .filter(feed_token::Column::Id.eq(id.to_owned()))
            .filter(feed_token::Column::FeedId.eq(feed_id.to_owned()))
            .filter(feed_token::Column::RevokedAt.is_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }

    pub async fn touch_feed_token(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        feed_token::Entity::update_many()
            .col_expr(
                feed_token::Column::LastUsedAt,
                Expr::value(at.timestamp_millis()),
            )
            .filter(feed_token::Column::Id.eq(id.to_owned()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Bans and unbans stored after event `after`, oldest first, at most `limit`.
    pub async fn ban_changes_after(
        &self,
        after: i64,
        limit: u64,
    ) -> Result<Vec<BanChange>, StoreError> {
        let mut sql = self.sql(&format!("SELECT {CHANGE_COLUMNS} FROM events WHERE id > "));
        sql.bind(after)
            .push(" AND kind IN ('ban', 'unban') ORDER BY id LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        to_changes(self.rows(sql).await?)
    }

    /// The id of the newest stored event; 0 when there is none.
    pub async fn newest_event_id(&self) -> Result<i64, StoreError> {
        let rows = self
            .rows(self.sql("SELECT COALESCE(MAX(id), 0) FROM events"))
            .await?;
        rows.first().map_or(Ok(0), |row| get::<i64>(row, 0))
    }

    /// The addresses with a ban event up to `up_to` whose ban has not ended at `now`: a range scan
    /// of the ban events' end index (M0019), so it reads the bans that may be in force and no other.
    pub async fn addresses_banned_at(
        &self,
        up_to: i64,
        now: DateTime<Utc>,
    ) -> Result<Vec<IpNet>, StoreError> {
        let mut sql = self.sql(&format!(
            "SELECT DISTINCT ip FROM events WHERE kind = 'ban' AND {BAN_END} > "
        ));
        sql.bind(now.timestamp_millis())
            .push(" AND id <= ")
            .bind(up_to);
        let mut nets = Vec::new();
        for row in self.rows(sql).await? {
            if let Some(ip) = get::<Option<String>>(&row, 0)? {
                let ip = IpOrCidr::parse(&ip)
                    .map_err(|_| StoreError::Corrupt(format!("event address {ip:?}")))?;
                nets.push(to_net(ip));
            }
        }
        Ok(nets)
    }

    /// Every ban and unban of these addresses up to event `up_to`, oldest first: an address's
    /// history, read through the address index.
    pub async fn ban_history(
        &self,
        nets: &[IpNet],
        up_to: i64,
    ) -> Result<Vec<BanChange>, StoreError> {
        let wanted: HashSet<IpNet> = nets.iter().copied().collect();
        let mut changes = Vec::new();
        for chunk in nets.chunks(HISTORY_CHUNK) {
            let keys = chunk.iter().map(|net| {
                let ip = if net.prefix_len() == net.max_prefix_len() {
                    IpOrCidr::Ip(net.addr())
                } else {
                    IpOrCidr::Net(*net)
                };
                sea_orm::Value::from(ip_key(&ip).to_vec())
            });
            let mut sql = self.sql(&format!(
                "SELECT {CHANGE_COLUMNS} FROM events WHERE ip_key IN "
            ));
            sql.tuple(keys)
                .push(" AND kind IN ('ban', 'unban') AND id <= ")
                .bind(up_to);
            // An address and a network starting at it share a key; each keeps its own history.
            changes.extend(
                to_changes(self.rows(sql).await?)?
                    .into_iter()
                    .filter(|c| wanted.contains(&c.net)),
            );
        }
        changes.sort_by_key(|c| c.event_id);
        Ok(changes)
    }

    /// The shared bans recorded by sharing policies that are in force at `now` (pending or
    /// delivered, not past their expiry).
    pub async fn policy_shares_in_force(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<PolicyShare>, StoreError> {
        let mut sql = self.sql(
            "SELECT ip, target_server, origin_jail, source_id, created_at, expires_at \
             FROM shared_bans WHERE source_kind = 'policy' \
             AND status IN ('pending', 'delivered') AND (expires_at IS NULL OR expires_at > ",
        );
        sql.bind(now.timestamp_millis()).push(") ORDER BY id");
        let mut shares = Vec::new();
        for row in self.rows(sql).await? {
            let ip: String = get(&row, 0)?;
            let target: String = get(&row, 1)?;
            let corrupt = |what: &str| StoreError::Corrupt(format!("shared ban: {what}"));
            shares.push(PolicyShare {
                net: to_net(IpOrCidr::parse(&ip).map_err(|_| corrupt("address"))?),
                target: ServerId::parse(&target).map_err(|_| corrupt("target server"))?,
                origin_jail: get(&row, 2)?,
                policy_id: get(&row, 3)?,
                created_at: to_time(get(&row, 4)?),
                until: get::<Option<i64>>(&row, 5)?.map(to_time),
            });
        }
        Ok(shares)
    }
}

/// The columns [`to_changes`] reads, in its order.
const CHANGE_COLUMNS: &str = "id, server_id, kind, ip, jail, ban_time, ban_duration, occurred_at";
/// Addresses per query of [`Store::ban_history`].
const HISTORY_CHUNK: usize = 256;

fn to_net(ip: IpOrCidr) -> IpNet {
    match ip {
        IpOrCidr::Ip(addr) => IpNet::from(addr),
        IpOrCidr::Net(net) => net,
    }
}

/// Rows of [`CHANGE_COLUMNS`] as ban changes; rows without an address or a jail are left out.
fn to_changes(rows: Vec<sea_orm::QueryResult>) -> Result<Vec<BanChange>, StoreError> {
    let mut changes = Vec::with_capacity(rows.len());
    for row in rows {
        let id: i64 = get(&row, 0)?;
        let corrupt = |what: &str| StoreError::Corrupt(format!("event {id}: {what}"));
        let server: String = get(&row, 1)?;
        let kind: String = get(&row, 2)?;
        let (Some(ip), Some(jail)) = (get::<Option<String>>(&row, 3)?, get(&row, 4)?) else {
            continue;
        };
        let ip = IpOrCidr::parse(&ip).map_err(|_| corrupt("address"))?;
        let ban_time: Option<i64> = get(&row, 5)?;
        let duration: Option<i64> = get(&row, 6)?;
        let occurred_at = to_time(get(&row, 7)?);
        let banned_at = ban_time
            .and_then(|s| DateTime::from_timestamp(s, 0))
            .unwrap_or(occurred_at);
        // fail2ban's `-1` (permanent) and an unknown duration both last until the unban.
        let until = duration
            .filter(|d| *d >= 0)
            .map(|d| banned_at + TimeDelta::seconds(d));
        changes.push(BanChange {
            event_id: id,
            server_id: ServerId::parse(&server).map_err(|_| corrupt("server id"))?,
            jail,
            net: to_net(ip),
            ban: kind == "ban",
            banned_at,
            until,
        });
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::events::{
        BanDuration, BanFacts, EventBody, EventSource, JailName, Logs, NewEvent,
    };
    use crate::domain::{Labels, NewServer, ServerName};

    async fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::TempDir::new().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("hub.db").display());
        let store = Store::connect(&url, 2).await.expect("connect");
        (dir, store)
    }

    fn event(ip: &str, ban: bool, at: i64, duration: Option<BanDuration>) -> NewEvent {
        let facts = BanFacts {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse("sshd").expect("jail"),
            hostname: String::new(),
            failures: 3,
            logs: Logs::default(),
            ban_time: Some(at),
            ban_duration: duration,
            ban_count: None,
        };
        NewEvent {
            occurred_at: DateTime::from_timestamp(at, 0).expect("time"),
            source: EventSource::Direct,
            body: if ban {
                EventBody::Ban(facts)
            } else {
                EventBody::Unban(facts)
            },
        }
    }

    /// The bans that may be in force are read through the ban end index, not by a scan of the
    /// events; an address's history comes whole, unbans and older bans included.
    #[tokio::test]
    async fn the_bans_in_force_are_read_through_the_ban_end_index() {
        let (_dir, store) = store().await;
        let server = store
            .create_server(NewServer {
                name: ServerName::parse("a").expect("name"),
                description: String::new(),
                labels: Labels::default(),
            })
            .await
            .expect("db")
            .id;
        let hour = Some(BanDuration::Seconds(3600));
        for (ip, ban, at, duration) in [
            ("192.0.2.1", true, 1_000, hour),
            ("192.0.2.1", true, 10_000, hour),
            ("192.0.2.2", true, 10_000, Some(BanDuration::Permanent)),
            ("192.0.2.3", true, 1_000, hour),
            ("192.0.2.4", true, 10_000, None),
            ("192.0.2.4", false, 10_100, None),
            ("198.51.100.0/24", true, 10_000, hour),
        ] {
            store
                .insert_direct_event(server, event(ip, ban, at, duration))
                .await
                .expect("db");
        }
        let head = store.newest_event_id().await.expect("db");
        assert_eq!(head, 7);
        let now = DateTime::from_timestamp(12_000, 0).expect("time");
        let mut nets: Vec<String> = store
            .addresses_banned_at(head, now)
            .await
            .expect("db")
            .iter()
            .map(ToString::to_string)
            .collect();
        nets.sort();
        // 192.0.2.3's hour is over; 192.0.2.4's unban is the history's business.
        assert_eq!(
            nets,
            [
                "192.0.2.1/32",
                "192.0.2.2/32",
                "192.0.2.4/32",
                "198.51.100.0/24"
            ]
        );
        assert!(store.addresses_banned_at(3, now).await.expect("db").len() == 2);

        let wanted: Vec<IpNet> = ["192.0.2.1/32", "192.0.2.4/32", "198.51.100.0/24"]
            .iter()
            .map(|n| n.parse().expect("net"))
            .collect();
        let history: Vec<(i64, bool)> = store
            .ban_history(&wanted, head)
            .await
            .expect("db")
            .iter()
            .map(|c| (c.event_id, c.ban))
            .collect();
        assert_eq!(
            history,
            [(1, true), (2, true), (5, true), (6, false), (7, true)]
        );

        let mut plan = store.sql(&format!(
            "EXPLAIN QUERY PLAN SELECT DISTINCT ip FROM events WHERE kind = 'ban' AND {BAN_END} > "
        ));
        plan.bind(0_i64).push(" AND id <= ").bind(head);
        let detail: Vec<String> = store
            .rows(plan)
            .await
            .expect("db")
            .iter()
            .filter_map(|row| get::<String>(row, 3).ok())
            .collect();
        assert!(
            detail.iter().any(|d| d.contains("events_ban_end")),
            "{detail:?}"
        );
    }
}
