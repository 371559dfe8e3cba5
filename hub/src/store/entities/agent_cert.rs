//! A client certificate issued to an agent. Rows outlive their server so revocation stays on record.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "agent_certs")]
pub struct Model {
    /// Lower-case hex serial number.
    #[sea_orm(primary_key, auto_increment = false)]
    pub serial: String,
    pub agent_id: String,
    pub server_id: String,
    pub fingerprint: String,
    pub issued_at: i64,
    pub not_after: i64,
    pub revoked_at: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
