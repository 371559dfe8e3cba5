//! Settings: one typed, validated, versioned document (SMTP, alerts, webhooks, event retention,
//! GeoIP, fail2ban defaults, the callback secret policy) kept in the store, with its secrets sealed
//! under a key outside it. [`callbacks`] issues and rotates servers' callback secrets by that policy.
//!
//! [`SettingsService`] is the only way in: it validates a new document, refuses one edited from an
//! older version (so a concurrent edit is never lost), seals new secrets, keeps omitted ones, and
//! publishes the new settings to whoever follows them (the alert worker, retention).

pub mod callbacks;
pub mod crypto;
pub mod model;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use secrecy::SecretString;
use tokio::sync::watch;

pub use callbacks::{CallbackSecretError, IssuedSecret, SecretStatus};
pub use crypto::{CryptoError, SecretsKey};
pub use model::{
    CallbackPolicy, Fail2banDefaults, FieldError, GeoipCheck, GeoipKind, Lookups, Settings,
    SettingsDocument, Smtp, SmtpDocument, TlsMode, WebhookFormat,
};

use crate::domain::{ServerId, StoredSettings};
use crate::store::{Store, StoreError};
use model::{abuseipdb_key_slot, smtp_password_slot, webhook_token_slot, webhook_url_slot};

/// Why reading or changing the settings failed.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error(
        "the settings were changed by someone else (now at version {current}); read them again \
         and redo the edit"
    )]
    Conflict { current: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Crypto(#[from] CryptoError),
    #[error("the stored settings cannot be read: {0}")]
    Corrupt(String),
}

/// The settings at one version.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub version: u64,
    pub updated_at: Option<DateTime<Utc>>,
    /// What `GET /api/settings` shows: secrets left out, their flags set.
    pub document: SettingsDocument,
    pub settings: Settings,
    /// Sealed secrets by slot.
    secrets: BTreeMap<String, String>,
}

struct Inner {
    store: Store,
    key: SecretsKey,
    /// Reads the GeoIP database a saved document names.
    geoip_check: GeoipCheck,
    current: watch::Sender<Arc<Snapshot>>,
    /// One update at a time in this process; the version check covers other hubs.
    write: tokio::sync::Mutex<()>,
}

/// The settings service; cheap to clone.
#[derive(Clone)]
pub struct SettingsService(Arc<Inner>);

impl std::fmt::Debug for SettingsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingsService")
            .field("version", &self.0.current.borrow().version)
            .finish_non_exhaustive()
    }
}

impl SettingsService {
    /// Reads the stored settings. A stored document that no longer passes every check (a GeoIP
    /// file that went away, a deleted server) is still loaded: those checks apply to edits.
    pub async fn load(
        store: Store,
        key: SecretsKey,
        geoip_check: GeoipCheck,
    ) -> Result<Self, SettingsError> {
        let stored = store.load_settings().await?;
        let snapshot = snapshot_of(&stored)?;
        let (current, _) = watch::channel(Arc::new(snapshot));
        Ok(Self(Arc::new(Inner {
            store,
            key,
            geoip_check,
            current,
            write: tokio::sync::Mutex::new(()),
        })))
    }

    /// The settings now.
    pub fn current(&self) -> Arc<Snapshot> {
        self.0.current.borrow().clone()
    }

