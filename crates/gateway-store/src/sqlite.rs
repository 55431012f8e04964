//! SQLite connections, used synchronously on the thread that needs them.
//!
//! A statement on a page already in memory takes microseconds; sending it to another thread
//! and waiting for the answer (as an async driver must) costs more than that in context
//! switches. So the store keeps plain SQLite connections and runs statements on the thread that
//! needs them.
//!
//! - A file (WAL mode): the writer thread owns a connection; reads borrow idle connections from
//!   a list (WAL readers never wait for the writer); a checkpointer thread has its own. sqlx
//!   brings the schema up to date when the store opens.
//! - In memory: one `:memory:` connection (every connection to `:memory:` is a database of its
//!   own), behind an async mutex: the writer holds it for a group, a read for its statements,
//!   and whoever waits for it waits without holding a thread. The embedded migrations are applied
//!   to it directly.
//!
//! A database file and its `-wal` and `-shm` companions are readable and writable by their owner
//! only (INTERFACE.md §10: mode 0600): the file is created so before SQLite first opens it (SQLite
//! gives the companions the database file's mode), and the companions are set so once the store
//! has opened them. Not by changing the process's umask, which every thread shares. A file that
//! already exists keeps the mode it has: that is the operator's.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gateway_core::Error;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::conn::sqlite_error;
use crate::health::{Say, Streak};

/// Sets `path` to mode 0600 (owner read and write); nothing on systems without Unix modes.
fn set_private(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

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

/// The size the WAL file is cut back to whenever it starts over after a checkpoint
/// (`journal_size_limit`). Without it, a WAL that once grew large (a burst of writes while a long
/// read held old pages) keeps its size on disk for good.
const WAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

/// The shortest time from the start of one checkpoint to the start of the next. The checkpointer
/// runs after commits, not on a timer: under load it copies the WAL into the database about
/// every this long, so that the writer's own checkpoint (at [`WRITER_CHECKPOINT_PAGES`]) finds
/// little left to copy and holds up a group for a short time. Measured with
/// `cargo xtask bench --scenario payments` (docs/PERFORMANCE.md): with checkpoints every 100 ms,
/// the writer's checkpoints were what put p99 above 30 ms; closer spacing lowers p99 and, past a
/// point, costs throughput (the checkpointer competes for the two cores): 5 ms gave p99 about
/// 14 ms at 9,400 payments/s, 10 ms about 19 ms at 10,300/s, 8 ms about 16 ms at 10,100/s.
/// Since a payment dirties fewer pages (migration 0012), checkpoints hold up groups less, and
/// 16 ms gave about 9 % more payments per second than 8 ms at the same p99 (about 14 ms).
const CHECKPOINT_SPACING: Duration = Duration::from_millis(16);

/// Where the database is.
#[derive(Debug)]
enum Location {
    File(PathBuf),
    /// The in-memory database's one connection.
    Memory(Arc<AsyncMutex<Connection>>),
}

/// A SQLite database: how to reach its connections, and a file's idle read connections.
#[derive(Debug)]
pub(crate) struct SqliteDb {
    location: Location,
    readers: Mutex<Vec<Connection>>,
}

/// The writer's connection.
#[derive(Debug)]
pub(crate) enum WriterConn {
    /// A file's: the writer's alone.
    Owned(Connection),
    /// An in-memory database's one connection, shared with the reads.
    Shared(Arc<AsyncMutex<Connection>>),
}

/// A connection borrowed for a read.
#[derive(Debug)]
pub(crate) enum Borrowed<'s> {
    /// An idle connection of a file's list, given back when dropped.
    Listed(&'s SqliteDb, Option<Connection>),
    /// The in-memory database's one connection, held until dropped.
    Shared(Option<OwnedMutexGuard<Connection>>),
}

impl Borrowed<'_> {
    pub(crate) fn connection(&mut self) -> &mut Connection {
        match self {
            Borrowed::Listed(_, db) => db.as_mut().expect("held until dropped"),
            Borrowed::Shared(db) => db.as_mut().expect("held until dropped"),
        }
    }

    /// Runs `work` on the connection off the async workers, for statements that may take long
    /// (scans of whole tables: the ledger's audit every 10 s, the balance gauge, the trust
    /// graph), so that they never hold up a request.
    ///
    /// A file's connection runs them on a thread of their own at the lowest priority (nice 19),
    /// offering its core each [`BACKGROUND_QUANTUM`] ([`yielding`]): the scan uses the CPU the
    /// requests leave. An ordinary thread shares a core with a busy worker half and half, in
    /// turns of the kernel's slice (milliseconds), and every request queued on that worker waits
    /// out each turn: measured with `cargo xtask bench --scenario log` (docs/PERFORMANCE.md),
    /// the audit of 35,000 payments took half of the pinned gateway's core for 250 ms every 10 s,
    /// and set the `log/proof` p99 of the runs it fell in. The in-memory database's one connection is every
    /// request's too: its scan runs at the ordinary priority, so that a starved scan never holds
    /// it while requests wait.
    pub(crate) async fn off_thread<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, Error> {
        match self {
            Borrowed::Listed(_, slot) => {
                let mut db = slot.take().expect("held until dropped");
                let (sender, answer) = tokio::sync::oneshot::channel();
                let scan = move || {
                    lower_priority();
                    let (out, _) = yielding(&mut db, BACKGROUND_QUANTUM, work);
                    // The read's future may have been dropped: the connection closes then.
                    let _ = sender.send((db, out));
                };
                // A thread starts with the CPUs and the slice of the thread that starts it: one
                // started here, on an async worker, would keep a pinned worker's core and its
                // short slice (`gatewayd --pin-workers`). A blocking thread has the process's.
                tokio::task::spawn_blocking(move || std::thread::Builder::new().name("store-scan".into()).spawn(scan))
                    .await
                    .map_err(|e| Error::Internal(format!("starting a scan's thread failed: {e}")))?
                    .map_err(|e| Error::ServiceUnavailable(format!("cannot start a scan's thread: {e}")))?;
                let (db, out) = answer
                    .await
                    .map_err(|_| Error::Internal("a background read's thread ended without an answer".into()))?;
                *slot = Some(db);
                Ok(out)
            }
            Borrowed::Shared(slot) => {
                let mut db = slot.take().expect("held until dropped");
                tokio::task::spawn_blocking(move || yielding(&mut db, BACKGROUND_QUANTUM, work).0)
                    .await
                    .map_err(|e| Error::Internal(format!("a blocking read failed: {e}")))
            }
        }
    }
}

