//! The container files and the compose example, checked as text and against the real binary
//! (`containers` builds and runs them with podman): the compose file parses as YAML (Debian's
//! python3-yaml, installed by `.ci/deps.d/50-packaging.sh`), everything it references exists, every
//! variable it needs is in the example environment file, and the real `banhub` binary accepts the
//! configuration the compose file and the Containerfiles give it, and serves with it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use banhub_tests::process::{LogFiles, ManagedChild, binary, workspace_root};
use banhub_tests::wait::{wait_for, wait_for_async};
use serde_json::Value;

fn deploy() -> PathBuf {
    workspace_root().join("deploy")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The compose file as JSON, parsed by a real YAML parser.
fn compose() -> Value {
    let python = Path::new("/usr/bin/python3");
    let output = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)",
        ])
        .arg(deploy().join("compose.yaml"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e}; install it with .ci/deps.d/50-packaging.sh",
                python.display()
            )
        });
    assert!(
        output.status.success(),
        "compose.yaml does not parse (is python3-yaml installed? .ci/deps.d/50-packaging.sh \
         installs it): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("json")
}

/// `NAME=value` lines of an env file (comments and commented-out lines skipped).
fn env_file(path: &Path) -> BTreeMap<String, String> {
    read(path)
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// Substitutes `${NAME}`, `${NAME:-default}` and `${NAME:?message}` as compose does, from `env`;
/// a required variable missing from `env` is an error naming it.
fn interpolate(text: &str, env: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("unclosed ${{ in {text}"))?;
        let expr = &after[..end];
        let (name, op) = match expr.find([':', '-', '?']) {
            Some(i) => (&expr[..i], &expr[i..]),
            None => (expr, ""),
        };
        match env.get(name).filter(|v| !v.is_empty()) {
            Some(value) => out.push_str(value),
            None if op.starts_with(":-") || op.starts_with('-') => {
                out.push_str(op.trim_start_matches(':').trim_start_matches('-'));
            }
            None if op.is_empty() => {}
            None => {
                return Err(format!(
                    "{name} is required ({expr}) but not in the example"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `ENV` assignments of a Containerfile (one `ENV` instruction, continued lines).
fn containerfile_env(path: &Path) -> BTreeMap<String, String> {
    let text = read(path).replace("\\\n", " ");
    text.lines()
        .filter_map(|l| l.trim_start().strip_prefix("ENV "))
        .flat_map(|l| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
        .filter_map(|pair| {
            pair.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

#[test]
fn compose_references_what_exists_and_the_example_sets_what_it_needs() {
    let compose = compose();
    let services = compose["services"].as_object().expect("services");
    assert!(services.contains_key("hub") && services.contains_key("postgres"));
    let hub = &services["hub"];

    // The build context is the repository, and the Containerfile is in it.
    let context = deploy().join(hub["build"]["context"].as_str().expect("context"));
    assert!(
        context.join("Cargo.toml").is_file(),
        "{}",
        context.display()
    );
    let dockerfile = context.join(hub["build"]["dockerfile"].as_str().expect("dockerfile"));
    assert!(dockerfile.is_file(), "{}", dockerfile.display());
    assert_eq!(
        dockerfile.canonicalize().expect("path"),
        deploy()
            .join("container/Containerfile.hub")
            .canonicalize()
            .expect("path")
    );

    // The hub waits for a healthy database, which has a health check.
    assert_eq!(
        hub["depends_on"]["postgres"]["condition"],
        "service_healthy"
    );
    assert!(services["postgres"]["healthcheck"]["test"].is_array());

    // Every variable without a default is in the example .env.
    let example = env_file(&deploy().join("compose.env.example"));
    let text = read(&deploy().join("compose.yaml"));
    let mut required = BTreeSet::new();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for part in line.split("${").skip(1) {
            let expr = part.split('}').next().unwrap_or_default();
            if expr.contains(":?") || !expr.contains(":-") {
                required.insert(
                    expr.split([':', '-', '?'])
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                );
            }
        }
    }
    for name in &required {
        assert!(
            example.contains_key(name),
            "compose.yaml needs {name}; compose.env.example does not set it"
        );
    }

    // The published ports are the ones the image's hub listens on.
    let image_env = containerfile_env(&deploy().join("container/Containerfile.hub"));
    let ports: Vec<&str> = hub["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for key in ["BANHUB_HTTP__LISTEN", "BANHUB_GRPC__LISTEN"] {
        let port = image_env[key].rsplit(':').next().expect("port");
        assert!(
            ports.iter().any(|p| p.ends_with(&format!(":{port}"))),
            "{key} port {port} is published: {ports:?}"
        );
    }
    // And the data volume is mounted where the image keeps its data.
    let volumes = hub["volumes"].to_string();
    assert!(
        volumes.contains(&format!(":{}", image_env["BANHUB_DATA_DIR"])),
        "{volumes}"
    );
}

#[test]
fn containerfiles_build_what_exists_and_run_unprivileged_with_a_health_check() {
    let packages = read(&workspace_root().join("Cargo.toml"));
    for (file, package, binary_name) in [
        ("Containerfile.hub", "banhub", "banhub"),
        ("Containerfile.agent", "banhub-agent", "banhub-agent"),
    ] {
        let path = deploy().join("container").join(file);
        let text = read(&path);
        assert!(
            text.contains(&format!("cargo build --release --locked -p {package} ")),
            "{file}"
        );
        assert!(
            text.contains(&format!("target/release/{binary_name} ")),
            "{file} copies the built binary"
        );
        let member = if package == "banhub" { "hub" } else { "agent" };
        assert!(
            packages.contains(&format!("\"{member}\"")),
            "{member} is a workspace member"
        );
        // Every COPY source from the context exists.
        for line in text
            .lines()
            .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
        {
            let words: Vec<&str> = line.split_whitespace().collect();
            for source in &words[1..words.len() - 1] {
                assert!(
                    workspace_root().join(source).exists(),
                    "{file}: COPY {source} does not exist"
                );
            }
        }
        // Multi-stage: the runtime copies from the build stage.
        assert!(
            text.contains("AS build") && text.contains("COPY --from=build"),
            "{file}"
        );
        assert!(text.contains("HEALTHCHECK "), "{file} has a health check");
        assert!(
            deploy()
                .join("container")
                .join(format!("{file}.dockerignore"))
                .is_file(),
            "{file} keeps target/ out of the build context"
        );
    }
    let hub = read(&deploy().join("container/Containerfile.hub"));
    let user = hub
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the hub image sets a user");
    assert!(
        !user.starts_with("root") && !user.starts_with('0'),
        "{user}"
    );
}

/// `banhub config` with the image's and the compose file's variables (values from the example
/// environment): the hub accepts every key, and the effective configuration says what they meant.
#[test]
fn the_hub_accepts_the_configuration_the_container_gives_it() {
    let example = env_file(&deploy().join("compose.env.example"));
    let compose = compose();
    let mut env = containerfile_env(&deploy().join("container/Containerfile.hub"));
    let dir = tempfile::tempdir().expect("tempdir");
    env.insert(
        "BANHUB_DATA_DIR".to_owned(),
        dir.path().display().to_string(),
    );
    for (key, value) in compose["services"]["hub"]["environment"]
        .as_object()
        .expect("environment")
    {
        let value = interpolate(value.as_str().expect("string"), &example)
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        env.insert(key.clone(), value);
    }
    let mut command = Command::new(binary("banhub").expect("banhub built"));
    command.arg("config").env_clear().envs(&env);
    let output = command.output().expect("banhub config");
    assert!(
        output.status.success(),
        "the hub refuses the container's configuration {env:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "listen = \"0.0.0.0:8080\"",
        "listen = \"0.0.0.0:50051\"",
        "advertise = \"hub.example.com:50051\"",
        "format = \"json\"",
    ] {
        assert!(printed.contains(expected), "{expected} in:\n{printed}");
    }
    assert!(
        printed.contains("postgres://banhub:") && printed.contains("@postgres:5432/banhub"),
        "the database URL from compose: {printed}"
    );
}

/// The image's environment with the ports the test picks: the hub starts on it (data directory
/// from the variable, JSON logs) and its health check URL answers.
#[tokio::test]
async fn the_hub_serves_its_health_check_with_the_image_environment() {
    let mut env = containerfile_env(&deploy().join("container/Containerfile.hub"));
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    env.insert("BANHUB_DATA_DIR".to_owned(), data.display().to_string());
    // Loopback and kernel-chosen ports here; the image listens on every interface.
    env.insert("BANHUB_HTTP__LISTEN".to_owned(), "127.0.0.1:0".to_owned());
    env.insert("BANHUB_GRPC__LISTEN".to_owned(), "127.0.0.1:0".to_owned());
    let logs = LogFiles::new(dir.path(), "hub");
    let mut command = Command::new(binary("banhub").expect("banhub built"));
    command
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&env)
        .current_dir(dir.path())
        .stdin(Stdio::null());
    logs.attach(&mut command).expect("logs");
    let _hub = ManagedChild::spawn("banhub", command).expect("spawn");
    let listening: Value = wait_for(Duration::from_secs(30), "listening.json", || {
        fs::read_to_string(data.join("listening.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
    })
    .unwrap_or_else(|e| panic!("{e}\n{}", logs.tail(40)));
    let url = format!(
        "http://{}/healthz",
        listening["http"].as_str().expect("http")
    );
    let client = reqwest::Client::new();
    wait_for_async(Duration::from_secs(30), "/healthz", || async {
        let response = client.get(&url).send().await.ok()?;
        response.status().is_success().then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", logs.tail(40)));
    // JSON logs, as the image asks for.
    let stderr = fs::read_to_string(&logs.stderr).unwrap_or_default();
    let first = stderr
        .lines()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("no JSON log line:\n{stderr}"));
    serde_json::from_str::<Value>(first).expect("a JSON log line");
}
