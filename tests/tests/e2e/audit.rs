//! The audit log (`GET /api/audit`): every state-changing request is recorded with who asked, what,
//! the server it was about and how it ended — here server add and delete, a settings change, a
//! jail config change, and ban/unban attempts (against a server whose agent is offline, so they are
//! recorded as failed), plus refused attempts by a lower role.

use banhub_tests::hub::HubProcess;
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn call(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn audit(hub: &HubProcess) -> Vec<Value> {
    let (status, page) = call(hub.client().get(hub.url("/api/audit?limit=500"))).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    page["entries"].as_array().expect("entries").clone()
}

fn find<'a>(entries: &'a [Value], action: &str) -> Vec<&'a Value> {
    entries.iter().filter(|e| e["action"] == action).collect()
}

#[tokio::test]
async fn changes_are_recorded_with_who_what_and_where() {
    let hub = HubProcess::start().expect("hub");
    let (status, server) = call(
        hub.client()
            .post(hub.url("/api/servers"))
            .json(&json!({ "name": "web-1" })),
    )
    .await;
    assert!(status.is_success(), "{status} {server}");
    let id = server["server"]["id"].as_str().expect("id").to_owned();

    let (_, settings) = call(hub.client().get(hub.url("/api/settings"))).await;
    let (status, body) = call(hub.client().post(hub.url("/api/settings")).json(&settings)).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    for path in [
        "/api/jails/sshd/ban/192.0.2.7",
        "/api/jails/sshd/unban/192.0.2.7",
    ] {
        let (status, body) = call(
            hub.client()
                .post(hub.url(path))
                .header("X-BanDaemon-Server", &id),
        )
        .await;
        assert!(!status.is_success(), "agent offline: {status} {body}");
    }
    let (status, body) = call(
        hub.client()
            .post(hub.url("/api/jails/sshd/config"))
            .header("X-BanDaemon-Server", &id)
            .json(&json!({})),
    )
    .await;
    assert!(!status.is_success(), "{status} {body}");

    let viewer = hub.client_as("viewer").await.expect("viewer");
    let (status, _) = call(viewer.delete(hub.url(&format!("/api/servers/{id}")))).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // A refused call names the server of its header (the handler that resolves it never ran).
    let (status, _) = call(
        viewer
            .post(hub.url("/api/jails/sshd/ban/192.0.2.8"))
            .header("X-BanDaemon-Server", &id),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = call(
        viewer
            .post(hub.url("/api/jails/sshd/unban/192.0.2.8"))
            .header("X-BanDaemon-Server", "web-1"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, body) = call(hub.client().delete(hub.url(&format!("/api/servers/{id}")))).await;
    assert!(status.is_success(), "{status} {body}");

    let entries = audit(&hub).await;
    let added = find(&entries, "POST /api/servers");
    assert_eq!(added.len(), 1, "{entries:#?}");
    assert_eq!(added[0]["actor"], "token:bootstrap");
    assert_eq!(added[0]["actorKind"], "bootstrap");
    assert_eq!(added[0]["outcome"], "ok");

    let settings = find(&entries, "POST /api/settings");
    assert_eq!(settings.len(), 1, "{entries:#?}");
    assert_eq!(settings[0]["outcome"], "ok");

    for action in [
        "POST /api/jails/{jail}/ban/{ip}",
        "POST /api/jails/{jail}/unban/{ip}",
        "POST /api/jails/{jail}/config",
    ] {
        let found: Vec<_> = find(&entries, action)
            .into_iter()
            .filter(|e| e["outcome"] != "denied")
            .collect();
        assert_eq!(found.len(), 1, "{action}: {entries:#?}");
        assert_eq!(found[0]["serverId"], id.as_str(), "{action}");
        assert_eq!(found[0]["outcome"], "failed", "{action}");
    }
    let denied_of = |action: &str| -> Vec<&Value> {
        find(&entries, action)
            .into_iter()
            .filter(|e| e["outcome"] == "denied")
            .collect()
    };
    let refused_ban = denied_of("POST /api/jails/{jail}/ban/{ip}");
    assert_eq!(refused_ban.len(), 1, "{entries:#?}");
    assert_eq!(refused_ban[0]["serverId"], id.as_str());
    assert_eq!(refused_ban[0]["status"], 403);
    let refused_unban = denied_of("POST /api/jails/{jail}/unban/{ip}");
    assert_eq!(refused_unban.len(), 1, "{entries:#?}");
    assert!(refused_unban[0]["serverId"].is_null(), "{entries:#?}");
    assert_eq!(refused_unban[0]["detail"]["serverHeader"], "web-1");

    let deletes = find(&entries, "DELETE /api/servers/{id}");
    assert_eq!(deletes.len(), 2, "{entries:#?}");
    assert!(deletes.iter().all(|e| e["serverId"] == id.as_str()));
    let denied: Vec<_> = deletes
        .iter()
        .filter(|e| e["outcome"] == "denied")
        .collect();
    assert_eq!(denied.len(), 1, "the viewer's attempt: {deletes:#?}");
    assert_eq!(denied[0]["actorKind"], "token");
    assert_eq!(denied[0]["status"], 403);
    assert!(deletes.iter().any(|e| e["outcome"] == "ok"));

    // Reads are not recorded.
    assert!(find(&entries, "GET /api/settings").is_empty());
}
