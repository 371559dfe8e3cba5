//! The operator web UI in a real browser: Playwright (`hub/ui/e2e/ui.spec.ts`) drives Debian's
//! Chromium through the UI served by a real hub, with two real agents beside fail2ban sandboxes, a
//! real OpenID provider (oidc-provider: the admin and the viewer sign in on its pages) and a real SMTP
//! server (maildev). This file starts everything, runs the suite with the addresses in `BANHUB_*`
//! variables (see `hub/ui/e2e/env.ts`), fails with Playwright's output when it fails, and checks the
//! real state behind what the browser saw (fail2ban's bans, maildev's inbox, the hub's sessions) and
//! the screenshots it must leave under `target/ui-e2e/`. The address page's lookups
//! (`hub/ui/e2e/address.spec.ts`) reach RDAP and AbuseIPDB as served by `LookupServer`, and its
//! country and ASN come from MaxMind databases written here. After the suite, the accessibility
//! audit (`hub/ui/e2e/a11y.spec.ts`: axe-core and a keyboard walk of every page) runs against what it
//! left. A second, small run
//! (`hub/ui/e2e/local-login.spec.ts`) signs in with the local administrator's form of a hub without
//! OIDC.

use std::path::{Path, PathBuf};
use std::process::Command;

use banhub_tests::TestFleet;
use banhub_tests::agent::relay_addr;
use banhub_tests::fail2ban::Fail2banSandbox;
use banhub_tests::hub::HubProcess;
use banhub_tests::lookup_server::LookupServer;
use banhub_tests::mmdb::{AsnNetwork, CountryNetwork, write_asn_db, write_country_db};
use banhub_tests::oidc::OidcProvider;
use banhub_tests::process::{target_dir, workspace_root};
use banhub_tests::smtp::SmtpServer;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const INSTALL_HINT: &str = "run .ci/install-deps (its .ci/deps.d/40-ui.sh installs Debian's chromium and runs npm ci in hub/ui)";
/// The jail every sandbox watches with the shipped action attached.
const JAIL: &str = "testauth";
/// Shared bans a minute one server may cause before the storm breaker pauses it.
const STORM_LIMIT: &str = "3";

/// Installs the shipped fail2ban action on `testauth`, posting to the agent's relay, so bans caused
/// by log lines travel the real event path to the hub.
fn attach_action(sandbox: &Fail2banSandbox, agent_state: &Path) {
    let conf = sandbox.conf_dir();
    let deploy = workspace_root().join("deploy/fail2ban");
    std::fs::copy(
        deploy.join("action.d/banhub.conf"),
        conf.join("action.d/banhub.conf"),
    )
    .expect("action installed");
    let relay = relay_addr(agent_state).expect("relay address");
    std::fs::write(
        conf.join("jail.local"),
        format!(
            "[{JAIL}]\naction = filelog\n         banhub[notify=\"{notify}\", relay_url=\"http://{relay}\", secret_file=\"{secret}\"]\n",
            notify = deploy.join("banhub-notify").display(),
            secret = agent_state.join("relay.secret").display(),
        ),
    )
    .expect("jail.local");
    sandbox
        .client(&["reload", "--restart", JAIL])
        .expect("reload");
}

/// The addresses fail2ban has banned in `testauth` right now.
fn banned(sandbox: &Fail2banSandbox) -> String {
    sandbox
        .client(&["get", JAIL, "banned"])
        .expect("fail2ban answers")
}

/// Every screenshot the browser suite must leave behind.
fn expected_screenshots() -> Vec<String> {
    let pages = [
        "dashboard",
        "servers",
        "jails",
        "jail",
        "events",
        "insights",
        "filters",
        "settings",
        "audit",
        "sharing",
        "defence",
        "protected",
        "feeds",
        "address",
    ];
    let mut names = Vec::new();
    for scheme in ["light", "dark"] {
        names.push(format!("login-{scheme}.png"));
        for page in pages {
            names.push(format!("{page}-{scheme}.png"));
            names.push(format!("{page}-{scheme}-phone.png"));
        }
    }
    names
}