    /// Follows changes: the receiver sees every new snapshot.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.0.current.subscribe()
    }

    /// The document as `GET /api/settings` shows it.
    pub fn view(&self) -> SettingsDocument {
        let current = self.current();
        let mut document = current.document.clone();
        document.version = Some(current.version);
        document.updated_at = current.updated_at;
        document
    }

    /// Reads the stored settings again and takes them if another hub saved a newer version (it
    /// announces that; see `cluster`). Returns whether they changed.
    pub async fn reload(&self) -> Result<bool, SettingsError> {
        let _guard = self.0.write.lock().await;
        let stored = self.0.store.load_settings().await?;
        if stored.version <= self.current().version {
            return Ok(false);
        }
        let snapshot = snapshot_of(&stored)?;
        tracing::info!(
            version = snapshot.version,
            "took the settings another hub saved"
        );
        self.0.current.send_replace(Arc::new(snapshot));
        Ok(true)
    }

    /// Replaces the settings with `doc`, edited from version `expected`. Secrets omitted from
    /// `doc` keep their stored values.
    #[tracing::instrument(skip_all, fields(expected), err(Display))]
    pub async fn update(
        &self,
        mut doc: SettingsDocument,
        expected: u64,
    ) -> Result<SettingsDocument, SettingsError> {
        let _guard = self.0.write.lock().await;
        let current = self.current();
        if current.version != expected {
            return Err(SettingsError::Conflict {
                current: current.version,
            });
        }
        let servers: Vec<ServerId> = self
            .0
            .store
            .list_servers()
            .await?
            .into_iter()
            .map(|s| s.id)
            .collect();
        let settings = model::validate(
            &mut doc,
            &|id| servers.contains(&id),
            Some(self.0.geoip_check),
        )?;
        let secrets = self.merge_secrets(&mut doc, &current)?;
        let document = canonical(doc);
        let text =
            serde_json::to_string(&document).map_err(|e| SettingsError::Corrupt(e.to_string()))?;
        let sealed =
            serde_json::to_string(&secrets).map_err(|e| SettingsError::Corrupt(e.to_string()))?;
        let Some(stored) = self.0.store.save_settings(expected, &text, &sealed).await? else {
            // Another hub saved in between.
            let fresh = self.0.store.load_settings().await?;
            let version = fresh.version;
            self.0.current.send_replace(Arc::new(snapshot_of(&fresh)?));
            return Err(SettingsError::Conflict { current: version });
        };
        let snapshot = Snapshot {
            version: stored.version,
            updated_at: stored.updated_at,
            document,
            settings,
            secrets,
        };
        tracing::info!(version = snapshot.version, "settings saved");
        self.0.current.send_replace(Arc::new(snapshot));
        Ok(self.view())
    }

    /// The new sealed secrets for `doc`: given ones sealed, `null` ones dropped, omitted ones
    /// carried over. Sets the flags and URL hosts in `doc`.
    fn merge_secrets(
        &self,
        doc: &mut SettingsDocument,
        current: &Snapshot,
    ) -> Result<BTreeMap<String, String>, SettingsError> {
        let key = &self.0.key;
        let mut secrets = BTreeMap::new();
        let carry = |slot: String, secrets: &mut BTreeMap<String, String>| {
            if let Some(old) = current.secrets.get(&slot) {
                secrets.insert(slot, old.clone());
                true
            } else {
                false
            }
        };
        if let Some(smtp) = &mut doc.smtp {
            let slot = smtp_password_slot();
            smtp.password_set = match smtp.password.take() {
                None => carry(slot, &mut secrets),
                Some(None) => false,
                Some(Some(password)) => {
                    secrets.insert(
                        slot.clone(),
                        key.seal(&slot, &SecretString::from(password))?,
                    );
                    true
                }
            };
        }
        let slot = abuseipdb_key_slot();
        doc.lookups.abuseipdb_key_set = match doc.lookups.abuseipdb_key.take() {
            None => carry(slot, &mut secrets),
            Some(None) => false,
            Some(Some(key_text)) => {
                secrets.insert(
                    slot.clone(),
                    key.seal(&slot, &SecretString::from(key_text))?,
                );
                true
            }
        };
        for (i, webhook) in doc.alerts.webhooks.iter_mut().enumerate() {
            let slot = webhook_url_slot(&webhook.name);
            match webhook.url.take() {
                Some(Some(url)) => {
                    let parsed = model::check_webhook_url(&url).map_err(|reason| FieldError {
                        field: format!("alerts.webhooks[{i}].url"),
                        reason,
                    })?;
                    webhook.url_host = Some(model::url_host(&parsed));
                    secrets.insert(slot.clone(), key.seal(&slot, &SecretString::from(url))?);
                }
                Some(None) => {
                    return Err(FieldError {
                        field: format!("alerts.webhooks[{i}].url"),
                        reason: "a webhook needs a URL; remove the webhook instead".to_owned(),
                    }
                    .into());
                }
                None => {
                    if !carry(slot, &mut secrets) {
                        return Err(FieldError {
                            field: format!("alerts.webhooks[{i}].url"),
                            reason: "is required for a new (or renamed) webhook".to_owned(),
                        }
                        .into());
                    }
                    webhook.url_host = current
                        .document
                        .alerts
                        .webhooks
                        .iter()
                        .find(|w| w.name == webhook.name)
                        .and_then(|w| w.url_host.clone());
                }
            }
            webhook.url_set = true;
            let slot = webhook_token_slot(&webhook.name);
            webhook.token_set = match webhook.token.take() {
                None => carry(slot, &mut secrets),
                Some(None) => false,
                Some(Some(token)) => {
                    secrets.insert(slot.clone(), key.seal(&slot, &SecretString::from(token))?);
                    true
                }
            };
        }
        Ok(secrets)
    }

    /// A stored secret, opened; `None` when none is stored.
    fn secret(&self, snapshot: &Snapshot, slot: &str) -> Result<Option<SecretString>, CryptoError> {
        snapshot
            .secrets
            .get(slot)
            .map(|sealed| self.0.key.open(slot, sealed))
            .transpose()
    }

    /// The stored SMTP password.
    pub fn smtp_password(&self, snapshot: &Snapshot) -> Result<Option<SecretString>, CryptoError> {
        self.secret(snapshot, &smtp_password_slot())
    }

    /// The stored AbuseIPDB API key.
    pub fn abuseipdb_key(&self, snapshot: &Snapshot) -> Result<Option<SecretString>, CryptoError> {
        self.secret(snapshot, &abuseipdb_key_slot())
    }

    /// A webhook's stored URL and token.
    pub fn webhook_secrets(
        &self,
        snapshot: &Snapshot,
        name: &str,
    ) -> Result<(Option<SecretString>, Option<SecretString>), CryptoError> {
        Ok((
            self.secret(snapshot, &webhook_url_slot(name))?,
            self.secret(snapshot, &webhook_token_slot(name))?,
        ))
    }

    /// The SMTP settings to test: `given` (checked; its password omitted means the stored one),
    /// else the saved ones. `None` when neither exists.
    pub fn smtp_for_test(
        &self,
        given: Option<SmtpDocument>,
    ) -> Result<Option<(Smtp, Option<SecretString>)>, SettingsError> {
        let snapshot = self.current();
        match given {
            Some(mut doc) => {
                let mut probe = SettingsDocument {
                    smtp: Some(doc.clone()),
                    ..SettingsDocument::default()
                };
                let smtp = model::validate(&mut probe, &|_| true, None)?
                    .smtp
                    .ok_or_else(|| SettingsError::Corrupt("smtp vanished".to_owned()))?;
                let password = match doc.password.take() {
                    Some(Some(password)) => Some(SecretString::from(password)),
                    Some(None) => None,
                    None => self.smtp_password(&snapshot)?,
                };
                Ok(Some((smtp, password)))
            }
            None => match &snapshot.settings.smtp {
                Some(smtp) => Ok(Some((smtp.clone(), self.smtp_password(&snapshot)?))),
                None => Ok(None),
            },
        }
    }
}

