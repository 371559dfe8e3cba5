//! `banhub::store::Store` on both backends: every scenario runs once on SQLite (a file in a temporary
//! directory) and once on PostgreSQL (a fresh database on a throwaway server), as `sqlite::<name>` and
//! `postgres::<name>`. A missing PostgreSQL fails the `postgres::` tests with a message naming
//! `.ci/install-deps`.

use banhub_tests::backends::{Backend, TestDatabase};
use banhub_tests::on_both_backends;
use std::collections::BTreeMap;

use banhub::domain::{AgentFacts, AgentId, Labels, NewServer, Server, ServerId, ServerName};
use banhub::pki::{Ca, PkiError, SignedAgentCert, agent_from_cert};
use banhub::store::{EnrollOutcome, Store, StoreError, TokenRefusal};
use chrono::{DateTime, Duration, Utc};
use tempfile::TempDir;

/// Pool size per store: enough for the concurrent scenarios, small like a test hub.
const POOL: u32 = 4;
/// Rounds of each race: a lost race must never show, whoever wins.
const RACE_ROUNDS: usize = 6;

/// One empty database, and whatever keeps it alive.
struct Db {
    backend: Backend,
    url: String,
    _database: TestDatabase,
}

impl Db {
    fn new(backend: Backend) -> Self {
        let database = TestDatabase::new(backend, "banhub_store");
        Self {
            backend,
            url: database.url.clone(),
            _database: database,
        }
    }

    /// A new store (its own connection pool) on this database, schema migrated.
    async fn connect(&self) -> Store {
        let store = Store::connect(&self.url, POOL)
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e}", self.url));
        let expected = match self.backend {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        };
        assert_eq!(store.backend_name(), expected, "{}", self.url);
        store.ping().await.expect("ping");
        store
    }
}

/// A real CA and a real CSR, so `enroll` stores what the hub would.
struct Pki {
    _dir: TempDir,
    ca: Ca,
    csr: String,
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let ca = Ca::load_or_create(dir.path()).expect("CA");
        let key = rcgen::KeyPair::generate().expect("agent key");
        let csr = rcgen::CertificateParams::new(Vec::<String>::new())
            .expect("params")
            .serialize_request(&key)
            .expect("CSR")
            .pem()
            .expect("CSR PEM");
        Self { _dir: dir, ca, csr }
    }

    /// The `sign` closure for `Store::enroll`.
    fn signer(&self) -> impl FnOnce(&Server, AgentId) -> Result<SignedAgentCert, PkiError> + '_ {
        move |server, agent| {
            self.ca
                .sign_agent_csr(&self.csr, agent, server.name.as_str(), 30)
        }
    }
}

fn name(raw: &str) -> ServerName {
    ServerName::parse(raw).expect("valid name")
}

fn new_server(raw: &str) -> NewServer {
    NewServer {
        name: name(raw),
        description: String::new(),
        labels: Labels::default(),
    }
}

fn facts(version: &str) -> AgentFacts {
    AgentFacts {
        agent_version: version.to_owned(),
        fail2ban_version: "1.0.2".to_owned(),
        hostname: "web-1.example".to_owned(),
        address: "127.0.0.1:40000".to_owned(),
    }
}

/// Now, truncated to the store's millisecond resolution.
fn now_ms() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).expect("in range")
}

/// A new token for `server`, valid for `ttl` (negative: already expired). Returns `(id, secret)`.
async fn token(store: &Store, server: ServerId, ttl: Duration) -> (String, String) {
    let id = uuid::Uuid::new_v4().to_string();
    let secret = banhub::pki::random_secret();
    store
        .create_enrollment_token(server, &id, &secret, Utc::now() + ttl)
        .await
        .expect("create token");
    (id, secret)
}

/// Redeems a token with real signing; returns the outcome and the serials revoked by it.
async fn enroll(
    store: &Store,
    pki: &Pki,
    (id, secret): &(String, String),
    facts: &AgentFacts,
) -> (EnrollOutcome<PkiError>, Vec<String>) {
    store
        .enroll(id, secret, facts, pki.signer())
        .await
        .expect("enroll must not fail at the database")
}

