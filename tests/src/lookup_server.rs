//! The outside services the hub looks addresses up in, served from the test process: an HTTP/1.1
//! server on 127.0.0.1 (port picked by the kernel) with IANA's RDAP bootstrap files, a registry's
//! RDAP answers (RFC 9083, in ARIN's and RIPE's shape) and AbuseIPDB's `check` (their documented
//! JSON). It counts every request, so a test can tell whether the hub asked; anything under
//! `/stall/` is never answered, to see the hub's time bound.
//!
//! Paths: `/bootstrap/ipv4.json`, `/bootstrap/ipv6.json` (pointing at `/rdap/`),
//! `/rdap/ip/{addr}`, `/abuseipdb/api/v2/check?ipAddress=…` (needs the `Key` header
//! [`ABUSEIPDB_KEY`]); `/_requests` lists the paths asked so far (for the browser tests), and is
//! not counted itself. Some registry paths answer with a redirect instead, as registries refer to
//! one another: [`REDIRECT_SAME`] to this server's own 8.8.8.8 answer, [`REDIRECT_LOOPBACK`] to
//! this server under the name `localhost` (`/trap/…`, counted but never answered),
//! [`REDIRECT_PRIVATE`] to a private address, [`REDIRECT_LOOP`] to itself.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The AbuseIPDB key the server accepts.
pub const ABUSEIPDB_KEY: &str = "banhub-test-abuseipdb-key";

/// The public address the tests look up: in Google's 8.8.8.0/24, registered at ARIN.
pub const PUBLIC_V4: &str = "8.8.8.8";
/// A public IPv6 address the registry knows (RIPE's shape, without `cidr0`).
pub const PUBLIC_V6: &str = "2a00:1450:4001::1";

/// An address whose registry redirects to this server's answer for [`PUBLIC_V4`].
pub const REDIRECT_SAME: &str = "1.2.3.1";
/// An address whose registry redirects to `http://localhost:PORT/trap/…` (loopback, not the
/// configured origin).
pub const REDIRECT_LOOPBACK: &str = "1.2.3.2";
/// An address whose registry redirects to `http://10.1.2.3/…` (private).
pub const REDIRECT_PRIVATE: &str = "1.2.3.3";
/// An address whose registry redirects to itself, forever.
pub const REDIRECT_LOOP: &str = "1.2.3.4";

/// One request as received.
#[derive(Debug, Clone)]
pub struct Request {
    /// The path with its query.
    pub path: String,
    /// The `Key` header, if any.
    pub key: Option<String>,
}

/// The server; stops when dropped.
#[derive(Debug)]
pub struct LookupServer {
    addr: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
    task: JoinHandle<()>,
}

impl Drop for LookupServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LookupServer {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the lookup server")?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let task = {
            let requests = requests.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let requests = requests.clone();
                    tokio::spawn(async move {
                        let _ = serve(stream, addr, requests).await;
                    });
                }
            })
        };
        Ok(Self {
            addr,
            requests,
            task,
        })
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The `lookups` settings section pointing at this server, with the AbuseIPDB key.
    pub fn settings(&self) -> serde_json::Value {
        serde_json::json!({
            "rdapBootstrapUrl": self.url("/bootstrap/"),
            "abuseipdbUrl": self.url("/abuseipdb/api/v2/"),
            "abuseipdbKey": ABUSEIPDB_KEY,
        })
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The requests whose path contains `part`.
    pub fn count(&self, part: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.path.contains(part))
            .count()
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn serve(
    mut stream: TcpStream,
    me: SocketAddr,
    requests: Arc<Mutex<Vec<Request>>>,
) -> anyhow::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            break end;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() > 64 * 1024 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or_default()
        .to_owned();
    let key = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("key"))
        .map(|(_, v)| v.trim().to_owned());
    if path == "/_requests" {
        let paths: Vec<String> = requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| r.path.clone())
            .collect();
        let body = serde_json::to_string(&paths)?;
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await?;
        return Ok(());
    }
    requests
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Request {
            path: path.clone(),
            key: key.clone(),
        });
    if path.starts_with("/stall/") {
        // Hold the connection open without a word until the client gives up.
        tokio::time::sleep(std::time::Duration::from_secs(120)).await;
        return Ok(());
    }
    let reply = if let Some(location) = redirect(&path, me) {
        format!(
            "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    } else {
        let (status, kind, body) = answer(&path, key.as_deref(), me);
        format!(
            "HTTP/1.1 {status} {}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            if status == 200 { "OK" } else { "Error" },
            body.len()
        )
    };
    stream.write_all(reply.as_bytes()).await?;
    stream.shutdown().await?;
    Ok(())
}

