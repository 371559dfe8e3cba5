//! Writing rollups to their tables: upserts of the hourly and daily counts, of the per-address
//! tables `ip_servers` and `ip_stats`, and of the totals in `event_totals`, in the caller's
//! transaction. Hand-written SQL that both databases accept, rows in sorted key order so that
//! concurrent PostgreSQL transactions lock them in one order and cannot deadlock.

use std::collections::{BTreeMap, HashMap};

use sea_orm::{ConnectionTrait, DatabaseTransaction, DbBackend};

use super::super::StoreError;
use super::super::sql::{Sql, fixed_chunks, get};
use super::rollups::{Grain, IpAgg, Rollups};
use crate::domain::ServerId;

/// `event_totals` row counting distinct banned addresses in `ip_stats`.
pub(super) const DISTINCT_IPS: &str = "distinct_ips";

/// SQLite: `event_totals` row holding the event id up to which the per-address rollups are written
/// (see [`DeferredRollups`]).
pub(super) const ROLLUPS_APPLIED_TO: &str = "rollups_applied_to";

impl Rollups {
    /// Writes the per-address rollups and moves the SQLite watermark to [`Rollups::upto`], in
    /// `txn`: the bans of every event up to there are then in the tables, exactly once.
    pub(super) async fn apply_deferred(&self, txn: &DatabaseTransaction) -> Result<(), StoreError> {
        let new_ips = self.apply_addresses(txn).await?;
        if new_ips > 0 {
            add_total(txn, DISTINCT_IPS, new_ips).await?;
        }
        let mut sql = Sql::new(
            txn.get_database_backend(),
            "INSERT INTO event_totals (name, value) VALUES ",
        );
        sql.tuple([ROLLUPS_APPLIED_TO.into(), self.upto.into()])
            .push(" ON CONFLICT (name) DO UPDATE SET value = excluded.value");
        txn.execute_raw(sql.build()).await?;
        Ok(())
    }

    /// Adds the batch to the rollup tables. Only one row per statement chunk comes back (the
    /// count of known addresses): a returned row costs a hand-off between SQLite's worker thread
    /// and the async side, and rows per address were most of a batch's round trips before. The
    /// rows every batch touches (the fleet-wide counts of the current hour and day, the distinct
    /// address total) are written last, so on PostgreSQL concurrent batches hold their locks only
    /// from there to the commit.
    pub(super) async fn apply(self, txn: &DatabaseTransaction) -> Result<(), StoreError> {
        let backend = txn.get_database_backend();
        let new_ips = self.apply_addresses(txn).await?;
        for sql in self.count_statements(backend) {
            txn.execute_raw(sql.build()).await?;
        }
        if new_ips > 0 {
            add_total(txn, DISTINCT_IPS, new_ips).await?;
        }
        Ok(())
    }

    /// The upserts that add the counts to the hourly and daily tables.
    pub(super) fn count_statements(&self, backend: DbBackend) -> Vec<Sql> {
        let mut statements = Vec::new();
        for grain in [Grain::Hour, Grain::Day] {
            let rows: Vec<_> = self.counts.iter().filter(|(k, _)| k.0 == grain).collect();
            let table = grain.table();
            let head =
                format!("INSERT INTO {table} (server_id, jail, bucket, kind, count) VALUES ");
            let tail = format!(
                " ON CONFLICT (server_id, jail, bucket, kind) \
                 DO UPDATE SET count = {table}.count + excluded.count"
            );
            for chunk in fixed_chunks(&rows) {
                let mut sql = Sql::new(backend, &head);
                for (i, ((_, server, jail, bucket, kind), count)) in chunk.iter().enumerate() {
                    if i > 0 {
                        sql.push(", ");
                    }
                    sql.tuple([
                        server.clone().into(),
                        jail.clone().into(),
                        (*bucket).into(),
                        (*kind).into(),
                        (**count).into(),
                    ]);
                }
                sql.push(&tail);
                statements.push(sql);
            }
        }
        statements
    }

