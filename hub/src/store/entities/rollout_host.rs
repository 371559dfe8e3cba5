//! One host of a rollout (table `rollout_hosts`, M0022).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "rollout_hosts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub rollout_id: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub server_id: String,
    pub server_name: String,
    pub position: i64,
    pub batch: i64,
    pub state: String,
    /// JSON: the checks of the host's watch.
    pub checks: String,
    pub error: Option<String>,
    pub change_id: Option<String>,
    pub watch_started_at: Option<i64>,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
