//! What a backup needs from the database: a consistent copy of a live SQLite database (`VACUUM
//! INTO`, one read transaction, while the hub keeps writing), the migrations a database holds, and
//! the migrations this binary knows.

use std::path::PathBuf;
use std::time::Duration;

use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection, Statement};
use sea_orm_migration::MigratorTrait;

use super::StoreError;

/// The names of this binary's migrations, oldest first; the last one is its schema version.
pub fn migration_names() -> Vec<String> {
    super::migration::Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect()
}

/// The file of an SQLite URL (`sqlite://path?options` or `sqlite:path`); `None` for PostgreSQL
/// and for an in-memory database.
pub fn sqlite_file(url: &str) -> Option<PathBuf> {
    let rest = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))?;
    let path = rest.split('?').next().unwrap_or_default();
    (!path.is_empty() && path != ":memory:").then(|| PathBuf::from(path))
}

/// One connection to an existing database: never creates an SQLite file, runs no migrations and
/// starts none of the hub's background work.
async fn open(url: &str) -> Result<DatabaseConnection, StoreError> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .max_connections(1)
        .min_connections(1)
        .connect_timeout(Duration::from_secs(10))
        .sqlx_logging(false);
    options.map_sqlx_sqlite_opts(|sqlite| {
        sqlite
            .create_if_missing(false)
            .busy_timeout(Duration::from_secs(30))
    });
    Ok(Database::connect(options).await?)
}

/// The migrations applied to the database at `url`, in the order this binary lists them, then
/// any it does not know (a newer release's) by name.
pub async fn applied_migrations(url: &str) -> Result<Vec<String>, StoreError> {
    let db = open(url).await?;
    let rows = db
        .query_all_raw(Statement::from_string(
            db.get_database_backend(),
            "SELECT version FROM seaql_migrations",
        ))
        .await?;
    let mut applied = rows
        .iter()
        .map(|row| row.try_get::<String>("", "version"))
        .collect::<Result<std::collections::BTreeSet<_>, _>>()?;
    let mut ordered: Vec<String> = migration_names()
        .into_iter()
        .filter(|name| applied.remove(name))
        .collect();
    ordered.extend(applied);
    db.close().await?;
    Ok(ordered)
}

/// Whether the database at `url` holds a banhub schema (its migration table).
pub async fn has_schema(url: &str) -> Result<bool, StoreError> {
    let db = open(url).await?;
    let sql = match db.get_database_backend() {
        sea_orm::DbBackend::Postgres => {
            "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_name = 'seaql_migrations'"
        }
        _ => "SELECT COUNT(*) AS n FROM sqlite_master WHERE name = 'seaql_migrations'",
    };
    let row = db
        .query_one_raw(Statement::from_string(db.get_database_backend(), sql))
        .await?;
    let count = match row {
        Some(row) => row.try_get::<i64>("", "n")?,
        None => 0,
    };
    db.close().await?;
    Ok(count > 0)
}

/// Writes a consistent copy of the SQLite database at `url` into `dest`, which must be missing or
/// an empty file. `VACUUM INTO` reads in one transaction, so the copy holds exactly the
/// transactions committed before it began, and in WAL mode the hub's writers go on meanwhile.
pub async fn sqlite_snapshot(url: &str, dest: &str) -> Result<(), StoreError> {
    let db = open(url).await?;
    db.execute_raw(Statement::from_sql_and_values(
        db.get_database_backend(),
        "VACUUM INTO ?",
        [dest.into()],
    ))
    .await?;
    db.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(url: &str, expected: Option<&str>) {
        assert_eq!(sqlite_file(url), expected.map(PathBuf::from), "{url}");
    }

    #[test]
    fn sqlite_urls_name_their_file() {
        check(
            "sqlite:///var/lib/banhub/banhub.db?mode=rwc",
            Some("/var/lib/banhub/banhub.db"),
        );
        check("sqlite://data/banhub.db", Some("data/banhub.db"));
        check("sqlite:hub.db", Some("hub.db"));
        check("sqlite::memory:", None);
        check("postgres://banhub@localhost/banhub", None);
    }

    #[test]
    fn the_last_migration_is_the_schema_version() {
        let names = migration_names();
        assert!(names.len() > 10);
        assert!(names.iter().any(|n| n.starts_with("m0017")), "{names:?}");
    }
}
