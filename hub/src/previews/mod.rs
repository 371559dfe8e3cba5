//! Filter previews for operators: one host's preview, or the same preview on every server a
//! selector names, each answered per host within its own time. Among the addresses a preview
//! would ban, every protected one is flagged with the entry protecting it: the hub's protected
//! networks (`Guards`: configured networks, the hub's own addresses, the operators' session
//! addresses) first, then the jail's `ignoreip` on that host.

use std::sync::Arc;
use std::time::Duration;

use banhub_proto::rules::IpOrCidr;
use futures::StreamExt as _;
use serde::Serialize;
use utoipa::ToSchema;

use crate::domain::{Guards, ServerId, ServerStatus};
use crate::fleet::{
    AgentErrorKind, FilterPreviewResult, Fleet, FleetError, PreviewAddress, PreviewInput,
    PreviewProtection, Selector,
};

/// Hosts previewed at once in a fleet preview.
const PARALLEL_HOSTS: usize = 16;
/// What a host gets beyond its preview's own time budget before it is marked timed out.
const HOST_MARGIN: Duration = Duration::from_secs(10);
/// The agent's default time budget, for a request that does not set one.
const DEFAULT_BUDGET: Duration = Duration::from_secs(20);

/// How one host of a fleet preview ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HostPreviewStatus {
    /// The preview ran.
    Ok,
    /// The agent is offline.
    Offline,
    /// No agent has enrolled for the server.
    NotEnrolled,
    /// The agent is too old to preview.
    Unsupported,
    /// The host did not answer within the preview's time.
    Timeout,
    /// A filter test or preview already runs there, and another waits.
    Busy,
    /// The agent or fail2ban refused or failed; `error` says why.
    Failed,
}

/// One host of a fleet preview.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPreview {
    pub server_id: String,
    pub server_name: String,
    pub status: HostPreviewStatus,
    /// Why the preview did not run (absent when `status` is `ok`).
    pub error: Option<String>,
    pub preview: Option<FilterPreviewResult>,
}

/// The filter preview service.
#[derive(Debug, Clone)]
pub struct Previews {
    fleet: Fleet,
    guards: Arc<Guards>,
}

impl Previews {
    pub fn new(fleet: Fleet, guards: Arc<Guards>) -> Self {
        Self { fleet, guards }
    }

    /// One host's preview, its protected addresses flagged.
    #[tracing::instrument(skip_all, fields(%server, jail = %input.jail), err)]
    pub async fn preview(
        &self,
        server: ServerId,
        input: PreviewInput,
        by: &str,
    ) -> Result<FilterPreviewResult, FleetError> {
        let mut result = self.fleet.preview_filter(server, input, by).await?;
        flag_protected(&self.guards, &mut result);
        Ok(result)
    }

    /// The preview on every server `selector` names, in name order, each bounded by the
    /// preview's time budget plus a margin.
    pub async fn preview_fleet(
        &self,
        selector: &Selector,
        input: PreviewInput,
        by: &str,
    ) -> Result<Vec<HostPreview>, FleetError> {
        let mut servers: Vec<_> = self
            .fleet
            .list()
            .await?
            .into_iter()
            .filter(|view| selector.matches(&view.server))
            .collect();
        servers.sort_by(|a, b| a.server.name.as_str().cmp(b.server.name.as_str()));
        let budget = input
            .time_budget_ms
            .map_or(DEFAULT_BUDGET, |ms| Duration::from_millis(u64::from(ms)));
        let hosts = futures::stream::iter(servers)
            .map(|view| {
                let input = input.clone();
                async move {
                    let answer = match view.status {
                        ServerStatus::Online => tokio::time::timeout(
                            budget + HOST_MARGIN,
                            self.preview(view.server.id, input, by),
                        )
                        .await
                        .unwrap_or(Err(FleetError::Timeout(budget + HOST_MARGIN))),
                        ServerStatus::Pending | ServerStatus::Reporting => {
                            Err(FleetError::NotEnrolled)
                        }
                        ServerStatus::Offline => Err(FleetError::Offline),
                    };
                    host(view.server.id, view.server.name.to_string(), answer)
                }
            })
            .buffered(PARALLEL_HOSTS)
            .collect()
            .await;
        Ok(hosts)
    }
}

