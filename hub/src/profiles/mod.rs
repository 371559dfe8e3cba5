//! Profiles: named, versioned config sets assigned to servers by label, and each server's drift
//! from its profile. `Profiles` saves versions (immutable; a save makes the next one) after one
//! online host of the assignment had fail2ban check them, keeps the assignment one profile per
//! server, diffs two versions, and ([`drift`]) compares every host with its profile on connect,
//! on a schedule and after each change banhub makes there, raising an alert when a host drifts.

mod drift;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::mpsc;

use crate::alerts::Alerts;
use crate::domain::profiles::{
    AssignmentConflict, Profile, ProfileFile, ProfileName, ProfileRuleError, ProfileVersion,
    VersionFileDiff, assignment_conflict, diff_versions, selector_matches,
};
use crate::domain::{Server, ServerId};
use crate::fleet::{AgentErrorKind, Fleet, FleetError, VALIDATE_SET_CAPABILITY};
use crate::store::profiles::{NewProfile, ProfileWrite};
use crate::store::{Store, StoreError};

pub use drift::{DriftSummary, ServerDrift};

/// Rechecks queued for the drift loop before a sender waits.
const RECHECK_QUEUE: usize = 1024;

/// Why a profile operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Invalid(#[from] ProfileRuleError),
    #[error("no profile is named {0:?}")]
    NotFound(String),
    #[error("profile {name} has no version {version}")]
    NoVersion { name: ProfileName, version: i64 },
    #[error("a profile named {0:?} exists already")]
    NameTaken(String),
    #[error(
        "server {} would have two profiles, {} and this one; a server has one profile, so change \
         one of the selectors", .0.server, .0.other
    )]
    Assignment(AssignmentConflict),
    #[error("another save of profile {0} came first; read it again and save once more")]
    Concurrent(ProfileName),
    /// fail2ban on `server` refused the files (its messages are in the fleet error).
    #[error("fail2ban on {server} refused the profile: {error}")]
    Rejected { server: String, error: FleetError },
    #[error(transparent)]
    Fleet(#[from] FleetError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Where the files of a save were checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// The host whose fail2ban checked the files; `None` when none could.
    pub checked_on: Option<String>,
    /// fail2ban's warnings, or why no host checked the files.
    pub notes: Vec<String>,
}

/// What a save of a profile or version asks for.
#[derive(Debug, Clone)]
pub struct NewVersion {
    pub files: Vec<ProfileFile>,
    pub comment: String,
}

/// A profile's new description and assignment.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub description: String,
    pub selector: BTreeMap<String, String>,
    pub pinned_version: Option<i64>,
}

/// What the drift loop is asked to check again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recheck {
    Server(ServerId),
    All,
}

struct Inner {
    store: Store,
    fleet: Fleet,
    alerts: Alerts,
    /// How often every host is compared with its profile.
    interval: Duration,
    recheck: mpsc::Sender<Recheck>,
    /// Taken by the drift loop when it starts.
    rechecks: Mutex<Option<mpsc::Receiver<Recheck>>>,
}

/// The profiles service; cheap to clone.
#[derive(Clone)]
pub struct Profiles(Arc<Inner>);

impl std::fmt::Debug for Profiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profiles")
            .field("interval", &self.0.interval)
            .finish_non_exhaustive()
    }
}

impl Profiles {
    pub fn new(store: Store, fleet: Fleet, alerts: Alerts, interval: Duration) -> Self {
        let (recheck, rechecks) = mpsc::channel(RECHECK_QUEUE);
        Self(Arc::new(Inner {
            store,
            fleet,
            alerts,
            interval,
            recheck,
            rechecks: Mutex::new(Some(rechecks)),
        }))
    }

    fn store(&self) -> &Store {
        &self.0.store
    }

    /// Asks the drift loop to compare `what` again soon (a full queue drops the ask: the
    /// schedule catches up).
    pub fn recheck(&self, what: Recheck) {
        let _ = self.0.recheck.try_send(what);
    }

    pub async fn list(&self) -> Result<Vec<Profile>, ProfileError> {
        Ok(self.store().profiles().await?)
    }

    pub async fn get(&self, name: &ProfileName) -> Result<Profile, ProfileError> {
        self.store()
            .profile(name)
            .await?
            .ok_or_else(|| ProfileError::NotFound(name.to_string()))
    }

    /// Creates a profile with its first version, after fail2ban on one host of `selector` checked
    /// the files.
    pub async fn create(
        &self,
        new: NewProfile,
        version: NewVersion,
    ) -> Result<(Profile, ProfileVersion, Validation), ProfileError> {
        self.check_assignment(&new.name, &new.selector).await?;
        let validation = self
            .validate(&new.selector, &version.files, &new.created_by)
            .await?;
        let written = self
            .store()
            .create_profile(&new, &version.files, &version.comment, Utc::now())
            .await?;
        match written {
            ProfileWrite::Done((profile, version)) => {
                tracing::info!(profile = %profile.name, by = %new.created_by, "profile created");
                self.recheck(Recheck::All);
                Ok((profile, version, validation))
            }
            ProfileWrite::NameTaken => Err(ProfileError::NameTaken(new.name.to_string())),
            ProfileWrite::NotFound => Err(ProfileError::NotFound(new.name.to_string())),
        }
    }

