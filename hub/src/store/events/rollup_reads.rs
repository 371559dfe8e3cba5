//! Reading the rollups back: count series and groups for stats and insights, the address
//! rankings, one address's details and the distinct-address total. Every read applies what is
//! pending first (see `flusher`), so it never sees a committed event late. Hand-written SQL.

use sea_orm::{ConnectionTrait, QueryResult};

use super::super::sql::{Sql, get, to_u64};
use super::super::{Store, StoreError, to_time};
use super::rollup_writes::DISTINCT_IPS;
use super::rollups::{CountRow, Grain};
use crate::domain::ServerId;
use crate::domain::events::{EventKind, IpOnServer, IpOrCidr, IpSummary, JailName};

/// Bans from which an address is in the partial ranking index of `ip_stats` (`ip_stats_hot`), and
/// of `ip_servers` (`ip_servers_hot`); the numbers are those of migration M0002.
const HOT_IP_BANS: i64 = 8;
const HOT_IP_SERVER_BANS: i64 = 4;

fn kind_of(raw: &str) -> Result<EventKind, StoreError> {
    EventKind::parse(raw).ok_or_else(|| StoreError::Corrupt(format!("rollup kind {raw:?}")))
}

fn ip_summary(row: &QueryResult) -> Result<IpSummary, StoreError> {
    let last_server: String = get(row, 6)?;
    Ok(IpSummary {
        ip: get(row, 0)?,
        bans: to_u64(get(row, 1)?),
        servers: to_u64(get(row, 2)?),
        first_seen: to_time(get(row, 3)?),
        last_seen: to_time(get(row, 4)?),
        last_jail: Some(get::<String>(row, 5)?).filter(|j| !j.is_empty()),
        last_server: ServerId::parse(&last_server).ok(),
    })
}

const IP_SUMMARY_COLUMNS: &str =
    "ip, bans, servers, first_seen, last_seen, last_jail, last_server_id";

impl Store {
    /// Counts per bucket and kind for one server (or all) and one jail (or all), buckets in
    /// `[from_ms, to_ms)`.
    pub async fn count_series(
        &self,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<CountRow<i64>>, StoreError> {
        // PostgreSQL: the fleet-wide counts may be pending (store::events).
        self.flush_counts().await?;
        let mut sql = Sql::new(
            self.backend(),
            &format!(
                "SELECT bucket, kind, count FROM {} WHERE server_id = ",
                grain.table()
            ),
        );
        sql.bind(server.map(|s| s.to_string()).unwrap_or_default())
            .push(" AND jail = ")
            .bind(jail.map(|j| j.as_str().to_owned()).unwrap_or_default())
            .push(" AND bucket >= ")
            .bind(from_ms)
            .push(" AND bucket < ")
            .bind(to_ms);
        self.count_rows(sql).await
    }

    /// Counts per server and kind in `[from_ms, to_ms)`, of one jail (or all), of one server (or
    /// every server).
    pub async fn count_by_server(
        &self,
        grain: Grain,
        jail: Option<&JailName>,
        server: Option<ServerId>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<CountRow<String>>, StoreError> {
        let jail = jail.map(|j| j.as_str().to_owned()).unwrap_or_default();
        let server = server.map(|s| s.to_string());
        self.count_by(
            grain,
            ("server_id", server),
            ("jail", jail),
            (from_ms, to_ms),
        )
        .await
    }

    /// Counts per jail and kind in `[from_ms, to_ms)`, on one server (or all), of one jail (or
    /// every jail).
    pub async fn count_by_jail(
        &self,
        grain: Grain,
        server: Option<ServerId>,
        jail: Option<&JailName>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<CountRow<String>>, StoreError> {
        // PostgreSQL: the fleet-wide counts may be pending (store::events).
        self.flush_counts().await?;
        let server = server.map(|s| s.to_string()).unwrap_or_default();
        let jail = jail.map(|j| j.as_str().to_owned());
        self.count_by(
            grain,
            ("jail", jail),
            ("server_id", server),
            (from_ms, to_ms),
        )
        .await
    }

    /// Counts per value of the `group` column and kind in `[from, to)`: of one value (`Some`) or
    /// of every value but the all-values rows (`''`), within the rows of `fixed`'s column whose
    /// value is given (`''`: all of them). The columns are this module's literals, never input.
    async fn count_by(
        &self,
        grain: Grain,
        (group, only): (&'static str, Option<String>),
        (fixed, value): (&'static str, String),
        (from, to): (i64, i64),
    ) -> Result<Vec<CountRow<String>>, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            &format!(
                "SELECT {group}, kind, CAST(SUM(count) AS BIGINT) FROM {} WHERE {fixed} = ",
                grain.table()
            ),
        );
        sql.bind(value);
        match only {
            Some(only) => sql.push(&format!(" AND {group} = ")).bind(only),
            None => sql.push(&format!(" AND {group} <> ''")),
        };
        sql.push(" AND bucket >= ")
            .bind(from)
            .push(" AND bucket < ")
            .bind(to)
            .push(&format!(" GROUP BY {group}, kind"));
        self.count_rows(sql).await
    }

    /// `(key, kind, count)` rows.
    async fn count_rows<K: sea_orm::TryGetable>(
        &self,
        sql: Sql,
    ) -> Result<Vec<CountRow<K>>, StoreError> {
        self.db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                Ok(CountRow {
                    key: get(row, 0)?,
                    kind: kind_of(&get::<String>(row, 1)?)?,
                    count: to_u64(get(row, 2)?),
                })
            })
            .collect()
    }

    /// The most banned addresses, over every server or on one. Read from the partial index of
    /// often-banned addresses; only when it holds fewer than `limit` (a young or very spread
    /// history) is the whole table ranked.
    pub async fn top_ips(
        &self,
        server: Option<ServerId>,
        limit: usize,
    ) -> Result<Vec<IpSummary>, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let hot = self.ranked_ips(server, limit, true).await?;
        if hot.len() >= limit {
            return Ok(hot);
        }
        self.ranked_ips(server, limit, false).await
    }

