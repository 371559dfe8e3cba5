//! Repository functions of profiles: profiles with their assignment, their immutable versions,
//! and each server's last drift comparison. Through sea-orm's entities; the files, selectors and
//! drift details are JSON text.

use std::collections::BTreeMap;

use banhub_proto::config_path::ConfigPath;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set, TransactionTrait,
};
use serde::{Deserialize, Serialize};

use super::entities::{profile, profile_version, server_drift};
use super::servers::is_unique_violation;
use super::{Store, StoreError, to_time};
use crate::domain::ServerId;
use crate::domain::profiles::drift::{DriftRecord, DriftState, FileDrift};
use crate::domain::profiles::{Profile, ProfileFile, ProfileName, ProfileVersion};

/// A profile to create.
#[derive(Debug, Clone)]
pub struct NewProfile {
    pub name: ProfileName,
    pub description: String,
    pub selector: BTreeMap<String, String>,
    pub created_by: String,
}

/// What an insert of a profile or a version did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileWrite<T> {
    Done(T),
    /// A profile of that name exists (create), or another save took the next version number at
    /// the same time (save a version).
    NameTaken,
    /// No profile has that name (save a version).
    NotFound,
}

/// A version's file as stored.
#[derive(Serialize, Deserialize)]
struct StoredFile {
    path: String,
    content: Option<String>,
}

fn to_profile(row: profile::Model) -> Result<Profile, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("profile {:?}: {what}", row.name));
    Ok(Profile {
        name: ProfileName::parse(&row.name).map_err(|_| corrupt("name"))?,
        selector: serde_json::from_str(&row.selector).map_err(|_| corrupt("selector"))?,
        description: row.description,
        pinned_version: row.pinned_version,
        latest_version: row.latest_version,
        created_by: row.created_by,
        created_at: to_time(row.created_at),
        updated_at: to_time(row.updated_at),
    })
}

fn to_version(row: profile_version::Model) -> Result<ProfileVersion, StoreError> {
    let corrupt = |what: &str| {
        StoreError::Corrupt(format!(
            "profile {:?} version {}: {what}",
            row.profile, row.version
        ))
    };
    let stored: Vec<StoredFile> = serde_json::from_str(&row.files).map_err(|_| corrupt("files"))?;
    let files = stored
        .into_iter()
        .map(|f| {
            Ok(ProfileFile {
                path: ConfigPath::parse(&f.path).map_err(|_| corrupt("a file's path"))?,
                content: f.content,
            })
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(ProfileVersion {
        profile: ProfileName::parse(&row.profile).map_err(|_| corrupt("name"))?,
        version: row.version,
        files,
        comment: row.comment,
        author: row.author,
        created_at: to_time(row.created_at),
    })
}

fn files_json(files: &[ProfileFile]) -> String {
    let stored: Vec<StoredFile> = files
        .iter()
        .map(|f| StoredFile {
            path: f.path.to_string(),
            content: f.content.clone(),
        })
        .collect();
    serde_json::to_string(&stored).unwrap_or_else(|_| "[]".to_owned())
}

fn selector_json(selector: &BTreeMap<String, String>) -> String {
    serde_json::to_string(selector).unwrap_or_else(|_| "{}".to_owned())
}

fn to_drift(row: server_drift::Model) -> Result<DriftRecord, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("drift of {}: {what}", row.server_id));
    let files: Vec<FileDrift> = serde_json::from_str(&row.files).map_err(|_| corrupt("files"))?;
    let baseline = row
        .baseline
        .as_deref()
        .map(serde_json::from_str)
        .transpose()
        .map_err(|_| corrupt("baseline"))?;
    Ok(DriftRecord {
        server: ServerId::parse(&row.server_id).map_err(|_| corrupt("server id"))?,
        state: DriftState::parse(&row.state).ok_or_else(|| corrupt("state"))?,
        profile: row
            .profile
            .as_deref()
            .map(ProfileName::parse)
            .transpose()
            .map_err(|_| corrupt("profile"))?,
        version: row.version,
        reason: row.reason,
        files,
        fingerprint: row.fingerprint,
        alerted: row.alerted,
        baseline,
        checked_at: to_time(row.checked_at),
        since: to_time(row.since),
    })
}

