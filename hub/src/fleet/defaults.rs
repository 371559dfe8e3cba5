//! Pushing fail2ban's defaults (`[DEFAULT]` bantime, findtime, maxretry, ignoreip,
//! bantime.increment, bantime.maxtime) of the saved settings to servers through their agents' safe
//! editor: choosing the servers (by id or name, and labels), then one result per server.
//!
//! Every `ignoreip` the hub writes carries the protected networks (the lockout guard), so fail2ban's
//! own jails never ban them either: the saved list plus each protected network it does not already
//! cover; with no saved list, the host's own global list keeps its entries and gets the protected
//! networks added (and those no longer protected taken out). Loopback hub addresses are left out:
//! fail2ban's `ignoreself` covers a host's own addresses.

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
        let ignoreip = defaults
            .ignoreip
            .as_deref()
            .map(|saved| with_protected(saved, &self.protected_ignoreip()));
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

    /// Writes `protected` (what [`Fleet::protected_ignoreip`] said) into one server's
    /// `[DEFAULT] ignoreip`: the saved list with them when one is saved; else the host's global
    /// list with them, and without the networks of `previous` (pushed before) that are no longer
    /// protected. Returns whether it wrote (the host may have them all already).
    pub async fn write_protected_ignoreip(
        &self,
        server: ServerId,
        protected: &[IpNet],
        previous: &[IpNet],
        by: &str,
    ) -> Result<bool, FleetError> {
        let saved = self.0.settings.current().settings.defaults.ignoreip.clone();
        if let Some(saved) = saved {
            let kind = command::Kind::WriteDefaults(WriteDefaults {
                set_ignoreip: true,
                ignoreip: with_protected(&saved, protected),
                ..WriteDefaults::default()
            });
            return match self.call(server, kind, "write_defaults", by).await? {
                Outcome::ConfigChange(_) => Ok(true),
                other => Err(unexpected(&other)),
            };
        }
        let global = self.ignore_list(server, None, by).await?;
        let kept = without(&global.entries, previous, protected);
        let list = with_protected(&kept, protected);
        if list == global.entries {
            return Ok(false);
        }
        self.set_ignore_list(server, None, list, global.version, by)
            .await?;
        Ok(true)
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

/// `list` plus each protected network no entry of it covers.
fn with_protected(list: &[String], protected: &[IpNet]) -> Vec<String> {
    let mut list = list.to_vec();
    let covering: Vec<IpNet> = list.iter().filter_map(|e| parse_entry(e)).collect();
    for net in protected {
        if !covering.iter().any(|c| c.contains(net)) {
            list.push(ignore_text(*net));
        }
    }
    list
}

/// `entries` without those naming a network of `previous` that `protected` no longer holds.
fn without(entries: &[String], previous: &[IpNet], protected: &[IpNet]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| {
            parse_entry(e).is_none_or(|net| !previous.contains(&net) || protected.contains(&net))
        })
        .cloned()
        .collect()
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
        let list = |raw: &[&str]| -> Vec<String> { raw.iter().map(|r| (*r).to_owned()).collect() };
        assert_eq!(
            with_protected(&list(&["10.0.0.0/8"]), &[]),
            list(&["10.0.0.0/8"]),
            "the list as it is"
        );
        assert_eq!(
            with_protected(
                &list(&["127.0.0.1/8", "::1"]),
                &nets(&["203.0.113.0/24", "198.51.100.7"])
            ),
            list(&["127.0.0.1/8", "::1", "203.0.113.0/24", "198.51.100.7"]),
        );
        assert_eq!(
            with_protected(
                &list(&["10.0.0.0/8", "host.example"]),
                &nets(&["10.1.0.0/16", "2001:db8::/48"])
            ),
            list(&["10.0.0.0/8", "host.example", "2001:db8::/48"]),
            "a network the list covers is not repeated"
        );
    }

    #[test]
    fn networks_no_longer_protected_leave_and_hand_entries_stay() {
        let nets = |raw: &[&str]| -> Vec<IpNet> {
            raw.iter()
                .map(|r| parse_entry(r).expect("network"))
                .collect()
        };
        let list = |raw: &[&str]| -> Vec<String> { raw.iter().map(|r| (*r).to_owned()).collect() };
        let host = list(&[
            "127.0.0.1/8",
            "192.0.2.9",
            "203.0.113.0/24",
            "198.51.100.7",
            "host.example",
        ]);
        assert_eq!(
            without(
                &host,
                &nets(&["203.0.113.0/24", "198.51.100.7"]),
                &nets(&["198.51.100.7"])
            ),
            list(&["127.0.0.1/8", "192.0.2.9", "198.51.100.7", "host.example"]),
            "only what was pushed and is no longer protected leaves"
        );
        assert_eq!(
            without(&host, &[], &[]),
            host,
            "nothing pushed before: all stay"
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
