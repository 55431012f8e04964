//! Running units of work: group commit on SQLite, one transaction per job on PostgreSQL.
//!
//! SQLite has one writer at a time and each durable commit costs an fsync, so a single writer
//! thread takes every job waiting in its queue, runs each inside its own savepoint of one
//! transaction (a failing job rolls back only its own writes), commits once, and only then
//! answers every job of the batch: one fsync for many acknowledged writes. PostgreSQL runs jobs
//! concurrently, each in its own transaction; its row locks (taken in a fixed order by the
//! primitives) serialise conflicting jobs, and the server groups commits itself.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::FutureExt;
use gateway_core::Error;
use gateway_domain::ports::{CoopSignal, Job as Work};
use sqlx::PgPool;
use tokio::sync::broadcast;
use tokio::sync::{mpsc, oneshot};

use crate::conn::events::NUMBER_SQL;
use crate::conn::{Conn, Db, sqlite_error, to_u64};
use crate::sqlite::{Checkpoints, WriterConn};
use crate::view::{BalanceView, Touched};
use crate::{db_error, health};

/// Most jobs committed together.
const MAX_GROUP: usize = 512;

/// A job's outcome as its caller hears it: on success, the number of the last event it
/// appended, if it appended any (or, replaying an answer under its `Idempotency-Key`, the
/// number that answer's last event got): the answer's `ICN-Event-Seq`.
pub(crate) type JobResult = Result<Option<u64>, Error>;

/// A job's outcome on the writer.
type Ran = Result<(), Error>;

/// What a queued job does: a domain unit of work, or the readiness probe's one-row write.
pub(crate) enum Task {
    /// A unit of work of the domain.
    Work(Work),
    /// `UPDATE write_probe`, committed like any unit of work.
    Probe {
        /// Unix seconds, stored so that the row really changes.
        at: i64,
    },
}

/// The readiness probe's statement.
pub(crate) const PROBE_SQL: &str = "UPDATE write_probe SET probed_at = $1 WHERE id = 1";

/// A job queued for the SQLite writer.
pub(crate) struct Job {
    task: Task,
    reply: oneshot::Sender<JobResult>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

impl Job {
    pub(crate) fn new(task: Task) -> (Self, oneshot::Receiver<JobResult>) {
        let (reply, receiver) = oneshot::channel();
        (Self { task, reply }, receiver)
    }
}

/// Starts the SQLite writer on its own thread, with a single-threaded runtime to wait for jobs
/// (and, in memory, for the one connection) on. Every statement of a group runs synchronously
/// on this thread; a job's future completes without waiting on anything else. The thread ends
/// when every sender of `queue` is dropped, and with it the checkpointer of a database file.
pub(crate) fn spawn_sqlite_writer(
    mut conn: WriterConn,
    mut queue: mpsc::Receiver<Job>,
    feed: broadcast::Sender<CoopSignal>,
    view: Arc<BalanceView>,
    checkpoints: Option<Checkpoints>,
) -> std::io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new()
        .name("store-writer".into())
        .spawn(move || {
            runtime.block_on(async move {
                while let Some(first) = queue.recv().await {
                    let group = take_group(first, &mut queue);
                    match &mut conn {
                        WriterConn::Owned(db) => run_group(db, group, &feed, &view).await,
                        WriterConn::Shared(shared) => run_group(&mut *shared.lock().await, group, &feed, &view).await,
                    }
                    if let Some(checkpoints) = &checkpoints {
                        checkpoints.committed();
                    }
                }
            })
        })
        .map(|_| ())
}

/// Takes the next group of jobs waiting behind `first`.
fn take_group(first: Job, queue: &mut mpsc::Receiver<Job>) -> Vec<Job> {
    let mut group = vec![first];
    while group.len() < MAX_GROUP {
        match queue.try_recv() {
            Ok(job) => group.push(job),
            Err(_) => break,
        }
    }
    group
}

/// Runs one of the writer's transaction statements (prepared once, like the jobs' statements:
/// three of them run for every job).
fn exec(db: &rusqlite::Connection, sql: &str) -> Result<(), Error> {
    db.prepare_cached(sql).and_then(|mut statement| statement.execute([])).map(|_| ()).map_err(sqlite_error)
}

