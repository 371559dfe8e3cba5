//! Ping and the dashboard's status: every running jail with its counters.
//!
//! Status is the hot path (the dashboard polls it): `status` plus `status <jail> short` for each
//! jail, all on one kept-open connection, which fail2ban answers quickly even for many jails
//! with long ban lists; `fail2ban-client` would start Python once per jail instead.

use std::time::Instant;

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{JailStatus, Pong, StatusReport};

use super::Context;
use super::failure::Reply;
use crate::fail2ban::Fail2banError;
use crate::fail2ban::client::is_unknown_jail;

/// `ping`: a round trip to fail2ban, with its version and the time it took.
pub async fn ping(context: &Context) -> Reply {
    let mut socket = context.fail2ban.lease().await?;
    let started = Instant::now();
    socket.ping().await?;
    let latency = started.elapsed();
    let version = socket.version().await?;
    Ok(Outcome::Pong(Pong {
        fail2ban_version: version,
        fail2ban_latency_us: micros(latency),
        agent_version: crate::AGENT_VERSION.to_owned(),
    }))
}

/// fail2ban's version, or `None` when it cannot be asked (for the hello; never an error there).
pub async fn fail2ban_version(context: &Context) -> Option<String> {
    let result = async {
        let mut socket = context.fail2ban.lease().await?;
        socket.version().await
    }
    .await;
    match result {
        Ok(version) => Some(version),
        Err(e) => {
            tracing::warn!(error = %e, "fail2ban is not reachable; the hub will show no fail2ban version");
            None
        }
    }
}

/// `GetStatus`: every running jail with its counters, in fail2ban's order (sorted by name).
pub async fn status(context: &Context) -> Reply {
    let mut socket = context.fail2ban.lease().await?;
    let started = Instant::now();
    let version = socket.version().await?;
    let names = socket.jail_names().await?;
    let mut jails = Vec::with_capacity(names.len());
    for name in names {
        match socket.jail_status(&name).await {
            Ok(status) => jails.push(JailStatus {
                name,
                currently_failed: status.currently_failed,
                total_failed: status.total_failed,
                currently_banned: status.currently_banned,
                total_banned: status.total_banned,
                file_list: status.file_list,
                journal_matches: status.journal_matches,
            }),
            // A reload between `status` and this call removed the jail: it no longer runs.
            Err(e) if is_unknown_jail(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let latency = started.elapsed();
    Ok(Outcome::Status(StatusReport {
        fail2ban_version: version,
        jails,
        fail2ban_latency_us: micros(latency),
    }))
}

/// The names of the running jails.
pub async fn running_jails(context: &Context) -> Result<Vec<String>, Fail2banError> {
    let mut socket = context.fail2ban.lease().await?;
    socket.jail_names().await
}

pub fn micros(elapsed: std::time::Duration) -> u64 {
    u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX)
}
