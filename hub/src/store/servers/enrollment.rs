//! Enrolling an agent: enrollment tokens stored by the hash of their secret, a token redeemed and
//! the agent's certificate recorded in one transaction, the revocation list, and the purge of
//! expired tokens and certificates. Through sea-orm's entities: single rows by key and simple
//! filtered updates and deletes, which need no SQL of their own.

use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set, TransactionTrait};
use subtle::ConstantTimeEq;

use super::super::entities::{agent_cert, enrollment_token, server};
use super::super::{Store, StoreError, now_ms};
use super::{non_empty, to_server};
use crate::domain::{AgentFacts, AgentId, Server, ServerId, SignedAgentCert, sha256_hex};
use chrono::{DateTime, Utc};

/// Why an enrollment token was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefusal {
    #[error("the enrollment token is unknown or its secret does not match")]
    Invalid,
    #[error("the enrollment token has already been used; create a new one on the hub")]
    Used,
    #[error("the enrollment token has expired; create a new one on the hub")]
    Expired,
}

/// Outcome of an enrollment attempt.
#[derive(Debug)]
pub enum EnrollOutcome<E> {
    Enrolled(Box<Server>, SignedAgentCert, AgentId),
    Refused(TokenRefusal),
    SignFailed(E),
}

impl Store {
    /// Stores a new enrollment token for `server` with the hash of its secret.
    pub async fn create_enrollment_token(
        &self,
        server: ServerId,
        token_id: &str,
        secret: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        enrollment_token::ActiveModel {
            id: Set(token_id.to_owned()),
            server_id: Set(server.to_string()),
            secret_hash: Set(sha256_hex(secret.as_bytes())),
            created_at: Set(now_ms()),
            expires_at: Set(expires_at.timestamp_millis()),
            used_at: Set(None),
        }
        .insert(&self.db)
        .await?;
        Ok(())
    }

    /// Redeems a token and records the agent it enrolls, in one transaction: the token is marked used,
    /// `sign` issues the certificate, the server points at the new agent, and older certificates of the
    /// server are revoked (returned in the outcome through the revocation list the caller keeps).
    pub async fn enroll<E>(
        &self,
        token_id: &str,
        secret: &str,
        facts: &AgentFacts,
        sign: impl FnOnce(&Server, AgentId) -> Result<SignedAgentCert, E>,
    ) -> Result<(EnrollOutcome<E>, Vec<String>), StoreError> {
        let txn = self.db.begin().await?;
        let now = now_ms();
        // Claim the token with one write before reading anything: on SQLite a transaction that
        // reads first and writes later fails with "database is locked" when another redemption
        // races it, instead of waiting. Only one concurrent redemption can update the row.
        let presented = sha256_hex(secret.as_bytes());
        let claimed = enrollment_token::Entity::update_many()
            .col_expr(enrollment_token::Column::UsedAt, Expr::value(now))
            .filter(enrollment_token::Column::Id.eq(token_id.to_owned()))
            .filter(enrollment_token::Column::SecretHash.eq(presented.clone()))
            .filter(enrollment_token::Column::UsedAt.is_null())
            .filter(enrollment_token::Column::ExpiresAt.gt(now))
            .exec(&txn)
            .await?;
        if claimed.rows_affected != 1 {
            // Say why, from the row as it is (the transaction changed nothing).
            let token = enrollment_token::Entity::find_by_id(token_id.to_owned())
                .one(&txn)
                .await?;
            let refusal = match token {
                Some(token)
                    if bool::from(presented.as_bytes().ct_eq(token.secret_hash.as_bytes())) =>
                {
                    if token.used_at.is_some() {
                        TokenRefusal::Used
                    } else {
                        TokenRefusal::Expired
                    }
                }
                _ => TokenRefusal::Invalid,
            };
            return Ok((EnrollOutcome::Refused(refusal), Vec::new()));
        }
        let token = enrollment_token::Entity::find_by_id(token_id.to_owned())
            .one(&txn)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a claimed token vanished".to_owned()))?;
        let Some(server_row) = server::Entity::find_by_id(token.server_id.clone())
            .one(&txn)
            .await?
        else {
            return Ok((EnrollOutcome::Refused(TokenRefusal::Invalid), Vec::new()));
        };
        let server = to_server(server_row.clone())?;
        let agent = AgentId::new();
        let cert = match sign(&server, agent) {
            Ok(cert) => cert,
            Err(e) => return Ok((EnrollOutcome::SignFailed(e), Vec::new())),
        };
        // Older certificates of this server stop working: one agent per server.
        let old: Vec<String> = agent_cert::Entity::find()
            .filter(agent_cert::Column::ServerId.eq(server_row.id.clone()))
            .filter(agent_cert::Column::RevokedAt.is_null())
            .all(&txn)
            .await?
            .into_iter()
            .map(|c| c.serial)
            .collect();
        agent_cert::Entity::update_many()
            .col_expr(agent_cert::Column::RevokedAt, Expr::value(now))
            .filter(agent_cert::Column::ServerId.eq(server_row.id.clone()))
            .filter(agent_cert::Column::RevokedAt.is_null())
            .exec(&txn)
            .await?;
        agent_cert::ActiveModel {
            serial: Set(cert.serial.clone()),
            agent_id: Set(agent.to_string()),
            server_id: Set(server_row.id.clone()),
            fingerprint: Set(cert.fingerprint.clone()),
            issued_at: Set(now),
            not_after: Set(cert.not_after.timestamp_millis()),
            revoked_at: Set(None),
        }
        .insert(&txn)
        .await?;
        let mut active: server::ActiveModel = server_row.into();
        active.agent_id = Set(Some(agent.to_string()));
        active.enrolled_at = Set(Some(now));
        active.agent_version = Set(non_empty(&facts.agent_version));
        active.hostname = Set(non_empty(&facts.hostname));
        active.last_address = Set(non_empty(&facts.address));
        let updated = active.update(&txn).await?;
        txn.commit().await?;
        Ok((
            EnrollOutcome::Enrolled(Box::new(to_server(updated)?), cert, agent),
            old,
        ))
    }

    /// Serials of every revoked certificate, for the handshake's revocation list.
    pub async fn revoked_serials(&self) -> Result<Vec<String>, StoreError> {
        Ok(agent_cert::Entity::find()
            .filter(agent_cert::Column::RevokedAt.is_not_null())
            .all(&self.db)
            .await?
            .into_iter()
            .map(|c| c.serial)
            .collect())
    }

    /// Whether `serial` was issued to `agent` and is still valid.
    pub async fn cert_is_current(&self, agent: AgentId, serial: &str) -> Result<bool, StoreError> {
        Ok(agent_cert::Entity::find_by_id(serial.to_owned())
            .one(&self.db)
            .await?
            .is_some_and(|c| c.agent_id == agent.to_string() && c.revoked_at.is_none()))
    }

    /// Deletes enrollment tokens that expired before `before_ms`, and revoked certificates that
    /// expired before it (the TLS handshake refuses an expired certificate by itself).
    pub async fn purge_expired_enrollment(&self, before_ms: i64) -> Result<u64, StoreError> {
        let tokens = enrollment_token::Entity::delete_many()
            .filter(enrollment_token::Column::ExpiresAt.lt(before_ms))
            .exec(&self.db)
            .await?
            .rows_affected;
        let certs = agent_cert::Entity::delete_many()
            .filter(agent_cert::Column::RevokedAt.is_not_null())
            .filter(agent_cert::Column::NotAfter.lt(before_ms))
            .exec(&self.db)
            .await?
            .rows_affected;
        Ok(tokens + certs)
    }
}
