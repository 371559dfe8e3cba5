//! Shared bans: inserted and lifted inside the engine's batch transaction (`batch`), read per
//! target as the work to deliver (bans to hold, addresses to lift), settled once the target's agent
//! confirmed, lifted everywhere, expired, and listed for the views.

use std::collections::{BTreeMap, HashMap, HashSet};

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    TransactionTrait,
};

use super::super::entities::shared_ban;
use super::super::sql::{Sql, get, to_u64};
use super::super::{Store, StoreError, to_time};
use super::corrupt;
use crate::domain::ServerId;
use crate::domain::events::EventId;
use crate::domain::sharing::{
    NewSharedBan, ShareSource, SharedBan, SharedBanFilter, SharedBanStatus, SourceKind,
};

/// Rows per insert statement.
const INSERT_CHUNK: usize = 200;
/// Values per `IN (…)` list.
const IN_CHUNK: usize = 500;

/// What one target server is to be told, with the rows that telling settles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TargetWork {
    pub target: Option<ServerId>,
    /// Address → (expiry in Unix ms, `None` for until lifted; reason), one per address.
    pub holds: BTreeMap<String, (Option<i64>, String)>,
    /// Addresses with no shared ban left on the target.
    pub lifts: Vec<String>,
    /// Pending rows that become delivered.
    pub pending_ids: Vec<i64>,
    /// Lifted rows whose lift is then confirmed.
    pub lift_ids: Vec<i64>,
}

impl TargetWork {
    pub fn is_empty(&self) -> bool {
        self.holds.is_empty() && self.lifts.is_empty()
    }
}

fn to_shared_ban(row: shared_ban::Model) -> Result<SharedBan, StoreError> {
    let bad = |what: &str| corrupt(format!("shared ban {}: {what}", row.id));
    Ok(SharedBan {
        id: row.id,
        target: ServerId::parse(&row.target_server).map_err(|_| bad("target"))?,
        origin_server: ServerId::parse(&row.origin_server).map_err(|_| bad("origin"))?,
        origin_jail: row.origin_jail,
        origin_event: row.origin_event.map(EventId),
        source: ShareSource {
            kind: SourceKind::parse(&row.source_kind).ok_or_else(|| bad("source kind"))?,
            id: row.source_id,
            name: row.source_name,
        },
        step: u32::try_from(row.step).unwrap_or(1),
        created_at: to_time(row.created_at),
        expires_at: row.expires_at.map(to_time),
        status: SharedBanStatus::parse(&row.status).ok_or_else(|| bad("status"))?,
        skip_reason: row.skip_reason,
        delivered_at: row.delivered_at.map(to_time),
        lifted_at: row.lifted_at.map(to_time),
        ip: row.ip,
    })
}

/// The reason a target's operator reads for a shared ban.
fn reason(row: &shared_ban::Model) -> String {
    format!(
        "shared by {} {} from server {} jail {}",
        row.source_kind, row.source_name, row.origin_server, row.origin_jail
    )
}

/// Whether `row` is held now: pending or delivered and not past its expiry.
fn is_active(row: &shared_ban::Model, now_ms: i64) -> bool {
    (row.status == "pending" || row.status == "delivered")
        && row.expires_at.is_none_or(|at| at > now_ms)
}

/// Keeps the later expiry of two (`None`, until lifted, is the latest).
fn later(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(std::cmp::max(a, b)),
        _ => None,
    }
}

impl Store {
    /// How many times each source already shared each address (distinct origin events), for
    /// escalation ladders: `(source id, ip) → count`.
    pub async fn shared_counts(
        &self,
        kind: SourceKind,
        ips: &[String],
    ) -> Result<HashMap<(String, String), u32>, StoreError> {
        let mut counts = HashMap::new();
        for chunk in ips.chunks(IN_CHUNK) {
            let mut sql = self.sql(
                "SELECT source_id, ip, COUNT(DISTINCT origin_event) FROM shared_bans \
                 WHERE source_kind = ",
            );
            sql.bind(kind.as_str()).push(" AND ip IN ");
            sql.tuple(chunk.iter().map(|ip| ip.clone().into()));
            sql.push(" GROUP BY source_id, ip");
            for row in self.rows(sql).await? {
                let source: String = get(&row, 0)?;
                let ip: String = get(&row, 1)?;
                let n: i64 = get(&row, 2)?;
                counts.insert((source, ip), u32::try_from(n).unwrap_or(u32::MAX));
            }
        }
        Ok(counts)
    }