fn enrolled(outcome: EnrollOutcome<PkiError>) -> (Server, SignedAgentCert, AgentId) {
    match outcome {
        EnrollOutcome::Enrolled(server, cert, agent) => (*server, cert, agent),
        EnrollOutcome::Refused(refusal) => panic!("refused: {refusal}"),
        EnrollOutcome::SignFailed(e) => panic!("signing failed: {e}"),
    }
}

fn refusal<E: std::fmt::Debug>(outcome: EnrollOutcome<E>) -> TokenRefusal {
    match outcome {
        EnrollOutcome::Refused(refusal) => refusal,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn der(pem: &str) -> Vec<u8> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("valid PEM")
        .to_vec()
}

// ---------------------------------------------------------------------------------------------------
// Servers

async fn servers_are_created_listed_and_read_back(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    assert!(store.list_servers().await.expect("list").is_empty());

    let labels = Labels::parse(BTreeMap::from([
        ("env".to_owned(), "prod".to_owned()),
        ("dc".to_owned(), "fra 1".to_owned()),
    ]))
    .expect("labels");
    let before = now_ms();
    let web = store
        .create_server(NewServer {
            name: name("web-1"),
            description: "front web server, ünïcode".to_owned(),
            labels: labels.clone(),
        })
        .await
        .expect("create web-1");
    let after = now_ms();
    assert_eq!(web.name, name("web-1"));
    assert_eq!(web.description, "front web server, ünïcode");
    assert_eq!(web.labels, labels);
    assert!(
        before <= web.created_at && web.created_at <= after,
        "{before} <= {} <= {after}",
        web.created_at
    );
    assert_eq!(web.agent_id, None);
    assert_eq!(web.enrolled_at, None);
    assert_eq!(web.last_seen_at, None);
    assert_eq!(web.agent_version, None);
    assert_eq!(web.fail2ban_version, None);
    assert_eq!(web.hostname, None);
    assert_eq!(web.last_address, None);

    let db1 = store.create_server(new_server("db-1")).await.expect("db-1");
    let mail = store.create_server(new_server("mail")).await.expect("mail");
    assert_ne!(web.id, db1.id);

    assert_eq!(
        store.get_server(web.id).await.expect("get"),
        Some(web.clone())
    );
    assert_eq!(store.get_server(ServerId::new()).await.expect("get"), None);
    let listed = store.list_servers().await.expect("list");
    assert_eq!(
        listed,
        [db1.clone(), mail.clone(), web.clone()],
        "ordered by name"
    );

    assert_eq!(
        store.delete_server(mail.id).await.expect("delete"),
        Some(Vec::new()),
        "nothing to revoke for a server that never enrolled"
    );
    assert_eq!(store.get_server(mail.id).await.expect("get"), None);
    assert_eq!(
        store.delete_server(mail.id).await.expect("delete again"),
        None
    );
    assert_eq!(store.list_servers().await.expect("list"), [db1, web]);
}

async fn duplicate_names_are_refused(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let first = store
        .create_server(new_server("web-1"))
        .await
        .expect("first");
    let mut again = new_server("web-1");
    again.description = "another".to_owned();
    match store.create_server(again).await {
        Err(StoreError::NameTaken(taken)) => assert_eq!(taken, "web-1"),
        other => panic!("expected NameTaken, got {other:?}"),
    }
    // Names are case-sensitive: the rule allows both, so both are distinct servers.
    store
        .create_server(new_server("Web-1"))
        .await
        .expect("other case");
    let listed = store.list_servers().await.expect("list");
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&first));
    // A deleted server's name is free again.
    store.delete_server(first.id).await.expect("delete");
    store
        .create_server(new_server("web-1"))
        .await
        .expect("name reused");
}

async fn concurrent_creates_of_one_name_admit_one(backend: Backend) {
    let db = Db::new(backend);
    // Two pools, like two hub replicas on one database.
    let a = db.connect().await;
    let b = db.connect().await;
    for round in 0..RACE_ROUNDS {
        let raw = format!("race-{round}");
        let (left, right) = tokio::join!(
            a.create_server(new_server(&raw)),
            b.create_server(new_server(&raw))
        );
        let (won, lost) = match (left, right) {
            (Ok(won), Err(lost)) | (Err(lost), Ok(won)) => (won, lost),
            (left, right) => {
                panic!("round {round}: expected one winner, got {left:?} and {right:?}")
            }
        };
        assert_eq!(won.name.as_str(), raw);
        assert!(
            matches!(&lost, StoreError::NameTaken(taken) if *taken == raw),
            "round {round}: the loser must see NameTaken, got {lost:?}"
        );
    }
    let listed = a.list_servers().await.expect("list");
    assert_eq!(listed.len(), RACE_ROUNDS);
}

