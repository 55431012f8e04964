//! Storage backends for the domain's ports: SQLite (in memory or a file) and PostgreSQL, through
//! sqlx.
//!
//! This crate holds all SQL of the gateway and nothing else: no business rules (those are in
//! `gateway-domain`), no HTTP. A store is chosen by a spec string: `memory`, `sqlite:<path>` or
//! `postgres://…`.

mod conn;
mod reads;
mod writer;

use std::any::Any;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, Membership, MembershipLookup, Role};
use gateway_domain::StoreHealth;
use gateway_domain::ports::{CoopSignal, ErasedJob, EventFeed, Transactor};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::{broadcast, mpsc};

/// The PostgreSQL notification channel of committed events (payload `<coop>\t<seq>`).
pub(crate) const EVENT_CHANNEL: &str = "icn_events";

impl EventFeed for Store {
    fn subscribe(&self) -> broadcast::Receiver<CoopSignal> {
        self.feed.subscribe()
    }
}

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
            Err(format!("unknown store '{text}': use memory, sqlite:<path> or postgres://…"))
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
    /// The writer's thread could not be started.
    #[error("cannot start the store writer: {0}")]
    Writer(#[from] std::io::Error),
}

/// Turns a database failure into the contract's error: unreachable → 503, anything else → 500.
pub(crate) fn db_error(err: sqlx::Error) -> Error {
    match err {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
            Error::ServiceUnavailable(format!("store unreachable: {err}"))
        }
        other => Error::Internal(format!("store error: {other}")),
    }
}

pub(crate) enum Backend {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Sqlite(_) => "Sqlite",
            Backend::Postgres(_) => "Postgres",
        })
    }
}

/// A connected store: the domain's ports over SQLite or PostgreSQL.
#[derive(Debug)]
pub struct Store {
    pub(crate) backend: Backend,
    /// The SQLite writer's queue (absent for PostgreSQL).
    writer: Option<mpsc::Sender<writer::Job>>,
    /// Committed-event signals.
    feed: broadcast::Sender<CoopSignal>,
    in_memory: bool,
    /// The WAL checkpointer of a SQLite file, stopped with the store.
    checkpointer: Option<tokio::task::AbortHandle>,
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(task) = &self.checkpointer {
            task.abort();
        }
    }
}

impl Store {
    /// Opens (creating if needed) the store a spec names, brings its schema up to date, and
    /// (for SQLite) starts its writer task.
    pub async fn open(spec: &StoreSpec) -> Result<Self, StoreError> {
        let (backend, writer_pool, in_memory) = Self::connect(spec).await?;
        match &backend {
            Backend::Sqlite(pool) => sqlx::migrate!("./migrations/sqlite").run(pool).await?,
            Backend::Postgres(pool) => sqlx::migrate!("./migrations/postgres").run(pool).await?,
        }
        let (feed, _) = broadcast::channel(8192);
        let writer = match (&backend, writer_pool) {
            (Backend::Sqlite(_), Some(writer_pool)) => {
                let (sender, queue) = mpsc::channel(4096);
                writer::spawn_sqlite_writer(writer_pool, queue, feed.clone())?;
                Some(sender)
            }
            (Backend::Sqlite(_), None) => None,
            (Backend::Postgres(pool), _) => {
                tokio::spawn(writer::postgres_listener(pool.clone(), feed.clone()));
                None
            }
        };
        let checkpointer = match &backend {
            Backend::Sqlite(pool) if !in_memory => Some(tokio::spawn(checkpointer(pool.clone())).abort_handle()),
            _ => None,
        };
        Ok(Self { backend, writer, feed, in_memory, checkpointer })
    }

