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
use gateway_domain::ports::ErasedJob;
use sqlx::{PgPool, SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use crate::conn::Conn;
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
pub(crate) async fn sqlite_writer(pool: SqlitePool, mut queue: mpsc::Receiver<Job>) {
    while let Some(first) = queue.recv().await {
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match queue.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        run_group(&pool, group).await;
    }
}

async fn exec(conn: &mut SqliteConnection, sql: &str) -> Result<(), Error> {
    sqlx::query(sql).execute(conn).await.map(|_| ()).map_err(db_error)
}

async fn run_group(pool: &SqlitePool, group: Vec<Job>) {
    let mut conn = match pool.acquire().await {
        Ok(conn) => conn,
        Err(err) => return fail_all(group, &db_error(err)),
    };
    if let Err(err) = exec(&mut conn, "BEGIN IMMEDIATE").await {
        return fail_all(group, &err);
    }
    let mut answered = Vec::with_capacity(group.len());
    for job in group {
        let result = run_in_savepoint(&mut conn, job.work).await;
        answered.push((job.reply, result));
    }
    match exec(&mut conn, "COMMIT").await {
        Ok(()) => {
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

async fn run_in_savepoint(conn: &mut SqliteConnection, work: ErasedJob) -> JobResult {
    exec(conn, "SAVEPOINT job").await?;
    let outcome = {
        let mut handle = Conn::Sqlite(&mut *conn);
        AssertUnwindSafe(work(&mut handle)).catch_unwind().await
    };
    let result = match outcome {
        Ok(result) => result,
        Err(_) => Err(Error::Internal("a unit of work panicked".into())),
    };
    if result.is_err() {
        exec(conn, "ROLLBACK TO SAVEPOINT job").await?;
    }
    exec(conn, "RELEASE SAVEPOINT job").await?;
    result
}

fn fail_all(group: Vec<Job>, err: &Error) {
    tracing::error!("the store writer could not start a transaction: {err}");
    for job in group {
        let _ = job.reply.send(Err(Error::ServiceUnavailable("the store is unavailable".into())));
    }
}

/// Runs one job in its own PostgreSQL transaction.
pub(crate) async fn run_postgres(pool: &PgPool, work: ErasedJob) -> JobResult {
    let mut tx = pool.begin().await.map_err(db_error)?;
    let outcome = {
        let mut handle = Conn::Postgres(&mut tx);
        AssertUnwindSafe(work(&mut handle)).catch_unwind().await
    };
    let result = outcome.unwrap_or_else(|_| Err(Error::Internal("a unit of work panicked".into())));
    match result {
        Ok(value) => {
            tx.commit().await.map_err(db_error)?;
            Ok(value)
        }
        Err(err) => {
            let _ = tx.rollback().await;
            Err(err)
        }
    }
}
