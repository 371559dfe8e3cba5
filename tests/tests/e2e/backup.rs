//! `banhub backup` and `banhub restore` end to end: a backup taken from a live hub while bans flow
//! through an agent restores, into a wiped data directory, a hub that holds every event it had
//! acknowledged before the backup and that its agents reconnect to with the certificates they
//! have; and a damaged, incomplete or too new backup is refused and changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use banhub_tests::agent::{relay_addr, relay_secret};
use banhub_tests::enrolled::wait_server_online;
use banhub_tests::fleet::snapshot;
use banhub_tests::process::binary;
use banhub_tests::wait::{wait_for_async, wait_until_async};
use banhub_tests::{HubProcess, TestFleet};
use reqwest::StatusCode;
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

/// `banhub <args> --data-dir <data_dir>`, run to its end.
fn banhub(data_dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(binary("banhub").expect("banhub built"));
    command.args(args).arg("--data-dir").arg(data_dir);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("BANHUB_") {
            command.env_remove(key);
        }
    }
    command.output().expect("banhub runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Posts ban callbacks for new addresses to the agent's relay, 8 at a time, until `stop`; counts
/// the ones the relay acknowledged (durable in its spool).
async fn callbacks(
    relay: std::net::SocketAddr,
    secret: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
) {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let mut next = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let batch: Vec<_> = (next..next + 8)
            .map(|i| {
                let ip = format!("10.77.{}.{}", i / 250, i % 250 + 1);
                let body = json!({
                    "serverId": "ignored", "ip": ip, "jail": "testauth", "hostname": "web-1",
                    "failures": 3, "logs": [format!("Failed login for root from {ip}")]
                });
                let request = client
                    .post(format!("http://{relay}/api/ban"))
                    .header("X-Callback-Secret", &secret)
                    .json(&body)
                    .send();
                async move { request.await.is_ok_and(|r| r.status() == StatusCode::OK) }
            })
            .collect();
        next += 8;
        let ok = futures::future::join_all(batch).await;
        acked.fetch_add(ok.into_iter().filter(|ok| *ok).count(), Ordering::SeqCst);
    }
}

