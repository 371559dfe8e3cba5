//! `banhub-bench`: the event path's benchmarks, on SQLite and PostgreSQL.
//!
//! * `ingest`: callbacks through a real agent's relay, spool and session into a real hub, with the
//!   database-only limits measured in the same run.
//! * `queries`: the events API over a seeded history of 10 million events: pages, deep pages,
//!   filters, text search, stats and insights.
//! * `render`: the dashboard, events and servers pages in Chromium over a seeded history of 1,000
//!   servers and 10 million events, beside a hub with one server and none.
//!
//! Both drive the release build of `banhub` and `banhub-agent` by default (`cargo build --release -p
//! banhub -p banhub-agent` first). Commands, conditions and figures: `bench/README.md`.

mod ingest;
use banhub_bench::measure;
mod queries;
mod render;
mod workload;

use anyhow::Context as _;
use banhub_tests::PostgresServer;
use clap::{Parser, Subcommand, ValueEnum};
use sea_orm::{ConnectionTrait as _, Database};

#[derive(Debug, Parser)]
#[command(about = "Benchmarks of banhub's event path")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Sustained callbacks through relay → spool → session → hub → database.
    Ingest(ingest::IngestArgs),
    /// Event queries over a large seeded history.
    Queries(queries::QueryArgs),
    /// First data of the UI's pages in Chromium over a large seeded history.
    Render(render::RenderArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Sqlite,
    Postgres,
    Both,
}

impl Backend {
    /// The single backends this choice covers.
    pub fn each(self) -> Vec<Self> {
        match self {
            Self::Both => vec![Self::Sqlite, Self::Postgres],
            one => vec![one],
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres => "PostgreSQL",
            Self::Both => "SQLite and PostgreSQL",
        }
    }
}

/// Where a run's databases live: files in a temporary directory for SQLite, or databases on a
/// throwaway PostgreSQL server made durable again (the test harness turns fsync off).
pub struct Databases {
    backend: Backend,
    dir: tempfile::TempDir,
    postgres: Option<PostgresServer>,
    hub_url: Option<String>,
}

impl Databases {
    pub fn start(backend: Backend) -> anyhow::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("banhub-bench-db-")
            .tempdir()?;
        let (postgres, hub_url) = if backend == Backend::Postgres {
            let server = PostgresServer::start().context("starting PostgreSQL")?;
            durable(&server.url())?;
            let url = server.create_database("hub")?;
            (Some(server), Some(url))
        } else {
            (None, None)
        };
        Ok(Self {
            backend,
            dir,
            postgres,
            hub_url,
        })
    }

    pub fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// A new, empty database.
    pub fn fresh(&self, name: &str) -> anyhow::Result<String> {
        match &self.postgres {
            Some(server) => server.create_database(name),
            None => Ok(format!(
                "sqlite://{}?mode=rwc",
                self.dir.path().join(format!("{name}.db")).display()
            )),
        }
    }

    /// The database the hub uses; `None`: the hub's default SQLite file in its data directory.
    pub fn hub_url(&self) -> anyhow::Result<Option<String>> {
        Ok(self.hub_url.clone())
    }

    /// CPU seconds of the PostgreSQL server processes so far (0 on SQLite, which runs in-process).
    pub fn server_cpu(&self) -> f64 {
        if self.postgres.is_some() {
            measure::cpu_seconds_of_command("postgres")
        } else {
            0.0
        }
    }

    /// ", PostgreSQL server N s" since `before`, or nothing on SQLite.
    pub fn server_cpu_note(&self, before: f64) -> String {
        if self.postgres.is_some() {
            format!(
                ", PostgreSQL server {:.1} s",
                (self.server_cpu() - before).max(0.0)
            )
        } else {
            String::new()
        }
    }
}

/// Turns durability back on (fsync, synchronous commit, full-page writes: PostgreSQL's defaults),
/// which the test harness switches off; all three take effect on reload.
fn durable(url: &str) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        runtime.block_on(async {
            let db = Database::connect(url).await?;
            for sql in [
                "ALTER SYSTEM SET fsync = on",
                "ALTER SYSTEM SET synchronous_commit = on",
                "ALTER SYSTEM SET full_page_writes = on",
                "SELECT pg_reload_conf()",
            ] {
                db.execute_unprepared(sql).await?;
            }
            db.close().await?;
            anyhow::Ok(())
        })
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Ingest(args) => ingest::run(args).await,
        Command::Queries(args) => queries::run(args).await,
        Command::Render(args) => render::run(args).await,
    }
}
