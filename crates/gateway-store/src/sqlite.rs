//! SQLite connections, used synchronously on the thread that needs them.
//!
//! A statement on a page already in memory takes microseconds; sending it to another thread
//! and waiting for the answer (as an async driver must) costs more than that in context
//! switches. So the store keeps plain SQLite connections: the writer's own (moved to the writer
//! thread), and idle read connections that a read borrows for the length of its statements on
//! whichever thread runs it. sqlx is used only to bring the schema up to date when the store
//! opens.
//!
//! Both modes are one database shared by several connections: a file in WAL mode, or, in
//! memory, SQLite's `memdb` database of a unique name, which every connection of this process
//! that opens that name shares (with a rollback journal: a commit waits for running reads).

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gateway_core::Error;
use rusqlite::{Connection, OpenFlags};

use crate::conn::sqlite_error;

/// How long a connection waits for a lock another connection holds before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Idle read connections kept for reuse.
const IDLE_READERS: usize = 16;

/// Distinct statements each connection keeps prepared.
const STATEMENT_CACHE: usize = 128;

/// The WAL size (in 4 KiB pages, so about 40 MB) at which the writer checkpoints after its
/// commit. Measured with `cargo xtask bench --scenario payments` (docs/PERFORMANCE.md): with the
/// checkpointer and this size, about a fifth more payments per second than SQLite's default
/// (the writer checkpointing everything itself, every 1,000 pages).
const WRITER_CHECKPOINT_PAGES: u32 = 10_000;

/// How often the checkpointer copies the WAL's committed pages into the database file.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// Where the database is.
#[derive(Debug, Clone)]
enum Location {
    File(PathBuf),
    /// The name of a `memdb` database (`/gateway-<process>-<n>`).
    Memory(String),
}

/// A SQLite database: how to open its connections, and the idle read connections.
#[derive(Debug)]
pub(crate) struct SqliteDb {
    location: Location,
    readers: Mutex<Vec<Connection>>,
    /// Keeps an in-memory database alive while the store lives (it is freed with the last
    /// connection to it).
    _anchor: Option<Mutex<Connection>>,
}

impl SqliteDb {
    /// A database file (created if missing), in WAL mode.
    pub(crate) fn file(path: PathBuf) -> Self {
        Self { location: Location::File(path), readers: Mutex::new(Vec::new()), _anchor: None }
    }

    /// A new, empty in-memory database, alive until the returned value is dropped.
    pub(crate) fn memory() -> Result<Self, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!("/gateway-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let mut db = Self { location: Location::Memory(name), readers: Mutex::new(Vec::new()), _anchor: None };
        db._anchor = Some(Mutex::new(db.connect()?));
        Ok(db)
    }

    /// How sqlx opens the database to run the migrations.
    pub(crate) fn migration_options(&self) -> sqlx::sqlite::SqliteConnectOptions {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        let options = SqliteConnectOptions::new().foreign_keys(true).busy_timeout(BUSY_TIMEOUT);
        match &self.location {
            Location::File(path) => options
                .filename(path)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Full),
            Location::Memory(name) => options.filename(name).vfs("memdb"),
        }
    }

    pub(crate) fn is_file(&self) -> bool {
        matches!(self.location, Location::File(_))
    }

    /// Opens a new connection with the store's settings: foreign keys on; for a file, WAL and
    /// `synchronous = FULL` (a commit is on disk before it returns).
    fn connect(&self) -> Result<Connection, Error> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let db = match &self.location {
            Location::File(path) => Connection::open_with_flags(path, flags),
            Location::Memory(name) => Connection::open_with_flags_and_vfs(name, flags, "memdb"),
        }
        .map_err(sqlite_error)?;
        db.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_error)?;
        db.pragma_update(None, "foreign_keys", true).map_err(sqlite_error)?;
        if self.is_file() {
            db.pragma_update(None, "journal_mode", "wal").map_err(sqlite_error)?;
            db.pragma_update(None, "synchronous", "full").map_err(sqlite_error)?;
        }
        db.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(db)
    }

    /// The writer's connection. For a file, the checkpointer copies most of the WAL into the
    /// database off the writer's thread, and the writer's own checkpoint (at
    /// [`WRITER_CHECKPOINT_PAGES`]) finishes the rest right after a commit, so that the WAL
    /// starts over instead of growing.
    pub(crate) fn writer(&self) -> Result<Connection, Error> {
        let db = self.connect()?;
        if self.is_file() {
            db.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES).map_err(sqlite_error)?;
        }
        Ok(db)
    }

    /// An idle read connection, or a new one.
    pub(crate) fn reader(&self) -> Result<Connection, Error> {
        let idle = self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        match idle {
            Some(db) => Ok(db),
            None => self.connect(),
        }
    }

    /// Takes a read connection back for reuse (closing it when enough are idle). A connection
    /// left inside a transaction is closed, never reused.
    pub(crate) fn give_back(&self, db: Connection) {
        if !db.is_autocommit() {
            return;
        }
        let mut idle = self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < IDLE_READERS {
            idle.push(db);
        }
    }

    /// Starts the checkpointer of a database file: a thread with its own connection that runs a
    /// passive checkpoint (which never blocks the writer or the readers) every
    /// [`CHECKPOINT_EVERY`], until `stop` is dropped.
    pub(crate) fn start_checkpointer(&self) -> Result<Option<std::sync::mpsc::Sender<()>>, Error> {
        if !self.is_file() {
            return Ok(None);
        }
        let db = self.connect()?;
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("store-checkpointer".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(CHECKPOINT_EVERY) {
                    let checkpoint = db.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    if let Err(err) = checkpoint {
                        tracing::warn!("WAL checkpoint failed: {err}");
                    }
                }
            })
            .map_err(|e| Error::ServiceUnavailable(format!("cannot start the checkpointer: {e}")))?;
        Ok(Some(stop))
    }
}
