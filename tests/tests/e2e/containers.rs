//! The container images built and run for real with podman: `deploy/container/build-images.sh`
//! builds the hub, agent and PostgreSQL images from a Debian base made on this machine and the
//! binaries cargo built; then the hub image runs on SQLite with a volume, as a non-root user on a
//! read-only root, with an agent container beside a fail2ban sandbox on the host whose bans reach
//! the API; and `deploy/compose.yaml` runs the hub with PostgreSQL, its health check following the
//! database. One test, so the images are built once; each part prints how long it took.

use std::path::Path;
use std::time::{Duration, Instant};

use banhub_tests::client::ApiClient;
use banhub_tests::enrolled::wait_server_online;
use banhub_tests::hub::{BOOTSTRAP_TOKEN_VAR, BootstrapToken, bearer_client};
use banhub_tests::podman::{ComposeProject, Container, Podman, Volume, free_port, image};
use banhub_tests::process::workspace_root;
use banhub_tests::wait::wait_for_async;
use banhub_tests::{Fail2banSandbox, agent};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// How long a container may take to pass its health check (the hub migrates its database first).
const HEALTHY: Duration = Duration::from_secs(90);
/// How long an agent may take to come online, and a ban to reach the API or fail2ban.
const DEADLINE: Duration = Duration::from_secs(45);
/// The pause between two runs of a health check.
const HEALTH_POLL: Duration = Duration::from_millis(500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_build_and_run_the_hub_the_agent_and_the_compose_stack() {
    let podman = Podman::new().unwrap_or_else(|e| panic!("{e:#}"));
    let started = Instant::now();
    let built = blocking(|| podman.build_images()).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{built}images built in {:?}", started.elapsed());
    for name in ["hub", "agent", "postgres"] {
        let size = podman.image_size(&image(name)).expect("image size");
        eprintln!("{}: {} MB", image(name), size / 1_000_000);
        assert!(size > 0, "{name}");
    }

    let started = Instant::now();
    hub_on_sqlite_with_an_agent_container(&podman).await;
    eprintln!("hub on SQLite and agent container: {:?}", started.elapsed());

    let started = Instant::now();
    compose_with_postgres(&podman).await;
    eprintln!("compose with PostgreSQL: {:?}", started.elapsed());
}

/// The hub image alone on SQLite, and the agent image driving the host's fail2ban.
async fn hub_on_sqlite_with_an_agent_container(podman: &Podman) {
    // Dropped last: the containers that use it go first.
    let volume = Volume::create(podman, "banhub-ci-hub-data").expect("volume");
    let http = free_port().expect("port");
    let grpc = free_port().expect("port");
    let admin = BootstrapToken::generate();
    let hub_args = [
        "--read-only".to_owned(),
        format!("--publish=127.0.0.1:{http}:8080"),
        format!("--publish=127.0.0.1:{grpc}:50051"),
        format!("--volume={}:/var/lib/banhub", volume.name),
        format!("--env=BANHUB_GRPC__ADVERTISE=127.0.0.1:{grpc}"),
        format!("--env={BOOTSTRAP_TOKEN_VAR}={}", admin.sha256),
        "--env=BANHUB_AGENTS__HEARTBEAT_INTERVAL_MS=500".to_owned(),
        image("hub"),
    ];
    let hub_args: Vec<&str> = hub_args.iter().map(String::as_str).collect();
    let hub = Container::run(podman, "banhub-ci-hub", &hub_args).expect("hub container");
    wait_healthy(podman, &hub.name);

    // Not root, and nothing writable outside the volume (and podman's tmpfs mounts), not even by
    // root.
    let uid = podman
        .run(&["exec", &hub.name, "stat", "--format=%u", "/proc/1"])
        .expect("podman exec");
    assert_eq!(uid, "10001", "the hub process runs as the banhub user");
    let read_only = podman
        .run(&[
            "inspect",
            "--format",
            "{{.HostConfig.ReadonlyRootfs}}",
            &hub.name,
        ])
        .expect("inspect");
    assert_eq!(read_only, "true");
    let write = podman
        .output(&["exec", "--user", "root", &hub.name, "touch", "/probe"])
        .expect("podman exec");
    assert!(
        !write.status.success()
            && String::from_utf8_lossy(&write.stderr).contains("Read-only file system"),
        "the root file system takes writes: {}",
        String::from_utf8_lossy(&write.stderr)
    );

    let base = format!("http://127.0.0.1:{http}");
    let api = ApiClient::new(&base, bearer_client(&admin.token).expect("client"));
    let (status, ready) = api.get("/readyz").await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["database"], "sqlite", "{ready}");

    // A fail2ban on the host, and an agent container enrolled for it: the state directory and the
    // sandbox (socket, configuration, logs) are mounted at the paths they have on the host, since
    // the host's fail2ban runs the notifier install-action writes there.
    let sandbox = blocking(|| Fail2banSandbox::start("container")).expect("fail2ban sandbox");
    let created = api
        .create_server("container-host")
        .await
        .expect("POST /api/servers");
    let server_id = created.server.id.clone();
    let state = tempfile::tempdir().expect("tempdir");
    let state_dir = state.path().join("agent");
    std::fs::create_dir_all(&state_dir).expect("state directory");
    let agent_args = agent_container_args(&state_dir, &sandbox);
    let agent_image = image("agent");
    let mut enroll: Vec<&str> = vec!["run", "--rm"];
    enroll.extend(agent_args.iter().map(String::as_str));
    enroll.extend([agent_image.as_str(), "enroll", &created.enrollment.token]);
    blocking(|| podman.run(&enroll)).unwrap_or_else(|e| panic!("enroll in a container: {e:#}"));

    let mut run: Vec<&str> = agent_args.iter().map(String::as_str).collect();
    run.push(&agent_image);
    let agent = Container::run(podman, "banhub-ci-agent", &run).expect("agent container");
    wait_server_online(api.http(), &base, &server_id, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}\n{}", agent.logs(), hub.logs()));
    wait_healthy(podman, &agent.name);

    // install-action from the image: the banhub action on the host's jails.
    let conf = sandbox.conf_dir().display().to_string();
    let socket = sandbox.socket_path().display().to_string();
    let state_arg = state_dir.display().to_string();
    let mut install: Vec<&str> = vec!["run", "--rm"];
    install.extend(agent_args.iter().map(String::as_str));
    install.extend([
        agent_image.as_str(),
        "install-action",
        "--config-dir",
        &conf,
        "--state-dir",
        &state_arg,
        "--fail2ban-socket",
        &socket,
    ]);
    blocking(|| podman.run(&install))
        .unwrap_or_else(|e| panic!("install-action in a container: {e:#}\n{}", sandbox.logs()));

    // A ban fail2ban makes from log lines on the host arrives through the API.
    let attacker = "203.0.113.61";
    sandbox
        .append_failures(&sandbox.log_path("testauth"), attacker, 3)
        .expect("log lines");
    let event = wait_for_async(DEADLINE, "the ban event in the API", || async {
        api.events(&format!("serverId={server_id}&ip={attacker}&kind=ban"))
            .await
            .ok()
            .and_then(|page| page.events.into_iter().next())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}\n{}", agent.logs(), sandbox.logs()));
    assert_eq!(event.jail.as_deref(), Some("testauth"));
    assert_eq!(event.failures, Some(3));

    // And a ban through the API reaches the host's fail2ban through the container.
    let target = "198.51.100.62";
    let outcome = api
        .for_server(&server_id)
        .ban("testauth", target)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", agent.logs()));
    assert!(outcome.changed, "{outcome:?}");
    let banned = sandbox
        .client(&["get", "testauth", "banned"])
        .expect("fail2ban lists its bans");
    assert!(banned.contains(target), "{banned}");

    // A new hub container on the same volume keeps the data, and the agent reconnects with the
    // identity it enrolled with.
    drop(hub);
    let hub = Container::run(podman, "banhub-ci-hub", &hub_args).expect("hub container again");
    wait_healthy(podman, &hub.name);
    wait_server_online(api.http(), &base, &server_id, DEADLINE)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\n{}\n{}", agent.logs(), hub.logs()));
    let kept = api
        .events(&format!("serverId={server_id}&ip={attacker}&kind=ban"))
        .await
        .expect("events");
    assert_eq!(
        kept.events.first().map(|e| e.id),
        Some(event.id),
        "the volume kept the event"
    );
}

/// `deploy/compose.yaml` with the PostgreSQL image: the operator's login works, and the hub's
/// health check fails while its database is down and passes again once it is back.
async fn compose_with_postgres(podman: &Podman) {
    let http = free_port().expect("port").to_string();
    let grpc = free_port().expect("port").to_string();
    let advertise = format!("127.0.0.1:{grpc}");
    let password = uuid::Uuid::new_v4().simple().to_string();
    let (hub_image, postgres_image) = (image("hub"), image("postgres"));
    let env = [
        ("BANHUB_DB_PASSWORD", password.as_str()),
        ("BANHUB_GRPC_ADVERTISE", advertise.as_str()),
        ("BANHUB_HTTP_PORT", http.as_str()),
        ("BANHUB_GRPC_PORT", grpc.as_str()),
        ("BANHUB_IMAGE", hub_image.as_str()),
        ("BANHUB_POSTGRES_IMAGE", postgres_image.as_str()),
        ("BANHUB_PUBLIC_URL", ""),
        ("BANHUB_BASE_PATH", ""),
    ];
    let file = workspace_root().join("deploy").join("compose.yaml");
    let project = blocking(|| ComposeProject::up(podman, "banhub-ci-compose", &file, &env))
        .unwrap_or_else(|e| panic!("{e:#}"));
    let (hub, postgres) = (project.container("hub"), project.container("postgres"));
    wait_healthy(podman, &postgres);
    wait_healthy(podman, &hub);

    let base = format!("http://127.0.0.1:{http}");
    let client = reqwest::Client::new();
    let ready: Value = client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("readyz")
        .json()
        .await
        .expect("json");
    assert_eq!(ready["database"], "postgres", "{ready}");
    let read_only = podman
        .run(&[
            "inspect",
            "--format",
            "{{.HostConfig.ReadonlyRootfs}}",
            &hub,
        ])
        .expect("inspect");
    assert_eq!(read_only, "true", "compose.yaml asks for a read-only root");

    // The operator's first login, with the password the hub generated on its volume.
    let admin_password = podman
        .run(&[
            "exec",
            &hub,
            "cat",
            "/var/lib/banhub/initial-admin-password",
        ])
        .expect("the initial admin password");
    let login = client
        .post(format!("{base}/auth/login"))
        .header("origin", &base)
        .json(&json!({ "username": "admin", "password": admin_password }))
        .send()
        .await
        .expect("login");
    assert!(login.status().is_success(), "login: {}", login.status());
    let cookie = login
        .headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok()?.split(';').next())
        .collect::<Vec<_>>()
        .join("; ");
    let servers = client
        .get(format!("{base}/api/servers"))
        .header(reqwest::header::COOKIE, cookie)
        .send()
        .await
        .expect("servers");
    assert_eq!(servers.status(), StatusCode::OK);

    // The health check follows the database.
    podman.run(&["stop", &postgres]).expect("stop postgres");
    blocking(|| wait_health(podman, &hub, false))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", podman.logs(&hub)));
    podman.run(&["start", &postgres]).expect("start postgres");
    wait_healthy(podman, &hub);
    drop(project);
}