/// The browser suite's prerequisites, each a failure naming the script that installs it.
fn require_browser_tooling(ui: &Path) -> PathBuf {
    let playwright = ui.join("node_modules/.bin/playwright");
    assert!(
        playwright.exists(),
        "{} is missing: {INSTALL_HINT}",
        playwright.display()
    );
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: {INSTALL_HINT}"
    );
    playwright
}

/// Points the hub's lookups at `server`, and its country and ASN databases at files written in
/// `dir` that know Google's 8.8.8.0/24.
async fn configure_lookups(hub: &HubProcess, server: &LookupServer, dir: &Path) {
    let country = dir.join("GeoLite2-Country.mmdb");
    let asn = dir.join("GeoLite2-ASN.mmdb");
    write_country_db(
        &country,
        &[CountryNetwork::new("8.8.8.0/24", "US", "United States")],
    )
    .expect("country database");
    write_asn_db(&asn, &[AsnNetwork::new("8.8.8.0/24", 15169, "GOOGLE")]).expect("ASN database");
    let mut doc: Value = hub
        .client()
        .get(hub.url("/api/settings"))
        .send()
        .await
        .expect("GET /api/settings")
        .json()
        .await
        .expect("json");
    doc["lookups"] = server.settings();
    doc["geoip"] = json!({"databasePath": country, "asnDatabasePath": asn});
    let response = hub
        .client()
        .post(hub.url("/api/settings"))
        .json(&doc)
        .send()
        .await
        .expect("POST /api/settings");
    assert!(
        response.status().is_success(),
        "{}",
        response.text().await.unwrap_or_default()
    );
}

