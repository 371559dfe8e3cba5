//! Servers' callback secrets under the callback secret policy of the settings: issuing and
//! rotating a secret (generated, or chosen by an admin and at least `minSecretLength` long), the
//! overlap during which the previous secret still counts, revoking both, and recognizing the
//! previous secret of a direct callback. The current secret is looked up by the events service;
//! the store keeps only SHA-256 hashes.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::SettingsService;
use crate::domain::{Server, ServerId};
use crate::pki::{random_secret, sha256_hex};
use crate::store::{CallbackSecretRow, RotateOutcome, StoreError};

/// Why a callback secret was not set.
#[derive(Debug, thiserror::Error)]
pub enum CallbackSecretError {
    #[error("no server has the id {0}")]
    NoServer(ServerId),
    /// A chosen secret breaks the policy (422 naming `secret`).
    #[error("secret: {0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A server's callback secret, without the secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretStatus {
    pub set: bool,
    pub set_at: Option<DateTime<Utc>>,
    /// Until when the previous secret is still accepted; `None` when it no longer is.
    pub previous_valid_until: Option<DateTime<Utc>>,
    /// Older than the policy's `maxAgeDays`.
    pub rotation_due: bool,
    /// Whether the policy accepts direct callbacks at all.
    pub direct_enabled: bool,
}

/// A new secret: the only time it exists outside the host.
#[derive(Debug, Clone)]
pub struct IssuedSecret {
    pub secret: String,
    pub status: SecretStatus,
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}

/// Checks a secret an admin chose: long enough, and a value an HTTP header carries unchanged
/// (visible ASCII, no spaces, which `curl -H` and proxies would mangle).
pub fn check_chosen_secret(secret: &str, min_length: usize) -> Result<(), String> {
    if secret.len() < min_length {
        return Err(format!(
            "must be at least {min_length} characters (callbacks.minSecretLength); leave it out \
             to have the hub generate one"
        ));
    }
    if secret.len() > 256 {
        return Err("must be at most 256 characters".to_owned());
    }
    if !secret.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(
            "must be visible ASCII characters without spaces (it travels in an HTTP header)"
                .to_owned(),
        );
    }
    Ok(())
}

/// Whether a secret set at `set_at` is older than the policy's `max_age` at `now` (a secret whose
/// time is unknown is due; without a secret or a maximum age nothing is).
fn rotation_due(
    set: bool,
    set_at: Option<DateTime<Utc>>,
    max_age: Option<Duration>,
    now: DateTime<Utc>,
) -> bool {
    match (set, max_age) {
        (true, Some(max)) => set_at.is_none_or(|at| {
            now.signed_duration_since(at)
                .to_std()
                .unwrap_or(Duration::ZERO)
                > max
        }),
        _ => false,
    }
}

impl SettingsService {
    fn status_of(&self, row: CallbackSecretRow, now: DateTime<Utc>) -> SecretStatus {
        let policy = self.current().settings.callbacks;
        let set_at = row.set_at.and_then(time);
        let previous_valid_until = row.previous_until.and_then(time).filter(|t| *t > now);
        let rotation_due = rotation_due(row.set, set_at, policy.max_age, now);
        SecretStatus {
            set: row.set,
            set_at,
            previous_valid_until,
            rotation_due,
            direct_enabled: policy.direct_enabled,
        }
    }

    /// A server's callback secret status; `None` if there is no such server.
    pub async fn callback_secret_status(
        &self,
        server: ServerId,
    ) -> Result<Option<SecretStatus>, StoreError> {
        let row = self.0.store.callback_secret_row(server).await?;
        Ok(row.map(|row| self.status_of(row, Utc::now())))
    }

    /// Gives `server` a new callback secret: `chosen` (checked against the policy) or a generated
    /// one. The previous secret keeps working for the policy's `rotationOverlapSecs`, unless
    /// `revoke_previous` (a secret that leaked) ends it now.
    pub async fn rotate_callback_secret(
        &self,
        server: ServerId,
        chosen: Option<String>,
        revoke_previous: bool,
    ) -> Result<IssuedSecret, CallbackSecretError> {
        let policy = self.current().settings.callbacks;
        let secret = match chosen {
            Some(secret) => {
                check_chosen_secret(&secret, policy.min_secret_length)
                    .map_err(CallbackSecretError::Invalid)?;
                secret
            }
            None => random_secret(),
        };
        let now = Utc::now();
        let overlap = if revoke_previous {
            Duration::ZERO
        } else {
            policy.rotation_overlap
        };
        let until = (!overlap.is_zero()).then(|| {
            now.timestamp_millis() + i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX / 4)
        });
        let hash = sha256_hex(secret.as_bytes());
        match self
            .0
            .store
            .rotate_callback_secret_hash(server, &hash, now.timestamp_millis(), until)
            .await?
        {
            RotateOutcome::Rotated(row) => {
                tracing::info!(
                    server = %server,
                    previous_valid_until = ?row.previous_until.and_then(time),
                    "callback secret rotated"
                );
                Ok(IssuedSecret {
                    secret,
                    status: self.status_of(row, now),
                })
            }
            RotateOutcome::NoServer => Err(CallbackSecretError::NoServer(server)),
            // Said without telling whose: choose another.
            RotateOutcome::InUse => Err(CallbackSecretError::Invalid(
                "is already in use; choose another (or leave it out to have one generated)"
                    .to_owned(),
            )),
        }
    }

    /// Removes a server's callback secrets (current and previous); false if there is no such
    /// server.
    pub async fn revoke_callback_secrets(&self, server: ServerId) -> Result<bool, StoreError> {
        let found = self.0.store.clear_callback_secrets(server).await?;
        if found {
            tracing::info!(server = %server, "callback secrets revoked");
        }
        Ok(found)
    }

    /// The server whose *previous* callback secret `secret` is, while the overlap lasts. (The
    /// current one is looked up by `Events::callback_server`.)
    pub async fn previous_callback_server(
        &self,
        secret: &str,
    ) -> Result<Option<Server>, StoreError> {
        if secret.is_empty() {
            return Ok(None);
        }
        let hash = sha256_hex(secret.as_bytes());
        let Some(id) = self
            .0
            .store
            .server_by_previous_callback_secret(&hash, Utc::now().timestamp_millis())
            .await?
        else {
            return Ok(None);
        };
        tracing::info!(server = %id, "callback accepted with the previous secret (rotation overlap)");
        self.0.store.get_server(id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chosen_secrets_follow_the_policy() {
        assert!(check_chosen_secret(&"a".repeat(32), 32).is_ok());
        assert!(check_chosen_secret(&"a".repeat(31), 32).is_err());
        assert!(check_chosen_secret(&format!("{} b", "a".repeat(40)), 32).is_err());
        assert!(check_chosen_secret(&"é".repeat(40), 32).is_err());
        assert!(check_chosen_secret(&"a".repeat(257), 32).is_err());
    }

    #[test]
    fn a_secret_is_due_for_rotation_once_older_than_the_maximum_age() {
        let now = Utc::now();
        let max = Some(Duration::from_secs(30 * 86_400));
        let days = |d: i64| Some(now - chrono::Duration::days(d));
        assert!(!rotation_due(true, days(29), max, now));
        assert!(rotation_due(true, days(31), max, now));
        assert!(rotation_due(true, None, max, now), "unknown age");
        assert!(!rotation_due(false, days(400), max, now), "no secret");
        assert!(!rotation_due(true, days(400), None, now), "no maximum");
        // A clock that went back does not make a secret due.
        assert!(!rotation_due(true, days(-1), max, now));
    }
}
