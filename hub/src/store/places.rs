//! A keyset scan over the per-address, per-server ban counts (`ip_servers`), for tallies that
//! need every address once (countries and networks in the insights), read in pages so that a
//! history of millions of addresses never sits in memory as rows.

use sea_orm::{ConnectionTrait, DbBackend, Statement, Value};

use super::{Store, StoreError};
use crate::domain::ServerId;

/// One row of `ip_servers`: an address (or network) as stored, a server, and its bans there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpBans {
    pub ip: String,
    pub server: ServerId,
    pub bans: u64,
}

impl Store {
    /// Up to `limit` rows of `ip_servers` after `after` (in `(ip, server_id)` order), the first
    /// page when `after` is `None`.
    pub async fn ip_bans_page(
        &self,
        after: Option<&IpBans>,
        limit: u64,
    ) -> Result<Vec<IpBans>, StoreError> {
        let backend = self.db.get_database_backend();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (text, values): (String, Vec<Value>) = match after {
            None => (
                format!(
                    "SELECT ip, server_id, bans FROM ip_servers ORDER BY ip, server_id LIMIT {}",
                    placeholder(backend, 1)
                ),
                vec![limit.into()],
            ),
            // Spelled out rather than as a row-value comparison, which not every SQLite has.
            Some(last) => (
                format!(
                    "SELECT ip, server_id, bans FROM ip_servers \
                     WHERE ip > {p1} OR (ip = {p1} AND server_id > {p2}) \
                     ORDER BY ip, server_id LIMIT {p3}",
                    p1 = placeholder(backend, 1),
                    p2 = placeholder(backend, 2),
                    p3 = placeholder(backend, 3),
                ),
                vec![
                    last.ip.clone().into(),
                    last.server.to_string().into(),
                    limit.into(),
                ],
            ),
        };
        let rows = self
            .db
            .query_all_raw(Statement::from_sql_and_values(backend, text, values))
            .await?;
        rows.iter()
            .map(|row| {
                let ip: String = row.try_get_by_index(0)?;
                let server: String = row.try_get_by_index(1)?;
                let bans: i64 = row.try_get_by_index(2)?;
                Ok(IpBans {
                    ip,
                    server: ServerId::parse(&server)
                        .map_err(|_| StoreError::Corrupt(format!("ip_servers: {server:?}")))?,
                    bans: u64::try_from(bans).unwrap_or(0),
                })
            })
            .collect()
    }
}

fn placeholder(backend: DbBackend, n: usize) -> String {
    match backend {
        DbBackend::Postgres => format!("${n}"),
        // SQLite numbers its parameters too, so one value can be used twice.
        _ => format!("?{n}"),
    }
}
