//! The servers' callback secrets, stored as SHA-256 hex: set, rotated with an overlap during which
//! the previous one still authenticates, cleared, and looked up by hash (compared in constant
//! time). Hand-written SQL built with `sql::Sql` and run through sea-orm's pool: the rotation's
//! conditional updates in one transaction are not what the entities express.

use sea_orm::{ConnectionTrait, TransactionTrait};
use subtle::ConstantTimeEq;

use super::super::sql::{Sql, get};
use super::super::{Store, StoreError};
use crate::domain::{Server, ServerId};

/// A server's callback secrets as stored (hashes aside).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallbackSecretRow {
    /// Whether a current secret is set.
    pub set: bool,
    /// When it was set (Unix ms); `None` for one set before M0007 or none.
    pub set_at: Option<i64>,
    /// Until when the previous secret is still accepted (Unix ms), if one is.
    pub previous_until: Option<i64>,
}

/// Why a new callback secret was not stored.
#[derive(Debug, PartialEq, Eq)]
pub enum RotateOutcome {
    Rotated(CallbackSecretRow),
    NoServer,
    /// The secret is already one of some server's (current or previous).
    InUse,
}

impl Store {
    /// A server's callback secret state, `None` if there is no such server.
    pub async fn callback_secret_row(
        &self,
        server: ServerId,
    ) -> Result<Option<CallbackSecretRow>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            "SELECT callback_secret_hash, callback_secret_set_at, callback_secret_previous_until \
             FROM servers WHERE id = ",
        );
        sql.bind(server.to_string());
        let row = self.db.query_one_raw(sql.build()).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let hash: Option<String> = row.try_get_by_index(0)?;
        Ok(Some(CallbackSecretRow {
            set: hash.is_some(),
            set_at: row.try_get_by_index(1)?,
            previous_until: row.try_get_by_index(2)?,
        }))
    }

    /// Makes `hash` the server's callback secret. With `previous_until`, the secret it replaces
    /// stays accepted until then; without, it stops at once. One transaction, so a secret is never
    /// half-rotated.
    pub async fn rotate_callback_secret_hash(
        &self,
        server: ServerId,
        hash: &str,
        now_ms: i64,
        previous_until: Option<i64>,
    ) -> Result<RotateOutcome, StoreError> {
        let backend = self.backend();
        let txn = self.db.begin().await?;
        // A write first takes the lock: on SQLite a transaction that reads and then writes fails
        // (busy) when another connection wrote in between.
        let mut sql = Sql::new(
            backend,
            "UPDATE servers SET callback_secret_set_at = callback_secret_set_at WHERE id = ",
        );
        sql.bind(server.to_string());
        let found = txn.execute_raw(sql.build()).await?;
        if found.rows_affected() != 1 {
            return Ok(RotateOutcome::NoServer);
        }
        let mut sql = Sql::new(
            backend,
            "SELECT callback_secret_hash FROM servers WHERE id = ",
        );
        sql.bind(server.to_string());
        let current = txn.query_one_raw(sql.build()).await?;
        let Some(current) = current else {
            return Ok(RotateOutcome::NoServer);
        };
        let current: Option<String> = current.try_get_by_index(0)?;
        let mut sql = Sql::new(
            backend,
            "SELECT id FROM servers WHERE callback_secret_hash = ",
        );
        sql.bind(hash.to_owned())
            .push(" OR callback_secret_previous_hash = ")
            .bind(hash.to_owned());
        let taken = txn.query_one_raw(sql.build()).await?;
        if taken.is_some() {
            return Ok(RotateOutcome::InUse);
        }
        let (previous, until) = match (current, previous_until) {
            (Some(old), Some(until)) if until > now_ms => (Some(old), Some(until)),
            _ => (None, None),
        };
        let mut sql = Sql::new(backend, "UPDATE servers SET callback_secret_hash = ");
        sql.bind(hash.to_owned())
            .push(", callback_secret_set_at = ")
            .bind(now_ms)
            .push(", callback_secret_previous_hash = ")
            .bind(previous)
            .push(", callback_secret_previous_until = ")
            .bind(until)
            .push(" WHERE id = ")
            .bind(server.to_string());
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        Ok(RotateOutcome::Rotated(CallbackSecretRow {
            set: true,
            set_at: Some(now_ms),
            previous_until: until,
        }))
    }

    /// Removes a server's callback secrets, current and previous: it takes no direct callbacks.
    /// Returns whether the server exists.
    pub async fn clear_callback_secrets(&self, server: ServerId) -> Result<bool, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            "UPDATE servers SET callback_secret_hash = NULL, callback_secret_set_at = NULL, \
             callback_secret_previous_hash = NULL, callback_secret_previous_until = NULL \
             WHERE id = ",
        );
        sql.bind(server.to_string());
        let done = self.db.execute_raw(sql.build()).await?;
        Ok(done.rows_affected() == 1)
    }

    /// The server whose previous callback secret hashes to `hash` and is still accepted at
    /// `now_ms`.
    pub async fn server_by_previous_callback_secret(
        &self,
        hash: &str,
        now_ms: i64,
    ) -> Result<Option<ServerId>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            "SELECT id, callback_secret_previous_hash FROM servers \
             WHERE callback_secret_previous_hash = ",
        );
        sql.bind(hash.to_owned())
            .push(" AND callback_secret_previous_until > ")
            .bind(now_ms);
        let row = self.db.query_one_raw(sql.build()).await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let id: String = row.try_get_by_index(0)?;
        let stored: String = row.try_get_by_index(1)?;
        // Looked up by hash; decided in constant time all the same.
        if !bool::from(subtle::ConstantTimeEq::ct_eq(
            stored.as_bytes(),
            hash.as_bytes(),
        )) {
            return Ok(None);
        }
        ServerId::parse(&id)
            .map(Some)
            .map_err(|_| StoreError::Corrupt(format!("server id {id:?}")))
    }
}
impl Store {
    /// Sets (or, with `None`, clears) the SHA-256 hex of the server's callback secret. Returns
    /// whether the server exists.
    pub async fn set_callback_secret(
        &self,
        server: ServerId,
        hash: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut sql = Sql::new(self.backend(), "UPDATE servers SET callback_secret_hash = ");
        sql.bind(hash.map(str::to_owned))
            .push(" WHERE id = ")
            .bind(server.to_string());
        Ok(self.db.execute_raw(sql.build()).await?.rows_affected() == 1)
    }

    /// The server whose callback secret hashes to `hash` (SHA-256 hex), if any.
    pub async fn server_by_callback_secret_hash(
        &self,
        hash: &str,
    ) -> Result<Option<Server>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            "SELECT id, callback_secret_hash FROM servers WHERE callback_secret_hash = ",
        );
        sql.bind(hash.to_owned());
        let Some(row) = self.db.query_one_raw(sql.build()).await? else {
            return Ok(None);
        };
        let id: String = get(&row, 0)?;
        let stored: String = get(&row, 1)?;
        // The lookup went by hash; the comparison that decides is constant-time all the same.
        if !bool::from(stored.as_bytes().ct_eq(hash.as_bytes())) {
            return Ok(None);
        }
        let id =
            ServerId::parse(&id).map_err(|_| StoreError::Corrupt(format!("server id {id:?}")))?;
        self.get_server(id).await
    }
}
