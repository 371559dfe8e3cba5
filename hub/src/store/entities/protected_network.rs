//! A network an admin protected (table `protected_networks`, created by M0015).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "protected_networks")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// CIDR form, normalized.
    pub network: String,
    pub note: String,
    pub created_by: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
