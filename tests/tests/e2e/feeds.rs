//! Blocklist feeds end to end, against a real hub: bans reported by a host's fail2ban action (direct
//! callbacks) appear in a feed while in force — a short ban drops out when its ban time is over, an
//! unbanned address at once, another jail never, the hub's own address is split out of a network —
//! and each format loads in its real consumer inside a network namespace the test creates
//! (`unshare -n`: `nft -f`, `ipset restore`; the plain list read as a URL-table alias reads it).
//! `ETag`/`If-None-Match` gives 304s; a feed token reads its feed and nothing else (401 without or
//! with a bad or revoked token, 403 for another feed or any API route, 404 for an unknown feed);
//! bad feeds are refused naming the field, and change nothing. A feed naming sharing policies lists
//! the shared bans those policies recorded on its servers and nothing else (real hosts A and B, a
//! ban in A's fail2ban shared into B's).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::process::Command;
use std::time::Duration;

use banhub_tests::hub::HubProcess;
use banhub_tests::hub::{api_get as get, api_post as post, send_json as send};
use banhub_tests::wait::wait_for_async;
use reqwest::StatusCode;
use reqwest::header::{AUTHORIZATION, ETAG, IF_NONE_MATCH, WWW_AUTHENTICATE};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(30);
/// The hub's public address: one of its own, which no feed may list.
const HUB_ADDRESS: &str = "203.0.113.9";
const SECRET: &str = "feeds-test-callback-secret-0123456789abcdef";
const TOOLS_SCRIPT: &str = ".ci/deps.d/70-firewall-tools.sh";

/// The firewall tools the feeds are loaded into; a missing one fails the test.
fn require_tools() {
    for tool in ["nft", "ipset", "unshare"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(found, "`{tool}` is missing: run {TOOLS_SCRIPT}");
    }
    // A network namespace of one's own needs root here.
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "the feed consumers run in a network namespace of their own (`unshare -n`), which needs root"
    );
}

