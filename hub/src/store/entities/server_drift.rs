//! The last comparison of a server with its profile (table `server_drift`, created by M0021).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "server_drift")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub server_id: String,
    /// `in_sync`, `drifted` or `unknown`.
    pub state: String,
    pub profile: Option<String>,
    pub version: Option<i64>,
    pub reason: String,
    /// The differing files as a JSON array.
    pub files: String,
    pub fingerprint: String,
    pub alerted: Option<String>,
    /// The files outside the profile as a JSON object, path → text.
    pub baseline: Option<String>,
    pub checked_at: i64,
    pub since: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
