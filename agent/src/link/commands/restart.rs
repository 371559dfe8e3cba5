//! Reload and restart: `fail2ban-client -c <confdir> -s <socket> reload`, or `reload --restart
//! --all`, which stops and starts every jail inside the running server (fail2ban 1.0's
//! `restart` without a jail would stop the server itself, which the host's init system owns
//! and the agent must not kill). Afterwards the jails the configuration enables are compared
//! with the jails that run.

use std::collections::BTreeSet;
use std::ffi::OsString;

use banhub_proto::v1::command_result::Outcome;
use banhub_proto::v1::{Restart, RestartMode, RestartReport};

use super::Context;
use super::failure::{Failure, Reply};
use super::status::running_jails;
use crate::fail2ban_files::tools;

/// `Restart`: reload the configuration, or also restart every jail.
pub async fn restart(context: &Context, request: Restart) -> Reply {
    let restart = match RestartMode::try_from(request.mode) {
        Ok(RestartMode::Reload) => false,
        Ok(RestartMode::Restart) => true,
        Ok(RestartMode::Unspecified) | Err(_) => {
            return Err(Failure::invalid(
                "say whether to reload the configuration or restart every jail",
            ));
        }
    };
    let _gate = context.config_gate.lock().await;
    let mut args: Vec<OsString> = vec![
        "-c".into(),
        context.config_dir().into(),
        "-s".into(),
        context.fail2ban.path().into(),
        "reload".into(),
    ];
    if restart {
        args.extend(["--restart".into(), "--all".into()]);
    }
    let tools = context.tools();
    let output = tools
        .client(&args, tools.reload_timeout)
        .await
        .map_err(|e| Failure::internal(e.to_string()))?;
    let messages = tools::client_messages(&output, None);
    context.bans.clear();
    if restart {
        // Stopping jails does not stop the server, but be safe about kept connections.
        context.fail2ban.clear();
    }

    let running: BTreeSet<String> = match running_jails(context).await {
        Ok(names) => names.into_iter().collect(),
        Err(e) => {
            return Ok(Outcome::Restart(RestartReport {
                ok: false,
                message: with_messages(
                    format!("fail2ban does not answer after the {}: {e}", verb(restart)),
                    &messages,
                ),
                ..RestartReport::default()
            }));
        }
    };
    let enabled = context.editor()?.read(|r| r.load()).await?.enabled_jails();
    let failed_jails: Vec<String> = enabled.difference(&running).cloned().collect();
    let ok = output.success() && failed_jails.is_empty();
    let summary = if !output.success() {
        format!(
            "fail2ban-client {} failed (exit {}); fail2ban keeps running the jails listed",
            verb(restart),
            output
                .code
                .map_or_else(|| "by a signal".to_owned(), |c| c.to_string())
        )
    } else if failed_jails.is_empty() {
        format!(
            "fail2ban {}; {} jails running",
            if restart {
                "restarted every jail"
            } else {
                "reloaded its configuration"
            },
            running.len()
        )
    } else {
        format!(
            "fail2ban {} but jails {} are enabled and do not run; fail2ban's log says why",
            if restart { "restarted" } else { "reloaded" },
            failed_jails.join(", ")
        )
    };
    tracing::info!(restart, ok, failed = ?failed_jails, "fail2ban {}", verb(restart));
    Ok(Outcome::Restart(RestartReport {
        ok,
        running_jails: running.into_iter().collect(),
        failed_jails,
        message: with_messages(summary, &messages),
    }))
}

fn verb(restart: bool) -> &'static str {
    if restart { "restart" } else { "reload" }
}

fn with_messages(mut summary: String, messages: &[String]) -> String {
    for message in messages {
        summary.push('\n');
        summary.push_str(message);
    }
    summary
}
