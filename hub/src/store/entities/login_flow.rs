//! An OIDC login in progress (table `login_flows`, created by M0003).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "login_flows")]
pub struct Model {
    /// SHA-256 (hex) of the `state` sent to the provider.
    #[sea_orm(primary_key, auto_increment = false)]
    pub state_hash: String,
    pub nonce: String,
    pub pkce_verifier: String,
    pub return_to: String,
    pub redirect_url: String,
    pub created_at: i64,
    pub expires_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