/// The balance read model forgets every key a job of the group touched, whatever the group's
/// outcome, before any job is answered or any event announced.
async fn run_group(
    db: &mut rusqlite::Connection,
    group: Vec<Job>,
    feed: &broadcast::Sender<CoopSignal>,
    view: &BalanceView,
) {
    if !db.is_autocommit() {
        // An earlier group's transaction could not be ended (its jobs were answered with 503):
        // try again before starting anew.
        tracing::error!("the store writer's connection was left inside a transaction: rolling it back");
        let _ = exec(db, "ROLLBACK");
    }
    if let Err(err) = exec(db, "BEGIN IMMEDIATE") {
        return fail_all(group, &err);
    }
    let mut answered: Vec<(oneshot::Sender<JobResult>, JobResult)> = Vec::with_capacity(group.len());
    let mut signals = Vec::new();
    let mut touched = Vec::new();
    let mut group = group.into_iter();
    while let Some(job) = group.next() {
        let (result, appended) = match run_in_savepoint(db, job.task, &mut touched).await {
            Ok(ran) => ran,
            Err(err) => {
                // The transaction's state is unknown (a failed job's writes may not have been
                // undone): nothing of the group may commit.
                let _ = exec(db, "ROLLBACK");
                view.forget(&touched);
                tracing::error!("the store writer lost its transaction: {err}");
                let unavailable = || Err(Error::ServiceUnavailable("the store could not commit".into()));
                let _ = job.reply.send(unavailable());
                for (reply, _) in answered {
                    let _ = reply.send(unavailable());
                }
                for job in group {
                    let _ = job.reply.send(unavailable());
                }
                return;
            }
        };
        let last = appended.last.or(appended.replayed);
        let appended = appended.signals;
        if result.is_ok() {
            signals.extend(appended);
        }
        answered.push((job.reply, result.map(|()| last)));
    }
    let committed = exec(db, "COMMIT");
    view.forget(&touched);
    match committed {
        Ok(()) => {
            for signal in signals {
                let _ = feed.send(signal);
            }
            for (reply, result) in answered {
                let _ = reply.send(result);
            }
        }
        Err(err) => {
            let _ = exec(db, "ROLLBACK");
            tracing::error!("group commit failed: {err}");
            for (reply, result) in answered {
                let _ = reply.send(result.and(Err(Error::ServiceUnavailable("the store could not commit".into()))));
            }
        }
    }
}

/// Runs one job in its own savepoint, so that a failing job undoes only its own writes. The
/// outer error means the savepoint could not be opened or closed, and the transaction can no
/// longer be trusted.
async fn run_in_savepoint(
    db: &mut rusqlite::Connection,
    task: Task,
    touched: &mut Vec<Touched>,
) -> Result<(Ran, Appended), Error> {
    exec(db, "SAVEPOINT job")?;
    let (result, appended) = match task {
        Task::Work(work) => run_job(db, work, touched).await,
        Task::Probe { at } => {
            (Conn::new(Db::Sqlite(db)).execute(PROBE_SQL, &[at.into()]).await.map(|_| ()), Appended::default())
        }
    };
    if result.is_err() {
        exec(db, "ROLLBACK TO SAVEPOINT job")?;
    }
    exec(db, "RELEASE SAVEPOINT job")?;
    Ok((result, appended))
}

/// Runs one job on the writer's connection, inside the savepoint the caller opened. Its
/// statements run synchronously, so its future completes without waiting on anything else.
async fn run_job(db: &mut rusqlite::Connection, work: Work, touched: &mut Vec<Touched>) -> (Ran, Appended) {
    let (outcome, appended) = {
        let mut handle = Conn::new(Db::Sqlite(db));
        let outcome = match AssertUnwindSafe(work(&mut handle)).catch_unwind().await {
            Ok(Ok(())) => Ok(handle.number_answer().await),
            outcome => outcome,
        };
        // Kept whether the job succeeded or not: forgetting a key too many costs one read.
        touched.append(&mut handle.touched);
        let last = handle.appended.last().map(|signal| signal.seq);
        (outcome, Appended { signals: handle.appended, last, replayed: handle.replayed })
    };
    match outcome {
        Ok(result) => (result, appended),
        Err(_) => (Err(Error::Internal("a unit of work panicked".into())), Appended::default()),
    }
}

/// What a SQLite job appended: its events' signals and the number of the last, or the number
/// of the answer it replays under its `Idempotency-Key`.
#[derive(Default)]
struct Appended {
    signals: Vec<CoopSignal>,
    last: Option<u64>,
    replayed: Option<u64>,
}

