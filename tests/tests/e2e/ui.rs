//! The operator web UI as the real hub binary serves it: the embedded build at every app path, hashed
//! assets with their types and caching, problem 404s under `/api` and `/auth`, and everything below
//! `http.base_path`. (The browser suite, `hub/ui/e2e/ui.spec.ts`, needs the OIDC harness to run.)

use std::path::PathBuf;

use banhub_tests::hub::HubProcess;
use banhub_tests::process::workspace_root;
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_TYPE};
use serde_json::Value;

fn ui_dir() -> PathBuf {
    workspace_root().join("hub/ui")
}

fn header(response: &reqwest::Response, name: reqwest::header::HeaderName) -> String {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The script the page loads, as written in `index.html` (relative to the base).
fn script_of(index: &str) -> String {
    let start = index.find("src=\"./assets/").expect("a script tag") + "src=\"./".len();
    index[start..start + index[start..].find('"').expect("quote")].to_owned()
}

#[tokio::test]
async fn the_hub_serves_the_ui_at_every_app_path_and_problems_under_the_api() {
    let hub = HubProcess::start().expect("hub starts");
    let client = hub.client();

    let mut script = String::new();
    for path in [
        "/",
        "/jails/sshd",
        "/events?ip=192.0.2.1",
        "/login?return_to=%2F",
    ] {
        let response = client.get(hub.url(path)).send().await.expect("GET");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(
            header(&response, CONTENT_TYPE),
            "text/html; charset=utf-8",
            "{path}"
        );
        assert_eq!(header(&response, CACHE_CONTROL), "no-cache", "{path}");
        let body = response.text().await.expect("body");
        assert!(body.contains("<base href=\"/\""), "{path}: {body}");
        script = script_of(&body);
    }

    let asset = client
        .get(hub.url(&format!("/{script}")))
        .send()
        .await
        .expect("GET asset");
    assert_eq!(asset.status(), StatusCode::OK);
    assert_eq!(
        header(&asset, CONTENT_TYPE),
        "text/javascript; charset=utf-8"
    );
    assert!(header(&asset, CACHE_CONTROL).contains("immutable"));
    let bytes = asset.bytes().await.expect("asset body");
    let on_disk =
        std::fs::read(ui_dir().join("dist").join(&script)).expect("the same file in dist/");
    assert_eq!(
        bytes.as_ref(),
        on_disk.as_slice(),
        "the served bundle is the committed one"
    );

    for path in [
        "/api/no-such-thing",
        "/auth/no-such-thing",
        "/assets/gone-0000.js",
    ] {
        let response = client.get(hub.url(path)).send().await.expect("GET");
        assert_eq!(response.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(
            header(&response, CONTENT_TYPE),
            "application/problem+json",
            "{path}"
        );
        let problem: Value = response.json().await.expect("problem");
        assert_eq!(problem["code"], "not_found", "{path}");
    }
    // The API itself is untouched by the fallback.
    let servers = client
        .get(hub.url("/api/servers"))
        .send()
        .await
        .expect("GET");
    assert!(
        header(&servers, CONTENT_TYPE).contains("json"),
        "{servers:?}"
    );
}

#[tokio::test]
async fn under_a_base_path_the_page_and_its_assets_live_below_it() {
    let hub = HubProcess::builder()
        .env("BANHUB_HTTP__BASE_PATH", "/tools/banhub")
        .start()
        .expect("hub starts");
    let client = hub.client();
    let page = client
        .get(hub.url("/tools/banhub/jails/sshd"))
        .send()
        .await
        .expect("GET");
    assert_eq!(page.status(), StatusCode::OK);
    let body = page.text().await.expect("body");
    assert!(body.contains("<base href=\"/tools/banhub/\""), "{body}");
    // Every URL in the page is relative, so the browser resolves it below the base.
    assert!(
        !body.contains("src=\"/") && !body.contains("href=\"/assets"),
        "{body}"
    );
    let asset = client
        .get(hub.url(&format!("/tools/banhub/{}", script_of(&body))))
        .send()
        .await
        .expect("GET asset");
    assert_eq!(asset.status(), StatusCode::OK);
    let outside = client
        .get(hub.url("/jails/sshd"))
        .send()
        .await
        .expect("GET");
    assert_eq!(outside.status(), StatusCode::NOT_FOUND);
}
