//! `GET /auth/logout` ends the session only when it comes from the hub's own pages; from another
//! site it answers 403 and the session stays.

use banhub_tests::HubProcess;
use reqwest::StatusCode;
use reqwest::header::{COOKIE, ORIGIN, REFERER, SET_COOKIE};
use serde_json::{Value, json};

/// Logs in as the local administrator with the generated password; the session cookie.
async fn session(hub: &HubProcess, client: &reqwest::Client) -> String {
    let password_file = hub.data_dir().join("initial-admin-password");
    let password = std::fs::read_to_string(&password_file).expect("password file");
    let response = client
        .post(hub.url("/auth/login"))
        .json(&json!({"username": "admin", "password": password.trim()}))
        .send()
        .await
        .expect("login");
    assert_eq!(response.status(), StatusCode::OK);
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("banhub_session="))
        .and_then(|v| v.split(';').next())
        .expect("a session cookie")
        .to_owned()
}

async fn user(hub: &HubProcess, client: &reqwest::Client, cookie: &str) -> StatusCode {
    let response = client
        .get(hub.url("/auth/user"))
        .header(COOKIE, cookie)
        .send()
        .await
        .expect("user");
    response.status()
}

#[tokio::test]
async fn a_logout_link_on_another_site_does_not_end_the_session() {
    let hub = HubProcess::start().expect("hub");
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let cookie = session(&hub, &client).await;
    let own = hub.http_url().trim_end_matches('/').to_owned();

    let foreign: [&[(reqwest::header::HeaderName, &str)]; 3] = [
        &[(REFERER, "https://evil.example/page")],
        &[(ORIGIN, "https://evil.example")],
        &[(
            reqwest::header::HeaderName::from_static("sec-fetch-site"),
            "cross-site",
        )],
    ];
    for headers in foreign {
        let mut request = client.get(hub.url("/auth/logout")).header(COOKIE, &cookie);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        let response = request.send().await.expect("logout");
        let status = response.status();
        let problem: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, StatusCode::FORBIDDEN, "{headers:?}: {problem}");
        assert_eq!(problem["code"], "cross_origin", "{problem}");
        assert_eq!(
            user(&hub, &client, &cookie).await,
            StatusCode::OK,
            "{headers:?} ended the session"
        );
    }

    // From the hub's own page it does.
    let response = client
        .get(hub.url("/auth/logout"))
        .header(COOKIE, &cookie)
        .header(REFERER, format!("{own}/servers"))
        .header("sec-fetch-site", "same-origin")
        .send()
        .await
        .expect("logout");
    assert_eq!(response.status(), StatusCode::FOUND);
    assert_eq!(user(&hub, &client, &cookie).await, StatusCode::UNAUTHORIZED);
}
