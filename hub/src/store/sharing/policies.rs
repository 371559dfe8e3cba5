//! Sharing policies: create, read, replace, delete, and each policy's live counters.

use std::collections::HashMap;

use sea_orm::{ActiveModelTrait, EntityTrait, QueryOrder, Set};

use super::super::entities::sharing_policy;
use super::super::sql::{get, to_u64};
use super::super::{Store, StoreError, now_ms, to_time};
use super::corrupt;
use crate::domain::sharing::{Policy, PolicyCounters, PolicySpec};

fn to_policy(row: sharing_policy::Model) -> Result<Policy, StoreError> {
    let mut spec: PolicySpec = serde_json::from_str(&row.spec)
        .map_err(|e| corrupt(format!("sharing policy {}: {e}", row.id)))?;
    spec.name = row.name;
    spec.enabled = row.enabled;
    Ok(Policy {
        id: row.id,
        spec,
        created_at: to_time(row.created_at),
        updated_at: to_time(row.updated_at),
    })
}

fn spec_json(spec: &PolicySpec) -> Result<String, StoreError> {
    serde_json::to_string(spec).map_err(|e| corrupt(format!("a sharing policy: {e}")))
}

impl Store {
    /// Every sharing policy, by name.
    pub async fn list_sharing_policies(&self) -> Result<Vec<Policy>, StoreError> {
        sharing_policy::Entity::find()
            .order_by_asc(sharing_policy::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_policy)
            .collect()
    }

    pub async fn sharing_policy(&self, id: &str) -> Result<Option<Policy>, StoreError> {
        sharing_policy::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .map(to_policy)
            .transpose()
    }

    /// Whether another policy than `except` has this name.
    pub async fn sharing_policy_name_taken(
        &self,
        name: &str,
        except: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut sql = self.sql("SELECT id FROM sharing_policies WHERE name = ");
        sql.bind(name.to_owned());
        let rows = self.rows(sql).await?;
        for row in rows {
            let id: String = get(&row, 0)?;
            if Some(id.as_str()) != except {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub async fn create_sharing_policy(&self, spec: &PolicySpec) -> Result<Policy, StoreError> {
        let now = now_ms();
        let row = sharing_policy::ActiveModel {
            id: Set(uuid::Uuid::now_v7().to_string()),
            name: Set(spec.name.clone()),
            enabled: Set(spec.enabled),
            spec: Set(spec_json(spec)?),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&self.db)
        .await?;
        to_policy(row)
    }

    /// Replaces a policy; `None` when there is no such policy.
    pub async fn update_sharing_policy(
        &self,
        id: &str,
        spec: &PolicySpec,
    ) -> Result<Option<Policy>, StoreError> {
        let Some(row) = sharing_policy::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let mut active: sharing_policy::ActiveModel = row.into();
        active.name = Set(spec.name.clone());
        active.enabled = Set(spec.enabled);
        active.spec = Set(spec_json(spec)?);
        active.updated_at = Set(now_ms());
        Ok(Some(to_policy(active.update(&self.db).await?)?))
    }

    /// Deletes a policy; false when there was none. Its shared bans stay until they expire.
    pub async fn delete_sharing_policy(&self, id: &str) -> Result<bool, StoreError> {
        let done = sharing_policy::Entity::delete_by_id(id.to_owned())
            .exec(&self.db)
            .await?;
        Ok(done.rows_affected == 1)
    }

    /// Each policy's counters at `now_ms`, by policy id.
    pub async fn sharing_policy_counters(
        &self,
        now_ms: i64,
    ) -> Result<HashMap<String, PolicyCounters>, StoreError> {
        let mut sql = self.sql(
            "SELECT source_id, COUNT(*), \
             CAST(SUM(CASE WHEN status IN ('pending', 'delivered') \
                 AND (expires_at IS NULL OR expires_at > ",
        );
        sql.bind(now_ms).push(
            ") THEN 1 ELSE 0 END) AS BIGINT), MAX(created_at) FROM shared_bans \
                 WHERE source_kind = 'policy' GROUP BY source_id",
        );
        let mut counters = HashMap::new();
        for row in self.rows(sql).await? {
            let id: String = get(&row, 0)?;
            let total: i64 = get(&row, 1)?;
            let active: Option<i64> = get(&row, 2)?;
            let last: Option<i64> = get(&row, 3)?;
            counters.insert(
                id,
                PolicyCounters {
                    total: to_u64(total),
                    active: to_u64(active.unwrap_or(0)),
                    last_match_at: last.map(to_time),
                },
            );
        }
        Ok(counters)
    }
}
