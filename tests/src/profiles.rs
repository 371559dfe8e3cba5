//! The profile tests' shared setup: a fleet whose drift loop runs every second and whose hosts all
//! carry the label `role=web`, the profile `web` assigned by that label, and waiting for a host's
//! drift to reach a state.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::TestFleet;
use crate::wait::wait_for_async;

/// How long a drift state is waited for.
const DRIFT_DEADLINE: Duration = Duration::from_secs(60);

/// A fleet of one host per name, each labelled `role=web`, with the drift loop every second.
pub async fn web_fleet(names: &[&str]) -> TestFleet {
    let fleet =
        TestFleet::start_configured(names, &[("BANHUB_PROFILES__DRIFT_INTERVAL_SECS", "1")], &[])
            .await
            .unwrap_or_else(|e| panic!("{e:#}"));
    let api = fleet.api();
    for host in &fleet.hosts {
        let (status, body) = api
            .put(
                &format!("/api/servers/{}/labels", host.id),
                &json!({"labels": {"role": "web"}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    fleet
}

/// Creates the profile `web`, assigned to `role=web`, whose first version holds
/// `jail.d/testauth.local` with `jail`, under `comment`; returns the hub's answer.
pub async fn create_web_profile(fleet: &TestFleet, jail: &str, comment: &str) -> Value {
    let (status, created) = fleet
        .api()
        .post(
            "/api/profiles",
            &json!({"name": "web", "labels": {"role": "web"}, "comment": comment,
                    "files": [{"path": "jail.d/testauth.local", "content": jail}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created
}

/// Waits until server `id`'s drift is `state` and `check` holds for it; returns it.
pub async fn wait_drift(
    fleet: &TestFleet,
    id: &str,
    state: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    let api = fleet.api();
    let path = format!("/api/servers/{id}/drift");
    wait_for_async(DRIFT_DEADLINE, &format!("{id} {state}"), || {
        let (api, path) = (api.clone(), path.clone());
        let check = &check;
        async move {
            let (status, drift) = api.get(&path).await;
            (status == StatusCode::OK && drift["state"] == state && check(&drift)).then_some(drift)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()))
}
