//! The relay's callback secret: generated at first start, kept in a file only its owner can read,
//! compared in constant time.
//!
//! The fail2ban action reads the same file (fail2ban runs its actions as root), so the secret never
//! appears on a command line where `ps` would show it.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use subtle::ConstantTimeEq;

/// The secret file's name in the agent's state directory.
pub const SECRET_FILE: &str = "relay.secret";
/// Random bytes in a generated secret (encoded as 43 base64url characters).
const SECRET_BYTES: usize = 32;
/// Bounds on a secret an operator supplies: long enough to resist guessing, short enough for a header.
const MIN_LEN: usize = 32;
const MAX_LEN: usize = 512;

/// Why the secret could not be loaded or stored.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{action} the relay secret file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: io::Error,
    },
    #[error(
        "the relay secret file {} has mode {mode:04o}, so other users can reach it; \
         run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Exposed { path: PathBuf, mode: u32 },
    #[error("the relay secret {} is invalid: {reason}", origin)]
    Invalid { origin: String, reason: String },
}

/// The shared secret fail2ban's action sends in `X-Callback-Secret`.
#[derive(Clone)]
pub struct RelaySecret(String);

impl RelaySecret {
    /// A fresh secret: 32 random bytes, base64url. `rand::rng()` is a cryptographically secure
    /// generator seeded from the operating system.
    pub fn generate() -> Self {
        let mut bytes = [0u8; SECRET_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        Self(URL_SAFE_NO_PAD.encode(bytes))
    }

    /// Checks a secret given by an operator: 32 to 512 visible ASCII characters.
    pub fn parse(raw: &str) -> Result<Self, SecretError> {
        let invalid = |reason: &str| SecretError::Invalid {
            origin: "given".to_owned(),
            reason: reason.to_owned(),
        };
        if !(MIN_LEN..=MAX_LEN).contains(&raw.len()) {
            return Err(invalid("it must be 32 to 512 characters long"));
        }
        if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "it may hold only visible ASCII characters, no spaces",
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// Reads the secret from `path`, or generates one and stores it there (mode 0600) when the file
    /// does not exist yet. A file that other users can read or write is refused.
    pub fn load_or_create(path: &Path) -> Result<Self, SecretError> {
        match Self::load(path) {
            Err(SecretError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            other => return other,
        }
        let secret = Self::generate();
        match secret.store(path) {
            Ok(()) => {
                tracing::info!(path = %path.display(), "generated the relay secret");
                Ok(secret)
            }
            // Another process created it first: use theirs.
            Err(SecretError::Io { source, .. })
                if source.kind() == io::ErrorKind::AlreadyExists =>
            {
                Self::load(path)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads an existing secret file.
    pub fn load(path: &Path) -> Result<Self, SecretError> {
        let io = |action| {
            move |source| SecretError::Io {
                path: path.to_owned(),
                action,
                source,
            }
        };
        let meta = fs::metadata(path).map_err(io("reading"))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o007 != 0 {
            return Err(SecretError::Exposed {
                path: path.to_owned(),
                mode,
            });
        }
        let text = fs::read_to_string(path).map_err(io("reading"))?;
        Self::parse(text.trim_end_matches(['\n', '\r'])).map_err(|e| match e {
            SecretError::Invalid { reason, .. } => SecretError::Invalid {
                origin: format!("in {}", path.display()),
                reason,
            },
            other => other,
        })
    }

    /// Writes the secret to a new file at `path`, atomically: a temporary file is written and
    /// synced, then linked into place, which fails rather than replaces if `path` exists.
    fn store(&self, path: &Path) -> Result<(), SecretError> {
        let io = |action| {
            move |source| SecretError::Io {
                path: path.to_owned(),
                action,
                source,
            }
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io("creating the directory of"))?;
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(".tmp");
        let tmp = PathBuf::from(tmp_name);
        // A leftover from a crash may have other permissions; never reuse it.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io("writing")(e)),
            _ => {}
        }
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut file| {
                file.write_all(self.0.as_bytes())?;
                file.write_all(b"\n")?;
                file.sync_all()
            });
        let linked = written.and_then(|()| fs::hard_link(&tmp, path));
        let _ = fs::remove_file(&tmp);
        linked.map_err(io("writing"))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io("syncing the directory of"))
    }

    /// The secret itself, to hand to something that must send it (tests, the action installer).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is the secret, in time that does not depend on where they differ.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(candidate).into()
    }
}

impl fmt::Debug for RelaySecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RelaySecret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_secret_is_stored_private_and_reloaded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state").join(SECRET_FILE);
        let secret = RelaySecret::load_or_create(&path).expect("create");
        assert_eq!(secret.expose().len(), 43);
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            format!("{}\n", secret.expose())
        );
        let again = RelaySecret::load_or_create(&path).expect("load");
        assert_eq!(again.expose(), secret.expose());
        assert!(!path.with_extension("secret.tmp").exists());
        assert_ne!(RelaySecret::generate().expose(), secret.expose());
    }

    #[test]
    fn exposed_or_invalid_files_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(SECRET_FILE);
        fs::write(&path, "x".repeat(40)).expect("write");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = RelaySecret::load_or_create(&path).expect_err("world-readable");
        assert!(err.to_string().contains("chmod 600"), "{err}");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
        RelaySecret::load(&path).expect("group-readable is allowed for a fail2ban group");

        fs::write(&path, "short").expect("write");
        let err = RelaySecret::load(&path).expect_err("short");
        assert!(matches!(err, SecretError::Invalid { .. }), "{err}");
        fs::write(&path, format!("{} y", "x".repeat(40))).expect("write");
        assert!(RelaySecret::load(&path).is_err());
    }

    #[test]
    fn comparison_and_debug() {
        let secret = RelaySecret::parse(&"s".repeat(32)).expect("valid");
        assert!(secret.matches("s".repeat(32).as_bytes()));
        assert!(!secret.matches("s".repeat(31).as_bytes()));
        assert!(!secret.matches(b""));
        assert!(!secret.matches(format!("{}t", "s".repeat(31)).as_bytes()));
        assert_eq!(format!("{secret:?}"), "RelaySecret(<redacted>)");
    }
}