impl Store {
    /// Every profile, by name.
    pub async fn profiles(&self) -> Result<Vec<Profile>, StoreError> {
        profile::Entity::find()
            .order_by_asc(profile::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_profile)
            .collect()
    }

    pub async fn profile(&self, name: &ProfileName) -> Result<Option<Profile>, StoreError> {
        profile::Entity::find_by_id(name.to_string())
            .one(&self.db)
            .await?
            .map(to_profile)
            .transpose()
    }

    /// Creates a profile and its first version in one transaction.
    pub async fn create_profile(
        &self,
        new: &NewProfile,
        files: &[ProfileFile],
        comment: &str,
        at: DateTime<Utc>,
    ) -> Result<ProfileWrite<(Profile, ProfileVersion)>, StoreError> {
        let ms = at.timestamp_millis();
        let tx = self.db.begin().await?;
        let inserted = profile::ActiveModel {
            name: Set(new.name.to_string()),
            description: Set(new.description.clone()),
            selector: Set(selector_json(&new.selector)),
            pinned_version: Set(None),
            latest_version: Set(Some(1)),
            created_by: Set(new.created_by.clone()),
            created_at: Set(ms),
            updated_at: Set(ms),
        }
        .insert(&tx)
        .await;
        let row = match inserted {
            Ok(row) => row,
            Err(e) if is_unique_violation(&e) => return Ok(ProfileWrite::NameTaken),
            Err(e) => return Err(e.into()),
        };
        let version = profile_version::ActiveModel {
            profile: Set(new.name.to_string()),
            version: Set(1),
            files: Set(files_json(files)),
            comment: Set(comment.to_owned()),
            author: Set(new.created_by.clone()),
            created_at: Set(ms),
        }
        .insert(&tx)
        .await?;
        tx.commit().await?;
        Ok(ProfileWrite::Done((to_profile(row)?, to_version(version)?)))
    }

    /// Saves the next version of a profile; `NameTaken` when another save took the same number
    /// at the same time (the caller may try again).
    pub async fn add_profile_version(
        &self,
        name: &ProfileName,
        files: &[ProfileFile],
        comment: &str,
        author: &str,
        at: DateTime<Utc>,
    ) -> Result<ProfileWrite<ProfileVersion>, StoreError> {
        let ms = at.timestamp_millis();
        let tx = self.db.begin().await?;
        // Write before reading: on SQLite a transaction that reads first and writes later fails at
        // once with "database is locked" when another writer (a drift check) holds the lock.
        let touched = profile::Entity::update_many()
            .col_expr(profile::Column::UpdatedAt, Expr::value(ms))
            .filter(profile::Column::Name.eq(name.to_string()))
            .exec(&tx)
            .await?;
        if touched.rows_affected == 0 {
            return Ok(ProfileWrite::NotFound);
        }
        let Some(row) = profile::Entity::find_by_id(name.to_string())
            .one(&tx)
            .await?
        else {
            return Ok(ProfileWrite::NotFound);
        };
        let next = row.latest_version.unwrap_or(0) + 1;
        let updated = profile::Entity::update_many()
            .col_expr(profile::Column::LatestVersion, Expr::value(next))
            .filter(profile::Column::Name.eq(name.to_string()))
            .filter(match row.latest_version {
                Some(v) => profile::Column::LatestVersion.eq(v),
                None => profile::Column::LatestVersion.is_null(),
            })
            .exec(&tx)
            .await?;
        if updated.rows_affected == 0 {
            return Ok(ProfileWrite::NameTaken);
        }
        let inserted = profile_version::ActiveModel {
            profile: Set(name.to_string()),
            version: Set(next),
            files: Set(files_json(files)),
            comment: Set(comment.to_owned()),
            author: Set(author.to_owned()),
            created_at: Set(ms),
        }
        .insert(&tx)
        .await;
        let version = match inserted {
            Ok(version) => version,
            Err(e) if is_unique_violation(&e) => return Ok(ProfileWrite::NameTaken),
            Err(e) => return Err(e.into()),
        };
        tx.commit().await?;
        Ok(ProfileWrite::Done(to_version(version)?))
    }