    /// The backend, the SQLite writer's own pool (`None` for PostgreSQL), and whether the store
    /// lives in memory.
    async fn connect(spec: &StoreSpec) -> Result<(Backend, Option<SqlitePool>, bool), StoreError> {
        match spec {
            StoreSpec::Memory => {
                // One connection: every connection to `:memory:` would be its own database.
                let options = SqliteConnectOptions::from_str("sqlite::memory:")?.foreign_keys(true);
                let pool = SqlitePoolOptions::new()
                    .max_connections(1)
                    // See the file pool below.
                    .test_before_acquire(false)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    .connect_with(options)
                    .await?;
                // The writer shares the one connection with the reads.
                Ok((Backend::Sqlite(pool.clone()), Some(pool), true))
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
                // No liveness ping on every checkout: a local file's connection cannot have been
                // dropped by a network, and sqlx's ping is one more round trip to the
                // connection's worker thread on every read.
                let pool = SqlitePoolOptions::new()
                    .max_connections(8)
                    .test_before_acquire(false)
                    .connect_with(options.clone())
                    .await?;
                // The writer keeps one connection of its own for good: its page cache stays
                // valid from one group to the next (no other connection writes), where a
                // connection that the reads also use would find its cache stale and re-read
                // every page it touches.
                let writer = SqlitePoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .idle_timeout(None)
                    .max_lifetime(None)
                    // The checkpointer copies most pages into the database off this thread;
                    // the writer's own checkpoint, at this size, finishes the rest, so that the
                    // WAL starts over instead of growing.
                    .connect_with(options.pragma("wal_autocheckpoint", WRITER_CHECKPOINT_PAGES))
                    .await?;
                Ok((Backend::Sqlite(pool), Some(writer), false))
            }
            StoreSpec::Postgres(url) => {
                let pool = PgPoolOptions::new()
                    .max_connections(32)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect(url)
                    .await?;
                Ok((Backend::Postgres(pool), None, false))
            }
        }
    }

    /// The PostgreSQL pool, for LISTEN/NOTIFY and tests; `None` for SQLite.
    pub fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.backend {
            Backend::Postgres(pool) => Some(pool),
            Backend::Sqlite(_) => None,
        }
    }
}

/// How often the checkpointer copies the WAL's committed pages into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// The WAL size (in 4 KiB pages, so about 40 MB) at which the writer checkpoints after its
/// commit. Measured with `cargo xtask bench --scenario payments` (docs/PERFORMANCE.md): with the
/// checkpointer and this size, about a fifth more payments per second than SQLite's default
/// (the writer checkpointing everything itself, every 1,000 pages).
const WRITER_CHECKPOINT_PAGES: &str = "10000";

/// Copies committed pages from the WAL into the database file, on a pool connection (that is,
/// on another thread than the writer's), so that the writer's own checkpoints (at
/// [`WRITER_CHECKPOINT_PAGES`]) find little left to copy. A passive checkpoint never blocks the
/// writer or the readers, but only a checkpoint that catches up with the last commit lets the
/// WAL start over: under a steady stream of commits that is the writer's, right after one.
async fn checkpointer(pool: SqlitePool) {
    loop {
        tokio::time::sleep(CHECKPOINT_EVERY).await;
        if let Err(err) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&pool).await {
            tracing::warn!("WAL checkpoint failed: {err}");
        }
    }
}

#[async_trait]
impl Transactor for Store {
    async fn run_erased(&self, job: ErasedJob) -> Result<Box<dyn Any + Send>, Error> {
        match (&self.backend, &self.writer) {
            (Backend::Sqlite(_), Some(writer)) => {
                let (job, answer) = writer::Job::new(job);
                writer.send(job).await.map_err(|_| Error::ServiceUnavailable("the store writer has stopped".into()))?;
                answer.await.map_err(|_| Error::ServiceUnavailable("the store writer has stopped".into()))?
            }
            (Backend::Postgres(pool), _) => writer::run_postgres(pool, job, &self.feed).await,
            (Backend::Sqlite(_), None) => Err(Error::Internal("SQLite store without a writer".into())),
        }
    }
}

