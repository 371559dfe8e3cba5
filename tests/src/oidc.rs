//! A real OpenID provider for the tests: npm `oidc-provider` (panva, certified) with its development
//! login and consent pages, `tests/components/oidc/provider.mjs` (installed by
//! `.ci/deps.d/20-oidc.sh`), on 127.0.0.1 and a port the kernel picks. The provider writes
//! `{"issuer": …, "pid": …}` to a ready file once it serves; [`OidcProvider::start`] waits for it and
//! for the discovery document.
//!
//! Its accounts (any password is accepted): `alice` (group `banhub-admins`), `olga`
//! (`banhub-operators`), `victor` (`banhub-viewers`), `nora` (only `staff`, which no role maps). As
//! oidc-provider does by default, the ID token carries only `sub`: name, e-mail and groups come from
//! the userinfo endpoint. Each start signs with a new key, so [`OidcProvider::restart`] (same
//! address) is a key rotation. [`HubBuilder::oidc`](crate::hub::HubBuilder::oidc) points a hub at it with
//! the role map below.
//!
//! [`Browser`] is a browser without JavaScript (a cookie jar, redirects followed by hand) that runs the
//! whole login: `GET /auth/login` on the hub → the provider's authorization endpoint → its login form
//! → its consent form → `/auth/callback` on the hub → the session cookie. Each step is a method of its
//! own, so tests can tamper with what passes between them.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use reqwest::Url;
use reqwest::cookie::{CookieStore as _, Jar};
use reqwest::header::{HeaderValue, LOCATION};
use serde::Deserialize;
use tempfile::TempDir;

use crate::process::{LogFiles, ManagedChild, workspace_root};
use crate::wait::POLL_INTERVAL;

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const READY_FILE: &str = "ready.json";
const INSTALL_HINT: &str = "run `.ci/install-deps` (its `.ci/deps.d/20-oidc.sh` runs `npm ci` in \
                            tests/components/oidc)";
/// The client the provider registers (its defaults; the hub is configured with the same).
pub const CLIENT_ID: &str = "banhub";
pub const CLIENT_SECRET: &str = "banhub-test-secret";
/// The claim values the hub maps to its roles ([`OidcProvider::hub_env`]).
pub const ADMIN_GROUP: &str = "banhub-admins";
pub const OPERATOR_GROUP: &str = "banhub-operators";
pub const VIEWER_GROUP: &str = "banhub-viewers";
/// The hub's session cookie.
pub const SESSION_COOKIE: &str = "banhub_session";
/// How many redirects one step of the login may take before it is called a loop.
const MAX_REDIRECTS: usize = 10;

#[derive(Debug, Deserialize)]
struct Ready {
    issuer: String,
    pid: u32,
}

/// A running provider, killed when dropped. Its logs are in its temporary directory.
#[derive(Debug)]
pub struct OidcProvider {
    dir: TempDir,
    logs: LogFiles,
    issuer: String,
    child: Option<ManagedChild>,
}

fn provider_dir() -> anyhow::Result<PathBuf> {
    let dir = workspace_root().join("tests/components/oidc");
    let module = dir.join("node_modules/oidc-provider/package.json");
    if !module.is_file() {
        bail!(
            "oidc-provider is not installed ({} is missing): {INSTALL_HINT}",
            module.display()
        );
    }
    Ok(dir)
}

/// `GET <issuer>/.well-known/openid-configuration` over a plain socket (the harness starts before
/// any async runtime may exist): whether it answers 200 with this issuer.
fn discovery_answers(issuer: &str) -> bool {
    let Some(authority) = issuer.strip_prefix("http://") else {
        return false;
    };
    let Ok(addr) = authority.parse::<SocketAddr>() else {
        return false;
    };
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!(
        "GET /.well-known/openid-configuration HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n"
    );
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200") && answer.contains(&format!("\"issuer\":\"{issuer}\""))
}

impl OidcProvider {
    /// Starts the provider and waits until its discovery document answers.
    pub fn start() -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("banhub-oidc-")
            .tempdir()
            .context("creating the provider's directory")?;
        let logs = LogFiles::new(dir.path(), "oidc-provider");
        let (child, issuer) = launch(dir.path(), &logs, None)?;
        Ok(Self {
            dir,
            logs,
            issuer,
            child: Some(child),
        })
    }

    /// Stops the provider and starts it again at the same issuer (same port). It forgets its
    /// sessions and signs with a new key: a key rotation, as far as the hub can tell.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.stop()?;
        let port = self
            .issuer
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .context("the issuer has no port")?;
        let (child, issuer) = launch(self.dir.path(), &self.logs, Some(port))?;
        self.child = Some(child);
        ensure!(
            issuer == self.issuer,
            "the restarted provider is {issuer}, not {}",
            self.issuer
        );
        Ok(())
    }
}

