//! A rollout of a profile version to many servers (table `rollouts`, M0022).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "rollouts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub profile: String,
    pub version: i64,
    pub state: String,
    pub canary: i64,
    pub batch_size: i64,
    pub watch_secs: i64,
    pub confirm_secs: i64,
    pub max_ban_rate_factor: f64,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub reason: Option<String>,
    pub stop_requested_by: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
