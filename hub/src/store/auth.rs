//! Repository functions of operator authentication: the local administrator's password hash,
//! sessions, OIDC logins in progress, API tokens and the audit log. Through sea-orm's entities.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
    Set,
};

use super::entities::{api_token, audit_entry, local_user, login_flow, session};
use super::servers::is_unique_violation;
use super::{Store, StoreError, now_ms, to_time};
use crate::domain::auth::{
    ApiTokenRecord, AuditQuery, AuditRecord, LoginFlow, Outcome, Role, SessionKind, SessionRecord,
};

fn role(text: &str, what: &str) -> Result<Role, StoreError> {
    Role::parse(text).ok_or_else(|| StoreError::Corrupt(format!("{what}: role {text:?}")))
}

fn to_session(row: session::Model) -> Result<SessionRecord, StoreError> {
    Ok(SessionRecord {
        kind: SessionKind::parse(&row.kind)
            .ok_or_else(|| StoreError::Corrupt(format!("session {}: kind", row.id)))?,
        role: role(&row.role, "session")?,
        id: row.id,
        secret_hash: row.secret_hash,
        subject: row.subject,
        name: row.name,
        email: row.email,
        id_token: row.id_token,
        created_at: to_time(row.created_at),
        last_seen_at: to_time(row.last_seen_at),
        expires_at: to_time(row.expires_at),
        revoked_at: row.revoked_at.map(to_time),
    })
}

fn to_token(row: api_token::Model) -> Result<ApiTokenRecord, StoreError> {
    Ok(ApiTokenRecord {
        role: role(&row.role, "api token")?,
        id: row.id,
        name: row.name,
        secret_hash: row.secret_hash,
        created_by: row.created_by,
        created_at: to_time(row.created_at),
        last_used_at: row.last_used_at.map(to_time),
        expires_at: row.expires_at.map(to_time),
        revoked_at: row.revoked_at.map(to_time),
    })
}

fn to_audit(row: audit_entry::Model) -> Result<AuditRecord, StoreError> {
    let corrupt = |what: &str| StoreError::Corrupt(format!("audit entry {}: {what}", row.id));
    let detail = match serde_json::from_str::<serde_json::Value>(&row.detail) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => return Err(corrupt("detail")),
    };
    Ok(AuditRecord {
        id: row.id,
        at: to_time(row.at),
        outcome: Outcome::parse(&row.outcome).ok_or_else(|| corrupt("outcome"))?,
        status: u16::try_from(row.status).map_err(|_| corrupt("status"))?,
        actor: row.actor,
        actor_name: row.actor_name,
        actor_kind: row.actor_kind,
        action: row.action,
        path: row.path,
        server_id: row.server_id,
        detail,
        client_addr: row.client_addr,
    })
}

impl Store {
    /// The password hash (PHC string) of a local user.
    pub async fn local_password_hash(&self, username: &str) -> Result<Option<String>, StoreError> {
        Ok(local_user::Entity::find_by_id(username.to_owned())
            .one(&self.db)
            .await?
            .map(|row| row.password_hash))
    }