// ---------------------------------------------------------------------------------------------------
// Enrollment

async fn token_is_redeemed_once(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let token = token(&store, server.id, Duration::hours(1)).await;

    let before = now_ms();
    let (outcome, revoked) = enroll(&store, &pki, &token, &facts("0.1.0")).await;
    let (enrolled_server, cert, agent) = enrolled(outcome);
    assert!(
        revoked.is_empty(),
        "first enrollment revokes nothing: {revoked:?}"
    );

    // The certificate is real: it names the agent and carries the recorded serial.
    let (cert_agent, cert_serial) = agent_from_cert(&der(&cert.pem)).expect("parse certificate");
    assert_eq!(cert_agent, agent);
    assert_eq!(cert_serial, cert.serial);
    assert!(cert.not_after > Utc::now() + Duration::days(29));

    assert_eq!(enrolled_server.id, server.id);
    assert_eq!(enrolled_server.agent_id, Some(agent));
    let enrolled_at = enrolled_server.enrolled_at.expect("enrolled_at");
    assert!(before <= enrolled_at && enrolled_at <= now_ms());
    assert_eq!(enrolled_server.agent_version.as_deref(), Some("0.1.0"));
    assert_eq!(enrolled_server.hostname.as_deref(), Some("web-1.example"));
    assert_eq!(
        enrolled_server.last_address.as_deref(),
        Some("127.0.0.1:40000")
    );
    assert_eq!(
        store.get_server(server.id).await.expect("get"),
        Some(enrolled_server.clone()),
        "the stored server is the one returned"
    );
    assert_eq!(
        store.server_of_agent(agent).await.expect("server of agent"),
        Some(enrolled_server)
    );
    assert_eq!(
        store
            .server_of_agent(AgentId::new())
            .await
            .expect("unknown"),
        None
    );
    assert!(
        store
            .cert_is_current(agent, &cert.serial)
            .await
            .expect("current")
    );
    assert!(
        !store
            .cert_is_current(AgentId::new(), &cert.serial)
            .await
            .expect("other agent"),
        "a serial is current only for the agent it was issued to"
    );
    assert!(
        !store
            .cert_is_current(agent, "00ff")
            .await
            .expect("unknown serial")
    );

    let (again, revoked) = enroll(&store, &pki, &token, &facts("0.1.0")).await;
    assert_eq!(refusal(again), TokenRefusal::Used);
    assert!(revoked.is_empty());
    assert!(
        store
            .cert_is_current(agent, &cert.serial)
            .await
            .expect("still current")
    );
    assert_eq!(
        store
            .get_server(server.id)
            .await
            .expect("get")
            .and_then(|s| s.agent_id),
        Some(agent),
        "a refused redemption changes nothing"
    );
}

