//! The settings row: read, and saved only when its version is still the one edited from. Through
//! sea-orm's entity.

use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

use super::entities::settings_row;
use super::{Store, StoreError, now_ms, to_time};

use crate::domain::StoredSettings;

const ROW: i32 = 1;

fn stored(row: settings_row::Model) -> StoredSettings {
    StoredSettings {
        version: u64::try_from(row.version).unwrap_or(0),
        document: row.document,
        secrets: row.secrets,
        updated_at: row.updated_at.map(to_time),
    }
}

impl Store {
    /// The settings as stored (M0004 creates the row at version 0).
    pub async fn load_settings(&self) -> Result<StoredSettings, StoreError> {
        settings_row::Entity::find_by_id(ROW)
            .one(&self.db)
            .await?
            .map(stored)
            .ok_or_else(|| StoreError::Corrupt("the settings row is missing".to_owned()))
    }

    /// Saves a new document and secrets if the stored version is still `expected`, as version
    /// `expected + 1`; `None` when another save came first.
    pub async fn save_settings(
        &self,
        expected: u64,
        document: &str,
        secrets: &str,
    ) -> Result<Option<StoredSettings>, StoreError> {
        let expected = i64::try_from(expected)
            .map_err(|_| StoreError::Corrupt("settings version out of range".to_owned()))?;
        // One conditional write: of two concurrent saves from the same version, one updates the
        // row and the other changes nothing.
        let updated = settings_row::Entity::update_many()
            .col_expr(settings_row::Column::Version, Expr::value(expected + 1))
            .col_expr(settings_row::Column::Document, Expr::value(document))
            .col_expr(settings_row::Column::Secrets, Expr::value(secrets))
            .col_expr(settings_row::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(settings_row::Column::Id.eq(ROW))
            .filter(settings_row::Column::Version.eq(expected))
            .exec(&self.db)
            .await?;
        if updated.rows_affected != 1 {
            return Ok(None);
        }
        self.load_settings().await.map(Some)
    }
}
