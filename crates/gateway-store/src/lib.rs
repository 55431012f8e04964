//! Storage backends for the domain's ports: SQLite (in memory or a file), through plain
//! connections used on the calling thread, and PostgreSQL, through sqlx.
//!
//! This crate holds all SQL of the gateway and nothing else: no business rules (those are in
//! `gateway-domain`), no HTTP. A store is chosen by a spec string: `memory`, `sqlite:<path>` or
//! `postgres://…`.

#[macro_use]
mod conn;
mod health;
mod nonces;
mod reads;
mod sqlite;
pub mod testing;
mod view;
mod writer;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, Membership, MembershipLookup, Role};
use gateway_domain::StoreHealth;
use gateway_domain::ports::{CoopSignal, EventFeed, Job, Transactor};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Connection, SqliteConnection};

use crate::conn::Arg;
use crate::sqlite::SqliteDb;

pub use crate::nonces::{KEEP_PAST_EXPIRY_MS, NonceClaim, SharedNonces};
use tokio::sync::{broadcast, mpsc};

/// The NOTIFY channels of the store's schema (PostgreSQL; migration
/// `0024_notify_channels_per_schema.sql`): a channel is the database's, so each schema's
/// deployment has its own.
#[derive(Debug, Clone)]
pub(crate) struct Channels {
    /// Committed events (payload `<coop>\t<seq>`).
    pub(crate) events: String,
    /// Trust-edge changes: every replica reloads its graph.
    pub(crate) trust: String,
}

impl Channels {
    /// The channels of the schema the pool's tables are in.
    async fn of(pool: &PgPool) -> Result<Self, sqlx::Error> {
        let (events, trust) =
            sqlx::query_as("SELECT notify_channel('events'), notify_channel('trust')").fetch_one(pool).await?;
        Ok(Self { events, trust })
    }
}

impl EventFeed for Store {
    fn subscribe(&self) -> broadcast::Receiver<CoopSignal> {
        self.feed.subscribe()
    }
}

/// Which backend a store spec names. Its `Display` and `Debug` forms hide a PostgreSQL
/// password ([`redact_url`]), so a spec can be printed and logged.
#[derive(Clone, PartialEq, Eq)]
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
            Err(format!("unknown store '{}': use memory, sqlite:<path> or postgres://…", redact_url(text)))
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::SqliteFile(path) => write!(f, "sqlite:{path}"),
            StoreSpec::Postgres(url) => f.write_str(&redact_url(url)),
        }
    }
}

impl std::fmt::Debug for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("Memory"),
            StoreSpec::SqliteFile(path) => f.debug_tuple("SqliteFile").field(path).finish(),
            StoreSpec::Postgres(url) => f.debug_tuple("Postgres").field(&redact_url(url)).finish(),
        }
    }
}