fn fail_all(group: Vec<Job>, err: &Error) {
    tracing::error!("the store writer could not start a transaction: {err}");
    for job in group {
        let _ = job.reply.send(Err(Error::ServiceUnavailable("the store is unavailable".into())));
    }
}

/// Runs one job in its own PostgreSQL transaction. After the commit, each coop the job appended
/// events to has its waiting events numbered by the [`Numberer`] (this job's among them), which
/// announces the coop's counter then (every number up to it is committed).
///
/// The work and its commit have [`crate::POSTGRES_DEADLINE`] together: a frozen server gets
/// the request a 503, never an endless wait. Before the commit was sent nothing was committed
/// (the server rolls the transaction back); past it, the outcome is unknown (a retry with the
/// same `Idempotency-Key` gets the stored answer if it did commit). Either way the connection is
/// closed rather than returned to the pool, where its statement could still hold it.
pub(crate) async fn run_postgres(pool: &PgPool, task: Task, numberer: &Arc<Numberer>) -> JobResult {
    let deadline = crate::POSTGRES_DEADLINE;
    let committing = std::sync::atomic::AtomicBool::new(false);
    let conn = CloseUnlessDone { conn: Some(pool.acquire().await.map_err(db_error)?) };
    let work = async {
        let mut conn = conn;
        let mut tx = sqlx::Connection::begin(&mut **conn.get()).await.map_err(db_error)?;
        let result = {
            let mut handle = Conn::new(Db::Postgres(&mut tx));
            let outcome = match task {
                Task::Work(work) => AssertUnwindSafe(work(&mut handle)).catch_unwind().await,
                Task::Probe { at } => Ok(handle.execute(PROBE_SQL, &[at.into()]).await.map(|_| ())),
            };
            match outcome.unwrap_or_else(|_| Err(Error::Internal("a unit of work panicked".into()))) {
                // The events last, just before the commit: see `Conn::flush_events`.
                Ok(()) => {
                    handle.flush_events().await.map(|coops| (coops, (handle.replayed, handle.replayed_waiting.take())))
                }
                Err(err) => Err(err),
            }
        };
        match result {
            Ok((coops, replayed)) => {
                committing.store(true, std::sync::atomic::Ordering::Relaxed);
                tx.commit().await.map_err(db_error)?;
                Ok((conn.done(), coops, replayed))
            }
            Err(err) => {
                let _ = tx.rollback().await;
                drop(conn.done());
                Err(err)
            }
        }
    };
    let (conn, coops, replayed) = match tokio::time::timeout(deadline, work).await {
        Ok(done) => done?,
        Err(_) => {
            let what = if committing.load(std::sync::atomic::Ordering::Relaxed) {
                "the commit (the change may or may not be recorded: retry with the same Idempotency-Key)"
            } else {
                "a unit of work's statements (nothing was committed)"
            };
            return Err(Error::ServiceUnavailable(format!(
                "{}: PostgreSQL did not answer {what} within {deadline:?}",
                health::UNREACHABLE
            )));
        }
    };
    // Committed. The connection goes back to the pool, and this replica's numberer numbers
    // each coop's waiting events, this job's among them, and announces them (migration 0023).
    // Within the deadline too; should the numbering fail, the sweep ([`number_waiting`]) numbers
    // the events and the answer goes without its `ICN-Event-Seq`.
    drop(conn);
    let (replayed, replayed_waiting) = replayed;
    if let Some(key) = replayed_waiting {
        return Ok(replayed_number(pool, &key).await);
    }
    if coops.is_empty() {
        return Ok(replayed);
    }
    let numbering = async {
        let mut last = None;
        for (coop, placeholder) in coops {
            last = numberer.number(&coop, placeholder).await;
        }
        last
    };
    match tokio::time::timeout(deadline, numbering).await {
        Ok(last) => Ok(last),
        Err(_) => {
            tracing::warn!("no answer from the numbering after a commit within {deadline:?}: the commit stands");
            Ok(None)
        }
    }
}

/// The number of the last event of the answer stored under `key`, which a replay found still
/// waiting for it: read again until the numbering gave it (within the deadline; `None` after).
async fn replayed_number(pool: &PgPool, key: &str) -> Option<u64> {
    let read = async {
        loop {
            let seq: Result<Option<i64>, sqlx::Error> =
                sqlx::query_scalar("SELECT event_seq FROM idempotency WHERE key = $1").bind(key).fetch_one(pool).await;
            match seq {
                Ok(Some(seq)) if seq > 0 => return Some(to_u64(seq)),
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
                Err(_) => return None,
            }
        }
    };
    tokio::time::timeout(crate::POSTGRES_DEADLINE, read).await.ok().flatten()
}

