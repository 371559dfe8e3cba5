//! A ban that the hub lifts at its time (table `timed_bans`, created by M0024).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "timed_bans")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub server_id: String,
    pub jail: String,
    pub ip: String,
    pub ends_at: i64,
    /// `active`, `lifted`, `failed`, `cancelled` or `replaced`.
    pub state: String,
    pub fleet_action_id: Option<String>,
    pub requested_by: String,
    pub created_at: i64,
    pub next_try_at: i64,
    pub attempts: i64,
    pub error: Option<String>,
    pub finished_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
