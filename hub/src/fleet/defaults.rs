//! Pushing fail2ban's defaults (`[DEFAULT]` bantime, findtime, maxretry, ignoreip,
//! bantime.increment, bantime.maxtime) of the saved settings to servers through their agents' safe
//! editor: choosing the servers (by id or name, and labels), then one result per server.
//!
//! Every `ignoreip` the hub writes carries the protected networks (the lockout guard), so fail2ban's
//! own jails never ban them either: the saved list (or loopback when none is saved) plus each
//! protected network it does not already cover. Loopback hub addresses are left out: fail2ban's
//! `ignoreself` covers a host's own addresses.

use banhub_proto::v1::{WriteDefaults, command, command_result::Outcome};
use serde::Serialize;
use utoipa::ToSchema;

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::control::unexpected;
use super::{ConfigChange, Fleet, FleetError, Selector};
use crate::domain::{ProtectedEntry, ProtectionKind, Server, ServerId, ServerName};
use crate::settings::Fail2banDefaults;
use crate::settings::model::DefaultsDocument;
use crate::store::StoreError;

/// The servers a push goes to.
#[derive(Debug, Clone, Default)]
pub struct DefaultsTargets {
    /// Server ids or names as sent; empty: every server.
    pub servers: Vec<String>,
    /// Only servers carrying all of these labels.
    pub labels: BTreeMap<String, String>,
}

/// A push of the saved defaults: what was pushed, and one result per server.
#[derive(Debug, Clone)]
pub struct DefaultsPush {
    pub defaults: DefaultsDocument,
    pub results: Vec<DefaultsPushResult>,
}