/// What waits for this replica's numbering: each commit's coop and placeholder (of its last
/// event of the coop) with where to answer the number it got, and whether a numbering runs.
#[derive(Debug, Default)]
struct Waiting {
    commits: Vec<(gateway_core::CoopId, i64, oneshot::Sender<Option<u64>>)>,
    running: bool,
}

/// This replica's numbering of its commits' events (PostgreSQL; migration 0023). A commit asks
/// for its number here; one call of `number_events` runs at a time and numbers every commit that
/// waits when it starts, of every coop (and any other replica's commits of those coops): the
/// replica's payments are numbered in batches, one transaction and one flush a batch, not one a
/// payment. Each numbering announces each coop's counter at once on this replica's feed, and
/// through the [`Announcer`] to every replica's.
#[derive(Debug)]
pub(crate) struct Numberer {
    pool: PgPool,
    feed: broadcast::Sender<CoopSignal>,
    announcer: Arc<Announcer>,
    waiting: std::sync::Mutex<Waiting>,
}

impl Numberer {
    pub(crate) fn new(pool: PgPool, feed: broadcast::Sender<CoopSignal>, announcer: Arc<Announcer>) -> Self {
        Self { pool, feed, announcer, waiting: std::sync::Mutex::default() }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The number the event of `coop` written with `placeholder` got, once numbered (`None`:
    /// the numbering failed, and the sweep numbers it).
    pub(crate) async fn number(self: &Arc<Self>, coop: &gateway_core::CoopId, placeholder: i64) -> Option<u64> {
        let (reply, answer) = oneshot::channel();
        let start = {
            let mut waiting = self.waiting();
            waiting.commits.push((coop.clone(), placeholder, reply));
            !std::mem::replace(&mut waiting.running, true)
        };
        if start {
            tokio::spawn(self.clone().run());
        }
        answer.await.ok().flatten()
    }

    /// Numbers the waiting commits, batch after batch, until none waits. A batch whose
    /// numbering failed waits again, with the next commits, for as long as its commits wait.
    async fn run(self: Arc<Self>) {
        /// Lets another task start should this one end without emptying the queue (a panic).
        struct Running<'a>(&'a Numberer, bool);
        impl Drop for Running<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.waiting().running = false;
                }
            }
        }
        let mut running = Running(&self, true);
        loop {
            let batch = {
                let mut waiting = self.waiting();
                waiting.commits.retain(|(_, _, reply)| !reply.is_closed());
                if waiting.commits.is_empty() {
                    waiting.running = false;
                    running.1 = false;
                    return;
                }
                std::mem::take(&mut waiting.commits)
            };
            let (coops, placeholders): (Vec<&str>, Vec<i64>) =
                batch.iter().map(|(coop, placeholder, _)| (coop.as_str(), *placeholder)).unzip();
            let numbered = tokio::time::timeout(
                crate::POSTGRES_DEADLINE,
                sqlx::query_as::<_, (Option<i64>, i64, Option<i64>, Option<i64>)>(NUMBER_SQL)
                    .bind(&coops)
                    .bind(&placeholders)
                    .fetch_all(&self.pool),
            )
            .await;
            let rows = match numbered {
                Ok(Ok(rows)) => rows,
                // The batch's commits stand; each waits for its number until its deadline.
                failed => {
                    match failed {
                        Ok(Err(err)) => tracing::warn!("numbering events after their commit: {err} (trying again)"),
                        _ => tracing::warn!("numbering events after their commit: no answer (trying again)"),
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    let mut waiting = self.waiting();
                    let later = std::mem::replace(&mut waiting.commits, batch);
                    waiting.commits.extend(later);
                    continue;
                }
            };
            let mut given: Vec<(Option<u64>, u64)> = vec![(None, 0); batch.len()];
            // Every event this call numbered, by placeholder (unique among all coops' events).
            let mut numbered_now = std::collections::HashMap::new();
            for (ord, counter, placeholder, seq) in rows {
                match ord {
                    Some(ord) => {
                        if let Some(slot) = usize::try_from(ord).ok().and_then(|ord| given.get_mut(ord.wrapping_sub(1)))
                        {
                            *slot = (seq.map(to_u64), to_u64(counter));
                        }
                    }
                    None => {
                        if let (Some(placeholder), Some(seq)) = (placeholder, seq) {
                            numbered_now.insert(placeholder, to_u64(seq));
                        }
                    }
                }
            }
            let mut announced: Vec<(&gateway_core::CoopId, u64)> = Vec::new();
            for ((coop, _, _), (_, counter)) in batch.iter().zip(&given) {
                match announced.iter_mut().find(|(c, _)| *c == coop) {
                    Some((_, seq)) => *seq = (*seq).max(*counter),
                    None => announced.push((coop, *counter)),
                }
            }
            for (coop, seq) in announced {
                self.announcer.note(coop, seq);
                let _ = self.feed.send(CoopSignal { coop_id: coop.clone(), seq });
            }
            for ((_, _, reply), (seq, _)) in batch.into_iter().zip(given) {
                let _ = reply.send(seq);
            }
            // Commits that asked while this call ran, and whose events it numbered (they had
            // committed when it looked), have their numbers, announced with their coops' counters
            // above: answered now rather than by another call.
            if !numbered_now.is_empty() {
                let mut waiting = self.waiting();
                for (_, placeholder, reply) in
                    waiting.commits.extract_if(.., |(_, placeholder, _)| numbered_now.contains_key(placeholder))
                {
                    let _ = reply.send(numbered_now.get(&placeholder).copied());
                }
            }
        }
    }
}

