//! Filter tests are bounded per host: one runs at a time (one more waits, any beyond get a 429 with
//! `Retry-After`), and a test that runs too long is killed and reported as such.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use banhub_tests::process::children_named;
use banhub_tests::wait::POLL_INTERVAL;
use banhub_tests::{TestFleet, wait_until};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The agent's bound on one filter test, short so the test does not wait for the default.
const TEST_TIMEOUT_MS: &str = "3000";

/// A filter whose regular expression backtracks exponentially on a run of `a`s that ends otherwise.
const CATASTROPHIC: &str = "[Definition]\nfailregex = ^(a+)+x <HOST>$\n";

#[tokio::test]
async fn catastrophic_filter_tests_run_one_at_a_time_and_are_killed_at_their_bound() {
    let fleet = TestFleet::start_with(
        &["web-1"],
        &[(
            "BANHUB_AGENT_FAIL2BAN__FILTER_TEST_TIMEOUT_MS",
            TEST_TIMEOUT_MS,
        )],
    )
    .await
    .expect("fleet");
    let host = fleet.host(0);
    let agent_pid = host.agent.pid().expect("the agent runs");
    let body = json!({"filterText": CATASTROPHIC, "lines": [format!("{}b", "a".repeat(60))]});

    let send = || async {
        let response = fleet
            .hub
            .client()
            .post(fleet.hub.url("/api/filters/test"))
            .header("X-BanDaemon-Server", host.id.as_str())
            .json(&body)
            .send()
            .await
            .expect("request");
        let retry_after = response.headers().get("retry-after").cloned();
        let content_type = response.headers().get("content-type").cloned();
        let status = response.status();
        let problem: Value = response.json().await.unwrap_or(Value::Null);
        (status, retry_after, content_type, problem)
    };
    let done = AtomicBool::new(false);
    let sends = async {
        let answers = tokio::join!(send(), send(), send());
        done.store(true, Ordering::SeqCst);
        answers
    };
    let watch = async {
        // While the tests run, the agent never has two fail2ban-regex processes.
        let mut most = 0;
        while !done.load(Ordering::SeqCst) {
            most = most.max(children_named(agent_pid, "fail2ban-regex"));
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        most
    };
    let ((a, b, c), most) = tokio::join!(sends, watch);
    let answers = [a, b, c];

    let busy: Vec<_> = answers
        .iter()
        .filter(|(status, ..)| *status == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert_eq!(busy.len(), 1, "one of three is refused: {answers:?}");
    let (_, retry_after, content_type, problem) = busy[0];
    assert!(retry_after.is_some(), "a 429 without Retry-After");
    assert_eq!(
        content_type.as_ref().and_then(|v| v.to_str().ok()),
        Some("application/problem+json")
    );
    assert_eq!(problem["code"], "filter_tests_busy", "{problem}");

    for (status, _, _, problem) in answers
        .iter()
        .filter(|(s, ..)| *s != StatusCode::TOO_MANY_REQUESTS)
    {
        assert_eq!(*status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("did not finish")),
            "{problem}"
        );
    }
    assert!(most <= 1, "{most} fail2ban-regex processes ran at once");
    wait_until(Duration::from_secs(10), "no fail2ban-regex left", || {
        children_named(agent_pid, "fail2ban-regex") == 0
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", fleet.logs()));
}
