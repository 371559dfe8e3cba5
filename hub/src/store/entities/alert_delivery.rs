//! One message of a digest to one channel, with its status (table `alert_deliveries`, M0004).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "alert_deliveries")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub digest_id: i64,
    pub rule_id: String,
    pub rule_name: String,
    /// `email` or `webhook`.
    pub channel: String,
    /// `email`, or the webhook's name.
    pub target: String,
    /// `pending`, `sending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: i32,
    pub max_attempts: i32,
    pub next_attempt_at: i64,
    pub last_error: Option<String>,
    /// The server's answer: the SMTP reply or the HTTP status line.
    pub response: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub delivered_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