async fn expired_token_is_refused(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let expired = token(&store, server.id, Duration::seconds(-1)).await;
    let (outcome, _) = enroll(&store, &pki, &expired, &facts("0.1.0")).await;
    assert_eq!(refusal(outcome), TokenRefusal::Expired);
    // Expired still, not used: the refusal did not consume it.
    let (outcome, _) = enroll(&store, &pki, &expired, &facts("0.1.0")).await;
    assert_eq!(refusal(outcome), TokenRefusal::Expired);
    // An expired token with a wrong secret says nothing about the token.
    let (outcome, _) = enroll(
        &store,
        &pki,
        &(expired.0.clone(), "wrong".to_owned()),
        &facts("0.1.0"),
    )
    .await;
    assert_eq!(refusal(outcome), TokenRefusal::Invalid);
    let stored = store
        .get_server(server.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(stored.agent_id, None);
    assert!(store.revoked_serials().await.expect("revoked").is_empty());
}

async fn wrong_secret_or_unknown_token_is_invalid(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let (id, secret) = token(&store, server.id, Duration::hours(1)).await;

    let mut wrong = secret.clone();
    wrong.pop();
    wrong.push(if secret.ends_with('A') { 'B' } else { 'A' });
    for (token_id, presented) in [
        (id.clone(), wrong),
        (id.clone(), String::new()),
        (uuid::Uuid::new_v4().to_string(), secret.clone()),
        (String::new(), secret.clone()),
    ] {
        let (outcome, _) = enroll(
            &store,
            &pki,
            &(token_id.clone(), presented.clone()),
            &facts("x"),
        )
        .await;
        assert_eq!(
            refusal(outcome),
            TokenRefusal::Invalid,
            "token {token_id:?} with secret {presented:?}"
        );
    }
    // Guessing does not burn the token for its rightful holder.
    let (outcome, _) = enroll(&store, &pki, &(id, secret), &facts("x")).await;
    enrolled(outcome);
}

async fn concurrent_redemptions_of_one_token_admit_one(backend: Backend) {
    let db = Db::new(backend);
    let a = db.connect().await;
    let b = db.connect().await;
    let pki = Pki::new();
    for round in 0..RACE_ROUNDS {
        let server = a
            .create_server(new_server(&format!("race-{round}")))
            .await
            .expect("create");
        let token = token(&a, server.id, Duration::hours(1)).await;
        let (facts_a, facts_b) = (facts("a"), facts("b"));
        let (left, right) = tokio::join!(
            a.enroll(&token.0, &token.1, &facts_a, pki.signer()),
            b.enroll(&token.0, &token.1, &facts_b, pki.signer())
        );
        let (winner, loser) = match (left, right) {
            (Ok((won @ EnrollOutcome::Enrolled(..), _)), lost)
            | (lost, Ok((won @ EnrollOutcome::Enrolled(..), _))) => (won, lost),
            (left, right) => panic!("round {round}: nobody enrolled: {left:?} and {right:?}"),
        };
        match loser {
            Ok((outcome, _)) => assert_eq!(refusal(outcome), TokenRefusal::Used, "round {round}"),
            Err(e) => panic!("round {round}: the losing redemption failed: {e}"),
        }
        let (_, cert, agent) = enrolled(winner);
        let stored = a.get_server(server.id).await.expect("get").expect("exists");
        assert_eq!(stored.agent_id, Some(agent), "round {round}");
        assert!(
            a.cert_is_current(agent, &cert.serial)
                .await
                .expect("current")
        );
    }
    assert!(
        a.revoked_serials().await.expect("revoked").is_empty(),
        "a lost race issues no certificate that would need revoking"
    );
}

async fn failed_signing_leaves_the_token_unused(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let token = token(&store, server.id, Duration::hours(1)).await;
    let (outcome, _) = store
        .enroll(&token.0, &token.1, &facts("x"), |_, _| {
            Err::<SignedAgentCert, _>("the CA is unavailable")
        })
        .await
        .expect("enroll");
    match outcome {
        EnrollOutcome::SignFailed(e) => assert_eq!(e, "the CA is unavailable"),
        other => panic!("expected SignFailed, got {other:?}"),
    }
    let stored = store
        .get_server(server.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(stored.agent_id, None);
    let (outcome, _) = enroll(&store, &pki, &token, &facts("x")).await;
    enrolled(outcome);
}

async fn re_enrollment_revokes_the_older_certificate(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let other = store
        .create_server(new_server("web-2"))
        .await
        .expect("create");

    let first = token(&store, server.id, Duration::hours(1)).await;
    let (_, old_cert, old_agent) = enrolled(enroll(&store, &pki, &first, &facts("0.1.0")).await.0);
    let neighbour = token(&store, other.id, Duration::hours(1)).await;
    let (_, neighbour_cert, neighbour_agent) =
        enrolled(enroll(&store, &pki, &neighbour, &facts("0.1.0")).await.0);

    let second = token(&store, server.id, Duration::hours(1)).await;
    let (outcome, revoked) = enroll(&store, &pki, &second, &facts("0.2.0")).await;
    let (server_now, new_cert, new_agent) = enrolled(outcome);
    assert_ne!(new_agent, old_agent);
    assert_ne!(new_cert.serial, old_cert.serial);
    assert_eq!(revoked, std::slice::from_ref(&old_cert.serial));
    assert_eq!(server_now.agent_id, Some(new_agent));
    assert_eq!(server_now.agent_version.as_deref(), Some("0.2.0"));

    assert_eq!(
        store.revoked_serials().await.expect("revoked"),
        std::slice::from_ref(&old_cert.serial)
    );
    assert!(
        !store
            .cert_is_current(old_agent, &old_cert.serial)
            .await
            .expect("old")
    );
    assert!(
        store
            .cert_is_current(new_agent, &new_cert.serial)
            .await
            .expect("new")
    );
    assert!(
        store
            .cert_is_current(neighbour_agent, &neighbour_cert.serial)
            .await
            .expect("neighbour"),
        "another server's certificate is untouched"
    );
    assert_eq!(
        store.server_of_agent(old_agent).await.expect("old agent"),
        None
    );
    assert_eq!(
        store
            .server_of_agent(new_agent)
            .await
            .expect("new agent")
            .map(|s| s.id),
        Some(server.id)
    );
}

async fn deleting_a_server_revokes_its_certificates(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let keep = store
        .create_server(new_server("web-2"))
        .await
        .expect("create");

    let first = token(&store, server.id, Duration::hours(1)).await;
    let (_, cert1, agent1) = enrolled(enroll(&store, &pki, &first, &facts("x")).await.0);
    let second = token(&store, server.id, Duration::hours(1)).await;
    let (_, cert2, agent2) = enrolled(enroll(&store, &pki, &second, &facts("x")).await.0);
    let unused = token(&store, server.id, Duration::hours(1)).await;
    let kept_token = token(&store, keep.id, Duration::hours(1)).await;
    let (_, kept_cert, kept_agent) =
        enrolled(enroll(&store, &pki, &kept_token, &facts("x")).await.0);

    let mut revoked = store
        .delete_server(server.id)
        .await
        .expect("delete")
        .expect("existed");
    revoked.sort();
    let mut expected = vec![cert1.serial.clone(), cert2.serial.clone()];
    expected.sort();
    assert_eq!(
        revoked, expected,
        "every certificate ever issued to the server"
    );

    let mut listed = store.revoked_serials().await.expect("revoked");
    listed.sort();
    assert_eq!(listed, expected);
    assert!(
        !store
            .cert_is_current(agent1, &cert1.serial)
            .await
            .expect("1")
    );
    assert!(
        !store
            .cert_is_current(agent2, &cert2.serial)
            .await
            .expect("2")
    );
    assert!(
        store
            .cert_is_current(kept_agent, &kept_cert.serial)
            .await
            .expect("kept")
    );
    assert_eq!(store.server_of_agent(agent2).await.expect("agent"), None);
    assert_eq!(store.get_server(server.id).await.expect("get"), None);
    assert_eq!(store.list_servers().await.expect("list").len(), 1);

    // The server's remaining token went with it.
    let (outcome, _) = enroll(&store, &pki, &unused, &facts("x")).await;
    assert_eq!(refusal(outcome), TokenRefusal::Invalid);
}

// ---------------------------------------------------------------------------------------------------
// Liveness and persistence

async fn mark_seen_records_liveness_and_facts(backend: Backend) {
    let db = Db::new(backend);
    let store = db.connect().await;
    let pki = Pki::new();
    let server = store
        .create_server(new_server("web-1"))
        .await
        .expect("create");
    let other = store
        .create_server(new_server("web-2"))
        .await
        .expect("create");
    let token = token(&store, server.id, Duration::hours(1)).await;
    enrolled(enroll(&store, &pki, &token, &facts("0.1.0")).await.0);

    let before = now_ms();
    store.mark_seen(server.id, None).await.expect("seen");
    let seen = store
        .get_server(server.id)
        .await
        .expect("get")
        .expect("exists");
    let first_seen = seen.last_seen_at.expect("last_seen_at");
    assert!(before <= first_seen && first_seen <= now_ms());
    assert_eq!(
        seen.agent_version.as_deref(),
        Some("0.1.0"),
        "facts kept without new ones"
    );
    assert_eq!(seen.fail2ban_version, None);

    let reported = AgentFacts {
        agent_version: "0.2.0".to_owned(),
        fail2ban_version: "1.0.2".to_owned(),
        hostname: "web-1.internal".to_owned(),
        address: "127.0.0.1:50000".to_owned(),
    };
    store
        .mark_seen(server.id, Some(&reported))
        .await
        .expect("seen");
    let seen = store
        .get_server(server.id)
        .await
        .expect("get")
        .expect("exists");
    assert!(seen.last_seen_at.expect("last_seen_at") >= first_seen);
    assert_eq!(seen.agent_version.as_deref(), Some("0.2.0"));
    assert_eq!(seen.fail2ban_version.as_deref(), Some("1.0.2"));
    assert_eq!(seen.hostname.as_deref(), Some("web-1.internal"));
    assert_eq!(seen.last_address.as_deref(), Some("127.0.0.1:50000"));

    // An empty fact means "not reported": stored as absent.
    store
        .mark_seen(server.id, Some(&AgentFacts::default()))
        .await
        .expect("seen");
    let seen = store
        .get_server(server.id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(seen.agent_version, None);
    assert_eq!(seen.hostname, None);

    let untouched = store.get_server(other.id).await.expect("get");
    assert_eq!(untouched, Some(other), "only the named server changes");
    store
        .mark_seen(ServerId::new(), None)
        .await
        .expect("an unknown server is not an error");
    assert_eq!(store.list_servers().await.expect("list").len(), 2);
}

async fn data_survives_reconnecting(backend: Backend) {
    let db = Db::new(backend);
    let pki = Pki::new();
    let (server, cert, agent, old_serial, pending) = {
        let store = db.connect().await;
        let server = store
            .create_server(NewServer {
                name: name("web-1"),
                description: "kept".to_owned(),
                labels: Labels::parse(BTreeMap::from([("env".to_owned(), "prod".to_owned())]))
                    .expect("labels"),
            })
            .await
            .expect("create");
        let first = token(&store, server.id, Duration::hours(1)).await;
        let (_, old, _) = enrolled(enroll(&store, &pki, &first, &facts("0.1.0")).await.0);
        let second = token(&store, server.id, Duration::hours(1)).await;
        let (_, cert, agent) = enrolled(enroll(&store, &pki, &second, &facts("0.1.0")).await.0);
        store
            .mark_seen(server.id, Some(&facts("0.1.1")))
            .await
            .expect("seen");
        let server = store
            .get_server(server.id)
            .await
            .expect("get")
            .expect("exists");
        let pending = token(&store, server.id, Duration::hours(1)).await;
        (server, cert, agent, old.serial, (first, pending))
    };

    // A new pool, as after a hub restart; connecting again also re-runs the (finished) migrations.
    let store = db.connect().await;
    assert_eq!(
        store.list_servers().await.expect("list"),
        std::slice::from_ref(&server)
    );
    assert_eq!(
        store.server_of_agent(agent).await.expect("agent"),
        Some(server.clone())
    );
    assert!(
        store
            .cert_is_current(agent, &cert.serial)
            .await
            .expect("current")
    );
    assert_eq!(
        store.revoked_serials().await.expect("revoked"),
        [old_serial]
    );
    let (used, unused) = pending;
    assert_eq!(
        refusal(enroll(&store, &pki, &used, &facts("x")).await.0),
        TokenRefusal::Used
    );
    let (outcome, revoked) = enroll(&store, &pki, &unused, &facts("x")).await;
    enrolled(outcome);
    assert_eq!(revoked, [cert.serial]);
}

on_both_backends!(
    multi_thread:
    servers_are_created_listed_and_read_back,
    duplicate_names_are_refused,
    concurrent_creates_of_one_name_admit_one,
    token_is_redeemed_once,
    expired_token_is_refused,
    wrong_secret_or_unknown_token_is_invalid,
    concurrent_redemptions_of_one_token_admit_one,
    failed_signing_leaves_the_token_unused,
    re_enrollment_revokes_the_older_certificate,
    deleting_a_server_revokes_its_certificates,
    mark_seen_records_liveness_and_facts,
    data_survives_reconnecting,
);