/// Starts `provider.mjs` (on `port`, or one the kernel picks) and waits until its discovery
/// document answers; returns the child and the issuer.
fn launch(
    dir: &std::path::Path,
    logs: &LogFiles,
    port: Option<u16>,
) -> anyhow::Result<(ManagedChild, String)> {
    let component = provider_dir()?;
    if Command::new("node").arg("--version").output().is_err() {
        bail!("node is not on PATH: {INSTALL_HINT}");
    }
    let ready_file = dir.join(READY_FILE);
    match std::fs::remove_file(&ready_file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).context(format!("removing {}", ready_file.display())),
    }
    let mut command = Command::new("node");
    command
        .arg(component.join("provider.mjs"))
        .arg(&ready_file)
        .env("OIDC_CLIENT_ID", CLIENT_ID)
        .env("OIDC_CLIENT_SECRET", CLIENT_SECRET)
        .env("OIDC_PORT", port.unwrap_or(0).to_string())
        .current_dir(&component);
    logs.mark(&format!("oidc-provider (port {})", port.unwrap_or(0)))?;
    logs.attach(&mut command)?;
    let mut child = ManagedChild::spawn("oidc-provider", command)?;
    let deadline = Instant::now() + START_TIMEOUT;
    let mut last_problem = "no ready file".to_owned();
    let issuer = loop {
        if let Some(status) = child.try_status()? {
            bail!(
                "oidc-provider exited during start-up ({status}); if it is missing, \
                     {INSTALL_HINT}\n{}",
                logs.tail(40)
            );
        }
        match std::fs::read_to_string(&ready_file) {
            Ok(text) => match serde_json::from_str::<Ready>(&text) {
                Ok(ready) if Some(ready.pid) == child.pid() => {
                    if discovery_answers(&ready.issuer) {
                        break ready.issuer;
                    }
                    last_problem = format!("{} does not serve discovery yet", ready.issuer);
                }
                Ok(ready) => {
                    last_problem = format!("the ready file names pid {}", ready.pid);
                }
                Err(e) => last_problem = format!("unreadable ready file ({e}): {text:?}"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => last_problem = e.to_string(),
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            bail!(
                "oidc-provider was not ready within {START_TIMEOUT:?} ({last_problem}); killed \
                     it\n{}",
                logs.tail(40)
            );
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    Ok((child, issuer))
}

impl OidcProvider {
    /// `http://127.0.0.1:PORT`, as the provider names itself.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The provider's temporary directory (ready file and logs).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The `BANHUB_…` variables that make a hub log in through this provider: the client, and the
    /// role map `groups` → admin `banhub-admins`, operator `banhub-operators`, viewer
    /// `banhub-viewers`.
    pub fn hub_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("BANHUB_AUTH__MODE", "oidc".to_owned()),
            ("BANHUB_AUTH__OIDC__ISSUER_URL", self.issuer.clone()),
            ("BANHUB_AUTH__OIDC__CLIENT_ID", CLIENT_ID.to_owned()),
            ("BANHUB_AUTH__OIDC__CLIENT_SECRET", CLIENT_SECRET.to_owned()),
            ("BANHUB_AUTH__OIDC__ROLE_CLAIM", "groups".to_owned()),
            (
                "BANHUB_AUTH__OIDC__ROLE_MAP__ADMIN",
                format!("[\"{ADMIN_GROUP}\"]"),
            ),
            (
                "BANHUB_AUTH__OIDC__ROLE_MAP__OPERATOR",
                format!("[\"{OPERATOR_GROUP}\"]"),
            ),
            (
                "BANHUB_AUTH__OIDC__ROLE_MAP__VIEWER",
                format!("[\"{VIEWER_GROUP}\"]"),
            ),
        ]
    }

    /// The provider's output, for failure messages.
    pub fn logs(&self) -> String {
        self.logs.tail(60)
    }

    /// Stops the provider (SIGTERM).
    pub fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut() {
            child.stop(STOP_TIMEOUT)?;
        }
        Ok(())
    }
}

/// One HTML form: where it posts and its hidden fields.
#[derive(Debug, Clone)]
struct Form {
    action: String,
    hidden: Vec<(String, String)>,
    /// Whether it asks for a login name (the provider's login page).
    asks_login: bool,
}

