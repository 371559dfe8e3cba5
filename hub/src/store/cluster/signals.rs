//! `LISTEN/NOTIFY` and advisory locks (PostgreSQL): the notices the cluster's bus receives and
//! the connection that holds the singleton jobs' locks. sqlx connections of their own, outside
//! sea-orm's pool, since both live as long as the session they belong to; a notice is sent with
//! one statement on the pool (`sql::Sql`).

use std::sync::Arc;

use sea_orm::sqlx;
use sea_orm::{DbErr, RuntimeErr};

use super::super::{Store, StoreError};

/// A notification received on a channel this replica listens to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    Message {
        channel: String,
        payload: String,
    },
    /// The listening connection was lost and is back: notifications sent in between are gone.
    Reconnected,
}

/// A `LISTEN` connection (PostgreSQL).
pub struct Listener {
    inner: sqlx::postgres::PgListener,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").finish_non_exhaustive()
    }
}

impl Listener {
    /// The next notification; `Notice::Reconnected` after the connection was lost and restored.
    pub async fn recv(&mut self) -> Result<Notice, StoreError> {
        match self.inner.try_recv().await.map_err(sqlx_err)? {
            Some(n) => Ok(Notice::Message {
                channel: n.channel().to_owned(),
                payload: n.payload().to_owned(),
            }),
            None => Ok(Notice::Reconnected),
        }
    }
}

/// A dedicated database connection holding session-level advisory locks (PostgreSQL). The locks
/// go when the connection does, so a replica that dies releases its jobs at once.
pub struct LockConnection {
    conn: sqlx::PgConnection,
}

impl std::fmt::Debug for LockConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockConnection").finish_non_exhaustive()
    }
}

impl LockConnection {
    /// `pg_try_advisory_lock(key)`: whether this connection holds the lock now.
    pub async fn try_lock(&mut self, key: i64) -> Result<bool, StoreError> {
        sqlx::query_scalar::<_, bool>("SELECT pg_try_advisory_lock($1)")
            .bind(key)
            .fetch_one(&mut self.conn)
            .await
            .map_err(sqlx_err)
    }

    /// Whether the connection (and so every lock it holds) is still alive.
    pub async fn alive(&mut self) -> bool {
        sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(&mut self.conn)
            .await
            .is_ok()
    }
}

fn sqlx_err(e: sqlx::Error) -> StoreError {
    StoreError::Db(DbErr::Conn(RuntimeErr::SqlxError(Arc::new(e))))
}

impl Store {
    /// `pg_notify(channel, payload)`: delivered to every listener after this statement commits.
    pub async fn notify(&self, channel: &str, payload: &str) -> Result<(), StoreError> {
        let mut sql = self.sql("SELECT pg_notify(");
        sql.bind(channel).push(", ").bind(payload).push(")");
        self.exec(sql).await?;
        Ok(())
    }

    /// A connection listening on `channels`; `None` on SQLite, which has no notifications.
    pub async fn listen(&self, channels: &[String]) -> Result<Option<Listener>, StoreError> {
        if !self.is_shared() {
            return Ok(None);
        }
        let pool = self.db.get_postgres_connection_pool();
        let mut inner = sqlx::postgres::PgListener::connect_with(pool)
            .await
            .map_err(sqlx_err)?;
        // Closing the pool at shutdown must not hang on this connection.
        inner.ignore_pool_close_event(false);
        let names: Vec<&str> = channels.iter().map(String::as_str).collect();
        inner.listen_all(names).await.map_err(sqlx_err)?;
        Ok(Some(Listener { inner }))
    }

    /// A connection of its own for advisory locks; `None` on SQLite.
    pub async fn lock_connection(&self) -> Result<Option<LockConnection>, StoreError> {
        if !self.is_shared() {
            return Ok(None);
        }
        let pool = self.db.get_postgres_connection_pool();
        // Detached: the connection never goes back to the pool with a lock held.
        let conn = pool.acquire().await.map_err(sqlx_err)?.detach();
        Ok(Some(LockConnection { conn }))
    }
}
