//! The alert worker's tables: digests and deliveries. Matching a batch of events and moving the
//! worker's cursor (`cursors`) past it is one transaction, so after a restart no event is alerted on
//! twice or never. Through sea-orm's entities; the read of many addresses' ban counts is
//! hand-written SQL (`sql::Sql`).

use std::collections::HashMap;

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set, TransactionTrait,
};

use super::cursors::{self, Cursor};
use super::entities::{alert_delivery, alert_digest};
use super::sql::Sql;
use super::{Store, StoreError, to_time};
use crate::domain::alerts::{
    AttemptOutcome, Channel, Delivery, DeliveryFilter, DeliveryStatus, Digest, DigestSummary,
    NewDelivery, RuleMatches,
};

fn corrupt(what: impl Into<String>) -> StoreError {
    StoreError::Corrupt(what.into())
}

fn to_digest(row: alert_digest::Model) -> Result<Digest, StoreError> {
    let summary: DigestSummary = serde_json::from_str(&row.summary)
        .map_err(|e| corrupt(format!("digest {}: summary: {e}", row.id)))?;
    Ok(Digest {
        id: row.id,
        rule_id: row.rule_id,
        rule_name: row.rule_name,
        opened_at: to_time(row.opened_at),
        due_at: to_time(row.due_at),
        closed_at: row.closed_at.map(to_time),
        events: u64::try_from(row.events).unwrap_or(0),
        first_event_id: row.first_event_id,
        last_event_id: row.last_event_id,
        summary,
    })
}

fn to_delivery(row: alert_delivery::Model) -> Result<Delivery, StoreError> {
    let status = DeliveryStatus::parse(&row.status)
        .ok_or_else(|| corrupt(format!("delivery {}: status {:?}", row.id, row.status)))?;
    Ok(Delivery {
        id: row.id,
        digest_id: row.digest_id,
        rule_id: row.rule_id,
        rule_name: row.rule_name,
        channel: Channel::parse(&row.channel)
            .ok_or_else(|| corrupt(format!("delivery {}: channel", row.id)))?,
        target: row.target,
        status,
        attempts: u32::try_from(row.attempts).unwrap_or(0),
        max_attempts: u32::try_from(row.max_attempts).unwrap_or(0),
        next_attempt_at: (status == DeliveryStatus::Pending).then(|| to_time(row.next_attempt_at)),
        last_error: row.last_error,
        response: row.response,
        created_at: to_time(row.created_at),
        updated_at: to_time(row.updated_at),
        delivered_at: row.delivered_at.map(to_time),
    })
}

impl Store {
    /// Adds matches to each rule's open digest (opening one, due `window_ms` from `now_ms`, when
    /// there is none) and moves the cursor from `from` to `to`, in one transaction. Returns false
    /// (changing nothing) when the cursor was no longer at `from`: another worker moved it.
    pub async fn record_alert_matches(
        &self,
        from: i64,
        to: i64,
        matches: Vec<RuleMatches>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let txn = self.db.begin().await?;
        if !cursors::advance(&txn, Cursor::Alerts, from, to).await? {
            return Ok(false);
        }
        for rule in matches {
            if rule.matches.is_empty() {
                continue;
            }
            let open = alert_digest::Entity::find()
                .filter(alert_digest::Column::RuleId.eq(rule.rule_id.clone()))
                .filter(alert_digest::Column::ClosedAt.is_null())
                .order_by_desc(alert_digest::Column::Id)
                .one(&txn)
                .await?;
            let first = rule.matches.iter().map(|m| m.event_id).min().unwrap_or(0);
            let last = rule.matches.iter().map(|m| m.event_id).max().unwrap_or(0);
            let count = i64::try_from(rule.matches.len()).unwrap_or(i64::MAX);
            match open {
                Some(row) => {
                    let mut summary: DigestSummary = serde_json::from_str(&row.summary)
                        .map_err(|e| corrupt(format!("digest {}: {e}", row.id)))?;
                    for m in &rule.matches {
                        summary.add(m);
                    }
                    let events = row.events + count;
                    let first_event_id = std::cmp::min(row.first_event_id, first);
                    let last_event_id = std::cmp::max(row.last_event_id, last);
                    let mut active: alert_digest::ActiveModel = row.into();
                    active.events = Set(events);
                    active.first_event_id = Set(first_event_id);
                    active.last_event_id = Set(last_event_id);
                    active.rule_name = Set(rule.rule_name.clone());
                    active.summary =
                        Set(serde_json::to_string(&summary).map_err(|e| corrupt(e.to_string()))?);
                    active.update(&txn).await?;
                }
                None => {
                    let mut summary = DigestSummary::default();
                    for m in &rule.matches {
                        summary.add(m);
                    }
                    alert_digest::ActiveModel {
                        rule_id: Set(rule.rule_id.clone()),
                        rule_name: Set(rule.rule_name.clone()),
                        opened_at: Set(now_ms),
                        due_at: Set(now_ms.saturating_add(rule.window_ms)),
                        closed_at: Set(None),
                        events: Set(count),
                        first_event_id: Set(first),
                        last_event_id: Set(last),
                        summary: Set(
                            serde_json::to_string(&summary).map_err(|e| corrupt(e.to_string()))?
                        ),
                        ..Default::default()
                    }
                    .insert(&txn)
                    .await?;
                }
            }
        }
        txn.commit().await?;
        Ok(true)
    }