#[async_trait]
impl StoreHealth for Store {
    fn kind(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) if self.in_memory => "memory",
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    async fn ping(&self) -> Result<(), Error> {
        let result = match &self.backend {
            Backend::Sqlite(pool) => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()),
            Backend::Postgres(pool) => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()),
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
        let row: Option<(String, Option<String>)> = match &self.backend {
            Backend::Sqlite(pool) => {
                sqlx::query_as(SQL).bind(coop.as_str()).bind(did.as_str()).fetch_optional(pool).await
            }
            Backend::Postgres(pool) => {
                sqlx::query_as(SQL).bind(coop.as_str()).bind(did.as_str()).fetch_optional(pool).await
            }
        }
        .map_err(db_error)?;
        Ok(match row {
            None => Membership::NoSuchCoop,
            Some((_, None)) => Membership::NotMember,
            Some((_, Some(role))) => Membership::Member(
                Role::parse(&role).ok_or_else(|| Error::Internal(format!("unknown role '{role}' in store")))?,
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
        assert_eq!("sqlite:gw.db".parse(), Ok(StoreSpec::SqliteFile("gw.db".into())));
        assert_eq!("sqlite://gw.db".parse(), Ok(StoreSpec::SqliteFile("gw.db".into())));
        assert!(matches!("postgres://u@h/db".parse(), Ok(StoreSpec::Postgres(_))));
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
        let Backend::Sqlite(pool) = &store.backend else { unreachable!() };
        sqlx::query("INSERT INTO coops VALUES ('c1', 'C', 'worker', '', 0, 'did:key:za', 'hours', -1000000000, 1000000000, 0, 50, 1)")
            .execute(pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO members VALUES ('c1', 'did:key:za', 'admin', 0, NULL)").execute(pool).await.unwrap();
        let c1 = CoopId::parse("c1").unwrap();
        let a = Did::parse("did:key:za").unwrap();
        let b = Did::parse("did:key:zb").unwrap();
        assert_eq!(store.membership(&c1, &a).await.unwrap(), Membership::Member(Role::Admin));
        assert_eq!(store.membership(&c1, &b).await.unwrap(), Membership::NotMember);
        assert_eq!(store.membership(&CoopId::parse("c2").unwrap(), &a).await.unwrap(), Membership::NoSuchCoop);
    }

    #[tokio::test]
    async fn the_audit_finds_a_corrupted_balance() {
        use gateway_core::{Amount, ManualClock};
        use gateway_domain::coops::{Coops, NewCoop};
        use gateway_domain::ledger::{Ledger, PaymentRequest};
        use gateway_domain::ports::LedgerReads;
        use gateway_domain::trust::TrustGraph;
        use std::sync::Arc;

        let store = Arc::new(Store::open(&StoreSpec::Memory).await.unwrap());
        let clock = Arc::new(ManualClock::at_secs(1_000));
        let coops = Coops::new(store.clone(), store.clone(), store.clone(), clock.clone());
        let ledger = Ledger::new(store.clone(), store.clone(), Arc::new(TrustGraph::new(vec![], 1.0, vec![])), clock);
        let coop = CoopId::parse("c1").unwrap();
        let (a, b) = (Did::parse("did:key:za").unwrap(), Did::parse("did:key:zb").unwrap());
        let new = NewCoop { id: None, name: "C".into(), coop_type: "w".into(), description: String::new() };
        coops.create(&a, &coop, new).await.unwrap();
        coops.add_member(&coop, &b, Role::Member).await.unwrap();
        let pay = PaymentRequest {
            from: a.to_string(),
            to: b.to_string(),
            amount: Amount::from_units(3),
            currency: None,
            memo: None,
        };
        ledger.pay(&coop, pay).await.unwrap();
        assert_eq!(store.unreconciled_accounts().await.unwrap(), 0);
        let Backend::Sqlite(pool) = &store.backend else { unreachable!() };
        sqlx::query("UPDATE balances SET balance = balance + 1 WHERE account = 'did:key:zb'")
            .execute(pool)
            .await
            .unwrap();
        assert_eq!(store.unreconciled_accounts().await.unwrap(), 1);
    }
}