const RDAP_JSON: &str = "application/rdap+json";

/// Where a registry path redirects to, if it does.
fn redirect(path: &str, me: SocketAddr) -> Option<String> {
    let addr = path.strip_prefix("/rdap/ip/")?;
    match addr {
        REDIRECT_SAME => Some(format!("/rdap/ip/{PUBLIC_V4}")),
        REDIRECT_LOOPBACK => Some(format!("http://localhost:{}/trap/ip/{addr}", me.port())),
        REDIRECT_PRIVATE => Some(format!("http://10.1.2.3/rdap/ip/{addr}")),
        REDIRECT_LOOP => Some(format!("http://{me}/rdap/ip/{addr}")),
        _ => None,
    }
}

/// The status, content type and body for a path.
fn answer(path: &str, key: Option<&str>, me: SocketAddr) -> (u16, &'static str, String) {
    let registry = format!("http://{me}/rdap/");
    match path.split_once('?').map_or(path, |(p, _)| p) {
        "/bootstrap/ipv4.json" => (
            200,
            "application/json",
            bootstrap("IPv4", &["8.0.0.0/8", "1.0.0.0/8"], &registry),
        ),
        "/bootstrap/ipv6.json" => (
            200,
            "application/json",
            bootstrap("IPv6", &["2a00::/12"], &registry),
        ),
        "/rdap/ip/8.8.8.8" => (200, RDAP_JSON, ARIN_8_8_8_0.to_owned()),
        "/rdap/ip/2a00:1450:4001::1" => (200, RDAP_JSON, RIPE_2A00_1450.to_owned()),
        p if p.starts_with("/rdap/ip/") => (404, RDAP_JSON, RDAP_NOT_FOUND.to_owned()),
        "/abuseipdb/api/v2/check" => {
            if key != Some(ABUSEIPDB_KEY) {
                return (401, "application/json", ABUSEIPDB_UNAUTHORIZED.to_owned());
            }
            let ip = path
                .split_once("ipAddress=")
                .map(|(_, rest)| rest.split('&').next().unwrap_or_default())
                .unwrap_or_default()
                .replace("%3A", ":");
            (200, "application/json", abuseipdb_check(&ip))
        }
        _ => (404, "text/plain", "no such path".to_owned()),
    }
}

/// A bootstrap file in IANA's format (RFC 9224) with one service: `networks` at `registry`.
fn bootstrap(family: &str, networks: &[&str], registry: &str) -> String {
    serde_json::json!({
        "description": format!("RDAP bootstrap file for {family} address allocations"),
        "publication": "2024-05-01T20:00:01Z",
        "services": [[networks, [registry]]],
        "version": "1.0"
    })
    .to_string()
}

