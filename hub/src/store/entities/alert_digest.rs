//! The matches of one alert rule within its digest window (table `alert_digests`, M0004).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "alert_digests")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub rule_id: String,
    pub rule_name: String,
    pub opened_at: i64,
    pub due_at: i64,
    /// `None` while matches are still added.
    pub closed_at: Option<i64>,
    pub events: i64,
    pub first_event_id: i64,
    pub last_event_id: i64,
    /// JSON of `alerts::DigestSummary`.
    pub summary: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
