//! `--scenario rollout`: one profile version rolled out by the hub to N simulated agents (100) in
//! batches (10) with a 0 s watch (`POST /api/rollouts`, then `GET /api/rollouts/{id}` until it is
//! done), timed wall-clock and in hub CPU; beside it, as the floor, the same change applied to the
//! same hosts by the client through `POST /api/servers/{id}/config-changes`, one batch at a time:
//! with the same commit-confirm window (each batch waited for until every change of it is
//! confirmed), and with no confirmation at all.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::{Value, json};

use super::sim_host::SIMULATED_JAIL;
use super::{Args, Fleet, Load, ca_pem, cpu_time, enroll_many, hub_with, pid_of, wait_online};
use banhub_tests::hub::HubProcess;

/// The label the scenario's servers carry, and the profile assigned by it.
const LABEL: (&str, &str) = ("sim", "rollout");
const PROFILE: &str = "bench-rollout";
/// The jail override the rollout and each floor write, one `maxretry` apart from the host's.
fn jail_text(maxretry: u32) -> String {
    SIMULATED_JAIL.replace("maxretry = 3", &format!("maxretry = {maxretry}"))
}

/// How long a rollout or a floor may take before the scenario gives up.
const GIVE_UP: Duration = Duration::from_secs(1800);

/// Wall and hub CPU time of one timed pass.
struct Pass {
    wall: Duration,
    cpu: Duration,
}

impl Pass {
    fn print(&self, label: &str, hosts: usize) {
        println!(
            "{label}: {hosts} hosts in {:.2} s wall, hub CPU {:.2} s ({:.1} ms per host)",
            self.wall.as_secs_f64(),
            self.cpu.as_secs_f64(),
            self.cpu.as_secs_f64() * 1000.0 / hosts as f64
        );
    }
}

async fn timed<F, T>(pid: u32, work: F) -> anyhow::Result<(Pass, T)>
where
    F: std::future::Future<Output = anyhow::Result<T>>,
{
    let cpu0 = cpu_time(pid)?;
    let started = Instant::now();
    let value = work.await?;
    Ok((
        Pass {
            wall: started.elapsed(),
            cpu: cpu_time(pid)? - cpu0,
        },
        value,
    ))
}

/// Sends a JSON request and returns the body of a success, or the hub's refusal as the error. A
/// `503` with `Retry-After` (the store busy) is sent again after the wait it names, a few times,
/// as a client of the API is asked to.
async fn send(request: reqwest::RequestBuilder, what: &str) -> anyhow::Result<Value> {
    for _ in 0..5 {
        let attempt = request
            .try_clone()
            .context("a request without a streamed body")?;
        let response = attempt.send().await.with_context(|| what.to_owned())?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let text = response.text().await?;
        if let (reqwest::StatusCode::SERVICE_UNAVAILABLE, Some(secs)) = (status, retry_after) {
            eprintln!("  {what}: 503, sent again in {secs} s: {text}");
            tokio::time::sleep(Duration::from_secs(secs)).await;
            continue;
        }
        if !status.is_success() {
            bail!("{what}: {status} {text}");
        }
        return serde_json::from_str(&text).with_context(|| format!("{what}: not JSON: {text}"));
    }
    bail!("{what}: still 503 after 5 tries")
}

