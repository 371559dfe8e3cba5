//! A shared ban on one target server, with its origin and source (table `shared_bans`, M0014).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "shared_bans")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub ip: String,
    pub target_server: String,
    pub origin_server: String,
    pub origin_jail: String,
    pub origin_event: Option<i64>,
    pub source_kind: String,
    pub source_id: String,
    pub source_name: String,
    pub step: i32,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub status: String,
    pub skip_reason: Option<String>,
    pub delivered_at: Option<i64>,
    pub lifted_at: Option<i64>,
    pub lift_pending: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
