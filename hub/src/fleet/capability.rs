//! What an agent can do, from the capabilities its hello announced, and the one answer for an
//! agent too old for a command: [`FleetError::Agent`] of kind [`AgentErrorKind::Unsupported`],
//! the same error an agent gives for a command it does not know, which the API answers with 501
//! `agent_unsupported` on every route.

use super::{AgentErrorKind, Fleet, FleetError};
use crate::domain::ServerId;

impl Fleet {
    /// Whether `server`'s agent announced `capability`; `None` when its session is not held
    /// here (then only the command itself can tell).
    pub fn agent_supports(&self, server: ServerId, capability: &str) -> Option<bool> {
        self.sessions()
            .info(server)
            .map(|info| info.capabilities.iter().any(|c| c == capability))
    }

    /// Refuses a command before it is sent when `server`'s agent, whose session is held here,
    /// did not announce `capability`; `what` names the feature in the refusal.
    pub(super) fn require_capability(
        &self,
        server: ServerId,
        capability: &str,
        what: &str,
    ) -> Result<(), FleetError> {
        check(self.agent_supports(server, capability), what)
    }
}

/// The check on what [`Fleet::agent_supports`] answered: only a known lack refuses.
fn check(supported: Option<bool>, what: &str) -> Result<(), FleetError> {
    match supported {
        Some(false) => Err(too_old(what)),
        Some(true) | None => Ok(()),
    }
}

/// The refusal of a command an agent is too old for.
fn too_old(what: &str) -> FleetError {
    FleetError::Agent {
        kind: AgentErrorKind::Unsupported,
        message: format!("this server's agent is too old for {what}; upgrade the agent"),
        details: Vec::new(),
        current_version: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_agent_known_to_lack_the_capability_is_refused_as_unsupported() {
        assert!(check(Some(true), "config sets").is_ok());
        // A session held by another replica: the agent itself answers there.
        assert!(check(None, "config sets").is_ok());
        match check(Some(false), "config sets") {
            Err(FleetError::Agent {
                kind: AgentErrorKind::Unsupported,
                message,
                ..
            }) => assert_eq!(
                message,
                "this server's agent is too old for config sets; upgrade the agent"
            ),
            other => panic!("{other:?}"),
        }
    }
}