/// `doc` as stored: no version, no secrets.
fn canonical(mut doc: SettingsDocument) -> SettingsDocument {
    doc.version = None;
    doc.updated_at = None;
    if let Some(smtp) = &mut doc.smtp {
        smtp.password = None;
    }
    for webhook in &mut doc.alerts.webhooks {
        webhook.url = None;
        webhook.token = None;
    }
    doc.lookups.abuseipdb_key = None;
    doc
}

fn snapshot_of(stored: &StoredSettings) -> Result<Snapshot, SettingsError> {
    let mut document: SettingsDocument = serde_json::from_str(&stored.document)
        .map_err(|e| SettingsError::Corrupt(format!("document: {e}")))?;
    let secrets: BTreeMap<String, String> = serde_json::from_str(&stored.secrets)
        .map_err(|e| SettingsError::Corrupt(format!("secrets: {e}")))?;
    // Checks that depend on the world outside (files, servers) are for edits; here a stored
    // document must still load.
    let settings = model::validate(&mut document, &|_| true, None)
        .map_err(|e| SettingsError::Corrupt(e.to_string()))?;
    document.version = None;
    document.updated_at = None;
    Ok(Snapshot {
        version: stored.version,
        updated_at: stored.updated_at,
        document: canonical(document),
        settings,
        secrets,
    })
}
