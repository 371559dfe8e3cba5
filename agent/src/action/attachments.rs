//! Which running jails run the banhub action, as fail2ban itself says (`get <jail> actions`):
//! the truth about delivery, whatever the configuration files claim.

use std::path::Path;
use std::time::Duration;

use crate::fail2ban::{Fail2banError, Fail2banSocket};

use super::ACTION_NAME;

/// One running jail and its running actions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailAttachment {
    pub jail: String,
    pub actions: Vec<String>,
}

impl JailAttachment {
    /// Whether `banhub` is among the jail's running actions.
    pub fn attached(&self) -> bool {
        self.actions.iter().any(|a| a == ACTION_NAME)
    }
}

/// The running actions of `jail` (`get <jail> actions` → a list of names).
pub async fn running_actions(
    socket: &mut Fail2banSocket,
    jail: &str,
) -> Result<Vec<String>, Fail2banError> {
    let args = ["get", jail, "actions"];
    let reply = socket.call(&args).await?;
    let description = reply.to_string();
    reply
        .into_list()
        .and_then(|items| items.into_iter().map(|v| v.into_string()).collect())
        .ok_or_else(|| Fail2banError::UnexpectedReply {
            command: args.join(" "),
            detail: format!("{description} is not a list of names"),
        })
}

/// Every running jail with its running actions, over one connection. A jail that stops while
/// it is being asked is left out.
pub async fn running_attachments(
    socket_path: &Path,
    timeout: Duration,
) -> Result<Vec<JailAttachment>, Fail2banError> {
    let mut socket = Fail2banSocket::connect(socket_path, timeout).await?;
    let mut jails = socket.jail_names().await?;
    jails.sort();
    let mut out = Vec::with_capacity(jails.len());
    for jail in jails {
        match running_actions(&mut socket, &jail).await {
            Ok(actions) => out.push(JailAttachment { jail, actions }),
            Err(e) if crate::fail2ban::client::is_unknown_jail(&e) => {}
            Err(e) => return Err(e),
        }
    }
    // The answers are in; a failed goodbye changes nothing.
    let _ = socket.close().await;
    Ok(out)
}
