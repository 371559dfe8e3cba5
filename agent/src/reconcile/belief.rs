//! What the agent believes fail2ban bans: every ban and unban it reported (through the relay or by
//! reconciliation), kept in memory and in a small state file so that it survives restarts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use banhub_proto::rules::IpOrCidr;

use super::diff::Key;
use crate::spool::{Event, JailName};

/// The state file's name in the state directory.
pub const STATE_FILE: &str = "reconcile.json";

/// Errors reading or writing the state file.
#[derive(Debug, thiserror::Error)]
pub enum BeliefError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{} is not a reconciliation state file ({source}); move it away and the agent records \
         the current bans as a new baseline",
        path.display()
    )]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The file's format: jail → addresses.
#[derive(Debug, Default, Serialize, Deserialize)]
struct StateFile {
    version: u32,
    bans: BTreeMap<String, BTreeSet<String>>,
}

#[derive(Debug, Default)]
struct State {
    /// jail → addresses. Nested rather than a set of `(jail, ip)` pairs so that recording an
    /// event finds its jail without allocating and compares addresses only: the relay records
    /// every event it stores, and a flat set of pairs would cost two allocations and a full jail
    /// comparison at every tree level.
    bans: BTreeMap<String, BTreeSet<String>>,
    /// Whether a state file existed (or a baseline was taken): without one, the first
    /// reconciliation records a baseline instead of reporting.
    has_baseline: bool,
    /// Changed since the last save.
    dirty: bool,
}

/// The shared belief. Clones share it: the relay records what it accepted, reconciliation what
/// it observed.
#[derive(Debug, Clone)]
pub struct Belief {
    path: PathBuf,
    state: Arc<Mutex<State>>,
}