/// Starts the rollout and polls it until it is no longer running; returns its last state.
async fn roll_out(hub: &HubProcess, args: &Args) -> anyhow::Result<Value> {
    let client = hub.client();
    let started = send(
        client.post(hub.url("/api/rollouts")).json(&json!({
            "profile": PROFILE,
            "version": 2,
            "canary": args.rollout_canary,
            "batchSize": args.rollout_batch,
            "watchSecs": 0,
            "confirmSecs": args.confirm_secs,
        })),
        "POST /api/rollouts",
    )
    .await?;
    let id = match &started["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let begun = Instant::now();
    loop {
        let rollout = send(
            client.get(hub.url(&format!("/api/rollouts/{id}"))),
            "GET /api/rollouts/{id}",
        )
        .await?;
        if rollout["state"] != "running" {
            return Ok(rollout);
        }
        if begun.elapsed() > GIVE_UP {
            bail!("rollout {id} still running after {GIVE_UP:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Hosts of a rollout by state, e.g. `confirmed 100`.
fn host_states(rollout: &Value) -> String {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for host in rollout["hosts"].as_array().into_iter().flatten() {
        *counts
            .entry(host["state"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    counts
        .iter()
        .map(|(state, n)| format!("{state} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Applies `content` (replacing `previous`) to each server through `config-changes`, `batch` at a
/// time; with a window, a batch is done when every change of it is confirmed.
async fn floor(
    hub: &HubProcess,
    servers: &[String],
    batch: usize,
    (previous, content): (&str, &str),
    window: u32,
) -> anyhow::Result<()> {
    let client = hub.client();
    let version = banhub::domain::sha256_hex(previous.as_bytes());
    for chunk in servers.chunks(batch) {
        let applied: Vec<anyhow::Result<()>> = futures::stream::iter(chunk)
            .map(|server| {
                let client = client.clone();
                let version = version.clone();
                async move {
                    let change = send(
                        client
                            .post(hub.url(&format!("/api/servers/{server}/config-changes")))
                            .json(&json!({
                                "files": [{"path": "jail.d/sshd.local", "content": content, "version": version}],
                                "confirmWithinSecs": window,
                            })),
                        "POST config-changes",
                    )
                    .await?;
                    let id = change["id"].as_str().context("a change id")?.to_owned();
                    let mut state = change["state"].as_str().unwrap_or_default().to_owned();
                    let begun = Instant::now();
                    while state != "confirmed" {
                        if state == "failed" || state == "reverted" || begun.elapsed() > GIVE_UP {
                            bail!("change {id} of {server}: {state}");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        let now = send(
                            client.get(hub.url(&format!(
                                "/api/servers/{server}/config-changes/{id}"
                            ))),
                            "GET config-changes/{change}",
                        )
                        .await?;
                        state = now["state"].as_str().unwrap_or_default().to_owned();
                    }
                    Ok(())
                }
            })
            .buffer_unordered(batch)
            .collect()
            .await;
        applied.into_iter().collect::<anyhow::Result<()>>()?;
    }
    Ok(())
}

/// The scenario.
pub async fn rollout(args: &Args) -> anyhow::Result<()> {
    let n = args.rollout_agents;
    println!(
        "== rollout: a profile version to {n} simulated agents, canary {}, batches of {}, watch 0 s, confirm within {} s (one hub, SQLite)",
        args.rollout_canary, args.rollout_batch, args.confirm_secs
    );
    let ca = tempfile::tempdir()?;
    // The drift schedule stays out of the way; the checks after each change still run.
    let env = [("BANHUB_PROFILES__DRIFT_INTERVAL_SECS", "86400".to_owned())];
    let hub = hub_with(args, &env, None, ca.path())?;
    let pem = ca_pem(ca.path())?;
    let creds = enroll_many(
        &hub.client(),
        &hub.http_url(),
        hub.grpc_addr(),
        &pem,
        LABEL.1,
        n,
    )
    .await?;
    let servers: Vec<String> = creds.iter().map(|c| c.name.clone()).collect();
    let fleet = Fleet::start(creds, &pem, &[hub.grpc_addr()], Load::Idle).await?;
    wait_online(&hub, n).await?;
    let pid = pid_of(&hub)?;
    let client = hub.client();

    // Version 1 is what every host has; version 2 is the change rolled out.
    send(
        client.post(hub.url("/api/profiles")).json(&json!({
            "name": PROFILE, "labels": {LABEL.0: LABEL.1},
            "files": [{"path": "jail.d/sshd.local", "content": SIMULATED_JAIL}]})),
        "POST /api/profiles",
    )
    .await?;
    send(
        client
            .post(hub.url(&format!("/api/profiles/{PROFILE}/versions")))
            .json(&json!({"files": [{"path": "jail.d/sshd.local", "content": jail_text(4)}]})),
        "POST /api/profiles/{name}/versions",
    )
    .await?;

    let (pass, done) = timed(pid, roll_out(&hub, args)).await?;
    pass.print("rollout (POST /api/rollouts until done)", n);
    println!(
        "rollout ended {} ({}){}",
        done["state"],
        host_states(&done),
        done["reason"]
            .as_str()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    if done["state"] != "succeeded" {
        bail!("the rollout did not succeed: {done}");
    }

    let (pass, ()) = timed(
        pid,
        floor(
            &hub,
            &servers,
            args.rollout_batch,
            (&jail_text(4), &jail_text(5)),
            args.confirm_secs,
        ),
    )
    .await?;
    pass.print(
        &format!(
            "floor: config-changes by the client, batches of {}, confirm within {} s, each batch until confirmed",
            args.rollout_batch, args.confirm_secs
        ),
        n,
    );
    let (pass, ()) = timed(
        pid,
        floor(
            &hub,
            &servers,
            args.rollout_batch,
            (&jail_text(5), &jail_text(6)),
            0,
        ),
    )
    .await?;
    pass.print(
        &format!(
            "floor: config-changes by the client, batches of {}, no confirmation",
            args.rollout_batch
        ),
        n,
    );
    fleet.stop_reporting_commands().await;
    Ok(())
}