#[tokio::test]
async fn the_operator_ui_works_in_chromium_against_a_real_fleet() {
    let ui = workspace_root().join("hub/ui");
    let playwright = require_browser_tooling(&ui);

    let smtp = SmtpServer::start().expect("maildev");
    let provider = OidcProvider::start().expect("the OpenID provider starts");
    let hub = TestFleet::hub_builder()
        .oidc(&provider)
        // The storm scenario trips the breaker with a handful of bans.
        .env("BANHUB_DEFENCE__STORM_LIMIT_PER_MINUTE", STORM_LIMIT)
        .start()
        .expect("hub starts");
    // Operator login is enforced: an anonymous browser gets nothing from the API, so the suite
    // signs in through the provider (alice is an admin there, victor a viewer).
    let anonymous = hub
        .anonymous_client()
        .expect("client")
        .get(hub.url("/api/servers"))
        .send()
        .await
        .expect("GET /api/servers");
    assert_eq!(anonymous.status(), reqwest::StatusCode::UNAUTHORIZED);
    let mut fleet = TestFleet::on(hub);
    for name in ["web-1", "web-2"] {
        let sandbox = Fail2banSandbox::start(name).expect("fail2ban sandbox");
        let host = fleet
            .add_host(name, sandbox, &[])
            .await
            .unwrap_or_else(|e| panic!("{name} comes online: {e:#}"));
        attach_action(&host.sandbox, &host.state_dir());
    }
    let hub = &fleet.hub;
    let (web1, web2) = (fleet.host(0), fleet.host(1));
    let lookups = LookupServer::start().await.expect("lookup server");
    let geoip = tempfile::tempdir().expect("tempdir");
    configure_lookups(hub, &lookups, geoip.path()).await;

    let artifacts = target_dir().join("ui-e2e");
    let screenshots = artifacts.join("screenshots");
    let _ = std::fs::remove_dir_all(&screenshots);
    let mut suite = Command::new(&playwright);
    suite
        .args([
            "test",
            "e2e/alerts.spec.ts",
            "e2e/ui.spec.ts",
            "e2e/i18n.spec.ts",
            "e2e/rollouts.spec.ts",
            "e2e/address.spec.ts",
            "e2e/fleet.spec.ts",
            "e2e/uigaps.spec.ts",
        ])
        .current_dir(&ui)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .env("CHROMIUM_PATH", CHROMIUM)
        .env("BANHUB_URL", hub.url("/"))
        .env("BANHUB_LOOKUP_URL", lookups.url("/"))
        .env("BANHUB_SERVER_A", "web-1")
        .env("BANHUB_SERVER_B", "web-2")
        .env("BANHUB_JAIL", JAIL)
        .env("BANHUB_LOG_A", web1.sandbox.log_path(JAIL))
        .env("BANHUB_F2B_CONF_A", web1.sandbox.conf_dir())
        .env("BANHUB_F2B_SOCK_A", web1.sandbox.socket_path())
        .env("BANHUB_F2B_CONF_B", web2.sandbox.conf_dir())
        .env("BANHUB_F2B_SOCK_B", web2.sandbox.socket_path())
        .env("BANHUB_MAILDEV_URL", smtp.web_url())
        .env("BANHUB_SMTP_PORT", smtp.smtp_port().to_string())
        // Through the provider's login and consent pages (`local`: the local administrator).
        .env("BANHUB_UI_LOGIN", "oidc")
        .env("BANHUB_OIDC_ISSUER", provider.issuer())
        .env("BANHUB_ADMIN_LOGIN", "alice")
        .env("BANHUB_VIEWER_LOGIN", "victor")
        .env("BANHUB_UI_ARTIFACTS", &artifacts)
        .env("BANHUB_SCREENSHOTS", &screenshots);
    // The accessibility audit (`hub/ui/e2e/a11y.spec.ts`) runs after the suite, in the same
    // environment, so its pages show what the suite left: bans, a profile and its rollout, the
    // address lookups.
    let mut a11y = Command::new(&playwright);
    a11y.args(["test", "e2e/a11y.spec.ts"])
        .current_dir(&ui)
        .envs(
            suite
                .get_envs()
                .filter_map(|(key, value)| Some((key, value?))),
        );
    // The suite runs on a blocking thread: this test's runtime keeps serving the lookup server
    // meanwhile.
    let output = tokio::task::spawn_blocking(move || suite.output())
        .await
        .expect("joined")
        .expect("playwright runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = format!(
        "{stdout}\n{}\n--- hub ---\n{}\n--- provider ---\n{}\n--- agent web-1 ---\n{}\n--- fail2ban web-1 ---\n{}",
        String::from_utf8_lossy(&output.stderr),
        hub.logs(),
        provider.logs(),
        web1.agent.logs(),
        web1.sandbox.logs(),
    );
    assert!(
        output.status.success(),
        "the browser suite failed ({}):\n{report}",
        output.status
    );
    println!("{stdout}");
    let audit = tokio::task::spawn_blocking(move || a11y.output())
        .await
        .expect("joined")
        .expect("playwright runs");
    let audit_stdout = String::from_utf8_lossy(&audit.stdout);
    assert!(
        audit.status.success(),
        "the accessibility audit failed ({}):\n{audit_stdout}\n{}",
        audit.status,
        String::from_utf8_lossy(&audit.stderr),
    );
    println!("{audit_stdout}");

    // What the browser did, seen from the real components: the ban from log lines stayed, the
    // address banned and unbanned from the jail page is gone, server B saw none of it, and the test
    // e-mail is in maildev.
    let on_a = banned(&web1.sandbox);
    assert!(on_a.contains("203.0.113.77"), "fail2ban on web-1: {on_a}");
    assert!(!on_a.contains("198.51.100.23"), "fail2ban on web-1: {on_a}");
    let on_b = banned(&web2.sandbox);
    assert!(!on_b.contains("203.0.113.77"), "fail2ban on web-2: {on_b}");
    // The address banned and lifted everywhere from its page is banned nowhere.
    assert!(!on_a.contains("198.51.100.77"), "fail2ban on web-1: {on_a}");
    assert!(!on_b.contains("198.51.100.77"), "fail2ban on web-2: {on_b}");
    let mails = smtp.emails().await.expect("maildev answers");
    assert!(
        mails
            .iter()
            .any(|m| m.to.iter().any(|t| t.address == "ops@example.test")),
        "no test e-mail in maildev: {mails:?}"
    );

    // Both users signed in through the provider, and the admin's logout ended its session: the
    // viewer's is the one left.
    let sessions: Value = hub
        .client()
        .get(hub.url("/api/sessions"))
        .send()
        .await
        .expect("GET /api/sessions")
        .json()
        .await
        .expect("json");
    let live: Vec<(&str, &str, &str)> = sessions
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["subject"].as_str().unwrap_or_default(),
                s["role"].as_str().unwrap_or_default(),
                s["kind"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(live, [("victor", "viewer", "oidc")], "{sessions}");

    // Fleet defence as the hub keeps it: the policy shared a ban, the paused source was resumed,
    // the feed's token is revoked.
    let get = |path: &str| {
        let request = hub.client().get(hub.url(path));
        async move {
            let response = request.send().await.expect("GET");
            assert!(response.status().is_success(), "{}", response.status());
            response.json::<Value>().await.expect("json")
        }
    };
    let policies = get("/api/sharing/policies").await;
    let policy = policies
        .as_array()
        .expect("a list")
        .iter()
        .find(|p| p["name"] == "fleet-ssh")
        .unwrap_or_else(|| panic!("no policy fleet-ssh in {policies}"));
    assert!(
        policy["counters"]["sharedTotal"].as_u64() >= Some(1),
        "{policy}"
    );
    assert_eq!(get("/api/sharing/pauses").await, json!([]), "A was resumed");
    let tokens = get("/api/feeds/edge/tokens").await;
    let tokens = tokens.as_array().expect("a list");
    assert_eq!(tokens.len(), 1, "{tokens:?}");
    assert!(tokens[0]["revokedAt"].is_string(), "{tokens:?}");

    // The address page asked the lookup server for 8.8.8.8 and never for the private address.
    let asked: Vec<String> = lookups.requests().into_iter().map(|r| r.path).collect();
    assert!(
        asked.iter().any(|p| p.ends_with("/rdap/ip/8.8.8.8")),
        "{asked:?}"
    );
    assert!(
        asked.iter().any(|p| p.contains("ipAddress=8.8.8.8")),
        "{asked:?}"
    );
    assert!(
        !asked.iter().any(|p| p.contains("10.20.30.40")),
        "{asked:?}"
    );
    let shot = artifacts.join("address.png");
    assert!(
        std::fs::metadata(&shot).is_ok_and(|m| m.len() > 1000),
        "{} is missing",
        shot.display()
    );

    let missing: Vec<String> = expected_screenshots()
        .into_iter()
        .filter(|name| std::fs::metadata(screenshots.join(name)).map_or(true, |m| m.len() < 1000))
        .collect();
    assert!(
        missing.is_empty(),
        "screenshots missing in {}: {missing:?}",
        screenshots.display()
    );
}

#[tokio::test]
async fn the_local_administrator_signs_in_with_the_login_form() {
    let ui = workspace_root().join("hub/ui");
    let playwright = require_browser_tooling(&ui);
    let admin_password = format!("ui-browser-admin-{}", std::process::id());
    let hub = HubProcess::builder()
        .env("BANHUB_AUTH__LOCAL__PASSWORD", admin_password.as_str())
        .start()
        .expect("hub starts");
    let artifacts = target_dir().join("ui-e2e-local");
    let output = Command::new(&playwright)
        .args(["test", "e2e/local-login.spec.ts"])
        .current_dir(&ui)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .env("CHROMIUM_PATH", CHROMIUM)
        .env("BANHUB_URL", hub.url("/"))
        .env("BANHUB_ADMIN_PASSWORD", admin_password.as_str())
        .env("BANHUB_UI_ARTIFACTS", &artifacts)
        .output()
        .expect("playwright runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the local login scenario failed ({}):\n{stdout}\n{}\n--- hub ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        hub.logs()
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
    // The wrong password and the login are on record; the logout ended the session.
    let audit: Value = hub
        .client()
        .get(hub.url("/api/audit?limit=50"))
        .send()
        .await
        .expect("GET /api/audit")
        .json()
        .await
        .expect("json");
    let entries = audit["entries"].as_array().expect("entries");
    for (action, outcome) in [("login", "denied"), ("login", "ok"), ("logout", "ok")] {
        assert!(
            entries
                .iter()
                .any(|e| e["actor"] == "admin" && e["action"] == action && e["outcome"] == outcome),
            "no {action} {outcome} of admin in {audit}"
        );
    }
    let sessions: Value = hub
        .client()
        .get(hub.url("/api/sessions"))
        .send()
        .await
        .expect("GET /api/sessions")
        .json()
        .await
        .expect("json");
    assert_eq!(sessions, json!([]), "the logout ended the session");
}