    /// Creates a local user unless one of that name exists; `true` if this call created it. Two hubs
    /// starting at once on one database create it once.
    pub async fn create_local_user(
        &self,
        username: &str,
        password_hash: &str,
    ) -> Result<bool, StoreError> {
        let now = now_ms();
        let row = local_user::ActiveModel {
            username: Set(username.to_owned()),
            password_hash: Set(password_hash.to_owned()),
            created_at: Set(now),
            updated_at: Set(now),
        };
        match row.insert(&self.db).await {
            Ok(_) => Ok(true),
            Err(e) if is_unique_violation(&e) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets a local user's password hash, creating the user if needed.
    pub async fn set_local_password(
        &self,
        username: &str,
        password_hash: &str,
    ) -> Result<(), StoreError> {
        if self.create_local_user(username, password_hash).await? {
            return Ok(());
        }
        local_user::Entity::update_many()
            .col_expr(
                local_user::Column::PasswordHash,
                Expr::value(password_hash.to_owned()),
            )
            .col_expr(local_user::Column::UpdatedAt, Expr::value(now_ms()))
            .filter(local_user::Column::Username.eq(username.to_owned()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    pub async fn insert_session(&self, record: &SessionRecord) -> Result<(), StoreError> {
        session::ActiveModel {
            id: Set(record.id.clone()),
            secret_hash: Set(record.secret_hash.clone()),
            kind: Set(record.kind.as_str().to_owned()),
            subject: Set(record.subject.clone()),
            name: Set(record.name.clone()),
            email: Set(record.email.clone()),
            role: Set(record.role.as_str().to_owned()),
            id_token: Set(record.id_token.clone()),
            created_at: Set(record.created_at.timestamp_millis()),
            last_seen_at: Set(record.last_seen_at.timestamp_millis()),
            expires_at: Set(record.expires_at.timestamp_millis()),
            revoked_at: Set(record.revoked_at.map(|t| t.timestamp_millis())),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    pub async fn session(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        session::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .map(to_session)
            .transpose()
    }

    /// Records that a session was used at `at` (the idle expiry counts from here).
    pub async fn touch_session(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        session::Entity::update_many()
            .col_expr(
                session::Column::LastSeenAt,
                Expr::value(at.timestamp_millis()),
            )
            .filter(session::Column::Id.eq(id.to_owned()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Ends a session; `false` if there was no such live session.
    pub async fn revoke_session(&self, id: &str) -> Result<bool, StoreError> {
        let result = session::Entity::update_many()
            .col_expr(session::Column::RevokedAt, Expr::value(now_ms()))
            .filter(session::Column::Id.eq(id.to_owned()))
            .filter(session::Column::RevokedAt.is_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }

    /// Sessions not revoked and not past their absolute expiry, newest first (the idle expiry is
    /// the caller's to judge).
    pub async fn live_sessions(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        session::Entity::find()
            .filter(session::Column::RevokedAt.is_null())
            .filter(session::Column::ExpiresAt.gt(now.timestamp_millis()))
            .order_by_desc(session::Column::CreatedAt)
            .limit(1000)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_session)
            .collect()
    }

    /// Deletes sessions and login flows that can no longer be used: past their absolute expiry,
    /// idle since before `idle_cutoff`, or revoked.
    pub async fn prune_sessions(
        &self,
        now: DateTime<Utc>,
        idle_cutoff: DateTime<Utc>,
    ) -> Result<u64, StoreError> {
        let now = now.timestamp_millis();
        let sessions = session::Entity::delete_many()
            .filter(
                Condition::any()
                    .add(session::Column::ExpiresAt.lte(now))
                    .add(session::Column::LastSeenAt.lt(idle_cutoff.timestamp_millis()))
                    .add(session::Column::RevokedAt.is_not_null()),
            )
            .exec(&self.db)
            .await?;
        let flows = login_flow::Entity::delete_many()
            .filter(login_flow::Column::ExpiresAt.lte(now))
            .exec(&self.db)
            .await?;
        Ok(sessions.rows_affected + flows.rows_affected)
    }

    pub async fn insert_login_flow(
        &self,
        state_hash: &str,
        flow: &LoginFlow,
    ) -> Result<(), StoreError> {
        login_flow::ActiveModel {
            state_hash: Set(state_hash.to_owned()),
            nonce: Set(flow.nonce.clone()),
            pkce_verifier: Set(flow.pkce_verifier.clone()),
            return_to: Set(flow.return_to.clone()),
            redirect_url: Set(flow.redirect_url.clone()),
            created_at: Set(now_ms()),
            expires_at: Set(flow.expires_at.timestamp_millis()),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    /// Takes (deletes and returns) the login flow of a state, once: a second callback with the same
    /// state finds nothing. Expired flows are taken but not returned.
    pub async fn take_login_flow(
        &self,
        state_hash: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<LoginFlow>, StoreError> {
        let Some(row) = login_flow::Entity::find_by_id(state_hash.to_owned())
            .one(&self.db)
            .await?
        else {
            return Ok(None);
        };
        let deleted = login_flow::Entity::delete_many()
            .filter(login_flow::Column::StateHash.eq(state_hash.to_owned()))
            .exec(&self.db)
            .await?;
        if deleted.rows_affected != 1 || row.expires_at <= now.timestamp_millis() {
            return Ok(None);
        }
        Ok(Some(LoginFlow {
            nonce: row.nonce,
            pkce_verifier: row.pkce_verifier,
            return_to: row.return_to,
            redirect_url: row.redirect_url,
            expires_at: to_time(row.expires_at),
        }))
    }

    pub async fn insert_api_token(&self, record: &ApiTokenRecord) -> Result<(), StoreError> {
        api_token::ActiveModel {
            id: Set(record.id.clone()),
            name: Set(record.name.clone()),
            role: Set(record.role.as_str().to_owned()),
            secret_hash: Set(record.secret_hash.clone()),
            created_by: Set(record.created_by.clone()),
            created_at: Set(record.created_at.timestamp_millis()),
            last_used_at: Set(None),
            expires_at: Set(record.expires_at.map(|t| t.timestamp_millis())),
            revoked_at: Set(None),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    pub async fn api_token(&self, id: &str) -> Result<Option<ApiTokenRecord>, StoreError> {
        api_token::Entity::find_by_id(id.to_owned())
            .one(&self.db)
            .await?
            .map(to_token)
            .transpose()
    }

    /// Every API token, revoked ones included, newest first.
    pub async fn list_api_tokens(&self) -> Result<Vec<ApiTokenRecord>, StoreError> {
        api_token::Entity::find()
            .order_by_desc(api_token::Column::CreatedAt)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_token)
            .collect()
    }

    /// Revokes a token; `false` if there was no such unrevoked token.
    pub async fn revoke_api_token(&self, id: &str) -> Result<bool, StoreError> {
        let result = api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now_ms()))
            .filter(api_token::Column::Id.eq(id.to_owned()))
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(&self.db)
            .await?;
        Ok(result.rows_affected == 1)
    }

    pub async fn touch_api_token(&self, id: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        api_token::Entity::update_many()
            .col_expr(
                api_token::Column::LastUsedAt,
                Expr::value(at.timestamp_millis()),
            )
            .filter(api_token::Column::Id.eq(id.to_owned()))
            .exec(&self.db)
            .await?;
        Ok(())
    }

    /// Appends an entry to the audit log; returns its id.
    pub async fn insert_audit(&self, record: &AuditRecord) -> Result<i64, StoreError> {
        let row = audit_entry::ActiveModel {
            id: sea_orm::NotSet,
            at: Set(record.at.timestamp_millis()),
            actor: Set(record.actor.clone()),
            actor_name: Set(record.actor_name.clone()),
            actor_kind: Set(record.actor_kind.clone()),
            action: Set(record.action.clone()),
            path: Set(record.path.clone()),
            server_id: Set(record.server_id.clone()),
            status: Set(i32::from(record.status)),
            outcome: Set(record.outcome.as_str().to_owned()),
            detail: Set(serde_json::Value::Object(record.detail.clone()).to_string()),
            client_addr: Set(record.client_addr.clone()),
        }
        .insert(&self.db)
        .await?;
        Ok(row.id)
    }

    /// A page of the audit log, newest first.
    pub async fn audit_page(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>, StoreError> {
        let mut select = audit_entry::Entity::find();
        if let Some(before) = query.before {
            select = select.filter(audit_entry::Column::Id.lt(before));
        }
        if let Some(actor) = &query.actor {
            select = select.filter(audit_entry::Column::Actor.eq(actor.clone()));
        }
        if let Some(server) = &query.server_id {
            select = select.filter(audit_entry::Column::ServerId.eq(server.clone()));
        }
        select
            .order_by_desc(audit_entry::Column::Id)
            .limit(query.limit)
            .all(&self.db)
            .await?
            .into_iter()
            .map(to_audit)
            .collect()
    }
}