    /// The servers with shared bans to deliver or lifts to confirm.
    pub async fn targets_with_shared_work(&self, now_ms: i64) -> Result<Vec<ServerId>, StoreError> {
        let mut sql = self.sql(
            "SELECT DISTINCT target_server FROM shared_bans WHERE lift_pending = TRUE \
             OR (status = 'pending' AND (expires_at IS NULL OR expires_at > ",
        );
        sql.bind(now_ms).push("))");
        let mut targets = Vec::new();
        for row in self.rows(sql).await? {
            let id: String = get(&row, 0)?;
            targets.push(ServerId::parse(&id).map_err(|_| corrupt("a shared ban's target"))?);
        }
        Ok(targets)
    }

    /// What `target` is to be told: with `full`, every shared ban it should hold; otherwise what
    /// changed since it was last told (pending bans and unconfirmed lifts, with every other ban
    /// of the same addresses, so an address stays held while any of its shared bans is).
    pub async fn shared_work(
        &self,
        target: ServerId,
        full: bool,
        now_ms: i64,
    ) -> Result<TargetWork, StoreError> {
        let base = shared_ban::Entity::find()
            .filter(shared_ban::Column::TargetServer.eq(target.to_string()));
        let changed = base
            .clone()
            .filter(
                shared_ban::Column::LiftPending
                    .eq(true)
                    .or(shared_ban::Column::Status.eq("pending")),
            )
            .all(&self.db)
            .await?;
        let mut work = TargetWork {
            target: Some(target),
            ..TargetWork::default()
        };
        let rows = if full {
            base.filter(shared_ban::Column::Status.is_in(["pending", "delivered"]))
                .all(&self.db)
                .await?
        } else {
            let mut ips: Vec<String> = changed.iter().map(|r| r.ip.clone()).collect();
            ips.sort();
            ips.dedup();
            let mut rows = Vec::new();
            for chunk in ips.chunks(IN_CHUNK) {
                rows.extend(
                    base.clone()
                        .filter(shared_ban::Column::Ip.is_in(chunk.iter().cloned()))
                        .all(&self.db)
                        .await?,
                );
            }
            rows
        };
        for row in &changed {
            if row.lift_pending {
                work.lift_ids.push(row.id);
            }
            if row.status == "pending" {
                work.pending_ids.push(row.id);
            }
        }
        let mut seen: Vec<String> = Vec::new();
        for row in &rows {
            seen.push(row.ip.clone());
            if !is_active(row, now_ms) {
                continue;
            }
            work.holds
                .entry(row.ip.clone())
                .and_modify(|(at, _)| *at = later(*at, row.expires_at))
                .or_insert_with(|| (row.expires_at, reason(row)));
        }
        if !full {
            seen.sort();
            seen.dedup();
            work.lifts = seen
                .into_iter()
                .filter(|ip| !work.holds.contains_key(ip))
                .collect();
        }
        Ok(work)
    }