/// How often each replica numbers the events that still wait for a number.
const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Numbers, once every [`SWEEP_INTERVAL`], the events of every coop that still wait for their
/// number (PostgreSQL): those a replica committed but did not number, because it died between
/// its commit and the numbering or the numbering failed. Announced like any others.
pub(crate) async fn number_waiting(pool: PgPool, feed: broadcast::Sender<CoopSignal>, announcer: Arc<Announcer>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(SWEEP_INTERVAL).await;
        let swept = tokio::time::timeout(crate::POSTGRES_DEADLINE, async {
            let coops: Vec<String> =
                sqlx::query_scalar("SELECT DISTINCT coop_id FROM events WHERE seq < 0").fetch_all(&pool).await?;
            // One coop a transaction, and none whose numbering runs now (it numbers them).
            for coop in coops {
                let counter: Option<i64> =
                    sqlx::query_scalar("SELECT sweep_waiting($1)").bind(&coop).fetch_one(&pool).await?;
                if let (Some(counter), Ok(coop)) = (counter, gateway_core::CoopId::parse(&coop)) {
                    let seq = to_u64(counter);
                    tracing::info!("numbered coop {coop}'s events that waited, up to {seq}");
                    announcer.note(&coop, seq);
                    let _ = feed.send(CoopSignal { coop_id: coop, seq });
                }
            }
            Ok::<(), sqlx::Error>(())
        })
        .await;
        match swept {
            Ok(Ok(())) => failing = false,
            // Said once per outage.
            Ok(Err(err)) if !failing => {
                failing = true;
                tracing::warn!("could not number the events that wait for a number: {err}");
            }
            Err(_) if !failing => {
                failing = true;
                tracing::warn!("could not number the events that wait for a number: no answer");
            }
            Ok(Err(_)) | Err(_) => {}
        }
    }
}

/// A pooled connection that is closed, not returned to the pool, when it is dropped before
/// [`CloseUnlessDone::done`]: a unit of work cut off by its deadline may have left a statement
/// running or a transaction open on it.
struct CloseUnlessDone {
    conn: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
}

impl CloseUnlessDone {
    fn get(&mut self) -> &mut sqlx::pool::PoolConnection<sqlx::Postgres> {
        self.conn.as_mut().expect("taken only by done")
    }

    /// The connection, to be returned to the pool as usual.
    fn done(mut self) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
        self.conn.take().expect("taken once")
    }
}

