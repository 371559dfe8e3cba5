//! A stored ban, unban or gap event (table `events`, created by M0002). Written with multi-row SQL in
//! `store::events`; this model is how rows are read back.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub server_id: String,
    /// `None` for a direct callback.
    pub agent_id: Option<String>,
    pub epoch: Option<i64>,
    pub seq: Option<i64>,
    /// `ban`, `unban` or `gap`.
    pub kind: String,
    /// `action`, `observed` or `direct`.
    pub source: String,
    pub ip: Option<String>,
    /// 16 bytes that order addresses (IPv4 mapped into `::ffff:0:0/96`).
    pub ip_key: Option<Vec<u8>>,
    pub jail: Option<String>,
    pub hostname: String,
    pub failures: i64,
    /// JSON list of log lines.
    pub logs: String,
    /// Unix seconds.
    pub ban_time: Option<i64>,
    /// Seconds, `-1` for permanent.
    pub ban_duration: Option<i64>,
    pub ban_count: Option<i64>,
    /// A gap's count of lost events.
    pub lost: Option<i64>,
    /// A gap's reason and sequence ranges, JSON.
    pub detail: Option<String>,
    pub occurred_at: i64,
    pub stored_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