/// Gives the calling thread the lowest ordinary priority (nice 19: about 1.5 % of a core that
/// a thread of the default priority keeps busy). Any thread may lower its own priority (on
/// Linux, `setpriority` of process 0 is the calling thread's); should it fail, the scan runs at
/// the ordinary priority, slower for requests, never wrong.
fn lower_priority() {
    let _ = rustix::process::setpriority_process(None, 19);
}

/// How long a background statement runs before it offers its core to any other thread ready to
/// run there ([`Borrowed::off_thread`]).
pub(crate) const BACKGROUND_QUANTUM: Duration = Duration::from_micros(500);

/// Virtual machine instructions between two looks at the clock of a [`yielding`] statement
/// (some tens of microseconds of work).
const PROGRESS_STEPS: std::ffi::c_int = 1_000;

/// Runs `work` on `db` offering the thread's core to others (`sched_yield`) each time it has
/// worked `quantum` since the last offer; returns what `work` returned and how many offers it
/// made. An offer costs nothing when no other thread waits for the core. SQLite asks between
/// virtual machine instructions, so one instruction that takes longer (sorting rows already
/// read) is not cut. The connection has no progress handler again afterwards.
pub(crate) fn yielding<T>(db: &mut Connection, quantum: Duration, work: impl FnOnce(&mut Connection) -> T) -> (T, u64) {
    let offers = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = Arc::clone(&offers);
    let mut since = std::time::Instant::now();
    db.progress_handler(
        PROGRESS_STEPS,
        Some(move || {
            if since.elapsed() >= quantum {
                std::thread::yield_now();
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                since = std::time::Instant::now();
            }
            // Never interrupt the statement.
            false
        }),
    );
    let out = work(db);
    db.progress_handler(0, None::<fn() -> bool>);
    (out, offers.load(std::sync::atomic::Ordering::Relaxed))
}

impl Drop for Borrowed<'_> {
    fn drop(&mut self) {
        if let Borrowed::Listed(sqlite, db) = self
            && let Some(db) = db.take()
        {
            sqlite.give_back(db);
        }
    }
}

impl SqliteDb {
    /// Connections open now: for a file the writer, the checkpointer and the idle read
    /// connections (those lent to a read are not counted); in memory the one connection.
    pub(crate) fn open_connections(&self) -> usize {
        if self.is_file() {
            2 + self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
        } else {
            1
        }
    }

