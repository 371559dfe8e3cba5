//! Jails and filters created on a host: validated values go out as `CreateJail`, `WriteFilter`
//! and `DeleteConfig`, and the catalog a new jail is made from (the host's filters with their
//! origin, the jails of its `jail.conf` as templates, what banhub created) comes back from
//! `ListFilters`. The agent checks everything again and writes through its safe editor.

use banhub_proto::new_config::{FilterLines, JailSettings};
use banhub_proto::rules::{FilterName, JailName};
use banhub_proto::v1::{
    CreateJail, DeleteConfig, ListFilters, WriteFilter, command, command_result::Outcome,
    delete_config,
};
use serde::Serialize;
use utoipa::ToSchema;

use super::control::unexpected;
use super::{ConfigChange, Fleet, FleetError};
use crate::domain::ServerId;

/// A new jail, every field checked by the shared rules (`banhub_proto::new_config`).
#[derive(Debug, Clone)]
pub struct NewJail {
    pub name: JailName,
    pub filter: FilterName,
    pub settings: JailSettings,
}

/// A new custom filter, its lines checked by the shared rules.
#[derive(Debug, Clone)]
pub struct NewFilter {
    pub name: FilterName,
    pub lines: FilterLines,
}

/// A file banhub created, to delete.
#[derive(Debug, Clone)]
pub enum CreatedConfig {
    Jail(JailName),
    Filter(FilterName),
}

/// A filter of the host's `filter.d`.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogFilter {
    pub name: String,
    /// `filter.d/<name>.conf` exists: shipped with fail2ban (or put there by hand).
    pub conf: bool,
    /// `filter.d/<name>.local` exists: an override of the `.conf`, or a filter of its own.
    pub local: bool,
    /// banhub created the `.local` file, so banhub can delete it.
    pub managed: bool,
}

/// A jail of the host's `jail.conf`, whose filter and port a new jail can start from.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JailTemplate {
    pub name: String,
    pub filter: String,
    pub port: String,
    pub enabled: bool,
}

/// What new jails and filters are made from on one host, and what banhub created there.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilterCatalog {
    pub filters: Vec<CatalogFilter>,
    pub jail_templates: Vec<JailTemplate>,
    /// Jails banhub created (`jail.d/<jail>.local` with banhub's marker), which banhub can delete.
    pub managed_jails: Vec<String>,
}

impl Fleet {
    /// The catalog of `server`'s filters and jail templates.
    pub async fn filter_catalog(
        &self,
        server: ServerId,
        by: &str,
    ) -> Result<FilterCatalog, FleetError> {
        let kind = command::Kind::ListFilters(ListFilters {});
        match self.call(server, kind, "list_filters", by).await? {
            Outcome::Filters(list) => Ok(FilterCatalog {
                filters: list
                    .filters
                    .into_iter()
                    .map(|f| CatalogFilter {
                        name: f.name,
                        conf: f.conf,
                        local: f.local,
                        managed: f.managed,
                    })
                    .collect(),
                jail_templates: list
                    .jail_templates
                    .into_iter()
                    .map(|t| JailTemplate {
                        name: t.name,
                        filter: t.filter,
                        port: t.port,
                        enabled: t.enabled,
                    })
                    .collect(),
                managed_jails: list.managed_jails,
            }),
            other => Err(unexpected(&other)),
        }
    }

    /// Creates a jail of its own on `server` (`jail.d/<jail>.local`).
    pub async fn create_jail(
        &self,
        server: ServerId,
        jail: NewJail,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let s = jail.settings;
        let kind = command::Kind::CreateJail(CreateJail {
            jail: jail.name.to_string(),
            filter: jail.filter.to_string(),
            log_paths: s.log_paths,
            journal_match: s.journal_match,
            backend: s.backend,
            maxretry: s.maxretry,
            findtime: s.findtime,
            bantime: s.bantime,
            port: s.port,
            enabled: s.enabled,
        });
        self.config_change(server, kind, "create_jail", by).await
    }

    /// Creates a custom filter on `server` (`filter.d/<filter>.local`).
    pub async fn create_filter(
        &self,
        server: ServerId,
        filter: NewFilter,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let kind = command::Kind::WriteFilter(WriteFilter {
            name: filter.name.to_string(),
            failregex: filter.lines.failregex,
            ignoreregex: filter.lines.ignoreregex,
            datepattern: filter.lines.datepattern,
        });
        self.config_change(server, kind, "write_filter", by).await
    }

    /// Deletes a jail or filter file banhub created on `server`.
    pub async fn delete_created(
        &self,
        server: ServerId,
        target: CreatedConfig,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        let target = match target {
            CreatedConfig::Jail(jail) => delete_config::Target::Jail(jail.to_string()),
            CreatedConfig::Filter(filter) => delete_config::Target::Filter(filter.to_string()),
        };
        let kind = command::Kind::DeleteConfig(DeleteConfig {
            target: Some(target),
        });
        self.config_change(server, kind, "delete_config", by).await
    }

    async fn config_change(
        &self,
        server: ServerId,
        kind: command::Kind,
        label: &'static str,
        by: &str,
    ) -> Result<ConfigChange, FleetError> {
        match self.write_call(server, kind, label, by).await? {
            Outcome::ConfigChange(change) => Ok(change.into()),
            other => Err(unexpected(&other)),
        }
    }
}
