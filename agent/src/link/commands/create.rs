//! Jails and filters banhub creates and deletes (CreateJail, WriteFilter, DeleteConfig), and the
//! catalog they are made from (ListFilters: the filters with their origin, the jails of
//! `jail.conf` as templates, the jails banhub created).
//!
//! A new file carries banhub's marker line and goes through the editor like every edit (host
//! policy, `fail2ban-client -t`, the filter compiled by `fail2ban-regex`, atomic write, reload,
//! health check, rollback). Only a file with the marker is ever deleted, and never a filter a
//! jail still uses. Every command holds the context's config gate, so the checks of what exists
//! and the write see the same files.

use banhub_proto::new_config::{FilterLines, JailSettings};
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::delete_config::Target;
use banhub_proto::v1::{
    CreateJail, DeleteConfig, ErrorCode, FilterEntry, FilterList, JailTemplate, WriteFilter,
};

use super::Context;
use super::args;
use super::failure::{Failure, Reply};
use super::jails::config_change;
use crate::fail2ban_files::create::{self as files, is_managed};
use crate::fail2ban_files::{EditableFile, Version};

/// `ListFilters`: the filter names, and the catalog new jails and filters are made from.
pub async fn list_filters(context: &Context) -> Reply {
    let catalog = context.editor()?.read(|r| r.catalog()).await?;
    Ok(Outcome::Filters(FilterList {
        names: catalog.filters.iter().map(|f| f.name.to_string()).collect(),
        filters: catalog
            .filters
            .into_iter()
            .map(|f| FilterEntry {
                name: f.name.into(),
                conf: f.conf,
                local: f.local,
                managed: f.managed,
            })
            .collect(),
        jail_templates: catalog
            .jail_templates
            .into_iter()
            .map(|t| JailTemplate {
                name: t.name,
                filter: t.filter,
                port: t.port,
                enabled: t.enabled,
            })
            .collect(),
        managed_jails: catalog
            .managed_jails
            .into_iter()
            .map(String::from)
            .collect(),
    }))
}

fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `CreateJail`: `jail.d/<jail>.local` with the jail's own section, for a name no file defines.
pub async fn create_jail(context: &Context, request: CreateJail) -> Reply {
    let jail = args::writable_jail(&request.jail)?;
    let filter = args::filter(&request.filter)?;
    let settings = JailSettings {
        log_paths: request.log_paths,
        journal_match: request.journal_match,
        backend: request.backend,
        maxretry: request.maxretry,
        findtime: request.findtime,
        bantime: request.bantime,
        port: request.port,
        enabled: request.enabled,
    }
    .checked()
    .map_err(|e| Failure::invalid(format!("the new jail {jail} is refused: {e}")))?;
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let name = jail.clone();
    let (config, override_file, filters) = editor
        .read(move |r| Ok((r.load()?, r.jail_override(&name)?, r.list_filters()?)))
        .await?;
    if config.jail(jail.as_str()).is_some() || override_file.content.is_some() {
        return Err(Failure::invalid(format!(
            "jail {jail} already exists in fail2ban's configuration (or jail.d/{jail}.local \
             does); choose another name, or edit that jail"
        )));
    }
    if !filters.contains(&filter) {
        return Err(Failure::not_found(format!(
            "filter {filter} is not in filter.d on this host; create it first or pick one of \
             the host's filters"
        )));
    }
    let text = files::jail_file(&jail, &filter, &settings, now_unix());
    let report = editor
        .write_jail_override(&jail, &text, Version::Absent)
        .await?;
    context.bans.clear();
    Ok(Outcome::ConfigChange(
        config_change(context, &[report], &format!("created jail {jail}")).await,
    ))
}

/// `WriteFilter`: `filter.d/<name>.local` of a new custom filter, for a name no filter has.
pub async fn write_filter(context: &Context, request: WriteFilter) -> Reply {
    let filter = args::filter(&request.name)?;
    let lines = FilterLines {
        failregex: request.failregex,
        ignoreregex: request.ignoreregex,
        datepattern: request.datepattern,
    }
    .checked()
    .map_err(|e| Failure::invalid(format!("the new filter {filter} is refused: {e}")))?;
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let filters = editor.read(|r| r.list_filters()).await?;
    if filters.contains(&filter) {
        return Err(Failure::invalid(format!(
            "filter {filter} already exists in filter.d on this host (shipped or custom); \
             choose another name"
        )));
    }
    let text = files::filter_file(&lines, now_unix());
    let report = editor.write_filter(&filter, &text, Version::Absent).await?;
    Ok(Outcome::ConfigChange(
        config_change(context, &[report], &format!("created filter {filter}")).await,
    ))
}

/// `DeleteConfig`: removes a jail or filter file banhub created, then fail2ban reloads.
pub async fn delete_config(context: &Context, request: DeleteConfig) -> Reply {
    let file = match request.target {
        Some(Target::Jail(raw)) => EditableFile::JailOverride(args::writable_jail(&raw)?),
        Some(Target::Filter(raw)) => EditableFile::FilterLocal(args::filter(&raw)?),
        None => return Err(Failure::invalid("name a jail or a filter to delete")),
    };
    let editor = context.editor()?;
    let _gate = context.config_gate.lock().await;
    let target = file.clone();
    let (current, config) = editor
        .read(move |r| Ok((r.editable(&target)?, r.load()?)))
        .await?;
    let Some(text) = current.content else {
        return Err(Failure::not_found(format!(
            "{file} does not exist on this host, so there is nothing banhub created to delete"
        )));
    };
    if !is_managed(&text) {
        return Err(Failure::new(
            ErrorCode::PolicyRefused,
            format!(
                "{file} was not created by banhub (its first line is not banhub's marker), so \
                 banhub does not delete it; nothing was changed. Remove it by hand on the host."
            ),
        ));
    }
    let report = match &file {
        EditableFile::JailOverride(jail) => {
            editor.delete_jail_override(jail, current.version).await?
        }
        EditableFile::FilterLocal(filter) => {
            let users: Vec<String> = config
                .jails()
                .into_iter()
                .filter(|j| j.filter.as_ref().is_some_and(|f| f.name == filter.as_str()))
                .map(|j| j.name)
                .collect();
            if !users.is_empty() {
                return Err(Failure::invalid(format!(
                    "filter {filter} is still used by jail {}; delete or change those jails \
                     first",
                    users.join(", ")
                )));
            }
            editor.delete_filter_local(filter, current.version).await?
        }
        EditableFile::Defaults | EditableFile::Agent(_) => {
            return Err(Failure::invalid("only jails and filters can be deleted"));
        }
    };
    context.bans.clear();
    Ok(Outcome::ConfigChange(
        config_change(context, &[report], &format!("deleted {file}")).await,
    ))
}