/// One host's answer as the fleet preview lists it.
fn host(
    id: ServerId,
    name: String,
    answer: Result<FilterPreviewResult, FleetError>,
) -> HostPreview {
    let (status, error, preview) = match answer {
        Ok(preview) => (HostPreviewStatus::Ok, None, Some(preview)),
        Err(e) => {
            let status = match &e {
                FleetError::Offline | FleetError::SessionEnded => HostPreviewStatus::Offline,
                FleetError::NotEnrolled => HostPreviewStatus::NotEnrolled,
                FleetError::Timeout(_)
                | FleetError::Agent {
                    kind: AgentErrorKind::Expired,
                    ..
                } => HostPreviewStatus::Timeout,
                FleetError::Agent {
                    kind: AgentErrorKind::Unsupported,
                    ..
                } => HostPreviewStatus::Unsupported,
                FleetError::FilterTestsBusy => HostPreviewStatus::Busy,
                _ => HostPreviewStatus::Failed,
            };
            let detail = match &e {
                FleetError::Agent {
                    message, details, ..
                } if !details.is_empty() => {
                    format!("{message}: {}", details.join("; "))
                }
                _ => e.to_string(),
            };
            (status, Some(detail), None)
        }
    };
    HostPreview {
        server_id: id.to_string(),
        server_name: name,
        status,
        error,
        preview,
    }
}

/// Sets `protected_by` on every listed address a protection covers, and counts the would-be
/// bans among them.
pub fn flag_protected(guards: &Guards, result: &mut FilterPreviewResult) {
    let protect = |a: &mut PreviewAddress| {
        a.protected_by = protection(guards, a);
    };
    result.would_ban.iter_mut().for_each(protect);
    result.top.iter_mut().for_each(protect);
    result.protected_hits = result
        .would_ban
        .iter()
        .filter(|a| a.protected_by.is_some())
        .count() as u64;
}

/// The hub's protection of `address`, else the host's `ignoreip` entry.
fn protection(guards: &Guards, address: &PreviewAddress) -> Option<PreviewProtection> {
    let hub = IpOrCidr::parse(&address.ip)
        .ok()
        .and_then(|ip| guards.protecting(&ip))
        .map(|entry| PreviewProtection {
            kind: entry.kind.as_str().to_owned(),
            entry: entry.network.to_string(),
            note: entry.note,
        });
    hub.or_else(|| {
        address.ignored_by.as_ref().map(|entry| PreviewProtection {
            kind: "ignoreip".to_owned(),
            entry: entry.clone(),
            note: String::new(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{PrefixLimits, ProtectedEntry, ProtectionKind};

    fn address(ip: &str, ignored_by: Option<&str>) -> PreviewAddress {
        PreviewAddress {
            ip: ip.to_owned(),
            matches: 3,
            reaches_maxretry: true,
            first_ban_at: None,
            ignored_by: ignored_by.map(str::to_owned),
            protected_by: None,
        }
    }

    #[test]
    fn protected_addresses_name_their_entry_hub_first() {
        let guards = Guards::new(
            PrefixLimits { v4: 16, v6: 48 },
            vec!["10.0.0.1".parse().expect("ip")],
        );
        guards.set_operators(vec![ProtectedEntry::address(
            "198.51.100.7".parse().expect("ip"),
            ProtectionKind::OperatorSession,
            "admin",
        )]);
        let mut result = FilterPreviewResult {
            filter: "sshd".to_owned(),
            logs: vec![],
            lines_read: 0,
            lines_matched: 0,
            first_match_at: None,
            last_match_at: None,
            maxretry: 3,
            findtime_secs: 600,
            addresses: 4,
            would_ban_total: 4,
            would_ban: vec![
                address("198.51.100.7", Some("198.51.100.0/24")),
                address("10.0.0.1", None),
                address("203.0.113.5", Some("203.0.113.0/24")),
                address("192.0.2.9", None),
            ],
            top: vec![address("198.51.100.7", None)],
            ignoreip: vec![],
            bounds_hit: vec![],
            protected_hits: 0,
        };
        flag_protected(&guards, &mut result);
        let kinds: Vec<Option<(&str, &str)>> = result
            .would_ban
            .iter()
            .map(|a| {
                a.protected_by
                    .as_ref()
                    .map(|p| (p.kind.as_str(), p.entry.as_str()))
            })
            .collect();
        assert_eq!(
            kinds,
            [
                Some(("operator_session", "198.51.100.7/32")),
                Some(("hub_address", "10.0.0.1/32")),
                Some(("ignoreip", "203.0.113.0/24")),
                None,
            ]
        );
        assert_eq!(result.protected_hits, 3);
        assert_eq!(
            result.top[0].protected_by.as_ref().map(|p| p.note.as_str()),
            Some("admin")
        );
    }
}