impl Belief {
    /// Loads the belief from `<state_dir>/reconcile.json`; a missing file gives an empty belief
    /// without a baseline.
    pub fn load(state_dir: &Path) -> Result<Self, BeliefError> {
        let path = state_dir.join(STATE_FILE);
        let state = match std::fs::read(&path) {
            Ok(bytes) => {
                let file: StateFile =
                    serde_json::from_slice(&bytes).map_err(|source| BeliefError::Parse {
                        path: path.clone(),
                        source,
                    })?;
                let mut bans = file.bans;
                bans.retain(|_, ips| !ips.is_empty());
                State {
                    bans,
                    has_baseline: true,
                    dirty: false,
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => State::default(),
            Err(source) => return Err(BeliefError::Read { path, source }),
        };
        Ok(Self {
            path,
            state: Arc::new(Mutex::new(state)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes an event the agent reported into account: a ban adds `(jail, ip)`, an unban removes
    /// it, a gap changes nothing.
    pub fn record(&self, event: &Event) {
        match event {
            Event::Ban(ban) => self.record_ban(true, &ban.jail, &ban.ip),
            Event::Unban(ban) => self.record_ban(false, &ban.jail, &ban.ip),
            Event::Gap(_) => {}
        }
    }

    /// [`Belief::record`] for a ban (`banned`) or an unban of `ip` in `jail`, without the event:
    /// the relay hands the event itself to the spool.
    pub fn record_ban(&self, banned: bool, jail: &JailName, ip: &IpOrCidr) {
        let ip = ip.to_string();
        let mut state = self.lock();
        let changed = if banned {
            match state.bans.get_mut(jail.as_str()) {
                Some(ips) => ips.insert(ip),
                None => {
                    state
                        .bans
                        .insert(jail.as_str().to_owned(), BTreeSet::from([ip]));
                    true
                }
            }
        } else {
            match state.bans.get_mut(jail.as_str()) {
                Some(ips) => {
                    let removed = ips.remove(&ip);
                    if ips.is_empty() {
                        state.bans.remove(jail.as_str());
                    }
                    removed
                }
                None => false,
            }
        };
        state.dirty |= changed;
    }

    /// Whether `ip` is believed banned in `jail`.
    pub fn holds(&self, jail: &JailName, ip: &IpOrCidr) -> bool {
        self.lock()
            .bans
            .get(jail.as_str())
            .is_some_and(|ips| ips.contains(&ip.to_string()))
    }

    /// The current belief.
    pub fn snapshot(&self) -> BTreeSet<Key> {
        self.lock()
            .bans
            .iter()
            .flat_map(|(jail, ips)| ips.iter().map(|ip| (jail.clone(), ip.clone())))
            .collect()
    }

    /// Whether a baseline exists (a state file was found or [`Belief::set_baseline`] ran).
    pub fn has_baseline(&self) -> bool {
        self.lock().has_baseline
    }

    /// Replaces the belief with `bans` (the first run's baseline).
    pub fn set_baseline(&self, bans: BTreeSet<Key>) {
        let mut nested: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (jail, ip) in bans {
            nested.entry(jail).or_default().insert(ip);
        }
        let mut state = self.lock();
        state.bans = nested;
        state.has_baseline = true;
        state.dirty = true;
    }

    /// How many bans the agent believes in.
    pub fn len(&self) -> usize {
        self.lock().bans.values().map(BTreeSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the state file if anything changed since the last save (atomically: a temporary
    /// file, fsync, rename).
    pub async fn save_if_dirty(&self) -> Result<(), BeliefError> {
        let (text, path) = {
            let mut state = self.lock();
            if !state.dirty || !state.has_baseline {
                return Ok(());
            }
            let file = StateFile {
                version: 1,
                bans: state.bans.clone(),
            };
            state.dirty = false;
            let text = serde_json::to_vec(&file).unwrap_or_default();
            (text, self.path.clone())
        };
        let result = tokio::task::spawn_blocking(move || write_atomically(&path, &text))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        result.map_err(|source| {
            // Try again next time.
            self.lock().dirty = true;
            BeliefError::Write {
                path: self.path.clone(),
                source,
            }
        })
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        // Make the rename itself durable.
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spool::{BanEvent, JailName, Logs, Source};
    use banhub_proto::rules::IpOrCidr;

    fn event(ban: bool, jail: &str, ip: &str) -> Event {
        let ev = BanEvent {
            ip: IpOrCidr::parse(ip).expect("ip"),
            jail: JailName::parse(jail).expect("jail"),
            hostname: "h".to_owned(),
            failures: 0,
            logs: Logs::default(),
            ban_time: None,
            ban_duration: None,
            ban_count: None,
            received_at_ms: 1,
            source: Source::Action,
        };
        if ban {
            Event::Ban(ev)
        } else {
            Event::Unban(ev)
        }
    }

    #[tokio::test]
    async fn survives_a_restart_and_tracks_events() {
        let dir = tempfile::tempdir().expect("tempdir");
        let belief = Belief::load(dir.path()).expect("load");
        assert!(!belief.has_baseline());
        belief.set_baseline(BTreeSet::from([(
            "sshd".to_owned(),
            "192.0.2.1".to_owned(),
        )]));
        belief.record(&event(true, "sshd", "192.0.2.2"));
        belief.record(&event(false, "sshd", "192.0.2.1"));
        belief.save_if_dirty().await.expect("save");

        let again = Belief::load(dir.path()).expect("reload");
        assert!(again.has_baseline());
        assert_eq!(
            again.snapshot(),
            BTreeSet::from([("sshd".to_owned(), "192.0.2.2".to_owned())])
        );
    }

    #[test]
    fn record_ban_tracks_each_jail_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let belief = Belief::load(dir.path()).expect("load");
        let ip = |s: &str| IpOrCidr::parse(s).expect("ip");
        let jail = |s: &str| JailName::parse(s).expect("jail");
        belief.record_ban(true, &jail("sshd"), &ip("192.0.2.1"));
        belief.record_ban(true, &jail("sshd"), &ip("192.0.2.1"));
        belief.record_ban(true, &jail("nginx"), &ip("192.0.2.1"));
        belief.record_ban(true, &jail("sshd"), &ip("2001:db8::/64"));
        belief.record_ban(false, &jail("nginx"), &ip("192.0.2.1"));
        belief.record_ban(false, &jail("postfix"), &ip("192.0.2.9"));
        assert_eq!(belief.len(), 2);
        assert_eq!(
            belief.snapshot(),
            BTreeSet::from([
                ("sshd".to_owned(), "192.0.2.1".to_owned()),
                ("sshd".to_owned(), "2001:db8::/64".to_owned()),
            ])
        );
        assert!(
            !belief.lock().bans.contains_key("nginx"),
            "emptied jails go"
        );
    }

    #[test]
    fn a_damaged_file_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(STATE_FILE), "{not json").expect("write");
        let err = Belief::load(dir.path()).expect_err("damaged");
        assert!(err.to_string().contains("baseline"), "{err}");
    }
}