/// ARIN's answer for 8.8.8.8, as `https://rdap.arin.net/registry/ip/8.8.8.8` gives it (notices
/// and links shortened).
const ARIN_8_8_8_0: &str = r#"{
  "rdapConformance": ["nro_rdap_profile_0", "rdap_level_0", "cidr0", "arin_originas0"],
  "notices": [{"title": "Terms of Service", "description": ["By using the ARIN RDAP/Whois service, you are agreeing to the RDAP/Whois Terms of Use"]}],
  "handle": "NET-8-8-8-0-2", "startAddress": "8.8.8.0", "endAddress": "8.8.8.255",
  "ipVersion": "v4", "name": "GOGL", "type": "DIRECT ALLOCATION",
  "parentHandle": "NET-8-0-0-0-0",
  "events": [{"eventAction": "last changed", "eventDate": "2023-12-28T17:24:56-05:00"},
             {"eventAction": "registration", "eventDate": "2023-12-28T17:24:33-05:00"}],
  "links": [{"value": "https://rdap.arin.net/registry/ip/8.8.8.0", "rel": "self", "type": "application/rdap+json", "href": "https://rdap.arin.net/registry/ip/8.8.8.0"}],
  "entities": [{
    "handle": "GOGL",
    "vcardArray": ["vcard", [["version", {}, "text", "4.0"], ["fn", {}, "text", "Google LLC"],
      ["adr", {"label": "1600 Amphitheatre Parkway\nMountain View\nCA\n94043\nUnited States"}, "text", ["", "", "", "", "", "", ""]],
      ["kind", {}, "text", "org"]]],
    "roles": ["registrant"],
    "entities": [{
      "handle": "ABUSE5250-ARIN",
      "vcardArray": ["vcard", [["version", {}, "text", "4.0"], ["fn", {}, "text", "Abuse"],
        ["kind", {}, "text", "group"], ["email", {}, "text", "network-abuse@google.com"],
        ["tel", {"type": ["work", "voice"]}, "text", "+1-650-253-0000"]]],
      "roles": ["abuse"], "objectClassName": "entity", "port43": "whois.arin.net"
    }],
    "port43": "whois.arin.net", "objectClassName": "entity"
  }],
  "port43": "whois.arin.net", "status": ["active"], "objectClassName": "ip network",
  "cidr0_cidrs": [{"v4prefix": "8.8.8.0", "length": 24}],
  "arin_originas0_originautnums": []
}"#;

/// A RIPE-shaped answer (no `cidr0`, a country, the range by its first and last address).
const RIPE_2A00_1450: &str = r#"{
  "handle": "2a00:1450::/29", "name": "DE-GOOGLE-20090507", "type": "ALLOCATED-BY-RIR",
  "country": "IE", "startAddress": "2a00:1450::", "endAddress": "2a00:1457:ffff:ffff:ffff:ffff:ffff:ffff",
  "ipVersion": "v6", "parentHandle": "2a00::/12", "objectClassName": "ip network",
  "entities": [{"handle": "GOOG1-RIPE", "roles": ["registrant"], "objectClassName": "entity",
                "vcardArray": ["vcard", [["version", {}, "text", "4.0"], ["fn", {}, "text", "Google Ireland Limited"], ["kind", {}, "text", "org"]]]}],
  "events": [{"eventAction": "registration", "eventDate": "2009-05-07T09:07:48Z"}],
  "rdapConformance": ["rdap_level_0", "nro_rdap_profile_0"]
}"#;

/// A registry's answer for an address it does not hold (RFC 9083 error object).
const RDAP_NOT_FOUND: &str = r#"{"errorCode": 404, "title": "Not Found", "description": ["No network holds this address"], "rdapConformance": ["rdap_level_0"]}"#;

/// AbuseIPDB's answer to a bad key.
const ABUSEIPDB_UNAUTHORIZED: &str = r#"{"errors": [{"detail": "Authentication failed. Your API key is either missing, incorrect, or revoked.", "status": 401}]}"#;

/// AbuseIPDB's `check` answer in their documented shape, for `ip`.
fn abuseipdb_check(ip: &str) -> String {
    serde_json::json!({
        "data": {
            "ipAddress": ip, "isPublic": true, "ipVersion": if ip.contains(':') { 6 } else { 4 },
            "isWhitelisted": false, "abuseConfidenceScore": 87, "countryCode": "US",
            "usageType": "Data Center/Web Hosting/Transit", "isp": "Google LLC",
            "domain": "google.com", "hostnames": ["dns.google"], "isTor": false,
            "totalReports": 42, "numDistinctUsers": 17,
            "lastReportedAt": "2026-11-20T10:15:00+00:00"
        }
    })
    .to_string()
}