    /// A database file (created if missing), in WAL mode. Its schema is brought up to date by
    /// the caller, through sqlx, before the first connection is used.
    pub(crate) fn file(path: PathBuf) -> Self {
        Self { location: Location::File(path), readers: Mutex::new(Vec::new()) }
    }

    /// Creates the database file at `path`, mode 0600, unless it exists; before SQLite (or
    /// sqlx) first opens it, so that SQLite creates its `-wal` and `-shm` with that mode too.
    pub(crate) fn create_private(path: &Path) -> std::io::Result<()> {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            // A umask can only take bits away (0277 would leave the owner unable to write).
            Ok(_) => set_private(path),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Sets the database's `-wal` and `-shm` files that exist to mode 0600 (once the store has
    /// opened them; SQLite makes them with the database file's mode, this makes sure of it).
    pub(crate) fn make_companions_private(&self) -> std::io::Result<()> {
        let Location::File(path) = &self.location else { return Ok(()) };
        for suffix in ["-wal", "-shm"] {
            let mut companion = path.clone().into_os_string();
            companion.push(suffix);
            match set_private(Path::new(&companion)) {
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// A new in-memory database with the current schema.
    pub(crate) fn memory(migrations: &sqlx::migrate::Migrator) -> Result<Self, Error> {
        let db = Connection::open_in_memory().map_err(sqlite_error)?;
        set_up(&db)?;
        for migration in migrations.iter() {
            db.execute_batch(&migration.sql).map_err(sqlite_error)?;
        }
        Ok(Self { location: Location::Memory(Arc::new(AsyncMutex::new(db))), readers: Mutex::new(Vec::new()) })
    }

    /// How sqlx opens a database file to run the migrations (the same settings as [`Self::connect`]).
    pub(crate) fn migration_options(&self) -> Option<sqlx::sqlite::SqliteConnectOptions> {
        use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
        match &self.location {
            Location::File(path) => Some(
                SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .foreign_keys(true)
                    .busy_timeout(BUSY_TIMEOUT)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full),
            ),
            Location::Memory(_) => None,
        }
    }

    pub(crate) fn is_file(&self) -> bool {
        matches!(self.location, Location::File(_))
    }

    /// Opens a new connection to a database file: WAL, `synchronous = FULL` (a commit is on
    /// disk before it returns), foreign keys on.
    fn connect(path: &Path) -> Result<Connection, Error> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let db = Connection::open_with_flags(path, flags).map_err(sqlite_error)?;
        db.busy_timeout(BUSY_TIMEOUT).map_err(sqlite_error)?;
        set_up(&db)?;
        let mode: String = db.query_row("PRAGMA journal_mode = wal", [], |row| row.get(0)).map_err(sqlite_error)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(Error::ServiceUnavailable(format!(
                "{} cannot use a WAL (journal mode {mode})",
                path.display()
            )));
        }
        db.pragma_update(None, "synchronous", "full").map_err(sqlite_error)?;
        Ok(db)
    }

    /// The writer's connection. For a file, the checkpointer copies most of the WAL into the
    /// database off the writer's thread, and the writer's own checkpoint (at
    /// [`WRITER_CHECKPOINT_PAGES`]) finishes the rest right after a commit, so that the WAL
    /// starts over instead of growing.
    pub(crate) fn writer(&self) -> Result<WriterConn, Error> {
        match &self.location {
            Location::File(path) => {
                let db = Self::connect(path)?;
                db.pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES).map_err(sqlite_error)?;
                db.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES).map_err(sqlite_error)?;
                Ok(WriterConn::Owned(db))
            }
            Location::Memory(shared) => Ok(WriterConn::Shared(shared.clone())),
        }
    }

    /// A connection for a read: an idle one of a file's (or a new one), or the in-memory
    /// database's one connection once it is free.
    pub(crate) async fn reader(&self) -> Result<Borrowed<'_>, Error> {
        match &self.location {
            Location::File(path) => {
                let idle = self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
                let db = match idle {
                    Some(db) => db,
                    None => Self::connect(path)?,
                };
                Ok(Borrowed::Listed(self, Some(db)))
            }
            Location::Memory(shared) => Ok(Borrowed::Shared(Some(shared.clone().lock_owned().await))),
        }
    }

    /// Takes a read connection back for reuse (closing it when enough are idle). A connection
    /// left inside a transaction is closed, never reused.
    fn give_back(&self, db: Connection) {
        if !db.is_autocommit() {
            return;
        }
        let mut idle = self.readers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < IDLE_READERS {
            idle.push(db);
        }
    }

    /// Starts the checkpointer of a database file: a thread with its own connection that runs a
    /// passive checkpoint (which never blocks the writer or the readers) after the writer
    /// commits, at most once per [`CHECKPOINT_SPACING`]. The writer nudges it through the
    /// returned sender; the thread ends when the sender is dropped (with the writer), after
    /// a last checkpoint if a commit came since the one before.
    pub(crate) fn start_checkpointer(&self) -> Result<Option<Checkpoints>, Error> {
        let Location::File(path) = &self.location else { return Ok(None) };
        let db = Self::connect(path)?;
        db.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES).map_err(sqlite_error)?;
        let (nudge, nudged) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("store-checkpointer".into())
            .spawn(move || {
                // A full disk fails every checkpoint, up to one each CHECKPOINT_SPACING: said
                // once, then once a minute, then when they succeed again.
                let mut failures = Streak::default();
                while nudged.recv().is_ok() {
                    let started = std::time::Instant::now();
                    let checkpoint = db.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    match checkpoint {
                        Ok(()) => {
                            if let Say::Ended(count) = failures.succeeded() {
                                tracing::info!("WAL checkpoints succeed again, after {count} failed");
                            }
                        }
                        Err(err) => match failures.failed(started) {
                            Say::Started => tracing::warn!("WAL checkpoint failed: {err}"),
                            Say::Repeated(count) => tracing::warn!(
                                "WAL checkpoint failed {count} more times in the last {} s: {err}",
                                Streak::QUIET.as_secs()
                            ),
                            Say::Nothing | Say::Ended(_) => {}
                        },
                    }
                    std::thread::sleep(CHECKPOINT_SPACING.saturating_sub(started.elapsed()));
                }
            })
            .map_err(|e| Error::ServiceUnavailable(format!("cannot start the checkpointer: {e}")))?;
        Ok(Some(Checkpoints(nudge)))
    }
}

