//! A server-side operator session (table `sessions`, created by M0003).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sessions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    /// SHA-256 (hex) of the cookie's secret.
    pub secret_hash: String,
    /// `oidc` or `local`.
    pub kind: String,
    pub subject: String,
    pub name: String,
    pub email: Option<String>,
    pub role: String,
    pub id_token: Option<String>,
    pub created_at: i64,
    pub last_seen_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
