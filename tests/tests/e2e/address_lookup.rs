//! The address page's data end to end: an in-process hub, ban events from two servers' direct
//! callbacks, real MaxMind country and ASN databases written by the test, and the outside services
//! (RDAP's bootstrap and registry, AbuseIPDB) served by `LookupServer` in their real formats. Checks
//! where the address is banned now, its country and ASN, the RDAP and AbuseIPDB answers, the cache
//! (a second lookup asks nothing), the per-minute limit (429 with `Retry-After`), the time bound
//! (a stalled service is a 504 within it), that an address outside the public internet is never
//! sent anywhere, and that a registry's redirect is followed only to where the first request could
//! go (a redirect to a loopback or private address is refused, with nothing sent there).

use std::time::{Duration, Instant};

use banhub_tests::TestHub;
use banhub_tests::lookup_server::{
    ABUSEIPDB_KEY, LookupServer, PUBLIC_V4, PUBLIC_V6, REDIRECT_LOOP, REDIRECT_LOOPBACK,
    REDIRECT_PRIVATE, REDIRECT_SAME,
};
use banhub_tests::mmdb::{AsnNetwork, CountryNetwork, write_asn_db, write_country_db};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// Replaces the `lookups` section (and, when given, the `geoip` one) of the hub's settings.
async fn configure(hub: &TestHub, lookups: Value, geoip: Option<Value>) -> (StatusCode, Value) {
    let (status, mut doc) = hub.get("/api/settings").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    doc["lookups"] = lookups;
    if let Some(geoip) = geoip {
        doc["geoip"] = geoip;
    }
    hub.post("/api/settings", doc).await
}

