//! Secrets at rest: the settings' passwords, tokens and webhook URLs are sealed with AES-256-GCM
//! under a key that never enters the database (a file beside it, 0600, created on first start).
//!
//! Each sealed value is `v1:` + base64(nonce ‖ ciphertext ‖ tag), with the secret's slot name
//! (e.g. `smtp.password`) as associated data, so a value copied into another slot does not open.

use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use secrecy::{ExposeSecret, SecretString};

const PREFIX: &str = "v1:";
const KEY_LEN: usize = 32;

/// Why the key could not be loaded or a value not sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("secrets key {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "secrets key {path} is not 64 hexadecimal characters; restore the original file (without \
         it the stored secrets cannot be read) or remove it and enter the secrets again"
    )]
    BadKey { path: PathBuf },
    #[error(
        "secrets key {path} can be read by other users (mode {mode:o}); run `chmod 600 {path}`"
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error(
        "a stored secret cannot be opened with the current secrets key (was the key file replaced?); \
         enter the secret again"
    )]
    Open,
    #[error("the system random generator failed")]
    Random,
}

/// The key that seals secrets. Its `Debug` shows nothing of it.
pub struct SecretsKey {
    key: LessSafeKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretsKey(..)")
    }
}

impl SecretsKey {
    /// Reads the key file, or creates it (0600, 32 random bytes as hex) when it does not exist.
    pub fn load_or_create(path: &Path) -> Result<Self, CryptoError> {
        let io = |source| CryptoError::Io {
            path: path.to_owned(),
            source,
        };
        let rng = SystemRandom::new();
        match fs::read_to_string(path) {
            Ok(text) => {
                let mode = fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
                if mode & 0o077 != 0 {
                    return Err(CryptoError::Exposed {
                        path: path.to_owned(),
                        mode,
                    });
                }
                let bytes = hex::decode(text.trim()).map_err(|_| CryptoError::BadKey {
                    path: path.to_owned(),
                })?;
                Self::from_bytes(&bytes, rng).ok_or_else(|| CryptoError::BadKey {
                    path: path.to_owned(),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut bytes = [0u8; KEY_LEN];
                rng.fill(&mut bytes).map_err(|_| CryptoError::Random)?;
                // create_new: two hubs starting on one data directory never overwrite each
                // other's key; the loser reads the winner's.
                let mut file = match OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)
                {
                    Ok(file) => file,
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        return Self::load_or_create(path);
                    }
                    Err(e) => return Err(io(e)),
                };
                file.write_all(format!("{}\n", hex::encode(bytes)).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(io)?;
                tracing::info!(path = %path.display(), "created the secrets key; back it up with the database");
                Self::from_bytes(&bytes, rng).ok_or(CryptoError::Random)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn from_bytes(bytes: &[u8], rng: SystemRandom) -> Option<Self> {
        if bytes.len() != KEY_LEN {
            return None;
        }
        let key = UnboundKey::new(&AES_256_GCM, bytes).ok()?;
        Some(Self {
            key: LessSafeKey::new(key),
            rng,
        })
    }

    /// A key for tests.
    #[cfg(test)]
    pub fn for_tests(byte: u8) -> Self {
        Self::from_bytes(&[byte; KEY_LEN], SystemRandom::new()).expect("a 32-byte key")
    }

    /// Seals `secret` for the slot `slot`.
    pub fn seal(&self, slot: &str, secret: &SecretString) -> Result<String, CryptoError> {
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).map_err(|_| CryptoError::Random)?;
        let mut data = secret.expose_secret().as_bytes().to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(slot.as_bytes()),
                &mut data,
            )
            .map_err(|_| CryptoError::Random)?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(format!(
            "{PREFIX}{}",
            base64::engine::general_purpose::STANDARD.encode(out)
        ))
    }

    /// Opens a value sealed for `slot`.
    pub fn open(&self, slot: &str, sealed: &str) -> Result<SecretString, CryptoError> {
        let raw = sealed
            .strip_prefix(PREFIX)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .ok_or(CryptoError::Open)?;
        if raw.len() < NONCE_LEN {
            return Err(CryptoError::Open);
        }
        let (nonce, data) = raw.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| CryptoError::Open)?;
        let mut data = data.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(slot.as_bytes()), &mut data)
            .map_err(|_| CryptoError::Open)?;
        let text = String::from_utf8(plain.to_vec()).map_err(|_| CryptoError::Open)?;
        Ok(SecretString::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_values_open_only_in_their_slot_with_their_key() {
        let key = SecretsKey::for_tests(7);
        let secret = SecretString::from("hunter2".to_owned());
        let sealed = key.seal("smtp.password", &secret).expect("seal");
        assert!(sealed.starts_with("v1:"));
        assert!(!sealed.contains("hunter2"));
        assert_eq!(
            key.open("smtp.password", &sealed)
                .expect("open")
                .expose_secret(),
            "hunter2"
        );
        // A fresh nonce each time.
        assert_ne!(sealed, key.seal("smtp.password", &secret).expect("seal"));
        assert!(key.open("webhook:x:token", &sealed).is_err());
        assert!(
            SecretsKey::for_tests(8)
                .open("smtp.password", &sealed)
                .is_err()
        );
        assert!(key.open("smtp.password", "v1:AAAA").is_err());
        assert!(key.open("smtp.password", "plain").is_err());
    }

    #[test]
    fn the_key_file_is_created_private_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("secrets.key");
        let first = SecretsKey::load_or_create(&path).expect("create");
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let sealed = first
            .seal("s", &SecretString::from("x".to_owned()))
            .expect("seal");
        let again = SecretsKey::load_or_create(&path).expect("load");
        assert_eq!(again.open("s", &sealed).expect("open").expose_secret(), "x");

        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        assert!(matches!(
            SecretsKey::load_or_create(&path),
            Err(CryptoError::Exposed { .. })
        ));
        fs::write(&path, "short").expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
        assert!(matches!(
            SecretsKey::load_or_create(&path),
            Err(CryptoError::BadKey { .. })
        ));
    }
}
