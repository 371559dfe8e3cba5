//! Every `/api` and `/auth` answer, errors included, says `nosniff` and `no-store`; the UI's hashed
//! assets keep their long cache; HSTS is sent once operators reach the hub over HTTPS.

use banhub_tests::HubProcess;
use reqwest::StatusCode;
use reqwest::header::{
    CACHE_CONTROL, HeaderName, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS,
};

fn header(response: &reqwest::Response, name: HeaderName) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[tokio::test]
async fn api_and_auth_answers_are_nosniff_and_no_store_errors_included() {
    let hub = HubProcess::start().expect("hub");
    let admin = hub.client();
    let anonymous = hub.anonymous_client().expect("client");
    let answers = [
        (admin.get(hub.url("/api/servers")), StatusCode::OK),
        (
            admin.get(hub.url("/api/no-such-route")),
            StatusCode::NOT_FOUND,
        ),
        (
            anonymous.get(hub.url("/api/servers")),
            StatusCode::UNAUTHORIZED,
        ),
        (
            admin
                .post(hub.url("/api/servers"))
                .body("{")
                .header("content-type", "application/json"),
            StatusCode::BAD_REQUEST,
        ),
        (anonymous.get(hub.url("/auth/status")), StatusCode::OK),
        (
            anonymous.get(hub.url("/auth/user")),
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (request, expected) in answers {
        let response = request.send().await.expect("request");
        let what = format!("{} {}", response.status(), response.url().path());
        assert_eq!(response.status(), expected, "{what}");
        assert_eq!(
            header(&response, X_CONTENT_TYPE_OPTIONS).as_deref(),
            Some("nosniff"),
            "{what}"
        );
        assert_eq!(
            header(&response, CACHE_CONTROL).as_deref(),
            Some("no-store"),
            "{what}"
        );
        assert_eq!(
            header(&response, STRICT_TRANSPORT_SECURITY),
            None,
            "plain HTTP: {what}"
        );
    }

    // The UI's hashed assets are still cached for good.
    let index = admin.get(hub.url("/")).send().await.expect("index");
    let index = index.text().await.expect("index body");
    let start = index.find("src=\"./assets/").expect("a script tag") + "src=\"./".len();
    let script = &index[start..start + index[start..].find('"').expect("quote")];
    let asset = admin
        .get(hub.url(&format!("/{script}")))
        .send()
        .await
        .expect("asset");
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(
        header(&asset, CACHE_CONTROL).is_some_and(|v| v.contains("immutable")),
        "{:?}",
        asset.headers()
    );
    assert_eq!(
        header(&asset, X_CONTENT_TYPE_OPTIONS).as_deref(),
        Some("nosniff")
    );
}

#[tokio::test]
async fn an_https_public_url_adds_hsts() {
    let hub = HubProcess::builder()
        .env("BANHUB_AUTH__PUBLIC_URL", "https://hub.example.com")
        .start()
        .expect("hub");
    for path in ["/api/servers", "/auth/status", "/"] {
        let response = hub
            .client()
            .get(hub.url(path))
            .send()
            .await
            .expect("request");
        assert!(
            header(&response, STRICT_TRANSPORT_SECURITY).is_some_and(|v| v.starts_with("max-age=")),
            "{path}: {:?}",
            response.headers()
        );
    }
}