    /// What changed for each of `targets` (as [`Store::shared_work`] without `full`), read in a
    /// few statements for all of them: the engine's delivery right after a match.
    pub async fn shared_work_many(
        &self,
        targets: &[ServerId],
        now_ms: i64,
    ) -> Result<Vec<TargetWork>, StoreError> {
        let mut works: BTreeMap<String, TargetWork> = BTreeMap::new();
        for chunk in targets.chunks(IN_CHUNK) {
            let ids: Vec<String> = chunk.iter().map(ToString::to_string).collect();
            let changed = shared_ban::Entity::find()
                .filter(shared_ban::Column::TargetServer.is_in(ids.iter().cloned()))
                .filter(
                    shared_ban::Column::LiftPending
                        .eq(true)
                        .or(shared_ban::Column::Status.eq("pending")),
                )
                .all(&self.db)
                .await?;
            let mut ips: Vec<String> = changed.iter().map(|r| r.ip.clone()).collect();
            ips.sort();
            ips.dedup();
            let mut dirty: HashSet<(String, String)> = HashSet::new();
            for row in &changed {
                let work = works.entry(row.target_server.clone()).or_default();
                if row.lift_pending {
                    work.lift_ids.push(row.id);
                }
                if row.status == "pending" {
                    work.pending_ids.push(row.id);
                }
                dirty.insert((row.target_server.clone(), row.ip.clone()));
            }
            for ip_chunk in ips.chunks(IN_CHUNK) {
                let rows = shared_ban::Entity::find()
                    .filter(shared_ban::Column::TargetServer.is_in(ids.iter().cloned()))
                    .filter(shared_ban::Column::Ip.is_in(ip_chunk.iter().cloned()))
                    .all(&self.db)
                    .await?;
                for row in &rows {
                    if !dirty.contains(&(row.target_server.clone(), row.ip.clone()))
                        || !is_active(row, now_ms)
                    {
                        continue;
                    }
                    works
                        .entry(row.target_server.clone())
                        .or_default()
                        .holds
                        .entry(row.ip.clone())
                        .and_modify(|(at, _)| *at = later(*at, row.expires_at))
                        .or_insert_with(|| (row.expires_at, reason(row)));
                }
            }
            for (target, ip) in dirty {
                let work = works.entry(target).or_default();
                if !work.holds.contains_key(&ip) && !work.lifts.contains(&ip) {
                    work.lifts.push(ip);
                }
            }
        }
        works
            .into_iter()
            .map(|(target, mut work)| {
                work.target =
                    Some(ServerId::parse(&target).map_err(|_| corrupt("a shared ban's target"))?);
                work.lifts.sort();
                Ok(work)
            })
            .collect()
    }

    /// Marks the rows of `works` told, in a few statements for all of them.
    pub async fn settle_shared_works(
        &self,
        works: &[&TargetWork],
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let all = TargetWork {
            pending_ids: works
                .iter()
                .flat_map(|w| w.pending_ids.iter().copied())
                .collect(),
            lift_ids: works
                .iter()
                .flat_map(|w| w.lift_ids.iter().copied())
                .collect(),
            ..TargetWork::default()
        };
        self.settle_shared_work(&all, now_ms).await
    }

    /// Marks the rows of `work` told: pending ones delivered, lifts confirmed.
    pub async fn settle_shared_work(
        &self,
        work: &TargetWork,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        for chunk in work.pending_ids.chunks(IN_CHUNK) {
            shared_ban::Entity::update_many()
                .col_expr(shared_ban::Column::Status, Expr::value("delivered"))
                .col_expr(shared_ban::Column::DeliveredAt, Expr::value(now_ms))
                .filter(shared_ban::Column::Id.is_in(chunk.iter().copied()))
                .filter(shared_ban::Column::Status.eq("pending"))
                .exec(&self.db)
                .await?;
        }
        for chunk in work.lift_ids.chunks(IN_CHUNK) {
            shared_ban::Entity::update_many()
                .col_expr(shared_ban::Column::LiftPending, Expr::value(false))
                .filter(shared_ban::Column::Id.is_in(chunk.iter().copied()))
                .exec(&self.db)
                .await?;
        }
        Ok(())
    }

    /// Lifts every held shared ban of `ip` ("unban everywhere"). Returns the targets that have a
    /// lift to be told.
    pub async fn lift_shared_bans(
        &self,
        ip: &str,
        now_ms: i64,
    ) -> Result<Vec<ServerId>, StoreError> {
        let txn = self.db.begin().await?;
        let targets = lift(&txn, &LiftScope::everywhere(ip), now_ms).await?;
        txn.commit().await?;
        Ok(targets)
    }

    /// Marks the held shared bans past their expiry expired (the agents lift them by themselves).
    pub async fn expire_shared_bans(&self, now_ms: i64) -> Result<u64, StoreError> {
        let done = shared_ban::Entity::update_many()
            .col_expr(shared_ban::Column::Status, Expr::value("expired"))
            .filter(shared_ban::Column::Status.is_in(["pending", "delivered"]))
            .filter(shared_ban::Column::ExpiresAt.lte(now_ms))
            .exec(&self.db)
            .await?;
        Ok(done.rows_affected)
    }

