//! Servers: created, listed, found by id, name or agent, deleted with their tokens (revoking their
//! certificates), their labels, and when their agents or direct callbacks were last seen. Their
//! enrollment is in `enrollment`, their callback secrets in `callback_secrets`. Through sea-orm's
//! entities: single rows by key and simple filtered updates, which need no SQL of their own.

mod callback_secrets;
mod enrollment;

pub use callback_secrets::{CallbackSecretRow, RotateOutcome};
pub use enrollment::{EnrollOutcome, TokenRefusal};

use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set, TransactionTrait,
};

use super::entities::{agent_cert, enrollment_token, server};
use super::{Store, StoreError, now_ms, to_time};
use crate::domain::{AgentFacts, AgentId, Labels, NewServer, Server, ServerId, ServerName};

impl Store {
    pub async fn create_server(&self, new: NewServer) -> Result<Server, StoreError> {
        let id = ServerId::new();
        let model = server::ActiveModel {
            id: Set(id.to_string()),
            name: Set(new.name.as_str().to_owned()),
            description: Set(new.description),
            labels: Set(serde_json::to_string(new.labels.as_map())
                .map_err(|e| StoreError::Corrupt(e.to_string()))?),
            created_at: Set(now_ms()),
            agent_id: Set(None),
            enrolled_at: Set(None),
            last_seen_at: Set(None),
            agent_version: Set(None),
            fail2ban_version: Set(None),
            hostname: Set(None),
            last_address: Set(None),
        };
        if server::Entity::find()
            .filter(server::Column::Name.eq(new.name.as_str()))
            .one(&self.db)
            .await?
            .is_some()
        {
            return Err(StoreError::NameTaken(new.name.to_string()));
        }
        match model.insert(&self.db).await {
            Ok(row) => to_server(row),
            // A concurrent insert of the same name loses on the unique index.
            Err(e) if is_unique_violation(&e) => Err(StoreError::NameTaken(new.name.to_string())),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn list_servers(&self) -> Result<Vec<Server>, StoreError> {
        server::Entity::find()
            .order_by_asc(server::Column::Name)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_server)
            .collect()
    }

    pub async fn get_server(&self, id: ServerId) -> Result<Option<Server>, StoreError> {
        server::Entity::find_by_id(id.to_string())
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// The server requests go to when they name none: the oldest one.
    pub async fn default_server(&self) -> Result<Option<Server>, StoreError> {
        server::Entity::find()
            .order_by_asc(server::Column::CreatedAt)
            .order_by_asc(server::Column::Id)
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// The server named `name`, if any.
    pub async fn server_by_name(&self, name: &ServerName) -> Result<Option<Server>, StoreError> {
        server::Entity::find()
            .filter(server::Column::Name.eq(name.as_str()))
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// The server whose current agent is `agent`, if any.
    pub async fn server_of_agent(&self, agent: AgentId) -> Result<Option<Server>, StoreError> {
        server::Entity::find()
            .filter(server::Column::AgentId.eq(agent.to_string()))
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }

    /// Deletes a server with its tokens and revokes every certificate issued for it. Returns the
    /// revoked serials, or `None` if there was no such server.
    pub async fn delete_server(&self, id: ServerId) -> Result<Option<Vec<String>>, StoreError> {
        let txn = self.db.begin().await?;
        let now = now_ms();
        // Write before reading (see `enroll`): revoking the certificates of a server that does not
        // exist changes nothing, and the transaction then holds the write lock.
        agent_cert::Entity::update_many()
            .col_expr(agent_cert::Column::RevokedAt, Expr::value(now))
            .filter(agent_cert::Column::ServerId.eq(id.to_string()))
            .filter(agent_cert::Column::RevokedAt.is_null())
            .exec(&txn)
            .await?;
        let Some(row) = server::Entity::find_by_id(id.to_string()).one(&txn).await? else {
            return Ok(None);
        };
        let serials = agent_cert::Entity::find()
            .filter(agent_cert::Column::ServerId.eq(row.id.clone()))
            .all(&txn)
            .await?
            .into_iter()
            .map(|c| c.serial)
            .collect();
        enrollment_token::Entity::delete_many()
            .filter(enrollment_token::Column::ServerId.eq(row.id.clone()))
            .exec(&txn)
            .await?;
        server::Entity::delete_by_id(row.id).exec(&txn).await?;
        txn.commit().await?;
        Ok(Some(serials))
    }

    /// Records a direct callback of a server that has no agent, so it shows as reporting; a
    /// server with an agent is left alone (its `last_seen_at` is its agent's).
    pub async fn mark_reported_directly(&self, id: ServerId) -> Result<(), StoreError> {
        server::Entity::update_many()
            .col_expr(server::Column::LastSeenAt, Expr::value(now_ms()))
            .filter(server::Column::Id.eq(id.to_string()))
            .filter(server::Column::AgentId.is_null())
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Records that the server's agent is alive, with what it reported.
    pub async fn mark_seen(
        &self,
        id: ServerId,
        facts: Option<&AgentFacts>,
    ) -> Result<(), StoreError> {
        let mut update = server::Entity::update_many()
            .col_expr(server::Column::LastSeenAt, Expr::value(now_ms()))
            .filter(server::Column::Id.eq(id.to_string()));
        if let Some(facts) = facts {
            update = update
                .col_expr(
                    server::Column::AgentVersion,
                    Expr::value(non_empty(&facts.agent_version)),
                )
                .col_expr(
                    server::Column::Fail2banVersion,
                    Expr::value(non_empty(&facts.fail2ban_version)),
                )
                .col_expr(
                    server::Column::Hostname,
                    Expr::value(non_empty(&facts.hostname)),
                )
                .col_expr(
                    server::Column::LastAddress,
                    Expr::value(non_empty(&facts.address)),
                );
        }
        update.exec(&self.db).await?;
        Ok(())
    }

    /// Records that the agents of `servers` are alive now, in one statement.
    pub async fn mark_seen_many(&self, servers: &[ServerId]) -> Result<u64, StoreError> {
        if servers.is_empty() {
            return Ok(0);
        }
        Ok(server::Entity::update_many()
            .col_expr(server::Column::LastSeenAt, Expr::value(now_ms()))
            .filter(server::Column::Id.is_in(servers.iter().map(ServerId::to_string)))
            .exec(&self.db)
            .await?
            .rows_affected)
    }

    /// Replaces the labels of `server`; the updated server, or `None` if there is none.
    pub async fn set_server_labels(
        &self,
        server: ServerId,
        labels: &Labels,
    ) -> Result<Option<Server>, StoreError> {
        use sea_orm::EntityTrait as _;
        let json = serde_json::to_string(labels.as_map())
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let changed = server::Entity::update_many()
            .col_expr(server::Column::Labels, Expr::value(json))
            .filter(server::Column::Id.eq(server.to_string()))
            .exec(&self.db)
            .await?
            .rows_affected;
        if changed == 0 {
            return Ok(None);
        }
        super::entities::server::Entity::find_by_id(server.to_string())
            .one(&self.db)
            .await?
            .map(to_server)
            .transpose()
    }
}

pub(super) fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

pub(super) fn is_unique_violation(e: &sea_orm::DbErr) -> bool {
    matches!(
        e.sql_err(),
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_))
    )
}

pub(super) fn to_server(row: server::Model) -> Result<Server, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("server {}: {what}", row.id));
    let labels: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&row.labels).map_err(|_| corrupt("labels"))?;
    Ok(Server {
        id: ServerId::parse(&row.id).map_err(|_| corrupt("id"))?,
        name: ServerName::parse(&row.name).map_err(|_| corrupt("name"))?,
        description: row.description.clone(),
        labels: Labels::parse(labels).map_err(|_| corrupt("labels"))?,
        created_at: to_time(row.created_at),
        agent_id: row
            .agent_id
            .as_deref()
            .map(AgentId::parse)
            .transpose()
            .map_err(|_| corrupt("agent id"))?,
        enrolled_at: row.enrolled_at.map(to_time),
        last_seen_at: row.last_seen_at.map(to_time),
        agent_version: row.agent_version,
        fail2ban_version: row.fail2ban_version,
        hostname: row.hostname,
        last_address: row.last_address,
    })
}