/// The burst's ban events the hub holds, by id: their addresses.
async fn stored(fleet: &TestFleet, server: &str) -> BTreeMap<i64, String> {
    fleet
        .api()
        .all_events_json(&format!("serverId={server}&kind=ban"), 1000)
        .await
        .unwrap_or_else(|e| panic!("events: {e:?}"))
        .iter()
        .filter(|e| e["ip"].as_str().is_some_and(|ip| ip.starts_with("10.77.")))
        .map(|e| {
            (
                e["id"].as_i64().unwrap_or_else(|| panic!("event id: {e}")),
                e["ip"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The agent's identity on disk: its key, certificate, CA and id.
fn identity(state: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    ["agent.key", "agent.pem", "ca.pem", "identity.json"]
        .iter()
        .map(|f| {
            let path = state.join(f);
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (path, bytes)
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for entry in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

fn wipe(dir: &Path) {
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        if entry.path().is_dir() {
            std::fs::remove_dir_all(entry.path()).expect("remove dir");
        } else {
            std::fs::remove_file(entry.path()).expect("remove");
        }
    }
}

/// `damage` applied to a copy of `backup` makes restore refuse with `expected` in its message and
/// leave `data_dir` as it is.
fn assert_refused(backup: &Path, data_dir: &Path, expected: &str, damage: impl FnOnce(&Path)) {
    let scratch = tempfile::tempdir().expect("temp dir");
    let copy = scratch.path().join("backup");
    copy_dir(backup, &copy);
    damage(&copy);
    let before = snapshot(data_dir);
    let output = banhub(data_dir, &["restore", copy.to_str().expect("utf-8")]);
    assert!(
        !output.status.success(),
        "restore accepted: {}",
        text(&output)
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(expected),
        "restore should say {expected:?}:\n{stderr}"
    );
    assert!(
        snapshot(data_dir) == before,
        "a refused restore changed {}",
        data_dir.display()
    );
}

#[tokio::test]
async fn a_backup_taken_while_bans_flow_restores_a_hub_the_agents_reconnect_to() {
    let mut fleet = TestFleet::start(&["web-1", "web-2"])
        .await
        .unwrap_or_else(|e| panic!("{e:#}"));
    let server = fleet.hosts[0].id.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let flow = tokio::spawn(callbacks(
        relay_addr(&fleet.hosts[0].state_dir()).expect("relay"),
        relay_secret(&fleet.hosts[0].state_dir()).expect("secret"),
        stop.clone(),
        acked.clone(),
    ));
    wait_until_async(DEADLINE, "bans stored", || async {
        stored(&fleet, &server).await.len() >= 200
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    // What the hub answered just before the backup: every one of these must come back.
    let before_backup = stored(&fleet, &server).await;
    let scratch = tempfile::tempdir().expect("temp dir");
    let backup = scratch.path().join("backup");
    let started = Instant::now();
    let output = banhub(
        fleet.hub.data_dir(),
        &["backup", backup.to_str().expect("utf-8")],
    );
    let backup_time = started.elapsed();
    assert!(output.status.success(), "backup: {}", text(&output));
    let during = acked.load(Ordering::SeqCst);
    // Ingest went on past the backup.
    wait_until_async(DEADLINE, "more bans after the backup", || async {
        acked.load(Ordering::SeqCst) > during + 50
    })
    .await
    .expect("bans flow on");
    stop.store(true, Ordering::SeqCst);
    flow.await.expect("callbacks");
    let total = acked.load(Ordering::SeqCst);
    // Every acknowledged callback is in the hub, so no spool holds anything the restored hub
    // could receive anew.
    let before_stop = wait_for_async(DEADLINE, "every callback stored", || async {
        let all = stored(&fleet, &server).await;
        (all.len() == total).then_some(all)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));

    let manifest: Value =
        serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).expect("manifest"))
            .expect("manifest json");
    assert_eq!(manifest["database"], "sqlite", "{manifest}");
    assert!(
        manifest["schema_version"]
            .as_str()
            .is_some_and(|v| v.starts_with('m')),
        "{manifest}"
    );
    let listed: BTreeSet<&str> = manifest["files"]
        .as_object()
        .expect("files")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        listed,
        BTreeSet::from(["banhub.db", "ca/ca.key", "ca/ca.pem", "secrets.key"])
    );
    for file in listed.iter().copied().chain(["manifest.json"]) {
        let mode = std::fs::metadata(backup.join(file))
            .expect("backup file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file} has mode {mode:o}");
    }
    let again = banhub(
        fleet.hub.data_dir(),
        &["backup", backup.to_str().expect("utf-8")],
    );
    assert!(
        !again.status.success(),
        "a second backup into the same directory"
    );
    assert!(text(&again).contains("is not empty"), "{}", text(&again));

    let servers_before = fleet.api().servers().await.expect("servers").len();
    let identities: Vec<_> = fleet
        .hosts
        .iter()
        .map(|h| identity(&h.state_dir()))
        .collect();
    fleet.hub.stop().expect("hub stops");
    let data_dir = fleet.hub.data_dir().to_owned();

    // A live data directory is not replaced without --force.
    assert_refused(
        &backup,
        &data_dir,
        "restore replaces it only with --force",
        |_| {},
    );

    wipe(&data_dir);
    assert_refused(&backup, &data_dir, "banhub.db is damaged", |copy| {
        let path = copy.join("banhub.db");
        let mut bytes = std::fs::read(&path).expect("db");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        std::fs::write(&path, bytes).expect("damaged");
    });
    assert_refused(
        &backup,
        &data_dir,
        "ca/ca.key is listed in manifest.json but missing from the backup",
        |copy| std::fs::remove_file(copy.join("ca/ca.key")).expect("removed"),
    );
    assert_refused(
        &backup,
        &data_dir,
        "schema_version \"m9999_future\" is not a migration of this banhub",
        |copy| {
            let path = copy.join("manifest.json");
            let mut manifest: Value =
                serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
            manifest["schema_version"] = json!("m9999_future");
            std::fs::write(&path, manifest.to_string()).expect("written");
        },
    );

    let started = Instant::now();
    let output = banhub(&data_dir, &["restore", backup.to_str().expect("utf-8")]);
    let restore_time = started.elapsed();
    assert!(output.status.success(), "restore: {}", text(&output));
    eprintln!(
        "backup of {} events: {backup_time:?}; restore: {restore_time:?}",
        before_backup.len()
    );
    fleet.hub.restart().expect("the restored hub starts");

    for host in &fleet.hosts {
        wait_server_online(&fleet.hub.client(), &fleet.hub.url(""), &host.id, DEADLINE)
            .await
            .unwrap_or_else(|e| panic!("{} reconnects: {e}\n{}", host.name, fleet.logs()));
        let jails = fleet
            .api()
            .for_server(&host.id)
            .jails()
            .await
            .unwrap_or_else(|e| panic!("{} answers a command: {e:?}", host.name));
        assert!(
            format!("{jails:?}").contains("testauth"),
            "{}: {jails:?}",
            host.name
        );
    }
    assert_eq!(
        fleet.api().servers().await.expect("servers").len(),
        servers_before,
        "no server was added or lost"
    );
    let after: Vec<_> = fleet
        .hosts
        .iter()
        .map(|h| identity(&h.state_dir()))
        .collect();
    assert!(after == identities, "an agent enrolled again");

    let restored = stored(&fleet, &server).await;
    let lost: Vec<_> = before_backup
        .iter()
        .filter(|(id, ip)| restored.get(id) != Some(ip))
        .take(5)
        .collect();
    assert!(
        lost.is_empty(),
        "events acknowledged before the backup are missing or changed after the restore \
         ({} of {}): {lost:?}",
        before_backup
            .iter()
            .filter(|(id, ip)| restored.get(id) != Some(ip))
            .count(),
        before_backup.len()
    );
    let foreign: Vec<_> = restored
        .iter()
        .filter(|(id, ip)| before_stop.get(id) != Some(ip))
        .take(5)
        .collect();
    assert!(
        foreign.is_empty(),
        "the restored hub holds events the live one never had: {foreign:?}"
    );
}

/// Direct ban callbacks of a host without an agent: `count` addresses from `first` on.
async fn direct_bans(hub: &HubProcess, secret: &str, first: usize, count: usize) {
    for i in first..first + count {
        let status = hub
            .anonymous_client()
            .expect("client")
            .post(hub.url("/api/ban"))
            .header("X-Callback-Secret", secret)
            .json(
                &json!({"ip": format!("10.77.0.{}", i + 1), "jail": "sshd", "hostname": "edge-1",
                          "failures": 3}),
            )
            .send()
            .await
            .expect("callback")
            .status();
        assert_eq!(status, StatusCode::OK);
    }
}

/// The ban events of `server`, by id: their addresses, once `count` are stored.
async fn wait_stored(hub: &HubProcess, server: &str, count: usize) -> BTreeMap<i64, String> {
    wait_for_async(DEADLINE, "the bans stored", || async {
        // A new connection each time: a pooled one may be to the hub before its restart.
        let client = banhub_tests::bearer_client(hub.admin_token()).expect("client");
        let events = banhub_tests::ApiClient::new(hub.http_url(), client)
            .all_events_json(&format!("serverId={server}&kind=ban"), 1000)
            .await
            .unwrap_or_else(|e| panic!("events: {e:?}"));
        (events.len() == count).then(|| {
            events
                .iter()
                .map(|e| {
                    (
                        e["id"].as_i64().expect("id"),
                        e["ip"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", hub.logs()))
}

#[tokio::test]
async fn a_postgresql_backup_restores_over_a_changed_database_only_with_force() {
    let postgres = banhub_tests::PostgresServer::start()
        .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
    let url = postgres
        .create_database("banhub_backup")
        .unwrap_or_else(|e| panic!("{e:#}\n{}", postgres.logs()));
    let mut hub = HubProcess::builder()
        .database_url(&url)
        .start()
        .expect("hub starts");
    let (status, created) = hub
        .api()
        .post("/api/servers", &json!({"name": "edge-1"}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let server = created["server"]["id"].as_str().expect("id").to_owned();
    let (status, secret) = hub
        .api()
        .post(
            &format!("/api/servers/{server}/callback-secret"),
            &json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{secret}");
    let secret = secret["secret"].as_str().expect("secret").to_owned();
    direct_bans(&hub, &secret, 0, 20).await;
    let before_backup = wait_stored(&hub, &server, 20).await;

    let scratch = tempfile::tempdir().expect("temp dir");
    let backup = scratch.path().join("backup");
    let data_dir = hub.data_dir().to_owned();
    let output = banhub(
        &data_dir,
        &[
            "backup",
            backup.to_str().expect("utf-8"),
            "--database-url",
            &url,
        ],
    );
    assert!(output.status.success(), "backup: {}", text(&output));
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).expect("manifest"))
            .expect("manifest json");
    assert_eq!(manifest["database"], "postgres", "{manifest}");
    assert!(
        manifest["files"]["banhub.pgdump"]["bytes"].as_u64() > Some(0),
        "{manifest}"
    );

    // Bans after the backup, which the restore takes back.
    direct_bans(&hub, &secret, 20, 5).await;
    wait_stored(&hub, &server, 25).await;
    hub.stop().expect("hub stops");
    wipe(&data_dir);

    let restore = |force: bool| {
        let mut args = vec![
            "restore",
            backup.to_str().expect("utf-8"),
            "--database-url",
            &url,
        ];
        if force {
            args.push("--force");
        }
        banhub(&data_dir, &args)
    };
    let refused = restore(false);
    assert!(
        !refused.status.success(),
        "restore over a database without --force"
    );
    assert!(
        text(&refused).contains("the PostgreSQL database's banhub schema exists"),
        "{}",
        text(&refused)
    );
    assert!(
        snapshot(&data_dir).is_empty(),
        "a refused restore wrote files"
    );
    let output = restore(true);
    assert!(output.status.success(), "restore: {}", text(&output));
    hub.restart().expect("the restored hub starts");
    assert_eq!(wait_stored(&hub, &server, 20).await, before_backup);
    // The restored callback secret and CA work: a new ban is accepted.
    direct_bans(&hub, &secret, 30, 1).await;
    wait_stored(&hub, &server, 21).await;
}