    /// Shared bans matching `filter`, newest first, at most `limit`.
    pub async fn list_shared_bans(
        &self,
        filter: &SharedBanFilter,
        limit: u64,
        now_ms: i64,
    ) -> Result<Vec<SharedBan>, StoreError> {
        let mut query = shared_ban::Entity::find().order_by_desc(shared_ban::Column::Id);
        if let Some(ip) = &filter.ip {
            query = query.filter(shared_ban::Column::Ip.eq(ip.to_string()));
        }
        if let Some(target) = filter.target {
            query = query.filter(shared_ban::Column::TargetServer.eq(target.to_string()));
        }
        if let Some(policy) = &filter.policy {
            query = query
                .filter(shared_ban::Column::SourceKind.eq(SourceKind::Policy.as_str()))
                .filter(shared_ban::Column::SourceId.eq(policy.clone()));
        }
        match filter.status {
            // Stored pending or delivered rows past their expiry read expired, like stored ones.
            Some(SharedBanStatus::Expired) => {
                query = query.filter(
                    shared_ban::Column::Status
                        .eq("expired")
                        .or(shared_ban::Column::Status
                            .is_in(["pending", "delivered"])
                            .and(shared_ban::Column::ExpiresAt.lte(now_ms))),
                );
            }
            Some(status @ (SharedBanStatus::Pending | SharedBanStatus::Delivered)) => {
                query = query
                    .filter(shared_ban::Column::Status.eq(status.as_str()))
                    .filter(
                        shared_ban::Column::ExpiresAt
                            .is_null()
                            .or(shared_ban::Column::ExpiresAt.gt(now_ms)),
                    );
            }
            Some(status) => query = query.filter(shared_ban::Column::Status.eq(status.as_str())),
            None => {}
        }
        query
            .limit(limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_shared_ban)
            .collect()
    }

    /// The shared bans held on any of `targets` for any of `ips` (in any state), oldest first: for
    /// telling which shared ban an event of the shared-ban jail came from.
    pub async fn shared_bans_of(
        &self,
        targets: &[ServerId],
        ips: &[String],
    ) -> Result<Vec<SharedBan>, StoreError> {
        if targets.is_empty() || ips.is_empty() {
            return Ok(Vec::new());
        }
        let targets: Vec<String> = targets.iter().map(ToString::to_string).collect();
        let mut bans = Vec::new();
        for chunk in ips.chunks(IN_CHUNK) {
            let rows = shared_ban::Entity::find()
                .filter(shared_ban::Column::TargetServer.is_in(targets.iter().cloned()))
                .filter(shared_ban::Column::Ip.is_in(chunk.iter().cloned()))
                .filter(shared_ban::Column::Status.ne("skipped"))
                .order_by_asc(shared_ban::Column::Id)
                .all(&self.db)
                .await?;
            for row in rows {
                bans.push(to_shared_ban(row)?);
            }
        }
        Ok(bans)
    }

    /// How many shared bans are held now in the whole fleet.
    pub async fn active_shared_ban_count(&self, now_ms: i64) -> Result<u64, StoreError> {
        let mut sql = Sql::new(
            self.backend(),
            "SELECT COUNT(*) FROM shared_bans WHERE status IN ('pending', 'delivered') \
             AND (expires_at IS NULL OR expires_at > ",
        );
        sql.bind(now_ms).push(")");
        let rows = self.rows(sql).await?;
        let n: i64 = rows.first().map(|r| get(r, 0)).transpose()?.unwrap_or(0);
        Ok(to_u64(n))
    }
}

