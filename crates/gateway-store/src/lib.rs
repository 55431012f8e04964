//! Storage backends for the domain's ports: SQLite (in memory or a file) and PostgreSQL, through
//! sqlx.
//!
//! This crate holds all SQL of the gateway and nothing else: no business rules (those are in
//! `gateway-domain`), no HTTP. A store is chosen by a spec string: `memory`, `sqlite:<path>` or
//! `postgres://…`.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, Membership, MembershipLookup, Role};
use gateway_domain::StoreHealth;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// Which backend a store spec names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// SQLite in memory: the standalone mode; nothing survives the process.
    Memory,
    /// A SQLite file (WAL, fsync on commit): the default of `gatewayd`.
    SqliteFile(String),
    /// A PostgreSQL URL: several gateway replicas may share it.
    Postgres(String),
}

impl FromStr for StoreSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "memory" {
            Ok(StoreSpec::Memory)
        } else if let Some(path) = text.strip_prefix("sqlite:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err("sqlite: needs a file path, e.g. sqlite:gateway.db".into());
            }
            Ok(StoreSpec::SqliteFile(path.to_owned()))
        } else if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            Ok(StoreSpec::Postgres(text.to_owned()))
        } else {
            Err(format!(
                "unknown store '{text}': use memory, sqlite:<path> or postgres://…"
            ))
        }
    }
}

/// Why the store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or could not be reached.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema could not be brought up to date.
    #[error("migration failed: {0}")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

/// Turns a database failure into the contract's error: unreachable → 503, anything else → 500.
fn db_error(err: sqlx::Error) -> Error {
    match err {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            Error::ServiceUnavailable(format!("store unreachable: {err}"))
        }
        other => Error::Internal(format!("store error: {other}")),
    }
}

/// A connected store.
#[derive(Debug, Clone)]
pub enum Store {
    /// SQLite, in memory or a file.
    Sqlite {
        /// The pool.
        pool: SqlitePool,
        /// Whether it is the in-memory mode.
        in_memory: bool,
    },
    /// PostgreSQL.
    Postgres(PgPool),
}

impl Store {
    /// Opens (creating if needed) the store a spec names and brings its schema up to date.
    pub async fn open(spec: &StoreSpec) -> Result<Self, StoreError> {
        let store = Self::connect(spec).await?;
        match &store {
            Store::Sqlite { pool, .. } => sqlx::migrate!("./migrations/sqlite").run(pool).await?,
            Store::Postgres(pool) => sqlx::migrate!("./migrations/postgres").run(pool).await?,
        }
        Ok(store)
    }

    async fn connect(spec: &StoreSpec) -> Result<Self, StoreError> {
        match spec {
            StoreSpec::Memory => {
                // One connection: every connection to `:memory:` would be its own database.
                let options = SqliteConnectOptions::from_str("sqlite::memory:")?;
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect_with(options)
                    .await?;
                Ok(Store::Sqlite {
                    pool,
                    in_memory: true,
                })
            }
            StoreSpec::SqliteFile(path) => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    // FULL: a committed transaction is on disk before the commit returns.
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(5))
                    .foreign_keys(true);
                let pool = SqlitePoolOptions::new()
                    .max_connections(8)
                    .connect_with(options)
                    .await?;
                Ok(Store::Sqlite {
                    pool,
                    in_memory: false,
                })
            }
            StoreSpec::Postgres(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(16)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(url)
                    .await?;
                Ok(Store::Postgres(pool))
            }
        }
    }
}

#[async_trait]
impl StoreHealth for Store {
    fn kind(&self) -> &'static str {
        match self {
            Store::Sqlite {
                in_memory: true, ..
            } => "memory",
            Store::Sqlite {
                in_memory: false, ..
            } => "sqlite",
            Store::Postgres(_) => "postgres",
        }
    }

    async fn ping(&self) -> Result<(), Error> {
        let result = match self {
            Store::Sqlite { pool, .. } => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()),
            Store::Postgres(pool) => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()),
        };
        result.map_err(|e| Error::ServiceUnavailable(format!("store unreachable: {e}")))
    }
}

#[async_trait]
impl MembershipLookup for Store {
    async fn membership(&self, coop: &CoopId, did: &Did) -> Result<Membership, Error> {
        // One round trip: the coop's existence and the member's role together.
        const SQL: &str = "SELECT c.id, m.role FROM coops c LEFT JOIN members m \
                           ON m.coop_id = c.id AND m.did = $2 WHERE c.id = $1";
        let row: Option<(String, Option<String>)> = match self {
            Store::Sqlite { pool, .. } => {
                sqlx::query_as(SQL)
                    .bind(coop.as_str())
                    .bind(did.as_str())
                    .fetch_optional(pool)
                    .await
            }
            Store::Postgres(pool) => {
                sqlx::query_as(SQL)
                    .bind(coop.as_str())
                    .bind(did.as_str())
                    .fetch_optional(pool)
                    .await
            }
        }
        .map_err(db_error)?;
        Ok(match row {
            None => Membership::NoSuchCoop,
            Some((_, None)) => Membership::NotMember,
            Some((_, Some(role))) => Membership::Member(
                Role::parse(&role)
                    .ok_or_else(|| Error::Internal(format!("unknown role '{role}' in store")))?,
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_specs() {
        assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
        assert_eq!(
            "sqlite:gw.db".parse(),
            Ok(StoreSpec::SqliteFile("gw.db".into()))
        );
        assert_eq!(
            "sqlite://gw.db".parse(),
            Ok(StoreSpec::SqliteFile("gw.db".into()))
        );
        assert!(matches!(
            "postgres://u@h/db".parse(),
            Ok(StoreSpec::Postgres(_))
        ));
        assert!("mysql://x".parse::<StoreSpec>().is_err());
        assert!("sqlite:".parse::<StoreSpec>().is_err());
    }

    #[tokio::test]
    async fn memory_store_answers() {
        let store = Store::open(&StoreSpec::Memory).await.unwrap();
        assert_eq!(store.kind(), "memory");
        store.ping().await.unwrap();
    }

    #[tokio::test]
    async fn membership_distinguishes_the_three_cases() {
        let store = Store::open(&StoreSpec::Memory).await.unwrap();
        let Store::Sqlite { pool, .. } = &store else {
            unreachable!()
        };
        sqlx::query("INSERT INTO coops VALUES ('c1', 'C', 'worker', '', 0, 'did:key:za', 'hours', -1000000000, 1000000000, 0, 50)")
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO members VALUES ('c1', 'did:key:za', 'admin', 0, NULL)")
            .execute(pool)
            .await
            .unwrap();
        let c1 = CoopId::parse("c1").unwrap();
        let a = Did::parse("did:key:za").unwrap();
        let b = Did::parse("did:key:zb").unwrap();
        assert_eq!(
            store.membership(&c1, &a).await.unwrap(),
            Membership::Member(Role::Admin)
        );
        assert_eq!(
            store.membership(&c1, &b).await.unwrap(),
            Membership::NotMember
        );
        assert_eq!(
            store
                .membership(&CoopId::parse("c2").unwrap(), &a)
                .await
                .unwrap(),
            Membership::NoSuchCoop
        );
    }
}
