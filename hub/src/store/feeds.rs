//! Repository functions of blocklist feeds: the feeds and their read-only tokens through sea-orm's
//! entities, and the ban changes the feeds follow (hand-written SQL over `events`, a lean read of
//! the few columns they need, in id order).

use chrono::{DateTime, TimeDelta, Utc};
use ipnet::IpNet;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set, TransactionTrait,
};

use super::entities::{feed, feed_token};
use super::servers::is_unique_violation;
use super::sql::get;
use super::{Store, StoreError, now_ms, to_time};
use crate::domain::ServerId;
use crate::domain::events::IpOrCidr;
use crate::domain::feeds::{BanChange, FeedDraft, FeedRecord, FeedSpec, FeedTokenRecord};

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
        let mut sql = self.sql(
            "SELECT id, server_id, kind, ip, jail, ban_time, ban_duration, occurred_at \
             FROM events WHERE id > ",
        );
        sql.bind(after)
            .push(" AND kind IN ('ban', 'unban') ORDER BY id LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = self.rows(sql).await?;
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
                net: match ip {
                    IpOrCidr::Ip(addr) => IpNet::from(addr),
                    IpOrCidr::Net(net) => net,
                },
                ban: kind == "ban",
                banned_at,
                until,
            });
        }
        Ok(changes)
    }
}
