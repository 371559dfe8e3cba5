//! Delivery diagnostics and the end-to-end probe: `GetDeliveryStatus` (the relay, the spool, and
//! whether each running jail runs the banhub action) and `ProbeStep` (ban or unban a documentation
//! address in the probe jail, so that the hub can watch the event come back the real way).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use banhub_proto::rules::{IpOrCidr, PROBE_JAIL, is_probe_address};
use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{DeliveryStatus, JailDelivery, ProbeStep, ProbeStepReport};

use super::Context;
use super::failure::{Failure, Reply};
use crate::action::{self, attachments};
use crate::relay::RelayStats;
use crate::spool::Spool;

/// How long the probe waits to connect to its own relay.
const RELAY_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the diagnostics look at besides fail2ban: set once the relay runs.
#[derive(Debug, Clone, Default)]
pub struct DeliveryHandles {
    pub relay: Option<RelayHandle>,
    pub spool: Option<Spool>,
}

/// The running relay.
#[derive(Debug, Clone)]
pub struct RelayHandle {
    pub listen: SocketAddr,
    pub stats: Arc<RelayStats>,
}

fn handles(context: &Context) -> DeliveryHandles {
    context.delivery.get().cloned().unwrap_or_default()
}

/// Whether something accepts connections at the relay's address.
async fn relay_listening(relay: Option<&RelayHandle>) -> bool {
    let Some(relay) = relay else {
        return false;
    };
    matches!(
        tokio::time::timeout(
            RELAY_CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect(relay.listen)
        )
        .await,
        Ok(Ok(_))
    )
}

/// `GetDeliveryStatus`.
pub async fn delivery_status(context: &Context) -> Reply {
    let handles = handles(context);
    let mut status = DeliveryStatus {
        relay_enabled: handles.relay.is_some(),
        action_installed: action::is_installed(context.config_dir()),
        ..DeliveryStatus::default()
    };
    if let Some(relay) = &handles.relay {
        if relay_listening(Some(relay)).await {
            status.relay_listen = relay.listen.to_string();
        }
        status.last_callback_unix_ms = relay.stats.last_accepted_at_ms().unwrap_or(0);
        status.callbacks_accepted = relay.stats.accepted();
        status.callbacks_rejected = relay.stats.rejected();
    }
    if let Some(spool) = &handles.spool {
        status.spool = Some(
            crate::link::delivery::head(spool)
                .await
                .map_err(|e| Failure::internal(format!("cannot read the event spool: {e}")))?,
        );
    }
    let timeout = context.editor_settings.socket_timeout;
    match attachments::running_attachments(context.fail2ban.path(), timeout).await {
        Ok(jails) => {
            status.fail2ban_running = true;
            status.jails = jails
                .into_iter()
                .map(|j| JailDelivery {
                    action_attached: j.attached(),
                    jail: j.jail,
                    actions: j.actions,
                })
                .collect();
        }
        Err(e) => status.fail2ban_error = e.to_string(),
    }
    Ok(Outcome::DeliveryStatus(status))
}

/// `ProbeStep`: checks the probe jail, its action and the relay, then bans or unbans.
pub async fn probe_step(context: &Context, request: ProbeStep) -> Reply {
    let ip = IpOrCidr::parse(&request.ip)
        .map_err(|e| Failure::invalid(format!("ip {:?}: {e}", request.ip)))?;
    if !is_probe_address(&ip) {
        return Err(Failure::invalid(format!(
            "the probe bans documentation addresses only (192.0.2.0/24, 198.51.100.0/24, \
             203.0.113.0/24, 2001:db8::/32), not {ip}"
        )));
    }
    let handles = handles(context);
    let mut report = ProbeStepReport {
        relay_listening: relay_listening(handles.relay.as_ref()).await,
        ..ProbeStepReport::default()
    };
    let mut socket = context.fail2ban.lease().await?;
    match attachments::running_actions(&mut socket, PROBE_JAIL).await {
        Ok(actions) => {
            report.probe_jail_running = true;
            report.action_attached = actions.iter().any(|a| a == action::ACTION_NAME);
        }
        Err(e) if crate::fail2ban::client::is_unknown_jail(&e) => {}
        Err(e) => return Err(e.into()),
    }
    if !(report.probe_jail_running && report.action_attached && report.relay_listening) {
        return Ok(Outcome::ProbeStep(report));
    }
    let address = ip.to_string();
    report.changed = if request.ban {
        socket.ban(PROBE_JAIL, &address).await?
    } else {
        socket.unban(PROBE_JAIL, &address).await?
    };
    report.done_unix_ms = crate::spool::now_ms();
    tracing::info!(ip = %address, ban = request.ban, changed = report.changed, "probe step");
    Ok(Outcome::ProbeStep(report))
}
