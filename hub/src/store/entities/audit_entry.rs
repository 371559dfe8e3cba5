//! One entry of the audit log (table `audit_log`, created by M0003).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_log")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub actor_name: String,
    pub actor_kind: String,
    pub action: String,
    pub path: String,
    pub server_id: Option<String>,
    pub status: i32,
    /// `ok`, `failed` or `denied`.
    pub outcome: String,
    /// JSON object.
    pub detail: String,
    pub client_addr: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