/// The `podman run` options of every agent container: the host's network (fail2ban's action
/// calls the relay on loopback), the state directory and the sandbox at their own paths, and the
/// settings the harness gives every test agent.
fn agent_container_args(state_dir: &Path, sandbox: &Fail2banSandbox) -> Vec<String> {
    let state = state_dir.display();
    let sandbox_dir = sandbox.dir().display();
    vec![
        "--network=host".to_owned(),
        format!("--volume={state}:{state}"),
        format!("--volume={sandbox_dir}:{sandbox_dir}"),
        format!("--env=BANHUB_AGENT_STATE_DIR={state}"),
        format!(
            "--env=BANHUB_AGENT_FAIL2BAN__SOCKET={}",
            sandbox.socket_path().display()
        ),
        format!(
            "--env=BANHUB_AGENT_FAIL2BAN__CONFIG_DIR={}",
            sandbox.conf_dir().display()
        ),
        "--env=BANHUB_AGENT_RELAY__LISTEN=127.0.0.1:0".to_owned(),
        "--env=BANHUB_AGENT_LINK__BACKOFF_MAX_MS=500".to_owned(),
        format!(
            "--env={}={}",
            agent::POLICY_LOG_PREFIXES,
            agent::sandbox_log_prefixes()
        ),
    ]
}

/// Waits until the container's health check passes.
fn wait_healthy(podman: &Podman, container: &str) {
    blocking(|| wait_health(podman, container, true))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", podman.logs(container)));
    let status = podman
        .run(&["inspect", "--format", "{{.State.Health.Status}}", container])
        .unwrap_or_default();
    eprintln!("{container}: health check passes (podman reports {status})");
}

/// Runs the container's health check until its verdict is `healthy`, for at most [`HEALTHY`].
/// Each check starts a process in the container, hence the pause between checks.
fn wait_health(podman: &Podman, container: &str, healthy: bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + HEALTHY;
    loop {
        if podman.health_check(container).ok() == Some(healthy) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{container}'s health check did not turn healthy={healthy} within {HEALTHY:?}"
            );
        }
        std::thread::sleep(HEALTH_POLL);
    }
}

/// Runs blocking harness code (podman, fail2ban-client) off the async workers.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}
