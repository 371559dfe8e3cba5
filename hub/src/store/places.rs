//! A keyset scan over the per-address, per-server ban counts (`ip_servers`), for tallies that
//! need every address once (countries and networks in the insights), read in pages so that a
//! history of millions of addresses never sits in memory as rows. Hand-written SQL (`sql::Sql`).

use sea_orm::ConnectionTrait;

use super::sql::Sql;
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
        if after.is_none() {
            // The per-address rollups may be pending (SQLite): written before a tally starts.
            self.flush_rollups().await?;
        }
        let mut sql = Sql::new(
            self.db.get_database_backend(),
            "SELECT ip, server_id, bans FROM ip_servers",
        );
        if let Some(last) = after {
            // Spelled out rather than as a row-value comparison, which not every SQLite has. The
            // leading `ip >= ?` is what lets both databases start the page in the primary key:
            // with only the `OR` SQLite scanned the table from its start for every page, which
            // over millions of addresses made the count quadratic (minutes over 10M events).
            sql.push(" WHERE ip >= ")
                .bind(last.ip.clone())
                .push(" AND (ip > ")
                .bind(last.ip.clone())
                .push(" OR server_id > ")
                .bind(last.server.to_string())
                .push(")");
        }
        sql.push(" ORDER BY ip, server_id LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        let rows = self.db.query_all_raw(sql.build()).await?;
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