/// Runs `script` in a fresh network namespace; its output, or the failure with its stderr.
fn in_namespace(script: &str) -> String {
    let out = Command::new("unshare")
        .args(["-n", "sh", "-c", script])
        .output()
        .expect("unshare");
    assert!(
        out.status.success(),
        "`{script}` failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// fail2ban's action on the host reporting a ban (or an unban) with its ban time.
async fn report(hub: &HubProcess, kind: &str, ip: &str, jail: &str, duration: i64) {
    let now = chrono::Utc::now().timestamp();
    let (status, body) = send(
        hub.anonymous_client()
            .expect("client")
            .post(hub.url(&format!("/api/{kind}")))
            .header("X-Callback-Secret", SECRET)
            .json(
                &json!({"ip": ip, "jail": jail, "hostname": "edge-1", "failures": 5,
                          "banTime": now, "banDuration": duration}),
            ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{kind} {ip}: {body}");
}

/// The plain list read strictly, the way a URL-table alias reads it: `#` starts a comment, every
/// other non-empty line is one address or one network without host bits.
fn read_url_table(text: &str) -> BTreeSet<String> {
    let mut entries = BTreeSet::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (addr, prefix) = match line.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (line, None),
        };
        let ip: IpAddr = addr
            .parse()
            .unwrap_or_else(|_| panic!("not an address: {line:?}"));
        let bits: u32 = if ip.is_ipv4() { 32 } else { 128 };
        if let Some(prefix) = prefix {
            let prefix: u32 = prefix
                .parse()
                .unwrap_or_else(|_| panic!("not a prefix: {line:?}"));
            assert!(
                (1..=bits).contains(&prefix),
                "prefix out of range: {line:?}"
            );
            let value = match ip {
                IpAddr::V4(v4) => u128::from(u32::from(v4)),
                IpAddr::V6(v6) => u128::from(v6),
            };
            let host_bits = bits - prefix;
            let host_mask = if host_bits == 0 {
                0
            } else {
                (1u128 << host_bits) - 1
            };
            assert_eq!(value & host_mask, 0, "host bits set: {line:?}");
        }
        assert!(entries.insert(line.to_owned()), "listed twice: {line:?}");
    }
    entries
}

/// `GET /feeds/{file}` with `token` as a bearer; the status, `ETag` and body.
async fn fetch(
    hub: &HubProcess,
    file: &str,
    token: Option<&str>,
    etag: Option<&str>,
) -> (StatusCode, Option<String>, String) {
    let mut request = hub
        .anonymous_client()
        .expect("client")
        .get(hub.url(&format!("/feeds/{file}")));
    if let Some(token) = token {
        request = request.header(AUTHORIZATION, format!("Bearer {token}"));
    }
    if let Some(etag) = etag {
        request = request.header(IF_NONE_MATCH, etag);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let tag = response
        .headers()
        .get(ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    (status, tag, response.text().await.expect("body"))
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

async fn create_feed(hub: &HubProcess, body: Value) -> Value {
    let (status, feed) = post(hub, "/api/feeds", body).await;
    assert_eq!(status, StatusCode::CREATED, "{feed}");
    feed
}

async fn create_token(hub: &HubProcess, feed: &str, name: &str) -> String {
    let (status, created) = post(
        hub,
        &format!("/api/feeds/{feed}/tokens"),
        json!({"name": name}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created["token"].as_str().expect("token").to_owned()
}

#[tokio::test]
async fn feeds_list_the_bans_in_force_and_load_in_their_real_consumers() {
    require_tools();
    let hub = HubProcess::builder()
        .env(
            "BANHUB_AUTH__PUBLIC_URL",
            format!("http://{HUB_ADDRESS}:8080"),
        )
        .start()
        .expect("hub starts");
    let server = reporting_server(&hub).await;

    let edge = create_feed(
        &hub,
        json!({"name": "edge", "allServers": true, "jails": ["ssh*"], "defaultFormat": "nft"}),
    )
    .await;
    assert_eq!(edge["paths"]["ipset"], "/feeds/edge.ipset", "{edge}");
    create_feed(
        &hub,
        json!({"name": "merged", "serverIds": [server], "aggregate": true, "maxAgeSecs": 3600}),
    )
    .await;
    let edge_token = create_token(&hub, "edge", "pfsense-1").await;
    let merged_token = create_token(&hub, "merged", "mikrotik-1").await;

    // Bans in force, a network, IPv6 (permanent), a short ban, one unbanned, one in another
    // jail, and a network around the hub's own address.
    for (ip, jail, duration) in [
        ("192.0.2.10", "sshd", 3600),
        ("192.0.2.11", "sshd", 3600),
        ("198.51.100.0/24", "sshd", 3600),
        ("2001:db8::7", "sshd", -1),
        ("192.0.2.20", "sshd", 8),
        ("192.0.2.40", "sshd", 3600),
        ("192.0.2.30", "nginx", 3600),
        ("203.0.113.8/30", "sshd", 3600),
    ] {
        report(&hub, "ban", ip, jail, duration).await;
    }
    report(&hub, "unban", "192.0.2.40", "sshd", 3600).await;

    let in_force = set(&[
        "192.0.2.10",
        "192.0.2.11",
        "198.51.100.0/24",
        "2001:db8::7",
        "203.0.113.8",
        "203.0.113.10/31",
    ]);
    let mut with_short = in_force.clone();
    with_short.insert("192.0.2.20".to_owned());
    let token = edge_token.as_str();
    let hub_ref = &hub;
    let listed = |want: BTreeSet<String>| async move {
        let (status, _, body) = fetch(hub_ref, "edge.txt", Some(token), None).await;
        (status == StatusCode::OK && read_url_table(&body) == want).then_some(body)
    };
    wait_for_async(DEADLINE, "the feed to list the bans in force", || {
        listed(with_short.clone())
    })
    .await
    .expect("listed");
    // The short ban drops out when its ban time is over.
    let text = wait_for_async(DEADLINE, "the short ban to drop out", || {
        listed(in_force.clone())
    })
    .await
    .expect("expired");
    assert!(text.starts_with("# banhub feed edge"), "{text}");

    // The aggregated feed merges neighbours and lists every jail.
    let (status, _, merged) = fetch(&hub, "merged.txt", Some(&merged_token), None).await;
    assert_eq!(status, StatusCode::OK, "{merged}");
    assert_eq!(
        read_url_table(&merged),
        set(&[
            "192.0.2.10/31",
            "192.0.2.30",
            "198.51.100.0/24",
            "2001:db8::7",
            "203.0.113.8",
            "203.0.113.10/31",
        ])
    );

    // nftables loads the file (twice: it replaces what it loaded before).
    let dir = tempfile::tempdir().expect("temp dir");
    let nft = dir.path().join("edge.nft");
    let (status, _, body) = fetch(&hub, "edge.nft", Some(token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    std::fs::write(&nft, &body).expect("write");
    let listed = in_namespace(&format!(
        "nft -f {f} && nft -f {f} && nft list set inet banhub bh_edge_v4 && nft list set inet banhub bh_edge_v6",
        f = nft.display()
    ));
    for element in [
        "192.0.2.10 timeout",
        "198.51.100.0/24 timeout",
        "203.0.113.8 timeout",
        "203.0.113.10/31 timeout",
        "2001:db8::7",
    ] {
        assert!(listed.contains(element), "nft lacks {element}: {listed}");
    }
    assert!(!listed.contains("203.0.113.9"), "{listed}");
    assert!(!listed.contains("192.0.2.20"), "{listed}");

    // ipset restores the file (twice) and holds exactly the entries.
    let ipset = dir.path().join("edge.ipset");
    let (status, _, body) = fetch(&hub, "edge.ipset", Some(token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    std::fs::write(&ipset, &body).expect("write");
    let listed = in_namespace(&format!(
        "ipset restore < {f} && ipset restore < {f} && ipset list bh-edge-4 && ipset list bh-edge-6 \
         && ipset test bh-edge-4 192.0.2.10 && ipset test bh-edge-4 198.51.100.77 \
         && ! ipset test bh-edge-4 203.0.113.9 2>/dev/null && ! ipset test bh-edge-4 192.0.2.30 2>/dev/null",
        f = ipset.display()
    ));
    assert!(listed.contains("Number of entries: 5"), "{listed}");
    assert!(listed.contains("2001:db8::7"), "{listed}");
    check_routeros(&hub, token).await;

    check_etags(&hub, token).await;
    check_token_scope(&hub, token, &merged_token).await;
    check_bad_feeds(&hub).await;

    // A revoked token reads nothing any more; the list shows its last use.
    let (status, tokens) = get(&hub, "/api/feeds/edge/tokens").await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    let first = &tokens[0];
    assert!(first["lastUsedAt"].is_string(), "{tokens}");
    assert!(first.get("token").is_none() && first.get("secretHash").is_none());
    let id = first["id"].as_str().expect("id");
    let (status, _) = send(
        hub.client()
            .delete(hub.url(&format!("/api/feeds/edge/tokens/{id}"))),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        fetch(&hub, "edge.txt", Some(token), None).await.0,
        StatusCode::UNAUTHORIZED
    );

    // Creating, changing and deleting feeds is audited.
    let (status, audit) = get(&hub, "/api/audit?limit=200").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "POST /api/feeds",
        "POST /api/feeds/{name}/tokens",
        "DELETE /api/feeds/{name}/tokens/{id}",
    ] {
        assert!(
            actions.contains(&action),
            "{action} not audited: {actions:?}"
        );
    }
}

/// The RouterOS script: one `add` per entry with the time left, under the right menu.
async fn check_routeros(hub: &HubProcess, token: &str) {
    let (status, _, body) = fetch(hub, "edge.rsc", Some(token), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let lines: Vec<&str> = body.lines().collect();
    assert!(lines.contains(&"/ip firewall address-list"), "{body}");
    assert!(lines.contains(&"/ipv6 firewall address-list"), "{body}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("add list=\"banhub-edge\" address=192.0.2.10 timeout=00:")),
        "{body}"
    );
    assert!(
        lines.contains(&"add list=\"banhub-edge\" address=2001:db8::7"),
        "{body}"
    );
}

/// The same copy revalidates with a 304 and no body; another tag gets the file.
async fn check_etags(hub: &HubProcess, token: &str) {
    let (status, etag, _) = fetch(hub, "edge.txt", Some(token), None).await;
    assert_eq!(status, StatusCode::OK);
    let etag = etag.expect("an ETag");
    let (status, again, body) = fetch(hub, "edge.txt", Some(token), Some(&etag)).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert_eq!(again.as_deref(), Some(etag.as_str()));
    assert!(body.is_empty());
    let (status, _, body) = fetch(hub, "edge.txt", Some(token), Some("\"stale\"")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!body.is_empty());
    // Each format has its own tag.
    let (_, nft_tag, _) = fetch(hub, "edge.nft", Some(token), None).await;
    assert_ne!(nft_tag.as_deref(), Some(etag.as_str()));
    // The token also works as a query parameter (URL-table aliases send no headers).
    let response = hub
        .anonymous_client()
        .expect("client")
        .get(hub.url(&format!("/feeds/edge.txt?token={token}")))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/plain; charset=utf-8")
    );
}

/// A feed token reads its own feed and nothing else.
async fn check_token_scope(hub: &HubProcess, token: &str, other_token: &str) {
    let (status, _, body) = fetch(hub, "edge.txt", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let response = hub
        .anonymous_client()
        .expect("client")
        .get(hub.url("/feeds/edge.txt"))
        .send()
        .await
        .expect("request");
    assert!(response.headers().contains_key(WWW_AUTHENTICATE));
    for bad in [
        "bhf_0123_wrong",
        "bhf_nothing",
        "not-a-token",
        &format!("{token}x"),
    ] {
        let (status, _, body) = fetch(hub, "edge.txt", Some(bad), None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bad}: {body}");
    }
    // Another feed's token, another feed, an API route.
    let (status, _, body) = fetch(hub, "edge.txt", Some(other_token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let (status, _, body) = fetch(hub, "merged.txt", Some(token), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    for path in ["/api/servers", "/api/feeds", "/api/feeds/edge/tokens"] {
        let (status, body) = send(
            hub.anonymous_client()
                .expect("client")
                .get(hub.url(path))
                .header(AUTHORIZATION, format!("Bearer {token}")),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{path}: {body}");
    }
    let (status, body) = send(
        hub.anonymous_client()
            .expect("client")
            .post(hub.url("/api/feeds"))
            .header(AUTHORIZATION, format!("Bearer {token}"))
            .json(&json!({"name": "sneaky", "allServers": true})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    // An unknown feed or format is 404 for a valid token.
    for file in ["nothing.txt", "edge.csv", "edge"] {
        let (status, _, body) = fetch(hub, file, Some(token), None).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{file}: {body}");
    }
    assert_eq!(
        get(hub, "/api/feeds/nothing").await.0,
        StatusCode::NOT_FOUND
    );
}

/// Bad feeds are refused naming the field and stored nowhere.
async fn check_bad_feeds(hub: &HubProcess) {
    for (body, field) in [
        (json!({"name": "bad name", "allServers": true}), "name"),
        (json!({"name": "dotted.name", "allServers": true}), "name"),
        (json!({"name": "x".repeat(25), "allServers": true}), "name"),
        (json!({"name": "nosel"}), "allServers"),
        (
            json!({"name": "both", "allServers": true, "labels": {"env": "prod"}}),
            "allServers",
        ),
        (json!({"name": "ids", "serverIds": ["nope"]}), "serverIds"),
        (
            json!({"name": "jails", "allServers": true, "jails": ["a b"]}),
            "jails",
        ),
        (
            json!({"name": "bans", "allServers": true, "minBans": 0}),
            "minBans",
        ),
        (
            json!({"name": "srv", "allServers": true, "minServers": 0}),
            "minServers",
        ),
        (
            json!({"name": "age", "allServers": true, "maxAgeSecs": 5}),
            "maxAgeSecs",
        ),
        (
            json!({"name": "fmt", "allServers": true, "defaultFormat": "csv"}),
            "defaultFormat",
        ),
        (
            json!({"name": "pol", "allServers": true, "policies": ["x"]}),
            "policies",
        ),
    ] {
        let (status, problem) = post(hub, "/api/feeds", body.clone()).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {problem}"
        );
        assert_eq!(problem["field"], field, "{body}: {problem}");
    }
    let (status, problem) = post(
        hub,
        "/api/feeds",
        json!({"name": "edge", "allServers": true}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let (status, problem) = send(
        hub.client()
            .put(hub.url("/api/feeds/edge"))
            .json(&json!({"name": "edge", "allServers": true, "minBans": 0})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    let (status, feeds) = get(hub, "/api/feeds").await;
    assert_eq!(status, StatusCode::OK, "{feeds}");
    let names: Vec<&str> = feeds
        .as_array()
        .expect("feeds")
        .iter()
        .filter_map(|f| f["name"].as_str())
        .collect();
    assert_eq!(names, ["edge", "merged"]);
    let (_, edge) = get(hub, "/api/feeds/edge").await;
    assert_eq!(edge["minBans"], 1, "{edge}");
    let (status, problem) = post(hub, "/api/feeds/edge/tokens", json!({"name": ""})).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "name");
}

/// A server reporting through direct callbacks with [`SECRET`]; its id.
async fn reporting_server(hub: &HubProcess) -> String {
    let (status, created) = post(hub, "/api/servers", json!({"name": "edge-1"})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let server = created["server"]["id"].as_str().expect("id").to_owned();
    let (status, body) = post(
        hub,
        &format!("/api/servers/{server}/callback-secret"),
        json!({"secret": SECRET}),
    )
    .await;
    assert!(status.is_success(), "{body}");
    server
}

/// Waits until `file` read with `token` from `hub` lists exactly `want`.
async fn wait_listed(hub: &HubProcess, file: &str, token: &str, want: &[&str]) {
    let want = set(want);
    wait_for_async(DEADLINE, &format!("{file} to list {want:?}"), || async {
        let (status, _, body) = fetch(hub, file, Some(token), None).await;
        (status == StatusCode::OK && read_url_table(&body) == want).then_some(())
    })
    .await
    .expect("listed");
}

/// A feed renamed keeps its tokens, a rename onto a taken name is 409, a deleted feed takes its
/// tokens with it.
async fn lifecycle(hub: &HubProcess) {
    create_feed(hub, json!({"name": "first", "allServers": true})).await;
    create_feed(hub, json!({"name": "taken", "allServers": true})).await;
    let token = create_token(hub, "first", "fw").await;
    report(hub, "ban", "192.0.2.77", "sshd", 3600).await;
    wait_listed(hub, "first.txt", &token, &["192.0.2.77"]).await;
    let (status, problem) = send(
        hub.client()
            .put(hub.url("/api/feeds/first"))
            .json(&json!({"name": "taken", "allServers": true})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{problem}");
    let (status, changed) = send(
        hub.client()
            .put(hub.url("/api/feeds/first"))
            .json(&json!({"name": "second", "labels": {"env": "prod"}, "minServers": 2})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["labels"]["env"], "prod");
    assert_eq!(changed["minServers"], 2);
    assert_eq!(changed["allServers"], false);
    assert_eq!(get(hub, "/api/feeds/first").await.0, StatusCode::NOT_FOUND);
    // The token follows its feed under the new name, which no longer selects the server.
    wait_listed(hub, "second.txt", &token, &[]).await;
    let (status, preview) = get(hub, "/api/feeds/second/preview?format=ipset&lines=2").await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(
        preview["lines"].as_array().map(Vec::len),
        Some(2),
        "{preview}"
    );
    assert_eq!(preview["format"], "ipset");
    let (status, _) = send(hub.client().delete(hub.url("/api/feeds/second"))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(get(hub, "/api/feeds/second").await.0, StatusCode::NOT_FOUND);
    // Its tokens went with it.
    assert_eq!(
        fetch(hub, "second.txt", Some(&token), None).await.0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn a_feed_is_renamed_changed_and_deleted() {
    let hub = HubProcess::start().expect("hub starts");
    reporting_server(&hub).await;
    lifecycle(&hub).await;
}

/// Two replicas on one PostgreSQL database: a ban reported to one is listed by the feed on both,
/// each rendering it from the shared events; the feed's token works on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_postgresql_serve_the_same_feed() {
    let postgres = banhub_tests::PostgresServer::start()
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_feeds")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    let ca = tempfile::tempdir().expect("ca dir");
    let replica = |id: &str| {
        HubProcess::builder()
            .database_url(&url)
            .ca_dir(ca.path())
            .env("BANHUB_CLUSTER__REPLICA_ID", id)
            .start()
            .expect("hub starts")
    };
    let a = replica("a");
    let b = replica("b");
    reporting_server(&a).await;
    create_feed(&a, json!({"name": "shared", "allServers": true})).await;
    let token = create_token(&a, "shared", "fw").await;
    report(&b, "ban", "198.51.100.5", "sshd", 3600).await;
    report(&a, "ban", "2001:db8::5", "sshd", 3600).await;
    for hub in [&a, &b] {
        wait_listed(hub, "shared.txt", &token, &["198.51.100.5", "2001:db8::5"]).await;
    }
    report(&a, "unban", "198.51.100.5", "sshd", 3600).await;
    for hub in [&a, &b] {
        wait_listed(hub, "shared.txt", &token, &["2001:db8::5"]).await;
    }
    report(&b, "unban", "2001:db8::5", "sshd", 3600).await;
    for hub in [&a, &b] {
        wait_listed(hub, "shared.txt", &token, &[]).await;
    }
    let (status, _) = send(a.client().delete(a.url("/api/feeds/shared"))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    lifecycle(&b).await;
}

/// With real hosts A and B: policy P shares A's `testauth` bans, policy Q its `dummyjail` bans, both
/// to B. A feed on P lists P's shared ban and not Q's (nor A's own bans), a feed on Q the other way
/// round, and a feed on P that selects only A lists nothing (P shared to B, not to A).
#[tokio::test]
async fn a_feed_of_a_policy_lists_the_shared_bans_of_that_policy() {
    let fleet = banhub_tests::TestFleet::with_action_installed(
        banhub_tests::TestFleet::hub_builder(),
        &["a", "b"],
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    let hub = &fleet.hub;
    let policy = |name: &str, jail: &str| {
        json!({"name": name, "sources": {"all": true}, "jails": [jail], "targets": {"all": true},
               "duration": {"mode": "fixed", "seconds": 3600}})
    };
    let (status, p) = post(hub, "/api/sharing/policies", policy("p", "testauth")).await;
    assert_eq!(status, StatusCode::CREATED, "{p}");
    let (status, q) = post(hub, "/api/sharing/policies", policy("q", "dummy*")).await;
    assert_eq!(status, StatusCode::CREATED, "{q}");
    let a = fleet.host(0);
    create_feed(
        hub,
        json!({"name": "by-p", "allServers": true, "policies": [p["id"]]}),
    )
    .await;
    create_feed(
        hub,
        json!({"name": "by-q", "allServers": true, "policies": [q["id"]]}),
    )
    .await;
    create_feed(
        hub,
        json!({"name": "p-on-a", "serverIds": [a.id], "policies": [p["id"]]}),
    )
    .await;
    let by_p = create_token(hub, "by-p", "fw").await;
    let by_q = create_token(hub, "by-q", "fw").await;
    let p_on_a = create_token(hub, "p-on-a", "fw").await;

    a.sandbox
        .client(&["set", "testauth", "banip", "203.0.113.70"])
        .expect("a bans in testauth");
    a.sandbox
        .client(&["set", "dummyjail", "banip", "203.0.113.71"])
        .expect("a bans in dummyjail");
    wait_listed(hub, "by-p.txt", &by_p, &["203.0.113.70"]).await;
    wait_listed(hub, "by-q.txt", &by_q, &["203.0.113.71"]).await;
    // Every feed is rendered from the same shared bans at once, so this one has seen P's too.
    let (status, _, body) = fetch(hub, "p-on-a.txt", Some(&p_on_a), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(read_url_table(&body), set(&[]), "{body}");
}
