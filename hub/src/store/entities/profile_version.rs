//! One immutable version of a profile (table `profile_versions`, created by M0021).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "profile_versions")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub profile: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub version: i64,
    /// The files as a JSON array of `{path, content}` (`content` null: must not exist).
    pub files: String,
    pub comment: String,
    pub author: String,
    pub created_at: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
