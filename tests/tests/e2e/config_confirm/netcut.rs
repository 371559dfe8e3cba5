//! A change whose reload cuts its own host off from the hub, for real: the host (fail2ban and its
//! agent) runs in a network namespace of its own, and the change adds a jail whose action's start
//! drops, in that namespace's firewall, every packet to and from the hub. After the reload the hub
//! loses the agent and cannot confirm; the agent reverts at its deadline by itself (the jail and
//! its rule gone, the files byte for byte the old ones), comes back, and the hub records the change
//! reverted by the host.

use std::process::Command;
use std::time::Duration;

use banhub_tests::client::ServerStatus;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::fleet::{TestFleet, TestHost, snapshot};
use banhub_tests::netns::NetNs;
use banhub_tests::wait::wait_until;
use reqwest::StatusCode;
use serde_json::json;

use super::hub::{agent_phase, changes_path, wait_state};

/// The confirmation window the change is sent with: the agent reverts this long after the reload.
const WINDOW_SECS: u32 = 15;
/// The jail the change adds, and the action root put on the host for it.
const JAIL: &str = "netcut";
const ACTION: &str = "cut-hub";
/// The nftables table the action's start creates and its stop deletes.
const TABLE: &str = "banhub_netcut";

/// `nft`'s full path: fail2ban runs actions with the environment it was started with.
fn nft_path() -> String {
    let out = Command::new("sh")
        .args(["-c", "command -v nft"])
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(!path.is_empty(), "`nft` is missing: run .ci/install-deps");
    path
}

/// An action, as root would put it in `action.d`, whose start drops every packet between the
/// host and the hub in the host's own firewall; its stop deletes the table again. No `;` follows
/// white space: fail2ban reads that as the start of a comment.
fn cut_action(nft: &str, hub: &str) -> String {
    format!(
        "[Definition]\n\
         actionstart_on_demand = false\n\
         actionstart = {nft} add table inet <table>\n\
         \x20             {nft} add chain inet <table> out '{{ type filter hook output priority 0; }}'\n\
         \x20             {nft} add rule inet <table> out ip daddr <hub> drop\n\
         \x20             {nft} add chain inet <table> in '{{ type filter hook input priority 0; }}'\n\
         \x20             {nft} add rule inet <table> in ip saddr <hub> drop\n\
         actionstop = {nft} delete table inet <table>\n\
         actioncheck =\n\
         actionban =\n\
         actionunban =\n\
         \n\
         [Init]\n\
         table = {TABLE}\n\
         hub = {hub}\n"
    )
}

/// The jails the host's fail2ban runs.
fn running_jails(host: &TestHost) -> Vec<String> {
    host.sandbox.running_jails().expect("fail2ban status")
}

#[tokio::test]
async fn a_change_that_cuts_the_host_off_from_the_hub_reverts_by_itself_and_the_hub_records_it() {
    let ns = NetNs::create().expect("a network namespace for the host");
    let mut fleet = TestFleet::on(ns.hub(TestFleet::hub_builder()).start().expect("the hub"));
    ns.add_host(&mut fleet, "cc-netcut", Fail2banSandbox::builder(), &[])
        .await
        .expect("the host in its namespace");
    let host = fleet.host(0);
    let conf = host.sandbox.conf_dir();
    std::fs::write(
        conf.join("action.d").join(format!("{ACTION}.conf")),
        cut_action(&nft_path(), &ns.hub_ip().to_string()),
    )
    .expect("the action");
    // The hub writes its protected networks into the host's `ignoreip` once the agent is online;
    // the files are compared from after that write.
    let defaults = conf.join("jail.d/banhub-defaults.local");
    wait_until(
        Duration::from_secs(20),
        "the hub's ignoreip on the host",
        || std::fs::read_to_string(&defaults).is_ok_and(|text| text.contains("ignoreip")),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    let before = snapshot(&conf);
    assert!(!ns.ruleset().expect("nft").contains(TABLE));

    let jail = format!(
        "[{JAIL}]\nenabled = true\nfilter = testauth\nlogpath = {}\naction = {ACTION}\n",
        host.sandbox.log_path("testauth").display()
    );
    let body = json!({
        "files": [{"path": format!("jail.d/{JAIL}.local"), "content": jail, "version": "absent"}],
        "confirmWithinSecs": WINDOW_SECS,
    });
    let path = changes_path(host);
    let (status, answer) = fleet.post(&path, None, &body).await;
    // The agent's answer races the cut: it arrives when it leaves before the action's start
    // drops the traffic, else the hub loses the session with the answer and the change stays
    // `applying` until the agent is back.
    let change = match status {
        StatusCode::CREATED => {
            assert_eq!(answer["state"], "awaiting_confirm", "{answer}");
            answer
        }
        _ => {
            let (_, listed) = fleet.get(&path, None).await;
            assert_eq!(
                listed[0]["state"], "applying",
                "{status} {answer}\n{listed}"
            );
            listed[0].clone()
        }
    };
    let change_path = format!("{path}/{}", change["id"].as_str().expect("id"));

    // The reload started the jail, and its action cut the host off: the hub loses the agent.
    wait_until(
        Duration::from_secs(10),
        "the cut in the host's firewall",
        || ns.ruleset().is_ok_and(|rules| rules.contains(TABLE)),
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert!(running_jails(host).iter().any(|j| j == JAIL));
    assert_eq!(agent_phase(host), "pending");
    fleet.wait_status(host, ServerStatus::Offline).await;

    // Nobody confirms: the agent puts the old files back at its deadline, and the jail's stop
    // lifts the cut.
    wait_until(
        Duration::from_secs(u64::from(WINDOW_SECS) + 30),
        "the host to revert by itself",
        || agent_phase(host) == "reverted",
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", fleet.logs()));
    assert_eq!(snapshot(&conf), before, "the files are the old ones");
    assert!(!running_jails(host).iter().any(|j| j == JAIL));
    let rules = ns.ruleset().expect("nft");
    assert!(!rules.contains(TABLE), "{rules}");

    // The agent is back, and the hub records what the host did.
    fleet.wait_status(host, ServerStatus::Online).await;
    let recorded = wait_state(&fleet, &change_path, "reverted", Duration::from_secs(40)).await;
    assert!(
        recorded["reason"]
            .as_str()
            .is_some_and(|r| r.contains("deadline")),
        "{recorded}"
    );
}