impl Drop for CloseUnlessDone {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

/// The statement that announces committed events, each coop once with its last number (`$1`
/// coops, `$2` numbers, `$3` the schema's events channel).
const ANNOUNCE_SQL: &str =
    "SELECT pg_notify($3, coop || chr(9) || seq) FROM unnest($1::text[], $2::bigint[]) AS t(coop, seq)";

/// This replica's announcements of its commits to the other replicas (PostgreSQL; INTERFACE.md
/// §10). A commit does not notify: a notifying commit holds PostgreSQL's one notification lock of
/// the database until its WAL is flushed, so every writing commit of every replica would queue
/// on it. Instead each numbering after the commits ([`Numberer`], the sweep) notes its coops' new
/// last numbers here, and one task per replica sends what was noted, each coop once with its
/// highest number, in one statement, while the next are noted: one notifying statement (which
/// writes no WAL) per batch.
///
/// An announcement can be lost (the replica dies between a commit and its announcement, the
/// statement fails, a listener reconnects): that costs the other replicas a wake-up, never an
/// event. A signal only says "something new may exist": the hubs read the outbox by number and
/// poll every coop with subscribers, and the log's checkpointers sweep for coops behind.
#[derive(Debug)]
pub(crate) struct Announcer {
    /// The channel of the store's schema ([`crate::Channels`]).
    channel: String,
    /// Each coop's highest number noted since the last announcement.
    pending: std::sync::Mutex<std::collections::HashMap<gateway_core::CoopId, u64>>,
    wake: tokio::sync::Notify,
}

impl Announcer {
    /// An announcer on `channel`.
    pub(crate) fn new(channel: String) -> Self {
        Self { channel, pending: Default::default(), wake: Default::default() }
    }

    /// Notes that `coop`'s events up to `seq` are committed.
    pub(crate) fn note(&self, coop: &gateway_core::CoopId, seq: u64) {
        {
            let mut pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let last = pending.entry(coop.clone()).or_insert(seq);
            *last = (*last).max(seq);
        }
        self.wake.notify_one();
    }

    /// Announces what was noted, batch after batch, until the store is dropped.
    pub(crate) async fn run(self: Arc<Self>, pool: PgPool) {
        let mut failing = false;
        loop {
            self.wake.notified().await;
            let batch = std::mem::take(&mut *self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
            if batch.is_empty() {
                continue;
            }
            let (coops, seqs): (Vec<String>, Vec<i64>) = batch
                .into_iter()
                .map(|(coop, seq)| (coop.as_str().to_owned(), i64::try_from(seq).unwrap_or(i64::MAX)))
                .unzip();
            let sent = tokio::time::timeout(
                crate::POSTGRES_DEADLINE,
                sqlx::query(ANNOUNCE_SQL).bind(&coops).bind(&seqs).bind(&self.channel).execute(&pool),
            )
            .await;
            match sent {
                Ok(Ok(_)) if failing => {
                    failing = false;
                    tracing::info!("announcing committed events to the other replicas again");
                }
                Ok(Ok(_)) => {}
                // Said once per outage: the other replicas' polls cover what is not announced.
                Ok(Err(err)) if !failing => {
                    failing = true;
                    tracing::warn!("could not announce committed events to the other replicas: {err}");
                }
                Err(_) if !failing => {
                    failing = true;
                    tracing::warn!("could not announce committed events to the other replicas: no answer");
                }
                Ok(Err(_)) | Err(_) => {}
            }
        }
    }
}

/// Relays other replicas' NOTIFY signals onto the local feed (events) and `trust_changes`
/// (trust edges), reconnecting after failures.
pub(crate) async fn postgres_listener(
    pool: PgPool,
    channels: crate::Channels,
    feed: broadcast::Sender<CoopSignal>,
    trust_changes: std::sync::Arc<tokio::sync::Notify>,
) {
    loop {
        match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(err) = listener.listen_all([channels.events.as_str(), channels.trust.as_str()]).await {
                    tracing::warn!("LISTEN failed: {err}");
                } else {
                    // Changes made while no one listened are unknown: reload once.
                    trust_changes.notify_one();
                    loop {
                        match listener.recv().await {
                            Ok(notification) if notification.channel() == channels.trust => {
                                trust_changes.notify_one();
                            }
                            Ok(notification) => {
                                if let Some(signal) = parse_signal(notification.payload()) {
                                    let _ = feed.send(signal);
                                }
                            }
                            Err(err) => {
                                tracing::warn!("event notifications interrupted: {err}");
                                break;
                            }
                        }
                    }
                }
            }
            Err(err) => tracing::warn!("cannot listen for events: {err}"),
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

fn parse_signal(payload: &str) -> Option<CoopSignal> {
    let (coop, seq) = payload.split_once('\t')?;
    Some(CoopSignal { coop_id: gateway_core::CoopId::parse(coop).ok()?, seq: seq.parse().ok()? })
}

#[cfg(test)]
mod tests {
    /// The announcer's payload is what the listeners parse.
    #[test]
    fn announcements_use_the_listened_format() {
        let signal = super::parse_signal("c1\t42").expect("a coop and a number");
        assert_eq!((signal.coop_id.as_str(), signal.seq), ("c1", 42));
    }
}