/// Why nothing was pushed.
#[derive(Debug, thiserror::Error)]
pub enum PushDefaultsError {
    #[error("nothing to push: save at least one default in the settings first")]
    NothingToPush,
    /// `servers[index]` names no server.
    #[error("no server has the id or name {raw:?}")]
    NoSuchServer { index: usize, raw: String },
    #[error("no server matches")]
    NoMatch,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a push did on one server.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DefaultsPushResult {
    pub server_id: String,
    pub server_name: String,
    pub ok: bool,
    /// On success: the files written and fail2ban's reload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<ConfigChange>,
    /// On failure: why (offline agent, fail2ban refused the values, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// fail2ban's own messages when it refused the configuration.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub details: Vec<String>,
}

impl Fleet {
    /// Writes `defaults` on one server, its `ignoreip` with the protected networks.
    pub async fn write_defaults(
        &self,
        server: ServerId,
        defaults: &Fail2banDefaults,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let ignoreip = with_protected(defaults.ignoreip.as_deref(), &self.protected_ignoreip());
        let kind = command::Kind::WriteDefaults(WriteDefaults {
            bantime: defaults.bantime,
            findtime: defaults.findtime,
            maxretry: defaults.maxretry,
            set_ignoreip: ignoreip.is_some(),
            ignoreip: ignoreip.unwrap_or_default(),
            bantime_increment: defaults.bantime_increment,
            bantime_maxtime: defaults.bantime_maxtime,
        });
        match self.call(server, kind, "write_defaults", by).await? {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }

    /// Writes only `ignoreip` on one server: the saved list with the protected networks.
    pub async fn write_protected_ignoreip(
        &self,
        server: ServerId,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let saved = self.0.settings.current().settings.defaults.ignoreip.clone();
        let ignoreip = with_protected(saved.as_deref(), &self.protected_ignoreip())
            .unwrap_or_else(|| saved.unwrap_or_else(loopback));
        let kind = command::Kind::WriteDefaults(WriteDefaults {
            set_ignoreip: true,
            ignoreip,
            ..WriteDefaults::default()
        });
        match self.call(server, kind, "write_defaults", by).await? {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }

    /// The protected networks every host's `ignoreip` carries (in CIDR form, sorted): the
    /// configured networks, the operators' addresses and the hub's address agents dial, loopback
    /// left out.
    pub fn protected_ignoreip(&self) -> Vec<IpNet> {
        let advertised = self
            .advertise()
            .rsplit_once(':')
            .map(|(host, _)| host.trim_start_matches('[').trim_end_matches(']'))
            .and_then(|host| host.parse::<IpAddr>().ok())
            .map(|ip| ProtectedEntry::address(ip, ProtectionKind::HubAddress, "advertised"));
        let mut networks: Vec<IpNet> = self
            .0
            .guards
            .protected_entries()
            .into_iter()
            .filter(|e| e.kind != ProtectionKind::HubAddress)
            .chain(advertised)
            .map(|e| e.network)
            .filter(|n| !n.addr().is_loopback())
            .collect();
        networks.sort();
        networks.dedup();
        networks
    }

    /// The servers whose agents hold a session with this replica.
    pub fn local_servers(&self) -> Vec<ServerId> {
        self.0.sessions.live_servers()
    }

    /// Pushes `fail2ban.defaults` of the saved settings to the servers `targets` chooses, all at
    /// once.
    pub async fn push_saved_defaults(
        &self,
        targets: DefaultsTargets,
        by: &str,
    ) -> Result<DefaultsPush, PushDefaultsError> {
        let snapshot = self.0.settings.current();
        let defaults = &snapshot.settings.defaults;
        if defaults.is_empty() {
            return Err(PushDefaultsError::NothingToPush);
        }
        let all = self.store().list_servers().await?;
        let chosen = choose(all, &targets)?;
        let results = self.push_defaults(chosen, defaults, by).await;
        Ok(DefaultsPush {
            defaults: snapshot.document.fail2ban.defaults.clone(),
            results,
        })
    }

    /// Writes `defaults` on every server of `servers` at once; one result per server.
    pub async fn push_defaults(
        &self,
        servers: Vec<Server>,
        defaults: &Fail2banDefaults,
        by: &str,
    ) -> Vec<DefaultsPushResult> {
        let calls = servers.into_iter().map(|server| async move {
            let result = self.write_defaults(server.id, defaults, by).await;
            let (ok, change, error, details) = match result {
                Ok(change) => (true, Some(change), None, Vec::new()),
                Err(FleetError::Agent {
                    message, details, ..
                }) => (false, None, Some(message), details),
                Err(e) => (false, None, Some(e.to_string()), Vec::new()),
            };
            DefaultsPushResult {
                server_id: server.id.to_string(),
                server_name: server.name.to_string(),
                ok,
                change,
                error,
                details,
            }
        });
        futures::future::join_all(calls).await
    }
}

/// fail2ban's own `ignoreip` default, the base when no list is saved.
fn loopback() -> Vec<String> {
    vec!["127.0.0.1/8".to_owned(), "::1".to_owned()]
}

/// The `ignoreip` to write: `saved` (loopback when `None`) plus each protected network no entry
/// of it covers; `None` (leave `ignoreip` as it is) when nothing is saved and nothing is protected.
fn with_protected(saved: Option<&[String]>, protected: &[IpNet]) -> Option<Vec<String>> {
    if saved.is_none() && protected.is_empty() {
        return None;
    }
    let mut list: Vec<String> = saved.map_or_else(loopback, <[String]>::to_vec);
    let covering: Vec<IpNet> = list.iter().filter_map(|e| parse_entry(e)).collect();
    for net in protected {
        if !covering.iter().any(|c| c.contains(net)) {
            list.push(ignore_text(*net));
        }
    }
    Some(list)
}

/// An `ignoreip` entry as a network, when it is an address or a CIDR network (not a host name).
fn parse_entry(raw: &str) -> Option<IpNet> {
    raw.parse::<IpNet>()
        .ok()
        .or_else(|| raw.parse::<IpAddr>().ok().map(IpNet::from))
        .map(|n| n.trunc())
}

/// A network as fail2ban's `ignoreip` reads it: a single address without its prefix.
fn ignore_text(net: IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

/// The servers of `all` that `targets` names (each once, in the order named; none named: all of
/// them), keeping those that carry every label asked for.
fn choose(all: Vec<Server>, targets: &DefaultsTargets) -> Result<Vec<Server>, PushDefaultsError> {
    let mut chosen: Vec<Server> = Vec::new();
    for (index, raw) in targets.servers.iter().enumerate() {
        let found = match ServerId::parse(raw) {
            Ok(id) => all.iter().find(|s| s.id == id),
            Err(_) => ServerName::parse(raw)
                .ok()
                .and_then(|name| all.iter().find(|s| s.name == name)),
        };
        match found {
            Some(server) if !chosen.iter().any(|c| c.id == server.id) => {
                chosen.push(server.clone());
            }
            Some(_) => {}
            None => {
                return Err(PushDefaultsError::NoSuchServer {
                    index,
                    raw: raw.clone(),
                });
            }
        }
    }
    if targets.servers.is_empty() {
        chosen = all;
    }
    let labelled = Selector::Labels(targets.labels.clone());
    chosen.retain(|s| labelled.matches(s));
    if chosen.is_empty() {
        return Err(PushDefaultsError::NoMatch);
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(chosen: &[Server]) -> Vec<String> {
        chosen.iter().map(|s| s.name.to_string()).collect()
    }

    fn targets(servers: &[&str], labels: &[(&str, &str)]) -> DefaultsTargets {
        DefaultsTargets {
            servers: servers.iter().map(|s| (*s).to_owned()).collect(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn ignoreip_carries_each_protected_network_not_already_covered() {
        let nets = |raw: &[&str]| -> Vec<IpNet> {
            raw.iter()
                .map(|r| parse_entry(r).expect("network"))
                .collect()
        };
        let saved = |raw: &[&str]| -> Vec<String> { raw.iter().map(|r| (*r).to_owned()).collect() };
        assert_eq!(with_protected(None, &[]), None, "nothing to write");
        assert_eq!(
            with_protected(Some(&saved(&["10.0.0.0/8"])), &[]),
            Some(saved(&["10.0.0.0/8"])),
            "the saved list as it is"
        );
        assert_eq!(
            with_protected(None, &nets(&["203.0.113.0/24", "198.51.100.7"])),
            Some(saved(&[
                "127.0.0.1/8",
                "::1",
                "203.0.113.0/24",
                "198.51.100.7"
            ])),
            "loopback when nothing is saved"
        );
        assert_eq!(
            with_protected(
                Some(&saved(&["10.0.0.0/8", "host.example"])),
                &nets(&["10.1.0.0/16", "2001:db8::/48"])
            ),
            Some(saved(&["10.0.0.0/8", "host.example", "2001:db8::/48"])),
            "a network the saved list covers is not repeated"
        );
    }

    #[test]
    fn servers_are_chosen_by_id_or_name_and_labels() {
        let all = vec![
            Server::example("web1", &[("role", "web")]),
            Server::example("web2", &[("role", "web")]),
            Server::example("db1", &[("role", "db")]),
        ];
        let db_id = all[2].id.to_string();
        let choose = |t: DefaultsTargets| choose(all.clone(), &t);

        let every = choose(targets(&[], &[])).expect("all");
        assert_eq!(names(&every), ["web1", "web2", "db1"]);
        let named = choose(targets(&[&db_id, "web2", "db1"], &[])).expect("named");
        assert_eq!(
            names(&named),
            ["db1", "web2"],
            "each once, in the order named"
        );
        let web = choose(targets(&[], &[("role", "web")])).expect("labelled");
        assert_eq!(names(&web), ["web1", "web2"]);

        assert!(matches!(
            choose(targets(&["web1", "nope"], &[])),
            Err(PushDefaultsError::NoSuchServer { index: 1, .. })
        ));
        assert!(matches!(
            choose(targets(&["db1"], &[("role", "web")])),
            Err(PushDefaultsError::NoMatch)
        ));
    }
}
