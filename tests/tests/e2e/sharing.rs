//! Sharing policies end to end, with three real fail2ban hosts and their agents (each with the
//! banhub action and the `banhub-shared` jail installed): a ban from a log line on host A is banned
//! in B's fail2ban (its shared jail's banned list and its ban action's `actions.txt`) and in C's
//! once C's agent comes back, while a shared ban that expired meanwhile is not; B's own report of
//! the shared ban is never shared again (no echo) and is shown with its origin; an unban at the
//! origin and "unban everywhere" lift the shared bans; a ban of the hub's own address is recorded
//! skipped and never sent; bad policies are refused with field-named 422s; and with two hub
//! replicas on PostgreSQL each origin ban is shared exactly once per target, even when the replica
//! leading the engine is killed mid-propagation.

use std::time::Duration;

use banhub_tests::client::ServerStatus;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::wait::{wait_for_async, wait_until};
use banhub_tests::{TestFleet, TestHost};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(45);
/// Delivery across replicas, after a replica died: the agents' reconnect backoff and the dead
/// replica's job lease come first, and the whole suite runs beside it.
const FAILOVER_DEADLINE: Duration = Duration::from_secs(120);
const SHARED: &str = "banhub-shared";

/// A hub and the hosts `a`, `b`, `c`, each online with the action and the shared jail installed.
async fn start() -> TestFleet {
    TestFleet::with_action_installed(TestFleet::hub_builder(), &["a", "b", "c"])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn wait_banned(fleet: &TestFleet, host: &TestHost, ip: &str, want: bool) {
    wait_until(
        DEADLINE,
        &format!("{ip} banned={want} in {}'s shared jail", host.name),
        || host.banned(SHARED).contains(ip) == want,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
}

async fn create_policy(fleet: &TestFleet, body: &Value) -> Value {
    let (status, policy) = fleet.api().post("/api/sharing/policies", body).await;
    assert_eq!(status, StatusCode::CREATED, "{policy}");
    policy
}

async fn shared_bans(fleet: &TestFleet, query: &str) -> Vec<Value> {
    let (status, bans) = fleet.api().get(&format!("/api/sharing/bans?{query}")).await;
    assert_eq!(status, StatusCode::OK, "{bans}");
    bans.as_array().cloned().unwrap_or_default()
}

/// Waits until the shared bans of `ip` are, per target name, in the given statuses.
async fn wait_statuses(fleet: &TestFleet, ip: &str, want: &[(&str, &str)]) -> Vec<Value> {
    let mut want: Vec<(String, String)> = want
        .iter()
        .map(|(s, t)| ((*s).to_owned(), (*t).to_owned()))
        .collect();
    want.sort();
    let found = wait_for_async(DEADLINE, "the shared bans' statuses", || {
        let want = want.clone();
        async move {
            let bans = shared_bans(fleet, &format!("ip={ip}")).await;
            let mut seen: Vec<(String, String)> = bans
                .iter()
                .map(|b| {
                    (
                        b["serverName"].as_str().unwrap_or_default().to_owned(),
                        b["status"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect();
            seen.sort();
            (seen == want).then_some(bans)
        }
    })
    .await;
    match found {
        Ok(bans) => bans,
        Err(e) => {
            let now = shared_bans(fleet, &format!("ip={ip}")).await;
            panic!("{e}: want {want:?}, have {now:?}\n{}", fleet.logs())
        }
    }
}

#[tokio::test]
async fn a_ban_on_one_host_is_banned_on_the_others_even_one_that_was_offline() {
    let mut fleet = start().await;
    let policy = create_policy(
        &fleet,
        &json!({"name": "ssh everywhere", "sources": {"all": true}, "jails": ["testauth"],
                "targets": {"all": true}, "duration": {"mode": "fixed", "seconds": 3600},
                "unbanFollowsOrigin": true}),
    )
    .await;
    // A policy with a short time, to see an expired shared ban never reach the offline host.
    create_policy(
        &fleet,
        &json!({"name": "short", "sources": {"all": true}, "jails": ["dummy*"],
                "targets": {"all": true}, "duration": {"mode": "fixed", "seconds": 2}}),
    )
    .await;

    // C goes offline.
    fleet.hosts[2].agent.stop().expect("c's agent stops");
    let c = &fleet.hosts[2];
    fleet.wait_status(c, ServerStatus::Offline).await;

    // Three failures on A: fail2ban bans, the banhub action reports it, the hub shares it.
    let (a, b) = (&fleet.hosts[0], &fleet.hosts[1]);
    a.sandbox
        .append_failures(&a.sandbox.log_path("testauth"), "203.0.113.50", 3)
        .expect("log lines");
    wait_banned(&fleet, b, "203.0.113.50", true);
    let actions = std::fs::read_to_string(b.sandbox.actions_path()).expect("b's actions.txt");
    assert!(
        actions.contains(&format!("ban {SHARED} 203.0.113.50")),
        "b's ban action ran for the shared ban:\n{actions}"
    );
    let bans = wait_statuses(
        &fleet,
        "203.0.113.50",
        &[("b", "delivered"), ("c", "pending")],
    )
    .await;
    for ban in &bans {
        assert_eq!(ban["originServerName"], "a", "{ban}");
        assert_eq!(ban["originJail"], "testauth", "{ban}");
        assert_eq!(ban["policyName"], "ssh everywhere", "{ban}");
        assert!(ban["expiresAt"].is_string(), "{ban}");
    }

    // A ban in the short policy's jail, shared with B and expired before C comes back.
    a.sandbox
        .append_failures(&a.sandbox.log_path("dummyjail"), "203.0.113.51", 3)
        .expect("log lines");
    wait_statuses(
        &fleet,
        "203.0.113.51",
        &[("b", "expired"), ("c", "expired")],
    )
    .await;

    // B reports its shared ban as an event of the shared jail, marked with its origin.
    let b_id = b.id.clone();
    let event = wait_for_async(DEADLINE, "b's shared-jail event", || {
        let api = fleet.api();
        let b_id = b_id.clone();
        async move {
            let (_, page) = api
                .get(&format!(
                    "/api/events/bans?serverId={b_id}&jail={SHARED}&ip=203.0.113.50"
                ))
                .await;
            page["events"].as_array()?.first().cloned()
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(event["shared"]["originServerName"], "a", "{event}");
    assert_eq!(event["shared"]["originJail"], "testauth", "{event}");
    assert_eq!(event["shared"]["policyId"], policy["id"], "{event}");

    // No echo: a later origin ban is shared after B's event was matched (in id order), and B's
    // event shared nothing.
    a.sandbox
        .append_failures(&a.sandbox.log_path("testauth"), "203.0.113.52", 3)
        .expect("log lines");
    wait_statuses(
        &fleet,
        "203.0.113.52",
        &[("b", "delivered"), ("c", "pending")],
    )
    .await;
    let to_a = shared_bans(&fleet, &format!("server={}", a.id)).await;
    assert!(to_a.is_empty(), "nothing is shared back to A: {to_a:?}");
    let all = shared_bans(&fleet, "ip=203.0.113.50").await;
    assert_eq!(all.len(), 2, "B's report shared nothing: {all:?}");

    // C comes back and gets every shared ban still valid, and not the expired one.
    fleet.hosts[2].agent.restart().expect("c's agent starts");
    let c = &fleet.hosts[2];
    fleet.wait_status(c, ServerStatus::Online).await;
    wait_banned(&fleet, c, "203.0.113.50", true);
    wait_banned(&fleet, c, "203.0.113.52", true);
    assert!(
        !c.banned(SHARED).contains("203.0.113.51"),
        "the expired shared ban came in the same full set"
    );
    wait_statuses(
        &fleet,
        "203.0.113.50",
        &[("b", "delivered"), ("c", "delivered")],
    )
    .await;

    // The address page says why it is banned where.
    let (status, page) = fleet.api().get("/api/addresses/203.0.113.50").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let servers = page["servers"].as_array().expect("servers");
    let on = |name: &str| {
        servers
            .iter()
            .find(|s| s["serverName"] == name)
            .unwrap_or_else(|| panic!("no {name} in {page}"))
    };
    assert!(
        on("a")["events"].as_array().is_some_and(|e| e
            .iter()
            .any(|e| e["jail"] == "testauth" && e["kind"] == "ban")),
        "{page}"
    );
    assert_eq!(on("b")["sharedBans"][0]["originServerName"], "a", "{page}");
    assert_eq!(
        on("c")["sharedBans"][0]["policyName"],
        "ssh everywhere",
        "{page}"
    );

    // The policy's counters.
    let (_, listed) = fleet.api().get("/api/sharing/policies").await;
    let counted = listed
        .as_array()
        .and_then(|l| l.iter().find(|p| p["id"] == policy["id"]))
        .cloned()
        .unwrap_or_default();
    assert_eq!(counted["counters"]["sharedTotal"], 4, "{counted}");
    assert_eq!(counted["counters"]["active"], 4, "{counted}");
    assert!(counted["counters"]["lastMatchAt"].is_string(), "{counted}");

    // An unban at the origin lifts the shared bans (the policy follows the origin).
    let a = &fleet.hosts[0];
    a.sandbox
        .client(&["set", "testauth", "unbanip", "203.0.113.50"])
        .expect("unban at the origin");
    for host in &fleet.hosts[1..] {
        wait_banned(&fleet, host, "203.0.113.50", false);
    }
    wait_statuses(&fleet, "203.0.113.50", &[("b", "lifted"), ("c", "lifted")]).await;
    let actions = std::fs::read_to_string(fleet.hosts[1].sandbox.actions_path()).expect("actions");
    assert!(
        actions.contains(&format!("unban {SHARED} 203.0.113.50")),
        "{actions}"
    );

    // "Unban everywhere" lifts every shared ban of the address.
    let (status, result) = fleet
        .api()
        .post("/api/bans/unban-everywhere", &json!({"ip": "203.0.113.52"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    for host in &fleet.hosts[1..] {
        wait_banned(&fleet, host, "203.0.113.52", false);
    }
    wait_statuses(&fleet, "203.0.113.52", &[("b", "lifted"), ("c", "lifted")]).await;
}

/// A non-loopback IPv4 address of this machine (one of the hub's own addresses: the hub runs
/// here), from the kernel's table of local addresses as the hub reads it.
fn own_address() -> String {
    let table = std::fs::read_to_string("/proc/net/fib_trie").expect("/proc/net/fib_trie");
    let lines: Vec<&str> = table.lines().collect();
    lines
        .windows(2)
        .filter(|pair| pair[1].trim() == "/32 host LOCAL")
        .filter_map(|pair| pair[0].trim().strip_prefix("|-- "))
        .find(|ip| !ip.starts_with("127."))
        .map(str::to_owned)
        .expect(
            "this machine has a non-loopback IPv4 address (the test bans the hub's own address)",
        )
}

#[tokio::test]
async fn a_ban_of_the_hubs_own_address_is_skipped_and_never_sent() {
    let own = own_address();
    let fleet = start().await;
    create_policy(
        &fleet,
        &json!({"name": "all", "sources": {"all": true}, "targets": {"all": true},
                "duration": {"mode": "origin"}}),
    )
    .await;
    // fail2ban bans an address it would ignore when told to ("User knows best"); the hub must not
    // share it.
    let a = &fleet.hosts[0];
    a.sandbox
        .client(&["set", "testauth", "banip", &own])
        .expect("a bans the hub's address");
    // And an ordinary one after it, to know the engine has passed the first.
    a.sandbox
        .client(&["set", "testauth", "banip", "203.0.113.60"])
        .expect("a bans");
    wait_statuses(
        &fleet,
        "203.0.113.60",
        &[("b", "delivered"), ("c", "delivered")],
    )
    .await;
    let skipped = wait_statuses(&fleet, &own, &[("b", "skipped"), ("c", "skipped")]).await;
    for ban in &skipped {
        let reason = ban["skipReason"].as_str().unwrap_or_default();
        assert!(reason.starts_with("hub_address"), "{ban}");
    }
    for host in &fleet.hosts[1..] {
        assert!(!host.banned(SHARED).contains(&own), "{}", host.name);
    }
    let (_, page) = fleet.api().get(&format!("/api/addresses/{own}")).await;
    assert_eq!(page["skipped"].as_array().map(Vec::len), Some(2), "{page}");
}

#[tokio::test]
async fn bad_policies_are_refused_with_the_field_named_and_change_nothing() {
    let hub = TestFleet::hub_builder().start().expect("hub starts");
    let fleet = TestFleet::on(hub);
    let valid = json!({"name": "p", "sources": {"all": true}, "targets": {"all": true},
                       "duration": {"mode": "origin"}});
    let cases = [
        ("name", json!("")),
        ("sources", json!({})),
        ("targets", json!({"all": true, "labels": {"env": "prod"}})),
        ("jails", json!(["../etc"])),
        ("jails", json!(["banhub-shared"])),
        ("minFailures", json!(0)),
        ("duration", json!({"mode": "fixed", "seconds": 0})),
        ("duration", json!({"mode": "ladder", "steps": []})),
        ("duration", json!({"mode": "sometimes"})),
    ];
    let fields = [
        "name",
        "sources.all",
        "targets.labels",
        "jails[0]",
        "jails[0]",
        "minFailures",
        "duration.seconds",
        "duration.steps",
        "duration.mode",
    ];
    for ((key, value), field) in cases.iter().zip(fields) {
        let mut body = valid.clone();
        body[*key] = value.clone();
        let (status, problem) = fleet.api().post("/api/sharing/policies", &body).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body} → {problem}"
        );
        assert_eq!(problem["field"], field, "{body} → {problem}");
    }
    let (_, listed) = fleet.api().get("/api/sharing/policies").await;
    assert_eq!(listed, json!([]), "nothing was stored");

    // A taken name, an unknown policy, and a viewer's list of shared bans with a bad status.
    create_policy(&fleet, &valid).await;
    let (status, problem) = fleet.api().post("/api/sharing/policies", &valid).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "name");
    let (status, _) = fleet
        .api()
        .put("/api/sharing/policies/no-such-policy", &valid)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = fleet
        .api()
        .delete("/api/sharing/policies/no-such-policy")
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, problem) = fleet.api().get("/api/sharing/bans?status=gone").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "status");
    let (status, problem) = fleet.api().get("/api/addresses/not-an-ip").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    assert_eq!(problem["field"], "ip");
}

/// Two hub replicas on one PostgreSQL behind a balancer, with the hosts `o` (the origin), `t1` and
/// `t2` (targets, with the shared jail installed) spread over them, and a policy that shares every
/// ban of any host with every other for an hour.
struct Replicas {
    // Dropped last: the replicas and agents stop before the database and the balancer.
    hosts: Vec<TestHost>,
    a: banhub_tests::hub::HubProcess,
    b: banhub_tests::hub::HubProcess,
    balancer: banhub_tests::balancer::Balancer,
    _ca: tempfile::TempDir,
    _pg: banhub_tests::postgres::PostgresServer,
}

impl Replicas {
    async fn start(database: &str) -> Self {
        use banhub_tests::balancer::Balancer;
        use banhub_tests::enrolled::EnrolledAgent;
        use banhub_tests::hub::HubProcess;
        use banhub_tests::postgres::PostgresServer;

        let pg = PostgresServer::start().unwrap_or_else(|e| panic!("PostgreSQL: {e:#}"));
        let url = pg
            .create_database(database)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", pg.logs()));
        let ca = tempfile::tempdir().expect("CA directory");
        let balancer = Balancer::start().expect("balancer");
        let replica = |id: &str| {
            HubProcess::builder()
                .database_url(&url)
                .ca_dir(ca.path())
                .env("BANHUB_CLUSTER__REPLICA_ID", id)
                .env("BANHUB_CLUSTER__LEASE_TTL_SECS", "3")
                .env("BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS", "500")
                .arg("--grpc-advertise")
                .arg(balancer.addr().to_string())
                .start()
                .unwrap_or_else(|e| panic!("replica {id} starts: {e:#}"))
        };
        let (a, b) = (replica("a"), replica("b"));
        balancer.set_backends(&[a.grpc_addr(), b.grpc_addr()]);
        let mut hosts = Vec::new();
        for (i, name) in ["o", "t1", "t2"].into_iter().enumerate() {
            let hub = if i % 2 == 0 { &a } else { &b };
            let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
            let EnrolledAgent {
                server_id,
                agent,
                state,
            } = EnrolledAgent::register(&hub.client(), &hub.url(""), name, &sandbox, &[])
                .await
                .expect("agent enrolled and started");
            hosts.push(TestHost {
                name: name.to_owned(),
                id: server_id,
                sandbox,
                agent,
                state,
            });
        }
        let replicas = Self {
            hosts,
            a,
            b,
            balancer,
            _ca: ca,
            _pg: pg,
        };
        wait_until_online(&replicas.a, replicas.hosts.len()).await;
        for host in &replicas.hosts[1..] {
            host.install_action().unwrap_or_else(|e| panic!("{e:#}"));
        }
        let (status, policy) = replicas
            .a
            .api()
            .post(
                "/api/sharing/policies",
                &json!({"name": "all", "sources": {"all": true}, "targets": {"all": true},
                        "duration": {"mode": "fixed", "seconds": 3600}}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{policy}");
        replicas
    }

    fn logs(&self) -> String {
        let mut out = format!("--- a ---\n{}\n--- b ---\n{}", self.a.logs(), self.b.logs());
        for h in &self.hosts {
            out.push_str(&format!("\n--- {} ---\n{}", h.name, h.agent.logs()));
        }
        out
    }

    /// The origin reports a ban of each of `ips` through its relay, as fail2ban's action would,
    /// all at once.
    async fn origin_bans(&self, ips: &[String]) {
        use banhub_tests::agent::{relay_addr, relay_secret};

        let origin = &self.hosts[0];
        let relay = relay_addr(&origin.state_dir()).expect("relay address");
        let secret = relay_secret(&origin.state_dir()).expect("relay secret");
        let client = reqwest::Client::new();
        let sent = ips.iter().map(|ip| {
            let (client, secret) = (&client, &secret);
            async move {
                client
                    .post(format!("http://{relay}/api/ban"))
                    .header("X-Callback-Secret", secret)
                    .json(&json!({"serverId": "ignored", "ip": ip, "jail": "testauth",
                                  "hostname": "o", "failures": 3,
                                  "logs": [format!("Failed login for root from {ip}")]}))
                    .send()
                    .await
            }
        });
        for response in futures::future::join_all(sent).await {
            let response = response.expect("relay answers");
            assert_eq!(response.status(), StatusCode::OK);
        }
    }

    /// Waits until `hub` lists one delivered shared ban per address of `ips` and target, and no
    /// other, and returns them.
    async fn wait_delivered_once(
        &self,
        hub: &banhub_tests::hub::HubProcess,
        ips: &[String],
    ) -> Vec<Value> {
        let targets = &self.hosts[1..];
        let delivered = wait_for_async(FAILOVER_DEADLINE, "every shared ban delivered", || async {
            let (_, bans) = hub.api().get("/api/sharing/bans?limit=1000").await;
            let bans = bans.as_array()?.clone();
            (bans.len() >= targets.len() * ips.len()
                && bans.iter().all(|x| x["status"] == "delivered"))
            .then_some(bans)
        })
        .await;
        let delivered = match delivered {
            Ok(bans) => bans,
            Err(e) => {
                let (_, bans) = hub.api().get("/api/sharing/bans?limit=1000").await;
                let statuses: Vec<String> = bans
                    .as_array()
                    .map(|all| {
                        all.iter()
                            .map(|x| format!("{} {} {}", x["ip"], x["serverId"], x["status"]))
                            .collect()
                    })
                    .unwrap_or_default();
                panic!("{e}\nshared bans: {statuses:#?}\n{}", self.logs())
            }
        };
        let mut pairs: Vec<(String, String)> = delivered
            .iter()
            .map(|x| {
                (
                    x["ip"].as_str().unwrap_or_default().to_owned(),
                    x["serverId"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        pairs.sort();
        let mut want: Vec<(String, String)> = ips
            .iter()
            .flat_map(|ip| targets.iter().map(|t| (ip.clone(), t.id.clone())))
            .collect();
        want.sort();
        assert_eq!(pairs, want, "one shared ban per origin ban and target");
        delivered
    }

    /// Waits until every target's `banhub-shared` jail bans every address of `ips`. A sync answers
    /// within the agent's budget and its loop bans the rest, so a delivered ban reaches
    /// fail2ban's list soon after, not necessarily before.
    fn wait_enforced(&self, ips: &[String]) {
        for host in &self.hosts[1..] {
            let held = wait_until(
                DEADLINE,
                &format!("{} holds every shared ban", host.name),
                || {
                    let held = host.banned(SHARED);
                    ips.iter().all(|ip| held.contains(ip.as_str()))
                },
            );
            held.unwrap_or_else(|e| panic!("{e}: {}\n{}", host.banned(SHARED), self.logs()));
        }
    }

    /// The replica leading the sharing engine, once one does.
    async fn sharing_leader(&self) -> String {
        wait_for_async(DEADLINE, "a replica leading the sharing engine", || async {
            let (_, cluster) = self.a.api().get("/api/cluster").await;
            let jobs = cluster["jobs"].as_array()?;
            let job = jobs.iter().find(|j| j["job"] == "sharing")?;
            job["replica"].as_str().map(str::to_owned)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.logs()))
    }
}

fn addresses(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}.{}", 10 + i)).collect()
}

/// The policy saved on one replica shares the bans an agent held by either replica reports, each
/// origin ban exactly once per target (no shared ban lost or doubled), delivered to targets
/// whichever replica holds them, and the engine runs on one replica at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_share_each_origin_ban_once() {
    let replicas = Replicas::start("banhub_sharing").await;
    let ips = addresses("198.51.100", 20);
    replicas.origin_bans(&ips).await;
    replicas.wait_delivered_once(&replicas.b, &ips).await;
    replicas.wait_enforced(&ips);
    // The engine ran on one replica at a time: one replica has led it.
    let (_, cluster) = replicas.a.api().get("/api/cluster").await;
    let leaders: Vec<&Value> = cluster["jobs"]
        .as_array()
        .map(|jobs| jobs.iter().filter(|j| j["job"] == "sharing").collect())
        .unwrap_or_default();
    assert_eq!(leaders.len(), 1, "{cluster}");
}

/// The replica leading the sharing engine (and holding some agents' sessions) is killed with
/// SIGKILL while a burst of origin bans propagates: the other replica takes the engine over, the
/// agents reconnect to it, and every shared ban of the burst is recorded exactly once per origin
/// ban and target and enforced in each target's fail2ban.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_killed_mid_propagation_loses_and_doubles_nothing() {
    let mut replicas = Replicas::start("banhub_sharing_kill").await;
    let leader = replicas.sharing_leader().await;
    // Each shared ban is a ban action in each target's fail2ban (about a second apiece on a loaded
    // machine), so the bursts stay small enough to settle within the deadline.
    let first = addresses("198.51.100", 12);
    let second = addresses("203.0.113", 12);
    replicas.origin_bans(&first).await;
    let survivor = if leader == "a" {
        &replicas.b
    } else {
        &replicas.a
    };
    wait_for_async(DEADLINE, "the first shared bans recorded", || async {
        let (_, bans) = survivor.api().get("/api/sharing/bans?limit=1000").await;
        let n = bans.as_array()?.len();
        (n > 0).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", replicas.logs()));
    let killed = if leader == "a" {
        &mut replicas.a
    } else {
        &mut replicas.b
    };
    killed.kill().expect("the leading replica is killed");
    let survivor = if leader == "a" {
        &replicas.b
    } else {
        &replicas.a
    };
    replicas.balancer.set_backends(&[survivor.grpc_addr()]);
    // More origin bans while the agents move and the engine changes replica.
    replicas.origin_bans(&second).await;
    wait_until_online(survivor, replicas.hosts.len()).await;

    let all: Vec<String> = first.iter().chain(&second).cloned().collect();
    let delivered = replicas.wait_delivered_once(survivor, &all).await;
    // Each origin ban is one stored event, and shared once per target from it.
    let mut origins: Vec<i64> = delivered
        .iter()
        .filter_map(|x| x["originEventId"].as_i64())
        .collect();
    origins.sort_unstable();
    origins.dedup();
    assert_eq!(
        origins.len(),
        all.len(),
        "one origin event per address: {delivered:?}"
    );
    replicas.wait_enforced(&all);
    let (_, cluster) = survivor.api().get("/api/cluster").await;
    let leaders: Vec<&str> = cluster["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .filter(|j| j["job"] == "sharing")
                .filter_map(|j| j["replica"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        leaders.iter().any(|r| *r != leader),
        "the surviving replica took the engine over: {cluster}"
    );
}

/// Waits until `hub` reports `n` servers online.
async fn wait_until_online(hub: &banhub_tests::hub::HubProcess, n: usize) {
    wait_for_async(DEADLINE, "every agent online", || async {
        let (_, servers) = hub.api().get("/api/servers").await;
        let online = servers
            .as_array()?
            .iter()
            .filter(|s| s["status"] == "online")
            .count();
        (online == n).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", hub.logs()));
}