/// The writer's handle on the checkpointer of a database file: [`Checkpoints::committed`] after
/// each commit. Dropping it stops the checkpointer.
#[derive(Debug)]
pub(crate) struct Checkpoints(std::sync::mpsc::SyncSender<()>);

impl Checkpoints {
    /// Tells the checkpointer that the WAL has new committed pages. Never waits: a nudge already
    /// pending covers this commit too.
    pub(crate) fn committed(&self) {
        let _ = self.0.try_send(());
    }
}

/// Settings of every connection: foreign keys on, prepared statements kept, temporary files in
/// memory. The last matters to the writer: each job runs in a savepoint, whose journal (the
/// pages as they were before the job changed them) would otherwise be written to a temporary
/// file, one `pwrite` per page; it is never needed after a crash (the group's transaction
/// rolls back as a whole), so it need not be on disk.
fn set_up(db: &Connection) -> Result<(), Error> {
    db.pragma_update(None, "foreign_keys", true).map_err(sqlite_error)?;
    db.pragma_update(None, "temp_store", "memory").map_err(sqlite_error)?;
    db.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database file with a `blobs (b BLOB)` table, and its writer's connection (the directory
    /// is kept alive by the caller).
    fn blob_store(name: &str) -> (tempfile::TempDir, PathBuf, SqliteDb, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let db = SqliteDb::file(path.clone());
        let WriterConn::Owned(writer) = db.writer().unwrap() else { panic!("a file has its own writer") };
        writer.execute_batch("CREATE TABLE blobs (b BLOB)").unwrap();
        (dir, path, db, writer)
    }

    /// A long statement run [`yielding`] offers its core each time it has worked a quantum,
    /// and gives the same answer; with a quantum longer than it runs, it offers nothing.
    #[test]
    fn a_background_statement_offers_its_core_each_quantum() {
        let mut db = Connection::open_in_memory().unwrap();
        let count = |db: &mut Connection| -> i64 {
            db.query_row(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300000) SELECT SUM(i % 7) FROM n",
                [],
                |row| row.get(0),
            )
            .unwrap()
        };
        let expected: i64 = (1..=300_000i64).map(|i| i % 7).sum();
        let (sum, offers) = yielding(&mut db, Duration::ZERO, count);
        assert_eq!(sum, expected);
        assert!(offers > 10, "a statement of 300,000 rows offered its core {offers} times at every look");
        let (sum, offers) = yielding(&mut db, Duration::from_secs(3_600), count);
        assert_eq!((sum, offers), (expected, 0), "an hour's quantum is never reached");
    }

    /// A file's scan runs on a thread of its own at nice 19, and its connection comes back for
    /// the next read; the in-memory database's (every request's one connection) at the
    /// priority the process has.
    #[tokio::test]
    async fn a_files_scan_runs_at_the_lowest_priority() {
        let (_dir, _path, db, _writer) = blob_store("scan.db");
        let ours = rustix::process::getpriority_process(None).unwrap();
        let mut reader = db.reader().await.unwrap();
        let (priority, name) = reader
            .off_thread(|_| {
                (rustix::process::getpriority_process(None).unwrap(), std::thread::current().name().map(str::to_owned))
            })
            .await
            .unwrap();
        assert_eq!((priority, name.as_deref()), (19, Some("store-scan")));
        let count: i64 = reader.connection().query_row("SELECT COUNT(*) FROM blobs", [], |row| row.get(0)).unwrap();
        assert_eq!(count, 0);
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), ours, "the caller's thread kept its priority");

        let memory = SqliteDb::memory(&sqlx::migrate::Migrator::DEFAULT).unwrap();
        let mut reader = memory.reader().await.unwrap();
        let priority = reader.off_thread(|_| rustix::process::getpriority_process(None).unwrap()).await.unwrap();
        assert_eq!(priority, ours);
    }

    /// A WAL that grew past the limit while a reader held its pages is cut back once it starts
    /// over: the file on disk does not keep the size of the largest burst it ever saw.
    #[test]
    fn the_wal_is_cut_back_after_a_burst() {
        let (_dir, path, _db, writer) = blob_store("wal.db");
        // A reader holding a snapshot keeps every page of the burst in the WAL.
        let reader = SqliteDb::connect(&path).unwrap();
        reader.execute_batch("BEGIN; SELECT COUNT(*) FROM blobs;").unwrap();
        let megabyte = vec![7u8; 1024 * 1024];
        let burst = (WAL_SIZE_LIMIT_BYTES / (1024 * 1024)) as usize + 16;
        for _ in 0..burst {
            writer.execute("INSERT INTO blobs (b) VALUES (?1)", [&megabyte]).unwrap();
        }
        let wal = path.with_extension("db-wal");
        let grown = std::fs::metadata(&wal).unwrap().len();
        assert!(grown > WAL_SIZE_LIMIT_BYTES as u64, "the burst grew the WAL to {grown} bytes");
        reader.execute_batch("COMMIT").unwrap();
        // The checkpointer's passive checkpoint copies the pages; the next write starts the
        // WAL over and cuts the file back.
        let checkpointer = SqliteDb::connect(&path).unwrap();
        checkpointer.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT_BYTES).unwrap();
        checkpointer.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())).unwrap();
        writer.execute("DELETE FROM blobs", []).unwrap();
        let after = std::fs::metadata(&wal).unwrap().len();
        assert!(after <= WAL_SIZE_LIMIT_BYTES as u64, "the WAL kept {after} bytes after starting over");
    }

    /// The checkpointer copies a commit's pages into the database file when the writer says it
    /// committed, not on a timer: before the nudge the pages are only in the WAL; after it they
    /// reach the database file. Dropping the writer's handle ends the thread.
    #[test]
    fn a_commit_nudges_the_checkpointer() {
        let (_dir, path, db, writer) = blob_store("nudged.db");
        let checkpoints = db.start_checkpointer().unwrap().expect("a file has a checkpointer");
        let before = std::fs::metadata(&path).unwrap().len();
        // Two megabytes: 512 pages, far below the writer's own checkpoint.
        let half = vec![7u8; 512 * 1024];
        for _ in 0..4 {
            writer.execute("INSERT INTO blobs (b) VALUES (?1)", [&half]).unwrap();
        }
        let database_size = || std::fs::metadata(&path).unwrap().len();
        std::thread::sleep(CHECKPOINT_SPACING * 20);
        assert_eq!(database_size(), before, "pages reached the database file with no commit announced");
        checkpoints.committed();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while database_size() < before + 2 * 1024 * 1024 {
            assert!(std::time::Instant::now() < deadline, "the checkpointer did not copy the commit's pages");
            std::thread::sleep(CHECKPOINT_SPACING);
        }
        // The last connection to close removes the WAL file: once the writer's is closed, the
        // file goes only if the checkpointer's thread ended and closed its own.
        drop(writer);
        drop(checkpoints);
        let wal = path.with_extension("db-wal");
        while wal.exists() {
            assert!(std::time::Instant::now() < deadline, "the checkpointer outlived the writer's handle");
            std::thread::sleep(CHECKPOINT_SPACING);
        }
    }
}
