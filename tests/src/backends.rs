//! The two databases the store-level tests run on, an empty database of either kind, the macro
//! that runs each such test on both, a server made in a store, and reading every page of a store's
//! event list.

use crate::postgres::PostgresServer;

/// Which database a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// An empty database for one test: a SQLite file in a temporary directory, or a database on a
/// PostgreSQL server of its own. Keep it until the stores on it are dropped.
pub struct TestDatabase {
    pub url: String,
    _dir: tempfile::TempDir,
    _postgres: Option<PostgresServer>,
}

impl TestDatabase {
    /// `name`: the SQLite file's stem, or the PostgreSQL database's name.
    pub fn new(backend: Backend, name: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let (url, postgres) = match backend {
            Backend::Sqlite => (
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join(format!("{name}.db")).display()
                ),
                None,
            ),
            Backend::Postgres => {
                let server = PostgresServer::start()
                    .unwrap_or_else(|e| panic!("cannot start PostgreSQL: {e:#}"));
                let url = server
                    .create_database(name)
                    .unwrap_or_else(|e| panic!("{e:#}\n{}", server.logs()));
                (url, Some(server))
            }
        };
        Self {
            url,
            _dir: dir,
            _postgres: postgres,
        }
    }
}

/// `on_both_backends!(a, b)` turns each `async fn a(backend: Backend)` of the calling module into
/// two tests, `sqlite::a` and `postgres::a`; `on_both_backends!(multi_thread: a, b)` runs them on a
/// two-worker runtime (for code that spawns tasks and waits for them).
#[macro_export]
macro_rules! on_both_backends {
    (@emit $attr:meta; $($name:ident),*) => {
        mod sqlite {
            $(
                #[$attr]
                async fn $name() {
                    super::$name($crate::backends::Backend::Sqlite).await;
                }
            )*
        }
        mod postgres {
            $(
                #[$attr]
                async fn $name() {
                    super::$name($crate::backends::Backend::Postgres).await;
                }
            )*
        }
    };
    (multi_thread: $($name:ident),* $(,)?) => {
        $crate::on_both_backends!(
            @emit tokio::test(flavor = "multi_thread", worker_threads = 2); $($name),*
        );
    };
    ($($name:ident),* $(,)?) => {
        $crate::on_both_backends!(@emit tokio::test; $($name),*);
    };
}

/// Every event matching `filter` as `(occurred_at in ms, id)`, newest first, walking the store's
/// pages of `page` events by their cursors.
pub async fn store_pages(
    store: &banhub::store::Store,
    filter: &banhub::domain::events::EventFilter,
    page: usize,
) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let got = store.list_events(filter, after, page).await.expect("page");
        out.extend(
            got.events
                .iter()
                .map(|e| (e.occurred_at.timestamp_millis(), e.id.0)),
        );
        match got.next {
            Some(next) => after = Some(next),
            None => return out,
        }
    }
}

/// A server named `name` (no description, no labels) created directly in `store`.
pub async fn create_server(store: &banhub::store::Store, name: &str) -> banhub::domain::ServerId {
    store
        .create_server(banhub::domain::NewServer {
            name: banhub::domain::ServerName::parse(name).expect("name"),
            description: String::new(),
            labels: banhub::domain::Labels::default(),
        })
        .await
        .expect("server")
        .id
}
