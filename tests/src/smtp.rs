//! A real SMTP server for the tests: npm `maildev` 3 (installed in `tests/components/smtp` by
//! `.ci/deps.d/30-smtp.sh`), listening on 127.0.0.1 with its SMTP port and its HTTP API port picked
//! free at start. Mail is read back through its API (`GET /api/email`; 3.x moved it under `/api`).
//!
//! [`SmtpServer::stop`] and [`SmtpServer::start_again`] take the server away and bring it back on
//! the same ports, for the "mail server down" tests.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use tempfile::TempDir;

use crate::process::{LogFiles, ManagedChild, workspace_root};
use crate::wait::wait_until;

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const INSTALL_HINT: &str = "run `.ci/install-deps` (its `.ci/deps.d/30-smtp.sh` runs `npm ci` in \
                            tests/components/smtp)";

/// One address as maildev reports it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct MailAddress {
    pub address: String,
    #[serde(default)]
    pub name: String,
}

/// A received message as maildev's API returns it (the fields the tests read).
#[derive(Debug, Clone, Deserialize)]
pub struct ReceivedMail {
    pub id: String,
    #[serde(default)]
    pub subject: String,
    #[serde(default)]
    pub from: Vec<MailAddress>,
    #[serde(default)]
    pub to: Vec<MailAddress>,
    /// The plain-text part.
    #[serde(default)]
    pub text: Option<String>,
    /// The HTML part.
    #[serde(default)]
    pub html: Option<String>,
}

/// A running maildev, killed when dropped.
#[derive(Debug)]
pub struct SmtpServer {
    dir: TempDir,
    logs: LogFiles,
    smtp: SocketAddr,
    web: SocketAddr,
    child: Option<ManagedChild>,
    client: reqwest::Client,
}

/// A port free right now on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a probe socket")?;
    Ok(listener.local_addr()?.port())
}

fn maildev_bin() -> anyhow::Result<PathBuf> {
    let path = workspace_root().join("tests/components/smtp/node_modules/.bin/maildev");
    if !path.exists() {
        bail!(
            "maildev is not installed at {}: {INSTALL_HINT}",
            path.display()
        );
    }
    Ok(path)
}

impl SmtpServer {
    /// Starts maildev and waits until both its SMTP port and its API answer.
    pub fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("banhub-smtp-")
            .tempdir()
            .context("creating maildev's directory")?;
        let logs = LogFiles::new(dir.path(), "maildev");
        let smtp = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let web = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let mut server = Self {
            dir,
            logs,
            smtp,
            web,
            child: None,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .context("building the HTTP client")?,
        };
        server.launch()?;
        Ok(server)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let bin = maildev_bin()?;
        if Command::new("node").arg("--version").output().is_err() {
            bail!("node is not on PATH: {INSTALL_HINT}");
        }
        let mut command = Command::new("node");
        command
            .arg(&bin)
            .args(["--ip", "127.0.0.1", "--web-ip", "127.0.0.1"])
            .args(["-s", &self.smtp.port().to_string()])
            .args(["-w", &self.web.port().to_string()])
            .current_dir(self.dir.path());
        self.logs
            .mark(&format!("maildev smtp {} api {}", self.smtp, self.web))?;
        self.logs.attach(&mut command)?;
        self.child = Some(ManagedChild::spawn("maildev", command)?);
        let (smtp, web) = (self.smtp, self.web);
        let ready = wait_until(START_TIMEOUT, "maildev to listen", || {
            TcpStream::connect_timeout(&smtp, Duration::from_millis(200)).is_ok()
                && TcpStream::connect_timeout(&web, Duration::from_millis(200)).is_ok()
        });
        if let Err(e) = ready {
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_status().ok().flatten());
            bail!(
                "{e} (exited: {exited:?}); if maildev is missing, {INSTALL_HINT}\n{}",
                self.logs.tail(40)
            );
        }
        Ok(())
    }

    /// `127.0.0.1`.
    pub fn host(&self) -> String {
        self.smtp.ip().to_string()
    }

    /// The SMTP port.
    pub fn smtp_port(&self) -> u16 {
        self.smtp.port()
    }

    /// The base URL of maildev's HTTP API and web UI.
    pub fn web_url(&self) -> String {
        format!("http://{}", self.web)
    }

    /// Every message received so far, oldest first.
    pub async fn emails(&self) -> anyhow::Result<Vec<ReceivedMail>> {
        let response = self
            .client
            .get(format!("{}/api/email", self.web_url()))
            .send()
            .await
            .context("GET /api/email")?;
        if !response.status().is_success() {
            bail!("maildev answered {}", response.status());
        }
        response.json().await.context("reading maildev's list")
    }

    /// Deletes every message.
    pub async fn clear(&self) -> anyhow::Result<()> {
        let response = self
            .client
            .delete(format!("{}/api/email/all", self.web_url()))
            .send()
            .await
            .context("DELETE /api/email/all")?;
        if !response.status().is_success() {
            bail!("maildev answered {}", response.status());
        }
        Ok(())
    }

    /// Stops maildev (SIGTERM): its ports refuse connections until [`SmtpServer::start_again`].
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut() {
            child.stop(STOP_TIMEOUT)?;
        }
        let smtp = self.smtp;
        wait_until(STOP_TIMEOUT, "maildev's SMTP port to close", || {
            TcpStream::connect_timeout(&smtp, Duration::from_millis(200)).is_err()
        })
    }

    /// Starts maildev again on the same ports (its mailbox starts empty).
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.launch()
    }

    /// maildev's output, for failure messages.
    pub fn logs(&self) -> String {
        self.logs.tail(60)
    }
}