fn unescape(text: &str) -> String {
    text.replace("&#x2F;", "/")
        .replace("&#47;", "/")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// The value of attribute `name` in one tag's text.
fn attribute(tag: &str, name: &str) -> Option<String> {
    let needle = format!(" {name}=\"");
    let start = tag.find(&needle)? + needle.len();
    let end = tag[start..].find('"')? + start;
    Some(unescape(&tag[start..end]))
}

/// The first `<form>` of a page of the provider (its pages are simple, generated HTML).
fn first_form(html: &str) -> Option<Form> {
    let start = html.find("<form")?;
    let end = html[start..]
        .find("</form>")
        .map_or(html.len(), |e| start + e);
    let form = &html[start..end];
    let action = attribute(&form[..form.find('>')?], "action")?;
    let mut hidden = Vec::new();
    let mut asks_login = false;
    for piece in form.split("<input").skip(1) {
        let tag = &piece[..piece.find('>').unwrap_or(piece.len())];
        let name = attribute(tag, "name").unwrap_or_default();
        match attribute(tag, "type").as_deref() {
            Some("hidden") => hidden.push((name, attribute(tag, "value").unwrap_or_default())),
            _ if name == "login" => asks_login = true,
            _ => {}
        }
    }
    Some(Form {
        action,
        hidden,
        asks_login,
    })
}

/// A browser without JavaScript: a cookie jar (shared by the hub and the provider, as a browser's
/// is), redirects not followed by itself, 30 s per request.
#[derive(Debug, Clone)]
pub struct Browser {
    client: reqwest::Client,
    jar: Arc<Jar>,
}

/// A login of [`Browser::login`]: the browser holding the session, and what the hub answered at
/// the callback.
#[derive(Debug)]
pub struct LoggedIn {
    pub browser: Browser,
    /// Where the callback sent the browser (the `return_to` of the login).
    pub location: String,
}

impl Browser {
    pub fn new() -> anyhow::Result<Self> {
        let jar = Arc::new(Jar::default());
        let client = reqwest::Client::builder()
            .cookie_provider(jar.clone())
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30))
            .build()
            .context("building the browser's HTTP client")?;
        Ok(Self { client, jar })
    }

    /// The HTTP client, sending this browser's cookies (and storing those it receives).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// The value of the cookie `name` this browser would send to `url`.
    pub fn cookie(&self, url: &str, name: &str) -> Option<String> {
        let url = Url::parse(url).ok()?;
        let header = self.jar.cookies(&url)?;
        header
            .to_str()
            .ok()?
            .split(';')
            .filter_map(|pair| pair.trim().split_once('='))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.to_owned())
    }

    /// Puts a cookie into the jar as if `url` had set it (e.g. to replay a captured one).
    pub fn set_cookie(&self, url: &str, cookie: &str) -> anyhow::Result<()> {
        let url = Url::parse(url).with_context(|| format!("URL {url}"))?;
        let value = HeaderValue::from_str(cookie).context("cookie value")?;
        self.jar.set_cookies(&mut std::iter::once(&value), &url);
        Ok(())
    }

    /// Step 1: `GET <hub>/auth/login[?return_to=…]`; returns the provider's authorization URL the
    /// hub redirects to (the hub set its login cookie in the jar).
    pub async fn start_login(&self, hub: &str, return_to: Option<&str>) -> anyhow::Result<Url> {
        let mut url = Url::parse(&format!("{}/auth/login", hub.trim_end_matches('/')))?;
        if let Some(target) = return_to {
            url.query_pairs_mut().append_pair("return_to", target);
        }
        let response = self
            .client
            .get(url.clone())
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let status = response.status();
        let location = response.headers().get(LOCATION).cloned();
        ensure!(
            status == reqwest::StatusCode::FOUND,
            "GET {url}: {status} {}",
            response.text().await.unwrap_or_default()
        );
        let location = location.context("no Location")?;
        Url::parse(location.to_str()?).context("the hub's redirect to the provider")
    }

    /// Step 2: at the provider, from the authorization URL: follows its redirects, signs in as
    /// `user` on its login form and agrees on its consent form when it asks. Returns the URL the
    /// provider sends the browser back to (the hub's callback with `code` and `state`), not yet
    /// visited.
    pub async fn sign_in_at_provider(&self, authorize: Url, user: &str) -> anyhow::Result<Url> {
        let provider_origin = authorize.origin();
        let mut next = self.client.get(authorize.clone());
        let mut current = authorize;
        for _ in 0..4 * MAX_REDIRECTS {
            let response = next
                .send()
                .await
                .with_context(|| format!("at the provider: {current}"))?;
            let status = response.status();
            if status.is_redirection() {
                let location = response
                    .headers()
                    .get(LOCATION)
                    .context("a redirect without Location")?
                    .to_str()?
                    .to_owned();
                let target = current
                    .join(&location)
                    .with_context(|| format!("redirect to {location}"))?;
                if target.origin() != provider_origin {
                    return Ok(target);
                }
                next = self.client.get(target.clone());
                current = target;
                continue;
            }
            let body = response.text().await.unwrap_or_default();
            ensure!(
                status.is_success(),
                "the provider answered {status} at {current}: {body}"
            );
            let form = first_form(&body)
                .with_context(|| format!("no form on the provider's page {current}: {body}"))?;
            let mut fields = form.hidden.clone();
            if form.asks_login {
                fields.push(("login".to_owned(), user.to_owned()));
                fields.push(("password".to_owned(), "any password".to_owned()));
            }
            let action = current.join(&form.action)?;
            next = self.client.post(action.clone()).form(&fields);
            current = action;
        }
        bail!(
            "the provider did not send the browser back to the client within {} steps",
            4 * MAX_REDIRECTS
        )
    }

    /// Step 3: visits the callback URL; returns the hub's answer as it is (a 302 with the session
    /// cookie when the login worked; the jar keeps the cookie).
    pub async fn finish_login(&self, callback: Url) -> anyhow::Result<reqwest::Response> {
        self.client
            .get(callback.clone())
            .send()
            .await
            .with_context(|| format!("GET {callback}"))
    }

    /// The whole login of `user` at the hub at `hub` (`http://127.0.0.1:PORT`), in this browser.
    /// Fails unless the hub answers the callback with a redirect and a session cookie.
    pub async fn log_in(&self, hub: &str, user: &str) -> anyhow::Result<String> {
        let authorize = self.start_login(hub, None).await?;
        let callback = self.sign_in_at_provider(authorize, user).await?;
        let response = self.finish_login(callback).await?;
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.text().await.unwrap_or_default();
        ensure!(
            status == reqwest::StatusCode::FOUND,
            "the hub refused the login of {user}: {status} {body}"
        );
        ensure!(
            self.cookie(hub, SESSION_COOKIE).is_some(),
            "the hub set no session cookie for {user}"
        );
        location.context("the callback's redirect has no Location")
    }

    /// A new browser logged in as `user` at the hub at `hub`.
    pub async fn login(hub: &str, user: &str) -> anyhow::Result<LoggedIn> {
        let browser = Self::new()?;
        let location = browser.log_in(hub, user).await?;
        Ok(LoggedIn { browser, location })
    }

    /// The provider's logout confirmation at `end_session` (the URL the hub's logout redirects
    /// to): confirms it and returns where the provider then sends the browser.
    pub async fn confirm_provider_logout(&self, end_session: Url) -> anyhow::Result<Url> {
        let response = self
            .client
            .get(end_session.clone())
            .send()
            .await
            .with_context(|| format!("GET {end_session}"))?;
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        ensure!(
            status.is_success(),
            "the provider refused the end-session request: {status} {body}"
        );
        let form = first_form(&body).with_context(|| format!("no logout form: {body}"))?;
        let mut fields = form.hidden.clone();
        fields.push(("logout".to_owned(), "yes".to_owned()));
        let action = end_session.join(&form.action)?;
        let mut response = self
            .client
            .post(action.clone())
            .form(&fields)
            .send()
            .await?;
        let mut current = action;
        for _ in 0..MAX_REDIRECTS {
            let status = response.status();
            ensure!(
                status.is_redirection(),
                "the provider's logout answered {status}: {}",
                response.text().await.unwrap_or_default()
            );
            let location = response
                .headers()
                .get(LOCATION)
                .context("a redirect without Location")?
                .to_str()?
                .to_owned();
            let target = current.join(&location)?;
            if target.origin() != end_session.origin() {
                return Ok(target);
            }
            response = self.client.get(target.clone()).send().await?;
            current = target;
        }
        bail!("the provider's logout did not send the browser back")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_provider_forms_are_read() {
        let login = r#"<form autocomplete="off" action="http://127.0.0.1:9/interaction/abc&amp;x" method="post">
  <input type="hidden" name="prompt" value="login"/>
  <input required type="text" name="login" placeholder="Enter any login" autofocus="on">
  <input required type="password" name="password" placeholder="and password" >
  <button type="submit" class="login login-submit">Sign-in</button></form>"#;
        let form = first_form(login).expect("form");
        assert_eq!(form.action, "http://127.0.0.1:9/interaction/abc&x");
        assert_eq!(form.hidden, [("prompt".to_owned(), "login".to_owned())]);
        assert!(form.asks_login);
        let logout = r#"<form id="op.logoutForm" method="post" action="/session/end/confirm"><input type="hidden" name="xsrf" value="s3cr&#x2F;t"/></form>"#;
        let form = first_form(logout).expect("form");
        assert_eq!(form.action, "/session/end/confirm");
        assert_eq!(form.hidden, [("xsrf".to_owned(), "s3cr/t".to_owned())]);
        assert!(!form.asks_login);
        assert!(first_form("<p>no form</p>").is_none());
    }
}
