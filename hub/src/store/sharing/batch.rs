//! What the sharing engine records for one batch of events, in one transaction with its cursor:
//! the shared bans, the lifts of the origin unbans, the origin bans that shared (the storm
//! breaker's window), the recidive firings to remember and the pauses of the sources the breaker
//! tripped. A replica that dies before the commit recorded none of it and the next engine matches
//! the batch again; one that dies after it left everything for delivery, which sends what its
//! targets have not confirmed.

use std::collections::BTreeSet;

use sea_orm::{ConnectionTrait, TransactionTrait};

use super::super::cursors::{self, Cursor};
use super::super::defence::{insert_pause, upsert_firing};
use super::super::sql::Sql;
use super::super::{Store, StoreError};
use super::bans::{LiftScope, insert_shared_bans, lift};
use crate::domain::ServerId;
use crate::domain::breaker::{OriginShare, Trip};
use crate::domain::recidive::NewFiring;
use crate::domain::sharing::{NewSharedBan, OriginLift};

/// Rows per insert statement of the origin bans that shared.
const SHARES_CHUNK: usize = 200;

/// What one batch of events made.
#[derive(Debug, Clone, Default)]
pub struct SharingBatch {
    pub bans: Vec<NewSharedBan>,
    /// The origin unbans, each lifting the earlier shared bans of the policies in `follows`.
    pub lifts: Vec<OriginLift>,
    /// The policies whose shared bans an unban at the origin lifts.
    pub follows: Vec<String>,
    pub shares: Vec<OriginShare>,
    pub firings: Vec<NewFiring>,
    pub trips: Vec<Trip>,
}

/// What recording a batch came to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recorded {
    /// The targets with a lift to be told.
    pub lifted: Vec<ServerId>,
    /// The trips that opened a pause (a source already paused opens none).
    pub paused: Vec<Trip>,
}

impl Store {
    /// Records `batch` and moves the sharing cursor from `from` to `to`, in one transaction.
    /// Returns `None` (changing nothing) when the cursor was no longer at `from`: another engine
    /// moved it.
    pub async fn record_sharing_batch(
        &self,
        from: i64,
        to: i64,
        batch: &SharingBatch,
        now_ms: i64,
    ) -> Result<Option<Recorded>, StoreError> {
        let txn = self.db.begin().await?;
        if !cursors::advance(&txn, Cursor::Sharing, from, to).await? {
            return Ok(None);
        }
        insert_shared_bans(&txn, &batch.bans, now_ms).await?;
        let mut lifted = BTreeSet::new();
        for unban in &batch.lifts {
            let scope = LiftScope {
                ip: &unban.ip,
                origin: Some((unban.origin_server, &unban.origin_jail)),
                policies: Some(&batch.follows),
                before: Some(unban.event),
            };
            lifted.extend(lift(&txn, &scope, now_ms).await?);
        }
        insert_shares(&txn, &batch.shares, now_ms).await?;
        for firing in &batch.firings {
            upsert_firing(&txn, firing).await?;
        }
        let mut paused = Vec::new();
        for trip in &batch.trips {
            if insert_pause(
                &txn,
                trip.server,
                now_ms,
                trip.count.shared_bans,
                &trip.reason,
            )
            .await?
            {
                paused.push(trip.clone());
            }
        }
        txn.commit().await?;
        Ok(Some(Recorded {
            lifted: lifted.into_iter().collect(),
            paused,
        }))
    }
}

/// Inserts the origin bans that shared on `conn`; one already recorded is left as it is.
async fn insert_shares(
    conn: &impl ConnectionTrait,
    shares: &[OriginShare],
    now_ms: i64,
) -> Result<(), StoreError> {
    for chunk in shares.chunks(SHARES_CHUNK) {
        let mut sql = Sql::new(
            conn.get_database_backend(),
            "INSERT INTO sharing_origins (origin_event, origin_server, shared_at, shared_bans) \
             VALUES ",
        );
        for (i, share) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.tuple([
                share.event.0.into(),
                share.server.to_string().into(),
                now_ms.into(),
                i64::from(share.shared_bans).into(),
            ]);
        }
        sql.push(" ON CONFLICT DO NOTHING");
        conn.execute_raw(sql.build()).await?;
    }
    Ok(())
}