    async fn ranked_ips(
        &self,
        server: Option<ServerId>,
        limit: usize,
        hot_only: bool,
    ) -> Result<Vec<IpSummary>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = match server {
            None => {
                let mut sql = Sql::new(
                    self.backend(),
                    &format!("SELECT {IP_SUMMARY_COLUMNS} FROM ip_stats WHERE 1 = 1"),
                );
                if hot_only {
                    sql.push(&format!(" AND bans >= {HOT_IP_BANS}"));
                }
                sql.push(" ORDER BY bans DESC, ip DESC LIMIT ").bind(limit);
                sql
            }
            Some(server) => {
                let mut sql = Sql::new(
                    self.backend(),
                    "SELECT s.ip, s.bans, t.servers, s.first_seen, s.last_seen, t.last_jail, \
                     t.last_server_id FROM ip_servers s JOIN ip_stats t ON t.ip = s.ip \
                     WHERE s.server_id = ",
                );
                sql.bind(server.to_string());
                if hot_only {
                    sql.push(&format!(" AND s.bans >= {HOT_IP_SERVER_BANS}"));
                }
                sql.push(" ORDER BY s.bans DESC, s.ip DESC LIMIT ")
                    .bind(limit);
                sql
            }
        };
        self.db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(ip_summary)
            .collect()
    }

    /// Addresses banned on more than one server, most servers first, then most bans.
    pub async fn repeat_offenders(&self, limit: usize) -> Result<Vec<IpSummary>, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let mut sql = Sql::new(
            self.backend(),
            &format!(
                "SELECT {IP_SUMMARY_COLUMNS} FROM ip_stats WHERE servers >= 2 \
                 ORDER BY servers DESC, bans DESC, ip DESC LIMIT "
            ),
        );
        sql.bind(i64::try_from(limit).unwrap_or(i64::MAX));
        self.db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(ip_summary)
            .collect()
    }

    /// One address: its summary and its bans per server, if it was ever banned.
    pub async fn ip_details(
        &self,
        ip: &IpOrCidr,
    ) -> Result<Option<(IpSummary, Vec<IpOnServer>)>, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let text = ip.to_string();
        let mut sql = Sql::new(
            self.backend(),
            &format!("SELECT {IP_SUMMARY_COLUMNS} FROM ip_stats WHERE ip = "),
        );
        sql.bind(text.clone());
        let Some(row) = self.db.query_one_raw(sql.build()).await? else {
            return Ok(None);
        };
        let summary = ip_summary(&row)?;
        let mut sql = Sql::new(
            self.backend(),
            "SELECT server_id, bans, first_seen, last_seen FROM ip_servers WHERE ip = ",
        );
        sql.bind(text).push(" ORDER BY bans DESC, server_id");
        let servers = self
            .db
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                let server: String = get(row, 0)?;
                Ok(IpOnServer {
                    server: ServerId::parse(&server)
                        .map_err(|_| StoreError::Corrupt(format!("ip_servers: {server:?}")))?,
                    bans: to_u64(get(row, 1)?),
                    first_seen: to_time(get(row, 2)?),
                    last_seen: to_time(get(row, 3)?),
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Some((summary, servers)))
    }

    /// How many distinct addresses the per-address rollup holds.
    pub async fn distinct_ips(&self) -> Result<u64, StoreError> {
        // The per-address rollups may be pending (SQLite): written first (store::events).
        self.flush_rollups().await?;
        let mut sql = Sql::new(
            self.backend(),
            "SELECT value FROM event_totals WHERE name = ",
        );
        sql.bind(DISTINCT_IPS);
        Ok(match self.db.query_one_raw(sql.build()).await? {
            Some(row) => to_u64(get(&row, 0)?),
            None => 0,
        })
    }
}