/// A server with a callback secret, for direct callbacks.
async fn server_with_secret(hub: &TestHub, name: &str) -> (String, String) {
    let (status, created) = hub.post("/api/servers", json!({"name": name})).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["server"]["id"].as_str().expect("id").to_owned();
    let (status, secret) = hub
        .post(&format!("/api/servers/{id}/callback-secret"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{secret}");
    (id, secret["secret"].as_str().expect("secret").to_owned())
}

/// A direct ban (or unban) callback of a host without an agent.
async fn callback(hub: &TestHub, secret: &str, kind: &str, ip: &str, bantime: i64) {
    let status = reqwest::Client::new()
        .post(hub.url(&format!("/api/{kind}")))
        .header("X-Callback-Secret", secret)
        .json(
            &json!({"ip": ip, "jail": "sshd", "hostname": "edge", "failures": 5,
                      "logs": [format!("Failed password for root from {ip} port 22 ssh2")],
                      "bantime": bantime}),
        )
        .send()
        .await
        .expect("callback")
        .status();
    assert_eq!(status, StatusCode::OK, "{kind} {ip}");
}

#[tokio::test]
async fn the_address_page_shows_bans_now_country_asn_rdap_and_abuseipdb() {
    let hub = TestHub::start().await;
    let outside = LookupServer::start().await.expect("lookup server");
    let dir = tempfile::tempdir().expect("tempdir");
    let country = dir.path().join("GeoLite2-Country.mmdb");
    let asn = dir.path().join("GeoLite2-ASN.mmdb");
    write_country_db(
        &country,
        &[
            CountryNetwork::new("8.8.8.0/24", "US", "United States"),
            CountryNetwork::new("2a00:1450::/29", "IE", "Ireland"),
        ],
    )
    .expect("country database");
    write_asn_db(
        &asn,
        &[
            AsnNetwork::new("8.8.8.0/24", 15169, "GOOGLE"),
            AsnNetwork::new("2a00:1450::/29", 15169, "GOOGLE"),
        ],
    )
    .expect("ASN database");

    // A country database where the ASN one belongs is refused on its field, and nothing changes.
    let (status, refused) = configure(
        &hub,
        outside.settings(),
        Some(json!({"databasePath": country, "asnDatabasePath": country})),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(refused["field"], "geoip.asnDatabasePath", "{refused}");
    assert_eq!(
        hub.get("/api/settings").await.1["lookups"]["abuseipdbKeySet"],
        false
    );

    let (status, saved) = configure(
        &hub,
        outside.settings(),
        Some(json!({"databasePath": country, "asnDatabasePath": asn})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{saved}");
    // The key is stored, said to be set and never shown.
    let (_, read) = hub.get("/api/settings").await;
    assert_eq!(read["lookups"]["abuseipdbKeySet"], true, "{read}");
    assert!(
        !read.to_string().contains(ABUSEIPDB_KEY),
        "the key leaked: {read}"
    );

    // Banned on edge-a for an hour; banned then unbanned on edge-b.
    let (a, secret_a) = server_with_secret(&hub, "edge-a").await;
    let (_b, secret_b) = server_with_secret(&hub, "edge-b").await;
    callback(&hub, &secret_a, "ban", PUBLIC_V4, 3600).await;
    callback(&hub, &secret_b, "ban", PUBLIC_V4, 3600).await;
    callback(&hub, &secret_b, "unban", PUBLIC_V4, 3600).await;

    let (status, view) = hub.get(&format!("/api/addresses/{PUBLIC_V4}")).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["scope"], "public");
    assert_eq!(view["country"], "US");
    assert_eq!(
        view["asn"],
        json!({"number": 15169, "organization": "GOOGLE"})
    );
    assert_eq!(view["lookups"], json!({"rdap": true, "abuseipdb": true}));
    let now = view["bannedNow"].as_array().expect("bannedNow");
    assert_eq!(now.len(), 1, "banned on edge-a only: {view}");
    assert_eq!(now[0]["serverId"], a.as_str());
    assert_eq!(now[0]["serverName"], "edge-a");
    assert_eq!(now[0]["jail"], "sshd");
    assert_eq!(now[0]["shared"], false);
    assert!(
        now[0]["until"].is_string(),
        "an hour's ban has an end: {view}"
    );
    assert_eq!(view["servers"].as_array().map(Vec::len), Some(2), "{view}");
    // Loading the page asked no outside service.
    assert!(outside.requests().is_empty(), "{:?}", outside.requests());

    // RDAP: the bootstrap file, then the registry; the answer as the page shows it.
    let (status, rdap) = hub.get(&format!("/api/addresses/{PUBLIC_V4}/rdap")).await;
    assert_eq!(status, StatusCode::OK, "{rdap}");
    assert_eq!(rdap["status"], "found");
    assert_eq!(rdap["cached"], false);
    let network = &rdap["network"];
    assert_eq!(network["name"], "GOGL");
    assert_eq!(network["handle"], "NET-8-8-8-0-2");
    assert_eq!(network["cidrs"], json!(["8.8.8.0/24"]));
    assert_eq!(network["abuseEmail"], "network-abuse@google.com");
    assert_eq!(network["entities"][0]["name"], "Google LLC");
    assert_eq!(network["events"][1]["action"], "registration");
    assert_eq!(outside.count("/bootstrap/ipv4.json"), 1);
    assert_eq!(outside.count("/rdap/ip/8.8.8.8"), 1);
    // The second lookup is answered from the cache: no request leaves the hub.
    let (status, again) = hub.get(&format!("/api/addresses/{PUBLIC_V4}/rdap")).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["cached"], true);
    assert_eq!(again["network"], rdap["network"]);
    assert_eq!(outside.requests().len(), 2, "{:?}", outside.requests());

    // IPv6 through its own bootstrap file; a RIPE-shaped answer without cidr0.
    let (status, v6) = hub.get(&format!("/api/addresses/{PUBLIC_V6}/rdap")).await;
    assert_eq!(status, StatusCode::OK, "{v6}");
    assert_eq!(v6["network"]["cidrs"], json!(["2a00:1450::/29"]), "{v6}");
    assert_eq!(v6["network"]["country"], "IE");
    // A public address no registry holds.
    let (status, unknown) = hub.get("/api/addresses/9.9.9.9/rdap").await;
    assert_eq!(status, StatusCode::OK, "{unknown}");
    assert_eq!(unknown["status"], "notFound", "{unknown}");

    // AbuseIPDB: the key goes in the `Key` header; the answer's fields; then the cache.
    let (status, abuse) = hub
        .get(&format!("/api/addresses/{PUBLIC_V4}/abuseipdb"))
        .await;
    assert_eq!(status, StatusCode::OK, "{abuse}");
    assert_eq!(abuse["status"], "found");
    let report = &abuse["report"];
    assert_eq!(report["abuseConfidenceScore"], 87);
    assert_eq!(report["totalReports"], 42);
    assert_eq!(report["isp"], "Google LLC");
    assert_eq!(report["usageType"], "Data Center/Web Hosting/Transit");
    let checks: Vec<_> = outside
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/check"))
        .collect();
    assert_eq!(checks.len(), 1, "{checks:?}");
    assert_eq!(checks[0].key.as_deref(), Some(ABUSEIPDB_KEY));
    assert!(checks[0].path.contains("ipAddress=8.8.8.8"), "{checks:?}");
    let (_, again) = hub
        .get(&format!("/api/addresses/{PUBLIC_V4}/abuseipdb"))
        .await;
    assert_eq!(again["cached"], true);
    assert_eq!(outside.count("/check"), 1);

    // Addresses outside the public internet: classified, and nothing is sent anywhere.
    let before = outside.requests().len();
    for (ip, scope) in [
        ("10.1.2.3", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("169.254.1.1", "linkLocal"),
        ("192.0.2.10", "documentation"),
        ("100.64.1.1", "sharedAddressSpace"),
        ("224.0.0.5", "multicast"),
        ("::1", "loopback"),
        ("fe80::1", "linkLocal"),
        ("fd00::1", "uniqueLocal"),
        ("2001:db8::1", "documentation"),
        ("::ffff:10.0.0.1", "private"),
    ] {
        for service in ["rdap", "abuseipdb"] {
            let (status, body) = hub.get(&format!("/api/addresses/{ip}/{service}")).await;
            assert_eq!(status, StatusCode::OK, "{ip} {service}: {body}");
            assert_eq!(body["status"], "notPublic", "{ip} {service}: {body}");
            assert_eq!(body["scope"], scope, "{ip} {service}: {body}");
        }
        let (_, view) = hub.get(&format!("/api/addresses/{ip}")).await;
        assert_eq!(view["scope"], scope, "{ip}: {view}");
        assert_eq!(view["lookups"], json!({"rdap": false, "abuseipdb": false}));
    }
    assert_eq!(outside.requests().len(), before, "{:?}", outside.requests());

    // Not one address: 400, and nothing asked.
    for raw in ["not-an-ip", "8.8.8.0%2F24", "999.1.1.1"] {
        let (status, body) = hub.get(&format!("/api/addresses/{raw}/rdap")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{raw}: {body}");
    }
    assert_eq!(outside.requests().len(), before);
}

#[tokio::test]
async fn lookups_are_limited_per_minute_and_bounded_in_time() {
    let hub = TestHub::start().await;
    let outside = LookupServer::start().await.expect("lookup server");
    let mut lookups = outside.settings();
    lookups["perMinute"] = json!(3);
    lookups["timeoutSecs"] = json!(1);
    // AbuseIPDB's base stalls: it never answers.
    lookups["abuseipdbUrl"] = json!(outside.url("/stall/abuseipdb/"));
    let (status, saved) = configure(&hub, lookups, None).await;
    assert_eq!(status, StatusCode::OK, "{saved}");

    // Three lookups a minute leave the hub; the fourth is refused before any request.
    for ip in [PUBLIC_V4, "8.8.4.4", "1.1.1.1"] {
        let (status, body) = hub.get(&format!("/api/addresses/{ip}/rdap")).await;
        assert_eq!(status, StatusCode::OK, "{ip}: {body}");
    }
    let asked = outside.count("/rdap/ip/");
    assert_eq!(asked, 3);
    let response = hub
        .client()
        .get(hub.url("/api/addresses/1.0.0.1/rdap"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After header");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let problem: Value = response.json().await.expect("problem");
    assert_eq!(problem["code"], "lookup_rate_limited", "{problem}");
    assert_eq!(
        outside.count("/rdap/ip/"),
        asked,
        "the refused lookup asked anyway"
    );
    // What is cached is still answered.
    let (status, cached) = hub.get(&format!("/api/addresses/{PUBLIC_V4}/rdap")).await;
    assert_eq!(status, StatusCode::OK, "{cached}");
    assert_eq!(cached["cached"], true);

    // A service that stalls is a 504 within the bound, not a hung page.
    let started = Instant::now();
    let (status, problem) = hub
        .get(&format!("/api/addresses/{PUBLIC_V4}/abuseipdb"))
        .await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{problem}");
    assert_eq!(problem["code"], "lookup_timeout", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("AbuseIPDB")),
        "{problem}"
    );
    assert!(took < Duration::from_secs(5), "the lookup took {took:?}");
    assert_eq!(outside.count("/stall/abuseipdb/check"), 1);
}

#[tokio::test]
async fn rdap_redirects_are_checked_at_every_hop() {
    let hub = TestHub::start().await;
    let outside = LookupServer::start().await.expect("lookup server");
    let (status, saved) = configure(&hub, outside.settings(), None).await;
    assert_eq!(status, StatusCode::OK, "{saved}");

    // A referral within the configured origin is followed to its answer.
    let (status, same) = hub
        .get(&format!("/api/addresses/{REDIRECT_SAME}/rdap"))
        .await;
    assert_eq!(status, StatusCode::OK, "{same}");
    assert_eq!(same["network"]["handle"], "NET-8-8-8-0-2", "{same}");
    assert_eq!(outside.count(&format!("/rdap/ip/{PUBLIC_V4}")), 1);

    // A referral to this same server under the name `localhost` (loopback, not the configured
    // origin) and one to a private address are refused, saying why; nothing reaches the target.
    for (ip, target) in [
        (REDIRECT_LOOPBACK, "localhost"),
        (REDIRECT_PRIVATE, "10.1.2.3"),
    ] {
        let (status, problem) = hub.get(&format!("/api/addresses/{ip}/rdap")).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{ip}: {problem}");
        assert_eq!(problem["code"], "lookup_refused", "{ip}: {problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(target) && detail.contains("outside the public internet"),
            "{ip}: {problem}"
        );
        assert_eq!(outside.count(&format!("/rdap/ip/{ip}")), 1, "{ip}");
    }
    assert_eq!(outside.count("/trap/"), 0, "{:?}", outside.requests());

    // A registry redirecting to itself is left after a bounded number of hops.
    let (status, problem) = hub
        .get(&format!("/api/addresses/{REDIRECT_LOOP}/rdap"))
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{problem}");
    assert_eq!(problem["code"], "lookup_refused", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("more than 3 redirects")),
        "{problem}"
    );
    assert_eq!(outside.count(&format!("/rdap/ip/{REDIRECT_LOOP}")), 4);
}
