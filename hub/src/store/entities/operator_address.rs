//! The client address an operator credential was last used from (table `operator_addresses`,
//! created by M0015).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "operator_addresses")]
pub struct Model {
    /// `session:<id>` or `token:<id>`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub credential: String,
    pub ip: String,
    pub name: String,
    pub seen_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
