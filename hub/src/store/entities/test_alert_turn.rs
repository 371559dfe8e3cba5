//! When a channel last had a test alert (table `test_alert_turns`, created by M0025).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "test_alert_turns")]
pub struct Model {
    /// `email` or `webhook:<name>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub channel: String,
    /// Milliseconds since the epoch.
    pub last_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
