//! A deleted server's agent exits with code 3, running or restarted; a restarted hub is no reason to.

use std::time::Duration;

use banhub_tests::enrolled::wait_server_online;
use banhub_tests::{TestFleet, wait_until};
use reqwest::StatusCode;

/// How long an agent may take to notice its revocation and exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_deleted_servers_agent_exits_with_code_3_running_or_restarted() {
    let mut fleet = TestFleet::start(&["web-1"]).await.expect("fleet");
    let id = fleet.host(0).id.as_str().to_owned();

    let (status, body) = fleet
        .send(
            fleet
                .hub
                .client()
                .delete(fleet.hub.url(&format!("/api/servers/{id}"))),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");

    let agent = &mut fleet.hosts[0].agent;
    let exit = agent
        .wait_exit(EXIT_DEADLINE)
        .unwrap_or_else(|e| panic!("the running agent did not stop: {e:#}"));
    assert_eq!(exit.code(), Some(3), "{}", agent.logs());

    // Started again, it is refused in the TLS handshake as revoked and stops for good.
    agent.restart().expect("restart");
    let exit = agent
        .wait_exit(EXIT_DEADLINE)
        .unwrap_or_else(|e| panic!("the restarted agent kept retrying: {e:#}"));
    assert_eq!(exit.code(), Some(3), "{}", agent.logs());
    assert!(
        agent.logs().contains("certificate as revoked"),
        "the agent did not say why it stopped:\n{}",
        agent.logs()
    );
}

#[tokio::test]
async fn an_agent_whose_hub_restarts_keeps_running_and_comes_back() {
    let mut fleet = TestFleet::start(&["web-1"]).await.expect("fleet");
    fleet.hub.stop().expect("the hub stops");
    let agent = &fleet.hosts[0].agent;
    wait_until(EXIT_DEADLINE, "the agent to notice the hub is gone", || {
        agent.logs().contains("cannot reach the hub")
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", agent.logs()));

    fleet.hub.restart().expect("the hub starts again");
    let host = fleet.host(0);
    wait_server_online(
        &fleet.hub.client(),
        &fleet.hub.http_url(),
        &host.id,
        EXIT_DEADLINE,
    )
    .await
    .unwrap_or_else(|e| panic!("the agent did not come back: {e:#}\n{}", fleet.logs()));
    let agent = &mut fleet.hosts[0].agent;
    assert!(agent.is_running(), "{}", agent.logs());
}
