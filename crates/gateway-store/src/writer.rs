//! Running units of work: group commit on SQLite, one transaction per job on PostgreSQL.
//!
//! SQLite has one writer at a time and each durable commit costs an fsync, so a single writer
//! task takes every job waiting in its queue, runs each inside its own savepoint of one
//! transaction (a failing job rolls back only its own writes), commits once, and only then
//! answers every job of the batch: one fsync for many acknowledged writes. PostgreSQL runs jobs
//! concurrently, each in its own transaction; its row locks (taken in a fixed order by the
//! primitives) serialise conflicting jobs, and the server groups commits itself.

use std::any::Any;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use gateway_core::Error;
use gateway_domain::ports::{CoopSignal, ErasedJob};
use sqlx::{PgPool, SqliteConnection, SqlitePool};
use tokio::sync::broadcast;
use tokio::sync::{mpsc, oneshot};

use crate::conn::{Conn, Db};
use crate::db_error;

/// Most jobs committed together.
const MAX_GROUP: usize = 512;

type JobResult = Result<Box<dyn Any + Send>, Error>;

/// A job queued for the SQLite writer.
pub(crate) struct Job {
    work: ErasedJob,
    reply: oneshot::Sender<JobResult>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Job")
    }
}

impl Job {
    pub(crate) fn new(work: ErasedJob) -> (Self, oneshot::Receiver<JobResult>) {
        let (reply, receiver) = oneshot::channel();
        (Self { work, reply }, receiver)
    }
}

/// The SQLite writer loop; ends when every sender is dropped.
pub(crate) async fn sqlite_writer(
    pool: SqlitePool,
    mut queue: mpsc::Receiver<Job>,
    feed: broadcast::Sender<CoopSignal>,
) {
    while let Some(first) = queue.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        run_group(&pool, group, &feed).await;
    }
}

async fn exec(conn: &mut SqliteConnection, sql: &str) -> Result<(), Error> {
    sqlx::query(sql).execute(conn).await.map(|_| ()).map_err(db_error)
}

async fn run_group(pool: &SqlitePool, group: Vec<Job>, feed: &broadcast::Sender<CoopSignal>) {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(err) => return fail_all(group, &db_error(err)),
    };
    if let Err(err) = exec(&mut conn, "BEGIN IMMEDIATE").await {
        return fail_all(group, &err);
    }
    let mut answered: Vec<(oneshot::Sender<JobResult>, JobResult)> = Vec::with_capacity(group.len());
    let mut signals = Vec::new();
    let mut group = group.into_iter();
    while let Some(job) = group.next() {
        let (result, appended) = match run_in_savepoint(&mut conn, job.work).await {
            Ok(ran) => ran,
            Err(err) => {
                // The transaction's state is unknown (a failed job's writes may not have been
                // undone): nothing of the group may commit.
                let _ = exec(&mut conn, "ROLLBACK").await;
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
        if result.is_ok() {
            signals.extend(appended);
        }
        answered.push((job.reply, result));
    }
    match exec(&mut conn, "COMMIT").await {
        Ok(()) => {
            for signal in signals {
                let _ = feed.send(signal);
            }
            for (reply, result) in answered {
                let _ = reply.send(result);
            }
        }
        Err(err) => {
            let _ = exec(&mut conn, "ROLLBACK").await;
            tracing::error!("group commit failed: {err}");
            for (reply, result) in answered {
                let _ = reply.send(result.and(Err(Error::ServiceUnavailable("the store could not commit".into()))));
            }
        }
    }
}

/// Runs one job in its own savepoint, so that a failing job undoes only its own writes. The
/// outer error means the savepoint could not be opened or closed, and the transaction can no
/// longer be trusted. (Sending the statements between two jobs as one multi-statement command
/// measured slower through sqlx than sending them one by one.)
async fn run_in_savepoint(conn: &mut SqliteConnection, work: ErasedJob) -> Result<(JobResult, Vec<CoopSignal>), Error> {
    exec(conn, "SAVEPOINT job").await?;
    let (result, appended) = run_job(conn, work).await;
    if result.is_err() {
        exec(conn, "ROLLBACK TO SAVEPOINT job").await?;
    }
    exec(conn, "RELEASE SAVEPOINT job").await?;
    Ok((result, appended))
}

/// Runs one job on the writer's connection, inside the savepoint the caller opened.
async fn run_job(conn: &mut SqliteConnection, work: ErasedJob) -> (JobResult, Vec<CoopSignal>) {
    let (outcome, appended) = {
        let mut handle = Conn::new(Db::Sqlite(&mut *conn));
        let outcome = AssertUnwindSafe(work(&mut handle)).catch_unwind().await;
        (outcome, handle.appended)
    };
    match outcome {
        Ok(result) => (result, appended),
        Err(_) => (Err(Error::Internal("a unit of work panicked".into())), Vec::new()),
    }
}

fn fail_all(group: Vec<Job>, err: &Error) {
    tracing::error!("the store writer could not start a transaction: {err}");
    for job in group {
        let _ = job.reply.send(Err(Error::ServiceUnavailable("the store is unavailable".into())));
    }
}

/// Runs one job in its own PostgreSQL transaction.
pub(crate) async fn run_postgres(pool: &PgPool, work: ErasedJob, feed: &broadcast::Sender<CoopSignal>) -> JobResult {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let (outcome, appended) = {
        let mut handle = Conn::new(Db::Postgres(&mut tx));
        let outcome = AssertUnwindSafe(work(&mut handle)).catch_unwind().await;
        (outcome, handle.appended)
    };
    let result = outcome.unwrap_or_else(|_| Err(Error::Internal("a unit of work panicked".into())));
    match result {
        Ok(value) => {
            tx.commit().await.map_err(db_error)?;
            for signal in appended {
                let _ = feed.send(signal);
            }
            Ok(value)
        }
        Err(err) => {
            let _ = tx.rollback().await;
            Err(err)
        }
    }
}

/// Relays other replicas' NOTIFY signals onto the local feed, reconnecting after failures.
pub(crate) async fn postgres_listener(pool: PgPool, feed: broadcast::Sender<CoopSignal>) {
    loop {
        match sqlx::postgres::PgListener::connect_with(&pool).await {
            Ok(mut listener) => {
                if let Err(err) = listener.listen(crate::EVENT_CHANNEL).await {
                    tracing::warn!("LISTEN failed: {err}");
                } else {
                    loop {
                        match listener.recv().await {
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
