//! The local administrator (`auth.mode = "local"`): its password is set from the environment or
//! generated at first start (written to `<data_dir>/initial-admin-password`, mode 0600, and never
//! logged: the log names the file), stored as an argon2id hash, and checked in constant time.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use argon2::password_hash::SaltString;
use argon2::{Argon2, PasswordHash, PasswordHasher as _, PasswordVerifier as _};
use rand::RngCore as _;

use super::error::AuthError;
use crate::config::auth::LocalConfig;
use crate::store::Store;

/// Where a generated password is written, in the data directory.
pub const INITIAL_PASSWORD_FILE: &str = "initial-admin-password";

/// Hashes a password with argon2id and a random salt (off the async runtime: it takes tens of
/// milliseconds by design).
pub async fn hash_password(password: String) -> Result<String, AuthError> {
    tokio::task::spawn_blocking(move || {
        let mut salt = [0u8; 16];
        rand::rng().fill_bytes(&mut salt);
        let salt = SaltString::encode_b64(&salt)
            .map_err(|e| AuthError::Internal(format!("password salt: {e}")))?;
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|hash| hash.to_string())
            .map_err(|e| AuthError::Internal(format!("hashing a password: {e}")))
    })
    .await
    .map_err(|e| AuthError::Internal(format!("password hashing task: {e}")))?
}

/// Whether `password` matches `hash` (a PHC string). argon2's comparison is constant-time.
pub async fn verify_password(password: String, hash: String) -> bool {
    tokio::task::spawn_blocking(move || {
        PasswordHash::new(&hash).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
    })
    .await
    .unwrap_or(false)
}

/// A hash of a password nobody knows, verified when the user name is wrong so that a wrong name
/// takes as long as a wrong password.
pub async fn decoy_hash() -> Result<String, AuthError> {
    hash_password(crate::pki::random_secret()).await
}

/// Makes sure the local administrator can log in: sets the configured password, or generates one at
/// first start. Returns the file the generated password was written to, if this call generated it.
pub async fn ensure_admin(
    store: &Store,
    local: &LocalConfig,
    data_dir: &Path,
) -> Result<Option<PathBuf>, AuthError> {
    let username = &local.username;
    if let Some(password) = &local.password {
        let current = store.local_password_hash(username).await?;
        let unchanged = match current {
            Some(hash) => verify_password(password.expose().to_owned(), hash).await,
            None => false,
        };
        if !unchanged {
            let hash = hash_password(password.expose().to_owned()).await?;
            store.set_local_password(username, &hash).await?;
            tracing::info!(%username, "local administrator password set from the configuration");
        }
        return Ok(None);
    }
    if store.local_password_hash(username).await?.is_some() {
        return Ok(None);
    }
    let password = crate::pki::random_secret();
    let hash = hash_password(password.clone()).await?;
    if !store.create_local_user(username, &hash).await? {
        // Another hub on the same database created it first; its password stands.
        return Ok(None);
    }
    let path = data_dir.join(INITIAL_PASSWORD_FILE);
    write_private(&path, &format!("{password}\n"))
        .map_err(|e| AuthError::Internal(format!("writing {}: {e}", path.display())))?;
    // Only the file holds it: logs are collected, shipped and kept where anyone may read them.
    tracing::warn!(
        %username,
        file = %path.display(),
        "generated the initial password of the local administrator; read it from the file \
         (readable by this user only); set BANHUB_AUTH__LOCAL__PASSWORD to choose one"
    );
    Ok(Some(path))
}

/// Writes `text` to a new file readable and writable by the owner only (replacing an old one).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_hash_verifies_its_password_only() {
        let hash = hash_password("correct horse battery".to_owned())
            .await
            .expect("hash");
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        assert!(verify_password("correct horse battery".to_owned(), hash.clone()).await);
        assert!(!verify_password("correct horse batterY".to_owned(), hash).await);
        assert!(!verify_password("x".to_owned(), "not a hash".to_owned()).await);
    }

    #[test]
    fn the_password_file_is_private() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(INITIAL_PASSWORD_FILE);
        write_private(&path, "secret\n").expect("write");
        write_private(&path, "again\n").expect("rewrite");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "again\n");
    }
}