/// The URL with its password replaced by `***`: the password of the user-info part
/// (`postgres://user:secret@host/db` → `postgres://user:***@host/db`) and any `password=`
/// query parameter. Text that is not a URL is returned as it is.
pub fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let (scheme, rest) = url.split_at(scheme_end + 3);
    // The user-info ends at the last `@` before the query: a password may hold `/` or `@`.
    let query_start = rest.find(['?', '#']).unwrap_or(rest.len());
    let (authority_and_path, query) = rest.split_at(query_start);
    let mut out = String::from(scheme);
    match authority_and_path.rfind('@') {
        Some(at) => {
            let (userinfo, host) = authority_and_path.split_at(at);
            match userinfo.split_once(':') {
                Some((user, _password)) => {
                    out.push_str(user);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(host);
        }
        None => out.push_str(authority_and_path),
    }
    out.push_str(&redact_query_password(query));
    out
}

/// `?…&password=secret&…` → `?…&password=***&…`.
fn redact_query_password(query: &str) -> String {
    let Some(params) = query.strip_prefix('?') else {
        return query.to_owned();
    };
    let (params, fragment) = params.split_once('#').map_or((params, None), |(p, f)| (p, Some(f)));
    let redacted: Vec<String> = params
        .split('&')
        .map(|param| match param.split_once('=') {
            Some((name, _)) if name.eq_ignore_ascii_case("password") => format!("{name}=***"),
            _ => param.to_owned(),
        })
        .collect();
    let mut out = format!("?{}", redacted.join("&"));
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// The password of a URL (user-info or `password=` parameter), percent-decoded too, so that
/// error messages which echo it can be cleaned.
fn url_secrets(url: &str) -> Vec<String> {
    let mut secrets = Vec::new();
    if let Some(rest) = url.split_once("://").map(|(_, r)| r) {
        let before_query = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
        if let Some(at) = before_query.rfind('@')
            && let Some((_, password)) = before_query[..at].split_once(':')
        {
            secrets.push(password.to_owned());
        }
        if let Some((_, query)) = rest.split_once('?') {
            for param in query.split(['&', '#']) {
                if let Some((name, value)) = param.split_once('=')
                    && name.eq_ignore_ascii_case("password")
                {
                    secrets.push(value.to_owned());
                }
            }
        }
    }
    let decoded: Vec<String> = secrets.iter().map(|s| percent_decode(s)).collect();
    secrets.extend(decoded);
    secrets.retain(|s| !s.is_empty());
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    secrets.dedup();
    secrets
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(byte) = text.get(i + 1..i + 3).and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `message` with every appearance of the URL's password replaced by `***`.
fn scrub(message: &str, url: &str) -> String {
    let mut message = message.to_owned();
    for secret in url_secrets(url) {
        message = message.replace(&secret, "***");
    }
    message
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
    /// A SQLite connection could not be opened or set up.
    #[error("{0}")]
    Sqlite(Error),
    /// PostgreSQL could not be connected to or migrated; the message never holds the
    /// password of the URL.
    #[error("{0}")]
    Postgres(String),
}

/// PostgreSQL's SQLSTATE for a unique (or primary key) violation.
const PG_UNIQUE_VIOLATION: &str = "23505";

/// The SQLSTATE migration 0027's `writer_enters` raises for an unsigned critical operation in a
/// coop that requires signed requests.
const PG_SIGNATURE_REQUIRED: &str = "GW401";

/// Turns a database failure into the interface's error: a unique violation (a row with that id
/// already exists, e.g. two concurrent creations of one coop) → 409 `CONFLICT`, unreachable →
/// 503, anything else → 500.
pub(crate) fn db_error(err: sqlx::Error) -> Error {
    match err {
        sqlx::Error::Database(db) if db.code().as_deref() == Some(PG_UNIQUE_VIOLATION) => {
            Error::conflict(format!("already exists: {}", db.message()))
        }
        // An unsigned critical operation in a coop that requires signed requests, found as it
        // wrote its first event (migration 0027's `writer_enters`).
        sqlx::Error::Database(db) if db.code().as_deref() == Some(PG_SIGNATURE_REQUIRED) => Error::SignatureRequired,
        // A deadlock or serialization failure: PostgreSQL rolled the transaction back and a
        // retry may succeed. Jobs take their locks in the documented order so that this should
        // not happen; if it does, the client is told to retry, never given a 500.
        sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("40P01" | "40001")) => {
            Error::ServiceUnavailable(format!("{}; retry: {}", health::CONFLICT_ABORTED, db.message()))
        }
        // The server going away mid-statement, refusing connections, shutting down, out of
        // resources (disk full, too many connections), or refusing writes (a read-only
        // standby, a database set read-only): SQLSTATE classes 08, 53 and 57P, and 25006.
        sqlx::Error::Database(db)
            if db.code().as_deref().is_some_and(|c| {
                c.starts_with("08") || c.starts_with("53") || c.starts_with("57P") || c == "25006"
            }) =>
        {
            Error::ServiceUnavailable(format!("store unavailable: {}", db.message()))
        }
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => Error::ServiceUnavailable(format!("{}: {err}", health::UNREACHABLE)),
        other => Error::Internal(format!("store error: {other}")),
    }
}

pub(crate) enum Backend {
    Sqlite(SqliteDb),
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
    /// The tasks relaying other replicas' NOTIFY signals, announcing this replica's commits and
    /// numbering events that wait for their number (PostgreSQL), stopped with the store.
    tasks: Vec<tokio::task::AbortHandle>,
    /// This replica's numbering of its commits' events, which announces them (PostgreSQL).
    numberer: Option<Arc<writer::Numberer>>,
    /// PostgreSQL: the connections of reads, apart from the units of work's (the pool of
    /// `Backend::Postgres`), so that a read never waits for a connection behind writes that
    /// queue on a coop's row (see [`StoreOptions::postgres_max_connections`]).
    pub(crate) read_pool: Option<PgPool>,
    /// Woken when a replica (this one included) committed a trust-edge change (PostgreSQL).
    trust_changes: Arc<tokio::sync::Notify>,
    /// The outcome of the latest store-level writes, for readiness.
    write_health: health::WriteHealth,
    /// Whether the latest probe or ping reached the database (PostgreSQL: requests fail at once
    /// while it did not).
    reach: health::Reachability,
    /// The balance read model (SQLite, whose only writer is this process's).
    pub(crate) view: Option<Arc<view::BalanceView>>,
}

impl Drop for Store {
    fn drop(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

/// How a store is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// The most connections a replica opens to PostgreSQL, besides its event listener's: a
    /// quarter of them (at least one) for reads, the rest for units of work, so that reads never
    /// queue behind writes. Several replicas share the server's `max_connections` (100 by
    /// default): size it for replicas × (this + 1), a spare each (docs/DEPLOYMENT.md §7).
    pub postgres_max_connections: u32,
}

/// The connections of units of work and of reads among `max` (at least 2): a quarter, at least
/// one, for reads.
fn split_connections(max: u32) -> (u32, u32) {
    let max = max.max(2);
    let reads = (max / 4).max(1);
    (max - reads, reads)
}

impl Default for StoreOptions {
    /// 16 PostgreSQL connections: more than a small server has cores to run queries on, and
    /// three replicas still fit in PostgreSQL's default 100.
    fn default() -> Self {
        Self { postgres_max_connections: 16 }
    }
}

impl Store {
    /// Opens (creating if needed) the store a spec names, brings its schema up to date, and
    /// (for SQLite) starts its writer thread.
    pub async fn open(spec: &StoreSpec) -> Result<Self, StoreError> {
        Self::open_with(spec, StoreOptions::default()).await
    }

    /// [`Store::open`] with `options`.
    pub async fn open_with(spec: &StoreSpec, options: StoreOptions) -> Result<Self, StoreError> {
        let (feed, _) = broadcast::channel(8192);
        match spec {
            StoreSpec::Memory | StoreSpec::SqliteFile(_) => {
                let migrations = sqlx::migrate!("./migrations/sqlite");
                let db = match spec {
                    StoreSpec::SqliteFile(path) => {
                        // SQLite's own message ("unable to open database file") names nothing.
                        let parent = std::path::Path::new(path).parent().filter(|p| !p.as_os_str().is_empty());
                        if let Some(dir) = parent
                            && !dir.is_dir()
                        {
                            return Err(StoreError::Sqlite(Error::ServiceUnavailable(format!(
                                "the directory {} of the SQLite file does not exist: create it (mkdir -p {}) or give another --store sqlite:<path>",
                                dir.display(),
                                dir.display()
                            ))));
                        }
                        SqliteDb::create_private(std::path::Path::new(path)).map_err(|err| {
                            StoreError::Sqlite(Error::ServiceUnavailable(format!(
                                "cannot create the SQLite file {path}: {err}"
                            )))
                        })?;
                        SqliteDb::file(path.into())
                    }
                    _ => SqliteDb::memory(&migrations).map_err(StoreError::Sqlite)?,
                };
                if let Some(options) = db.migration_options() {
                    // sqlx runs a file's migrations (and records them as it always has), then
                    // lets go.
                    let mut migrating = SqliteConnection::connect_with(&options).await?;
                    // `run_direct` rather than `run`, whose `Acquire` bound makes this future not
                    // provably `Send`, so a caller could not spawn `Store::open`.
                    migrations.run_direct(&mut migrating).await?;
                    migrating.close().await?;
                }
                let (sender, queue) = mpsc::channel(4096);
                let view = Arc::new(view::BalanceView::default());
                writer::spawn_sqlite_writer(
                    db.writer().map_err(StoreError::Sqlite)?,
                    queue,
                    feed.clone(),
                    view.clone(),
                    db.start_checkpointer().map_err(StoreError::Sqlite)?,
                )?;
                db.make_companions_private().map_err(|err| {
                    StoreError::Sqlite(Error::ServiceUnavailable(format!(
                        "cannot restrict the SQLite WAL files to their owner: {err}"
                    )))
                })?;
                Ok(Self {
                    backend: Backend::Sqlite(db),
                    writer: Some(sender),
                    feed,
                    tasks: Vec::new(),
                    numberer: None,
                    read_pool: None,
                    trust_changes: Arc::default(),
                    write_health: health::WriteHealth::default(),
                    reach: health::Reachability::default(),
                    view: Some(view),
                })
            }
            StoreSpec::Postgres(url) => {
                // sqlx's messages may quote the URL (a malformed one, a refused option): say
                // what failed without the password. One connection first: the pool would only
                // say "pool timed out", and this says why (refused, unknown host, bad password,
                // no such database).
                let probe = tokio::time::timeout(Duration::from_secs(5), sqlx::PgConnection::connect(url)).await;
                match probe {
                    Ok(Ok(connection)) => {
                        let _ = connection.close().await;
                    }
                    Ok(Err(e)) => {
                        return Err(StoreError::Postgres(scrub(
                            &format!("cannot connect to PostgreSQL at {}: {e}", redact_url(url)),
                            url,
                        )));
                    }
                    Err(_) => {
                        return Err(StoreError::Postgres(format!(
                            "cannot connect to PostgreSQL at {}: no answer within 5 s",
                            redact_url(url)
                        )));
                    }
                }
                let (writes, reads) = split_connections(options.postgres_max_connections);
                // Each statement of a unit of work sees every commit before it, whatever the
                // server's or the role's default: the numbering and the signing rule where a
                // coop's writers meet rely on it (migrations 0023 and 0027). A later `-c` of the
                // startup options wins over one the URL gives.
                let connect = url
                    .parse::<PgConnectOptions>()
                    .map_err(|e| StoreError::Postgres(scrub(&format!("database error: {e}"), url)))?
                    .options([("default_transaction_isolation", r"read\ committed")]);
                let pool = |size: u32| {
                    let connect = connect.clone();
                    async move {
                        PgPoolOptions::new()
                            .max_connections(size)
                            // INTERFACE.md §10: with the database gone, a request is answered 503 within 1 s.
                            .acquire_timeout(Duration::from_secs(1))
                            // A connection is checked when it comes back (sqlx pings it then), and
                            // again before use only after IDLE_CHECK idle: see there.
                            .test_before_acquire(false)
                            .before_acquire(|conn, meta| {
                                Box::pin(async move {
                                    if meta.idle_for >= IDLE_CHECK
                                        && let Err(err) = conn.ping().await
                                    {
                                        // Closed by the pool, which opens another.
                                        tracing::info!(
                                            "a pooled PostgreSQL connection idle for {:.1} s no longer answers \
                                             ({err}): another is opened",
                                            meta.idle_for.as_secs_f64()
                                        );
                                        return Ok(false);
                                    }
                                    Ok(true)
                                })
                            })
                            .connect_with(connect)
                            .await
                            .map_err(|e| StoreError::Postgres(scrub(&format!("database error: {e}"), url)))
                    }
                };
                let (pool, read_pool) = (pool(writes).await?, pool(reads).await?);
                sqlx::migrate!("./migrations/postgres")
                    .run(&pool)
                    .await
                    .map_err(|e| StoreError::Postgres(scrub(&format!("migration failed: {e}"), url)))?;
                let channels = Channels::of(&pool)
                    .await
                    .map_err(|e| StoreError::Postgres(scrub(&format!("database error: {e}"), url)))?;
                let trust_changes = Arc::<tokio::sync::Notify>::default();
                let listener = tokio::spawn(writer::postgres_listener(
                    pool.clone(),
                    channels.clone(),
                    feed.clone(),
                    trust_changes.clone(),
                ))
                .abort_handle();
                let announcer = Arc::new(writer::Announcer::new(channels.events));
                // Announced over the reads' connections: never behind writes queued on a row.
                let announcing = tokio::spawn(announcer.clone().run(read_pool.clone())).abort_handle();
                let sweeping =
                    tokio::spawn(writer::number_waiting(pool.clone(), feed.clone(), announcer.clone())).abort_handle();
                let numberer = Arc::new(writer::Numberer::new(pool.clone(), feed.clone(), announcer));
                Ok(Self {
                    backend: Backend::Postgres(pool),
                    writer: None,
                    feed,
                    tasks: vec![listener, announcing, sweeping],
                    numberer: Some(numberer),
                    read_pool: Some(read_pool),
                    trust_changes,
                    write_health: health::WriteHealth::default(),
                    reach: health::Reachability::default(),
                    view: None,
                })
            }
        }
    }

    /// Woken whenever a trust-edge change commits on the shared database, through any replica
    /// (PostgreSQL; never woken on SQLite, whose one process keeps its graph itself): the graph
    /// of this replica is stale until it reloads.
    pub fn trust_changes(&self) -> Arc<tokio::sync::Notify> {
        self.trust_changes.clone()
    }

    /// The database connections open now (PostgreSQL: the pool's; SQLite: see
    /// `SqliteDb::open_connections`), for `icn_network_connections_active`.
    pub fn backend_connections(&self) -> usize {
        match &self.backend {
            Backend::Postgres(pool) => (pool.size() + self.read_pool.as_ref().map_or(0, PgPool::size)) as usize,
            Backend::Sqlite(db) => db.open_connections(),
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

impl Store {
    /// Runs a task to its commit (or failure) and records the outcome for readiness.
    async fn run_task(&self, task: writer::Task) -> Result<(), Error> {
        let result = match (&self.backend, &self.writer) {
            (Backend::Sqlite(_), Some(writer)) => {
                let (job, answer) = writer::Job::new(task);
                match writer.send(job).await {
                    Ok(()) => answer
                        .await
                        .unwrap_or_else(|_| Err(Error::ServiceUnavailable("the store writer has stopped".into()))),
                    Err(_) => Err(Error::ServiceUnavailable("the store writer has stopped".into())),
                }
            }
            (Backend::Postgres(pool), _) => {
                // While the probe cannot reach the database, a request's unit of work fails at
                // once; the probe itself always tries.
                if !matches!(task, writer::Task::Probe { .. }) {
                    self.reach.check()?;
                }
                let numberer = self.numberer.as_ref().expect("a PostgreSQL store has a numberer");
                writer::run_postgres(pool, task, numberer).await
            }
            (Backend::Sqlite(_), None) => Err(Error::Internal("SQLite store without a writer".into())),
        };
        if matches!(&result, Err(Error::ServiceUnavailable(_))) {
            metrics::counter!("icn_network_messages_failed_total", "backend" => "database").increment(1);
        }
        let result = result.map(|last| {
            if let Some(seq) = last {
                gateway_domain::ports::appended::record(seq);
            }
        });
        self.write_health.record(&result);
        result
    }
}

#[async_trait]
impl Transactor for Store {
    async fn run(&self, job: Job) -> Result<(), Error> {
        self.run_task(writer::Task::Work(job)).await
    }
}

/// How long the write probe may take before the store counts as stalled.
const PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// How long a new connection to PostgreSQL may take to answer `SELECT 1` before the database
/// counts as out of reach ([`Store::answers`]).
const ANSWER_DEADLINE: Duration = Duration::from_secs(1);

/// How long a pooled PostgreSQL connection may have been idle and still be handed to a read or
/// a unit of work without a round trip to check it first. sqlx pings a connection when it comes
/// back to the pool (the rollback of an abandoned statement, a broken one closed); pinging it
/// again when it is taken cost every unit of work and every read one more round trip, a
/// wake-up of its server process, for a connection checked microseconds before under load
/// (docs/PERFORMANCE.md, "A round trip for every connection taken"). One idle longer is checked,
/// as before: the server's `idle_session_timeout`, a restart or an operator's
/// `pg_terminate_backend` while it sat in the pool are found before a request uses it. What
/// this leaves: a connection ended in the last second of its idleness fails the request that
/// takes it (a 503; the connection is closed), as the requests in flight when the server ended
/// them do; so does one ended shortly before the pool's maintenance pass (every 10 minutes, for
/// `idle_timeout`), which puts back the idle connections it keeps with their idle time started
/// again. And while a server freezes (it
/// answers nothing, the connections stay open), a request that takes a connection used in the
/// last second waits for its statement's deadline ([`POSTGRES_DEADLINE`]), not the pool's 1 s,
/// until the write probe has seen the database unreachable (within about 3 s: then every
/// request is answered 503 at once).
pub(crate) const IDLE_CHECK: Duration = Duration::from_secs(1);

/// How long a request waits for PostgreSQL: for a read, for a unit of work's statements, and
/// for the confirmation of its commit, each. A frozen server (a stopped process, a network that
/// drops packets without resetting connections) never answers: past this the request is
/// answered 503. Generous next to a commit's usual milliseconds (docs/PERFORMANCE.md), so a
/// busy but working database never trips it; background scans (audits, fsck) have no deadline.
pub(crate) const POSTGRES_DEADLINE: Duration = Duration::from_secs(5);

#[async_trait]
impl StoreHealth for Store {
    fn kind(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(db) if !db.is_file() => "memory",
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    async fn ping(&self) -> Result<(), Error> {
        // While the probe cannot reach the database, readiness says so at once; the probe, every
        // second, finds it back.
        self.reach.check()?;
        let read = async { self.connect_reader().await?.conn().fetch_one::<(bool,)>("SELECT 1 = 1", &[]).await };
        let answer = match tokio::time::timeout(PROBE_DEADLINE, read).await {
            Ok(answer) => answer.map(|_| ()),
            Err(_) => Err(health::stalled("a read", PROBE_DEADLINE)),
        };
        answer.map_err(|e| match e {
            e if health::is_unreachable(&e) => e,
            e => Error::ServiceUnavailable(format!("{}: {e}", health::UNREACHABLE)),
        })
    }

    fn writable(&self) -> Result<(), Error> {
        self.write_health.writable()
    }

    async fn probe_write(&self) -> Result<(), Error> {
        let at = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let result = match tokio::time::timeout(PROBE_DEADLINE, self.run_task(writer::Task::Probe { at })).await {
            Ok(result) => result,
            Err(_) => {
                self.write_health.record_stall(PROBE_DEADLINE);
                Err(health::stalled("a commit", PROBE_DEADLINE))
            }
        };
        // A probe that could not get a connection or an answer in time may have waited behind a
        // lock or a busy pool: only a new connection that gets no answer either says the
        // database is out of reach.
        let reach = match &result {
            Err(err) if health::is_unreachable(err) => self.answers().await,
            _ => Ok(()),
        };
        self.reach.observe(&reach);
        result
    }
}

impl Store {
    /// Whether PostgreSQL answers at all, on a connection of its own rather than the pool's
    /// (which a lock or a saturated pool can hold up while the server is well): `SELECT 1`
    /// within [`ANSWER_DEADLINE`]. A refusal from the server (too many clients, a database that
    /// does not exist) is an answer. Always `Ok` for SQLite.
    async fn answers(&self) -> Result<(), Error> {
        let Backend::Postgres(pool) = &self.backend else { return Ok(()) };
        let options = pool.connect_options();
        let check = async {
            let mut connection = sqlx::PgConnection::connect_with(&options).await?;
            sqlx::query("SELECT 1").execute(&mut connection).await?;
            let _ = connection.close().await;
            Ok::<(), sqlx::Error>(())
        };
        match tokio::time::timeout(ANSWER_DEADLINE, check).await {
            Ok(Ok(()) | Err(sqlx::Error::Database(_))) => Ok(()),
            Ok(Err(err)) => Err(Error::ServiceUnavailable(format!("{}: {err}", health::UNREACHABLE))),
            Err(_) => Err(health::stalled("a new connection's first query", ANSWER_DEADLINE)),
        }
    }
}

#[async_trait]
impl MembershipLookup for Store {
    async fn membership(&self, coop: &CoopId, did: &Did) -> Result<Membership, Error> {
        // One round trip: the coop's existence and the member's role together.
        const SQL: &str = "SELECT c.id, m.role FROM coops c LEFT JOIN members m \
                           ON m.coop_id = c.id AND m.did = $2 WHERE c.id = $1";
        let row: Option<(String, Option<String>)> =
            self.read_optional(SQL, &[Arg::from(coop.as_str()), Arg::from(did.as_str())]).await?;
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
    fn losing_the_database_is_unavailable_never_internal() {
        let lost = [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::WorkerCrashed,
            sqlx::Error::Protocol("unexpected end of stream".into()),
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ];
        for err in lost {
            let text = err.to_string();
            assert!(matches!(db_error(err), Error::ServiceUnavailable(_)), "{text}");
        }
        assert!(matches!(db_error(sqlx::Error::RowNotFound), Error::Internal(_)));
    }

    #[test]
    fn parses_specs() {
        assert_eq!("memory".parse(), Ok(StoreSpec::Memory));
        assert_eq!("sqlite:gw.db".parse(), Ok(StoreSpec::SqliteFile("gw.db".into())));
        assert_eq!("sqlite://gw.db".parse(), Ok(StoreSpec::SqliteFile("gw.db".into())));
        assert!(matches!("postgres://u@h/db".parse(), Ok(StoreSpec::Postgres(_))));
        assert!("mysql://x".parse::<StoreSpec>().is_err());
        let unknown = "mysql://u:pw-secret@h/db".parse::<StoreSpec>().unwrap_err();
        assert!(!unknown.contains("pw-secret"), "{unknown}");
        assert!("sqlite:".parse::<StoreSpec>().is_err());
    }

    #[test]
    fn urls_print_without_their_password() {
        for (url, shown) in [
            ("postgres://user:secret@host/db", "postgres://user:***@host/db"),
            (
                "postgresql://user:s%40c:r/t@host:5432/db?sslmode=require",
                "postgresql://user:***@host:5432/db?sslmode=require",
            ),
            ("postgres://user@host/db", "postgres://user@host/db"),
            (
                "postgres://host/db?user=u&password=secret&sslmode=disable",
                "postgres://host/db?user=u&password=***&sslmode=disable",
            ),
            ("postgres://u:p@ss@host/db", "postgres://u:***@host/db"),
            ("memory", "memory"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
        let spec: StoreSpec = "postgres://user:secret@host/db".parse().unwrap();
        assert_eq!(spec.to_string(), "postgres://user:***@host/db");
        assert!(!format!("{spec:?}").contains("secret"), "{spec:?}");
        assert_eq!(StoreSpec::SqliteFile("gw.db".into()).to_string(), "sqlite:gw.db");
    }

    #[test]
    fn error_messages_lose_the_password_in_every_spelling() {
        let url = "postgres://user:p%40ss@host/db?password=other";
        let message = "cannot connect to postgres://user:p%40ss@host/db with p@ss or other";
        let clean = scrub(message, url);
        assert!(!clean.contains("p%40ss") && !clean.contains("p@ss") && !clean.contains("other"), "{clean}");
    }

    #[tokio::test]
    async fn a_failed_open_does_not_echo_the_password() {
        // Nothing listens on port 1; whatever sqlx reports, the password is not in it.
        let spec: StoreSpec = "postgres://gw:hunter2-secret@127.0.0.1:1/db?connect_timeout=1".parse().unwrap();
        let err = Store::open(&spec).await.unwrap_err().to_string();
        assert!(!err.contains("hunter2"), "{err}");
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
        let mut reader = store.reader().await.unwrap();
        let mut conn = reader.conn();
        conn.execute(
            "INSERT INTO coops (id, name, coop_type, description, created_at, created_by, default_currency, \
             credit_limit, high_value_threshold, conversion_fee_ppm, quorum_percent) \
             VALUES ('c1', 'C', 'worker', '', 0, 'did:key:za', 'hours', -1000000000, 1000000000, 0, 50)",
            &[],
        )
        .await
        .unwrap();
        conn.execute("INSERT INTO members VALUES ('c1', 'did:key:za', 'admin', 0, NULL)", &[]).await.unwrap();
        drop(reader);
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
            request_signature: None,
        };
        ledger.pay(&coop, pay, None).await.unwrap();
        assert_eq!(store.unreconciled_accounts().await.unwrap(), 0);
        let mut reader = store.reader().await.unwrap();
        reader
            .conn()
            .execute("UPDATE balances SET balance = balance + 1 WHERE account = 'did:key:zb'", &[])
            .await
            .unwrap();
        drop(reader);
        assert_eq!(store.unreconciled_accounts().await.unwrap(), 1);
    }
}