/// Inserts `bans` on `conn`; a ban already recorded for the same origin event, source and target
/// is left as it is.
pub(super) async fn insert_shared_bans(
    conn: &impl ConnectionTrait,
    bans: &[NewSharedBan],
    now_ms: i64,
) -> Result<(), StoreError> {
    for chunk in bans.chunks(INSERT_CHUNK) {
        let mut sql = Sql::new(
            conn.get_database_backend(),
            "INSERT INTO shared_bans (ip, target_server, origin_server, origin_jail, \
             origin_event, source_kind, source_id, source_name, step, created_at, expires_at, \
             status, skip_reason, lift_pending) VALUES ",
        );
        for (i, ban) in chunk.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            let status = if ban.skipped.is_some() {
                SharedBanStatus::Skipped
            } else {
                SharedBanStatus::Pending
            };
            sql.tuple([
                ban.ip.to_string().into(),
                ban.target.to_string().into(),
                ban.origin_server.to_string().into(),
                ban.origin_jail.to_string().into(),
                ban.origin_event.map(|e| e.0).into(),
                ban.source.kind.as_str().into(),
                ban.source.id.clone().into(),
                ban.source.name.clone().into(),
                i32::try_from(ban.step).unwrap_or(i32::MAX).into(),
                now_ms.into(),
                ban.expires_at.map(|at| at.timestamp_millis()).into(),
                status.as_str().into(),
                ban.skipped.clone().into(),
                false.into(),
            ]);
        }
        sql.push(" ON CONFLICT DO NOTHING");
        conn.execute_raw(sql.build()).await?;
    }
    Ok(())
}

/// Which held shared bans of one address a lift ends.
#[derive(Debug, Clone, Copy)]
pub(super) struct LiftScope<'a> {
    pub ip: &'a str,
    /// Only those of this origin server and jail.
    pub origin: Option<(ServerId, &'a str)>,
    /// Only those these policies made.
    pub policies: Option<&'a [String]>,
    /// Only those made by an origin ban before this event (an unban lifts no later ban).
    pub before: Option<EventId>,
}

impl<'a> LiftScope<'a> {
    fn everywhere(ip: &'a str) -> Self {
        Self {
            ip,
            origin: None,
            policies: None,
            before: None,
        }
    }
}

/// Lifts the held shared bans of `scope` on `conn`: marked lifted with a lift for their targets to
/// confirm, which delivery sends (and its retry pass sends again until confirmed). Returns the
/// targets that have a lift to be told.
pub(super) async fn lift(
    conn: &impl ConnectionTrait,
    scope: &LiftScope<'_>,
    now_ms: i64,
) -> Result<Vec<ServerId>, StoreError> {
    if scope.policies.is_some_and(<[String]>::is_empty) {
        return Ok(Vec::new());
    }
    let mut filter = sea_orm::Condition::all().add(shared_ban::Column::Ip.eq(scope.ip));
    if let Some((server, jail)) = scope.origin {
        filter = filter
            .add(shared_ban::Column::OriginServer.eq(server.to_string()))
            .add(shared_ban::Column::OriginJail.eq(jail));
    }
    if let Some(policies) = scope.policies {
        filter = filter
            .add(shared_ban::Column::SourceKind.eq(SourceKind::Policy.as_str()))
            .add(shared_ban::Column::SourceId.is_in(policies.iter().cloned()));
    }
    if let Some(before) = scope.before {
        filter = filter.add(shared_ban::Column::OriginEvent.lt(before.0));
    }
    // Write first, then read what was written: on SQLite a transaction that reads before its
    // first write is refused at once when another connection wrote meanwhile.
    shared_ban::Entity::update_many()
        .col_expr(shared_ban::Column::Status, Expr::value("lifted"))
        .col_expr(shared_ban::Column::LiftedAt, Expr::value(now_ms))
        .col_expr(shared_ban::Column::LiftPending, Expr::value(true))
        .filter(
            filter
                .clone()
                .add(shared_ban::Column::Status.is_in(["pending", "delivered"])),
        )
        .exec(conn)
        .await?;
    let targets: Vec<String> = shared_ban::Entity::find()
        .select_only()
        .column(shared_ban::Column::TargetServer)
        .distinct()
        .filter(
            filter
                .add(shared_ban::Column::Status.eq("lifted"))
                .add(shared_ban::Column::LiftedAt.eq(now_ms))
                .add(shared_ban::Column::LiftPending.eq(true)),
        )
        .into_tuple()
        .all(conn)
        .await?;
    targets
        .iter()
        .map(|t| ServerId::parse(t).map_err(|_| corrupt("a shared ban's target")))
        .collect()
}
