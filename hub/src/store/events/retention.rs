//! Retention in the store: events deleted oldest first in small chunks, and the rollup buckets
//! and addresses older than the cutoff dropped. Hand-written SQL through sea-orm's pool.

use sea_orm::{ConnectionTrait, TransactionTrait};

use super::super::sql::{Sql, to_i64};
use super::super::{Store, StoreError};
use super::rollup_writes::{DISTINCT_IPS, add_total};
use super::rollups::Grain;

impl Store {
    /// Deletes up to `chunk` events that occurred before `cutoff_ms`, oldest first; returns how
    /// many. Small chunks keep each write transaction short, so ingest is never held up for long.
    pub async fn delete_events_before(
        &self,
        cutoff_ms: i64,
        chunk: usize,
    ) -> Result<u64, StoreError> {
        // The bans of the events going away are written first: after a stop they could not be
        // read back from `events` any more.
        self.flush_rollups().await?;
        let mut sql = Sql::new(
            self.backend(),
            "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE occurred_at < ",
        );
        sql.bind(cutoff_ms)
            .push(" ORDER BY occurred_at LIMIT ")
            .bind(i64::try_from(chunk).unwrap_or(i64::MAX))
            .push(")");
        Ok(self.db.execute_raw(sql.build()).await?.rows_affected())
    }

    /// Drops count buckets that start before `cutoff_ms` and addresses last banned before it.
    /// `cutoff_ms` should be a whole day, so no bucket straddles it. Returns the buckets and
    /// addresses dropped.
    pub async fn prune_rollups_before(&self, cutoff_ms: i64) -> Result<(u64, u64), StoreError> {
        self.flush_rollups().await?;
        let txn = self.db.begin().await?;
        let mut buckets = 0;
        for grain in [Grain::Hour, Grain::Day] {
            let mut sql = Sql::new(
                self.backend(),
                &format!("DELETE FROM {} WHERE bucket < ", grain.table()),
            );
            sql.bind(cutoff_ms);
            buckets += txn.execute_raw(sql.build()).await?.rows_affected();
        }
        // An address's last ban is its latest on any server, so every per-server row of an
        // address going away is older than the cutoff too.
        let mut sql = Sql::new(self.backend(), "DELETE FROM ip_servers WHERE last_seen < ");
        sql.bind(cutoff_ms)
            .push(" AND ip IN (SELECT ip FROM ip_stats WHERE last_seen < ")
            .bind(cutoff_ms)
            .push(")");
        txn.execute_raw(sql.build()).await?;
        let mut sql = Sql::new(self.backend(), "DELETE FROM ip_stats WHERE last_seen < ");
        sql.bind(cutoff_ms);
        let ips = txn.execute_raw(sql.build()).await?.rows_affected();
        if ips > 0 {
            add_total(&txn, DISTINCT_IPS, -to_i64(ips, "count")?).await?;
        }
        txn.commit().await?;
        Ok((buckets, ips))
    }
}