    /// Open digests whose window has passed.
    pub async fn due_digests(&self, now_ms: i64) -> Result<Vec<Digest>, StoreError> {
        alert_digest::Entity::find()
            .filter(alert_digest::Column::ClosedAt.is_null())
            .filter(alert_digest::Column::DueAt.lte(now_ms))
            .order_by_asc(alert_digest::Column::Id)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_digest)
            .collect()
    }

    /// Closes a digest and creates its deliveries, due now, in one transaction. False when it was
    /// already closed.
    pub async fn close_digest(
        &self,
        digest: &Digest,
        deliveries: &[NewDelivery],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let txn = self.db.begin().await?;
        let closed = alert_digest::Entity::update_many()
            .col_expr(alert_digest::Column::ClosedAt, Expr::value(now_ms))
            .filter(alert_digest::Column::Id.eq(digest.id))
            .filter(alert_digest::Column::ClosedAt.is_null())
            .exec(&txn)
            .await?;
        if closed.rows_affected != 1 {
            return Ok(false);
        }
        insert_deliveries(&txn, digest, deliveries, now_ms).await?;
        txn.commit().await?;
        Ok(true)
    }

    /// Stores a notice (a digest without events that says `summary.notice`), closed at once, with
    /// its deliveries due now, in one transaction.
    pub async fn record_notice(
        &self,
        rule_id: &str,
        rule_name: &str,
        summary: &DigestSummary,
        deliveries: &[NewDelivery],
        now_ms: i64,
    ) -> Result<Digest, StoreError> {
        let txn = self.db.begin().await?;
        let row = alert_digest::ActiveModel {
            rule_id: Set(rule_id.to_owned()),
            rule_name: Set(rule_name.to_owned()),
            opened_at: Set(now_ms),
            due_at: Set(now_ms),
            closed_at: Set(Some(now_ms)),
            events: Set(0),
            first_event_id: Set(0),
            last_event_id: Set(0),
            summary: Set(serde_json::to_string(summary).map_err(|e| corrupt(e.to_string()))?),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
        let digest = to_digest(row)?;
        insert_deliveries(&txn, &digest, deliveries, now_ms).await?;
        txn.commit().await?;
        Ok(digest)
    }

    pub async fn digest(&self, id: i64) -> Result<Option<Digest>, StoreError> {
        alert_digest::Entity::find_by_id(id)
            .one(&self.db)
            .await?
            .map(to_digest)
            .transpose()
    }

    /// The newest digests, newest first.
    pub async fn list_digests(&self, limit: u64) -> Result<Vec<Digest>, StoreError> {
        alert_digest::Entity::find()
            .order_by_desc(alert_digest::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_digest)
            .collect()
    }

    /// Pending deliveries whose time has come, oldest first.
    pub async fn due_deliveries(
        &self,
        now_ms: i64,
        limit: u64,
    ) -> Result<Vec<Delivery>, StoreError> {
        alert_delivery::Entity::find()
            .filter(alert_delivery::Column::Status.eq(DeliveryStatus::Pending.as_str()))
            .filter(alert_delivery::Column::NextAttemptAt.lte(now_ms))
            .order_by_asc(alert_delivery::Column::NextAttemptAt)
            .order_by_asc(alert_delivery::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_delivery)
            .collect()
    }

    /// The earliest time a pending delivery is due, if any.
    pub async fn next_delivery_due(&self) -> Result<Option<i64>, StoreError> {
        Ok(alert_delivery::Entity::find()
            .filter(alert_delivery::Column::Status.eq(DeliveryStatus::Pending.as_str()))
            .order_by_asc(alert_delivery::Column::NextAttemptAt)
            .one(&self.db)
            .await?
            .map(|row| row.next_attempt_at))
    }

    /// Marks a pending delivery as being sent; false when someone else took it.
    pub async fn claim_delivery(&self, id: i64, now_ms: i64) -> Result<bool, StoreError> {
        let claimed = alert_delivery::Entity::update_many()
            .col_expr(
                alert_delivery::Column::Status,
                Expr::value(DeliveryStatus::Sending.as_str()),
            )
            .col_expr(alert_delivery::Column::UpdatedAt, Expr::value(now_ms))
            .filter(alert_delivery::Column::Id.eq(id))
            .filter(alert_delivery::Column::Status.eq(DeliveryStatus::Pending.as_str()))
            .exec(&self.db)
            .await?;
        Ok(claimed.rows_affected == 1)
    }

    /// Records an attempt's outcome.
    pub async fn finish_delivery(
        &self,
        id: i64,
        outcome: &AttemptOutcome,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let mut update = alert_delivery::Entity::update_many()
            .col_expr(
                alert_delivery::Column::Attempts,
                Expr::col(alert_delivery::Column::Attempts).add(Expr::value(1)),
            )
            .col_expr(alert_delivery::Column::UpdatedAt, Expr::value(now_ms))
            .filter(alert_delivery::Column::Id.eq(id));
        update = match outcome {
            AttemptOutcome::Delivered { response } => update
                .col_expr(
                    alert_delivery::Column::Status,
                    Expr::value(DeliveryStatus::Delivered.as_str()),
                )
                .col_expr(
                    alert_delivery::Column::Response,
                    Expr::value(response.clone()),
                )
                .col_expr(alert_delivery::Column::DeliveredAt, Expr::value(now_ms)),
            AttemptOutcome::Retry { error, next } => update
                .col_expr(
                    alert_delivery::Column::Status,
                    Expr::value(DeliveryStatus::Pending.as_str()),
                )
                .col_expr(
                    alert_delivery::Column::LastError,
                    Expr::value(error.clone()),
                )
                .col_expr(alert_delivery::Column::NextAttemptAt, Expr::value(*next)),
            AttemptOutcome::Failed { error } => update
                .col_expr(
                    alert_delivery::Column::Status,
                    Expr::value(DeliveryStatus::Failed.as_str()),
                )
                .col_expr(
                    alert_delivery::Column::LastError,
                    Expr::value(error.clone()),
                ),
        };
        update.exec(&self.db).await?;
        Ok(())
    }

    /// Deliveries a stopped hub left half-sent go back to pending (sent again: at least once).
    pub async fn reset_sending_deliveries(&self) -> Result<u64, StoreError> {
        let reset = alert_delivery::Entity::update_many()
            .col_expr(
                alert_delivery::Column::Status,
                Expr::value(DeliveryStatus::Pending.as_str()),
            )
            .filter(alert_delivery::Column::Status.eq(DeliveryStatus::Sending.as_str()))
            .exec(&self.db)
            .await?;
        Ok(reset.rows_affected)
    }

    /// Deliveries, newest first.
    pub async fn list_deliveries(
        &self,
        filter: &DeliveryFilter,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut query = alert_delivery::Entity::find();
        if let Some(status) = filter.status {
            query = query.filter(alert_delivery::Column::Status.eq(status.as_str()));
        }
        if let Some(rule) = &filter.rule_id {
            query = query.filter(alert_delivery::Column::RuleId.eq(rule.clone()));
        }
        if let Some(digest) = filter.digest_id {
            query = query.filter(alert_delivery::Column::DigestId.eq(digest));
        }
        if let Some(before) = filter.before {
            query = query.filter(alert_delivery::Column::Id.lt(before));
        }
        query
            .order_by_desc(alert_delivery::Column::Id)
            .limit(filter.limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_delivery)
            .collect()
    }

    /// How often each address was banned, from the per-address rollup (addresses never banned are
    /// left out).
    pub async fn ip_ban_counts(&self, ips: &[String]) -> Result<HashMap<String, u64>, StoreError> {
        // Plus the bans not written to the rollup yet (SQLite), without writing them.
        self.with_pending_bans(ips, self.stored_ip_ban_counts(ips))
            .await
    }

    async fn stored_ip_ban_counts(
        &self,
        ips: &[String],
    ) -> Result<HashMap<String, u64>, StoreError> {
        let mut counts = HashMap::new();
        for chunk in ips.chunks(500) {
            let mut sql = Sql::new(self.backend(), "SELECT ip, bans FROM ip_stats WHERE ip IN ");
            sql.tuple(chunk.iter().map(|ip| ip.clone().into()));
            let rows = self.db.query_all_raw(sql.build()).await?;
            for row in rows {
                let ip: String = row.try_get_by_index(0)?;
                let bans: i64 = row.try_get_by_index(1)?;
                counts.insert(ip, u64::try_from(bans).unwrap_or(0));
            }
        }
        Ok(counts)
    }
}

/// Creates `digest`'s deliveries, due at `now_ms`.
async fn insert_deliveries(
    txn: &sea_orm::DatabaseTransaction,
    digest: &Digest,
    deliveries: &[NewDelivery],
    now_ms: i64,
) -> Result<(), StoreError> {
    for new in deliveries {
        alert_delivery::ActiveModel {
            digest_id: Set(digest.id),
            rule_id: Set(digest.rule_id.clone()),
            rule_name: Set(digest.rule_name.clone()),
            channel: Set(new.channel.as_str().to_owned()),
            target: Set(new.target.clone()),
            status: Set(DeliveryStatus::Pending.as_str().to_owned()),
            attempts: Set(0),
            max_attempts: Set(i32::try_from(new.max_attempts).unwrap_or(i32::MAX)),
            next_attempt_at: Set(now_ms),
            last_error: Set(None),
            response: Set(None),
            created_at: Set(now_ms),
            updated_at: Set(now_ms),
            delivered_at: Set(None),
            ..Default::default()
        }
        .insert(txn)
        .await?;
    }
    Ok(())
}