    /// Sets a profile's description and assignment.
    pub async fn update_profile(
        &self,
        name: &ProfileName,
        description: &str,
        selector: &BTreeMap<String, String>,
        pinned_version: Option<i64>,
        at: DateTime<Utc>,
    ) -> Result<Option<Profile>, StoreError> {
        let updated = profile::Entity::update_many()
            .col_expr(
                profile::Column::Description,
                Expr::value(description.to_owned()),
            )
            .col_expr(
                profile::Column::Selector,
                Expr::value(selector_json(selector)),
            )
            .col_expr(profile::Column::PinnedVersion, Expr::value(pinned_version))
            .col_expr(
                profile::Column::UpdatedAt,
                Expr::value(at.timestamp_millis()),
            )
            .filter(profile::Column::Name.eq(name.to_string()))
            .exec(&self.db)
            .await?;
        if updated.rows_affected == 0 {
            return Ok(None);
        }
        self.profile(name).await
    }

    /// Deletes a profile with its versions; `false` when there was none.
    pub async fn delete_profile(&self, name: &ProfileName) -> Result<bool, StoreError> {
        let tx = self.db.begin().await?;
        let deleted = profile::Entity::delete_by_id(name.to_string())
            .exec(&tx)
            .await?;
        if deleted.rows_affected == 0 {
            return Ok(false);
        }
        profile_version::Entity::delete_many()
            .filter(profile_version::Column::Profile.eq(name.to_string()))
            .exec(&tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Every version of a profile, oldest first.
    pub async fn profile_versions(
        &self,
        name: &ProfileName,
    ) -> Result<Vec<ProfileVersion>, StoreError> {
        profile_version::Entity::find()
            .filter(profile_version::Column::Profile.eq(name.to_string()))
            .order_by_asc(profile_version::Column::Version)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_version)
            .collect()
    }

    pub async fn profile_version(
        &self,
        name: &ProfileName,
        version: i64,
    ) -> Result<Option<ProfileVersion>, StoreError> {
        profile_version::Entity::find_by_id((name.to_string(), version))
            .one(&self.db)
            .await?
            .map(to_version)
            .transpose()
    }

    /// Every server's last drift comparison.
    pub async fn drift_records(&self) -> Result<Vec<DriftRecord>, StoreError> {
        server_drift::Entity::find()
            .order_by_asc(server_drift::Column::ServerId)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_drift)
            .collect()
    }

    pub async fn drift_record(&self, server: ServerId) -> Result<Option<DriftRecord>, StoreError> {
        server_drift::Entity::find_by_id(server.to_string())
            .one(&self.db)
            .await?
            .map(to_drift)
            .transpose()
    }

    /// Stores a server's drift comparison, replacing the previous one.
    pub async fn save_drift(&self, record: &DriftRecord) -> Result<(), StoreError> {
        let baseline = record
            .baseline
            .as_ref()
            .map(|b| serde_json::to_string(b).unwrap_or_else(|_| "{}".to_owned()));
        server_drift::Entity::insert(server_drift::ActiveModel {
            server_id: Set(record.server.to_string()),
            state: Set(record.state.as_str().to_owned()),
            profile: Set(record.profile.as_ref().map(ToString::to_string)),
            version: Set(record.version),
            reason: Set(record.reason.clone()),
            files: Set(serde_json::to_string(&record.files).unwrap_or_else(|_| "[]".to_owned())),
            fingerprint: Set(record.fingerprint.clone()),
            alerted: Set(record.alerted.clone()),
            baseline: Set(baseline),
            checked_at: Set(record.checked_at.timestamp_millis()),
            since: Set(record.since.timestamp_millis()),
        })
        .on_conflict(
            OnConflict::column(server_drift::Column::ServerId)
                .update_columns([
                    server_drift::Column::State,
                    server_drift::Column::Profile,
                    server_drift::Column::Version,
                    server_drift::Column::Reason,
                    server_drift::Column::Files,
                    server_drift::Column::Fingerprint,
                    server_drift::Column::Alerted,
                    server_drift::Column::Baseline,
                    server_drift::Column::CheckedAt,
                    server_drift::Column::Since,
                ])
                .to_owned(),
        )
        .exec(&self.db)
        .await?;
        Ok(())
    }

    /// Forgets the drift of servers that no longer exist.
    pub async fn delete_drift(&self, server: ServerId) -> Result<(), StoreError> {
        server_drift::Entity::delete_by_id(server.to_string())
            .exec(&self.db)
            .await?;
        Ok(())
    }
}