    /// Adds the batch's bans to `ip_servers` and `ip_stats`; returns how many addresses were new.
    pub(super) async fn apply_addresses(
        &self,
        txn: &DatabaseTransaction,
    ) -> Result<i64, StoreError> {
        if self.ip_servers.is_empty() {
            return Ok(0);
        }
        let backend = txn.get_database_backend();
        // SQLite has one writer at a time, so what this transaction reads is what it updates:
        // the new addresses and servers are counted in the database and nothing is read back per
        // row. PostgreSQL's concurrent writers need what each upsert returns (see below).
        let serial = backend == DbBackend::Sqlite;
        let mut new_pairs: HashMap<&str, i64> = HashMap::new();
        // As stored, in the order of the tables' keys: neighbouring upserts share pages, and
        // PostgreSQL's writers lock rows in one order. A batch has few servers, each written once.
        let mut server_texts: HashMap<ServerId, String> = HashMap::new();
        let mut pairs: Vec<((String, String), &IpAgg)> = self
            .ip_servers
            .iter()
            .map(|((ip, server), agg)| {
                let server = server_texts
                    .entry(*server)
                    .or_insert_with(|| server.to_string())
                    .clone();
                ((ip.to_string(), server), agg)
            })
            .collect();
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));

        // Per address and server. Written before `ip_stats`, whose server count is read from it.
        for chunk in fixed_chunks(&pairs) {
            let mut sql = Sql::new(
                backend,
                "INSERT INTO ip_servers (ip, server_id, bans, first_seen, last_seen) VALUES ",
            );
            for (i, ((ip, server), agg)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.tuple([
                    ip.clone().into(),
                    server.clone().into(),
                    agg.bans.into(),
                    agg.first.into(),
                    agg.last.into(),
                ]);
            }
            sql.push(
                " ON CONFLICT (ip, server_id) DO UPDATE SET \
                 bans = ip_servers.bans + excluded.bans, \
                 first_seen = CASE WHEN excluded.first_seen < ip_servers.first_seen \
                     THEN excluded.first_seen ELSE ip_servers.first_seen END, \
                 last_seen = CASE WHEN excluded.last_seen > ip_servers.last_seen \
                     THEN excluded.last_seen ELSE ip_servers.last_seen END",
            );
            if serial {
                txn.execute_raw(sql.build()).await?;
                continue;
            }
            // A returned count equal to the batch's means the row is new, so the address was
            // banned on one more server. The returned row is the one after any concurrent
            // transaction that held it committed, which a count read in this statement's
            // snapshot would not see.
            sql.push(" RETURNING ip, server_id, bans");
            for row in txn.query_all_raw(sql.build()).await? {
                let ip: String = get(&row, 0)?;
                let server: String = get(&row, 1)?;
                let bans: i64 = get(&row, 2)?;
                let key = (ip, server);
                if let Ok(at) = pairs.binary_search_by(|pair| pair.0.cmp(&key))
                    && let ((ip, _), agg) = &pairs[at]
                    && agg.bans == bans
                {
                    *new_pairs.entry(ip.as_str()).or_default() += 1;
                }
            }
        }

        // Per address: the batch's bans over every server, the server of the latest ban, and on
        // how many servers the batch banned it.
        let mut per_ip: BTreeMap<&str, (IpAgg, &str, i64)> = BTreeMap::new();
        for ((ip, server), agg) in &pairs {
            match per_ip.get_mut(ip.as_str()) {
                None => {
                    per_ip.insert(ip, ((*agg).clone(), server, 1));
                }
                Some(entry) => {
                    if agg.last >= entry.0.last {
                        entry.1 = server;
                    }
                    entry.0.add(agg);
                    entry.2 += 1;
                }
            }
        }
        if !serial {
            // On PostgreSQL `servers` is the number of servers new for the address.
            for (ip, entry) in per_ip.iter_mut() {
                entry.2 = new_pairs.get(ip).copied().unwrap_or(0);
            }
        }
        let rows: Vec<_> = per_ip.into_iter().collect();
        let mut new_ips = 0i64;
        for chunk in fixed_chunks(&rows) {
            if serial {
                // Addresses not in `ip_stats` yet are new distinct addresses: one count per chunk.
                let mut sql = Sql::new(backend, "SELECT COUNT(*) FROM ip_stats WHERE ip IN ");
                sql.tuple(chunk.iter().map(|(ip, _)| (*ip).to_owned().into()));
                let known: i64 = match txn.query_one_raw(sql.build()).await? {
                    Some(row) => get(&row, 0)?,
                    None => 0,
                };
                new_ips += i64::try_from(chunk.len()).unwrap_or(i64::MAX) - known;
            }

            // A new address is on the servers this batch banned it on. SQLite: a known one on as
            // many servers as `ip_servers` (already updated above) has rows for it; `ip_servers`
            // rows only go together with their `ip_stats` row (retention), so the two agree.
            // PostgreSQL: on as many more as it is new on.
            let mut sql = Sql::new(
                backend,
                "INSERT INTO ip_stats (ip, bans, servers, first_seen, last_seen, last_jail, \
                 last_server_id) VALUES ",
            );
            for (i, (ip, (agg, server, servers))) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.tuple([
                    (*ip).to_owned().into(),
                    agg.bans.into(),
                    (*servers).into(),
                    agg.first.into(),
                    agg.last.into(),
                    agg.last_jail.clone().into(),
                    (*server).to_owned().into(),
                ]);
            }
            sql.push(if serial {
                " ON CONFLICT (ip) DO UPDATE SET \
                 bans = ip_stats.bans + excluded.bans, \
                 servers = (SELECT COUNT(*) FROM ip_servers WHERE ip_servers.ip = excluded.ip), "
            } else {
                " ON CONFLICT (ip) DO UPDATE SET \
                 bans = ip_stats.bans + excluded.bans, \
                 servers = ip_stats.servers + excluded.servers, "
            });
            sql.push(
                "first_seen = CASE WHEN excluded.first_seen < ip_stats.first_seen \
                     THEN excluded.first_seen ELSE ip_stats.first_seen END, \
                 last_jail = CASE WHEN excluded.last_seen >= ip_stats.last_seen \
                     THEN excluded.last_jail ELSE ip_stats.last_jail END, \
                 last_server_id = CASE WHEN excluded.last_seen >= ip_stats.last_seen \
                     THEN excluded.last_server_id ELSE ip_stats.last_server_id END, \
                 last_seen = CASE WHEN excluded.last_seen > ip_stats.last_seen \
                     THEN excluded.last_seen ELSE ip_stats.last_seen END",
            );
            if serial {
                txn.execute_raw(sql.build()).await?;
                continue;
            }
            // A returned total equal to the batch's means the address is new (see above).
            sql.push(" RETURNING ip, bans");
            let batch: HashMap<&str, i64> = chunk.iter().map(|(ip, e)| (*ip, e.0.bans)).collect();
            for row in txn.query_all_raw(sql.build()).await? {
                let ip: String = get(&row, 0)?;
                let bans: i64 = get(&row, 1)?;
                if batch.get(ip.as_str()) == Some(&bans) {
                    new_ips += 1;
                }
            }
        }
        Ok(new_ips)
    }
}

pub(super) async fn add_total(
    txn: &DatabaseTransaction,
    name: &str,
    delta: i64,
) -> Result<(), StoreError> {
    let mut sql = Sql::new(
        txn.get_database_backend(),
        "INSERT INTO event_totals (name, value) VALUES ",
    );
    sql.tuple([name.to_owned().into(), delta.into()])
        .push(" ON CONFLICT (name) DO UPDATE SET value = event_totals.value + excluded.value");
    txn.execute_raw(sql.build()).await?;
    Ok(())
}
