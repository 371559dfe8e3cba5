//! A set of fail2ban files applied to one server with commit-confirm (table `config_changes`,
//! M0020).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "config_changes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub server_id: String,
    /// JSON: the set as sent.
    pub files: String,
    pub confirm_within_secs: i64,
    pub state: String,
    pub reason: String,
    pub deadline_at: Option<i64>,
    /// JSON: `[[path, version], ...]` after the change.
    pub applied: String,
    pub created_by: String,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