    /// Saves the next version of a profile, after fail2ban on one host of its assignment checked
    /// the files.
    pub async fn save_version(
        &self,
        name: &ProfileName,
        version: NewVersion,
        by: &str,
    ) -> Result<(ProfileVersion, Validation), ProfileError> {
        let profile = self.get(name).await?;
        let validation = self.validate(&profile.selector, &version.files, by).await?;
        let written = self
            .store()
            .add_profile_version(name, &version.files, &version.comment, by, Utc::now())
            .await?;
        match written {
            ProfileWrite::Done(saved) => {
                tracing::info!(profile = %name, version = saved.version, %by, "profile version saved");
                self.recheck(Recheck::All);
                Ok((saved, validation))
            }
            ProfileWrite::NameTaken => Err(ProfileError::Concurrent(name.clone())),
            ProfileWrite::NotFound => Err(ProfileError::NotFound(name.to_string())),
        }
    }

    /// Sets a profile's description and assignment; refused when a server would get two
    /// profiles or the pinned version does not exist.
    pub async fn assign(
        &self,
        name: &ProfileName,
        assignment: Assignment,
    ) -> Result<Profile, ProfileError> {
        let profile = self.get(name).await?;
        if let Some(version) = assignment.pinned_version
            && profile
                .latest_version
                .is_none_or(|latest| version > latest || version < 1)
        {
            return Err(ProfileError::NoVersion {
                name: name.clone(),
                version,
            });
        }
        self.check_assignment(name, &assignment.selector).await?;
        let updated = self
            .store()
            .update_profile(
                name,
                &assignment.description,
                &assignment.selector,
                assignment.pinned_version,
                Utc::now(),
            )
            .await?
            .ok_or_else(|| ProfileError::NotFound(name.to_string()))?;
        self.recheck(Recheck::All);
        Ok(updated)
    }

    pub async fn delete(&self, name: &ProfileName) -> Result<(), ProfileError> {
        if !self.store().delete_profile(name).await? {
            return Err(ProfileError::NotFound(name.to_string()));
        }
        self.recheck(Recheck::All);
        Ok(())
    }

    pub async fn versions(&self, name: &ProfileName) -> Result<Vec<ProfileVersion>, ProfileError> {
        self.get(name).await?;
        Ok(self.store().profile_versions(name).await?)
    }

    pub async fn version(
        &self,
        name: &ProfileName,
        version: i64,
    ) -> Result<ProfileVersion, ProfileError> {
        self.get(name).await?;
        self.store()
            .profile_version(name, version)
            .await?
            .ok_or_else(|| ProfileError::NoVersion {
                name: name.clone(),
                version,
            })
    }

    /// The files that differ from version `from` to version `to`.
    pub async fn diff(
        &self,
        name: &ProfileName,
        from: i64,
        to: i64,
    ) -> Result<Vec<VersionFileDiff>, ProfileError> {
        let (from, to) = (
            self.version(name, from).await?,
            self.version(name, to).await?,
        );
        Ok(diff_versions(&from.files, &to.files))
    }

    /// Refuses a selector that would give a server a second profile.
    async fn check_assignment(
        &self,
        name: &ProfileName,
        selector: &BTreeMap<String, String>,
    ) -> Result<(), ProfileError> {
        if selector.is_empty() {
            return Ok(());
        }
        let (profiles, servers) = (
            self.store().profiles().await?,
            self.store().list_servers().await?,
        );
        match assignment_conflict(name, selector, &profiles, &servers) {
            Some(conflict) => Err(ProfileError::Assignment(conflict)),
            None => Ok(()),
        }
    }

    /// Has one online host of `selector` check `files` (a dry run: nothing is written). A
    /// refusal by fail2ban or the host's policy refuses the save; when no host can check them,
    /// the answer says so.
    async fn validate(
        &self,
        selector: &BTreeMap<String, String>,
        files: &[ProfileFile],
        by: &str,
    ) -> Result<Validation, ProfileError> {
        let servers: Vec<Server> = self
            .store()
            .list_servers()
            .await?
            .into_iter()
            .filter(|s| selector_matches(selector, s))
            .collect();
        let host = servers
            .iter()
            .find(|s| self.0.fleet.agent_supports(s.id, VALIDATE_SET_CAPABILITY) == Some(true));
        let Some(host) = host else {
            let why = if servers.is_empty() {
                "no server carries the profile's labels, so no fail2ban checked the files"
            } else {
                "no server of the profile has an online agent that can check a config set \
                 (upgrade the agents), so no fail2ban checked the files"
            };
            return Ok(Validation {
                checked_on: None,
                notes: vec![why.to_owned()],
            });
        };
        let name = host.name.to_string();
        match self.0.fleet.validate_config_set(host.id, files, by).await {
            Ok(warnings) => Ok(Validation {
                checked_on: Some(name),
                notes: warnings,
            }),
            Err(
                error @ FleetError::Agent {
                    kind:
                        AgentErrorKind::ValidationFailed
                        | AgentErrorKind::PolicyRefused
                        | AgentErrorKind::InvalidArgument
                        | AgentErrorKind::NotFound,
                    ..
                },
            ) => Err(ProfileError::Rejected {
                server: name,
                error,
            }),
            Err(e) => Ok(Validation {
                checked_on: None,
                notes: vec![format!("{name} could not check the files: {e}")],
            }),
        }
    }
}
