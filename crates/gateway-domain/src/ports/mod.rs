//! Storage ports: the small traits through which the domain reaches its store.
//!
//! Writes go through a unit of work: a domain operation is a job run against a [`Tx`] handle
//! (one store transaction) by a [`Transactor`]. Business rules live in the job, in this crate;
//! the store only provides primitives (read this row, add to that balance, append an event), so
//! every rule is written once for every backend. `Tx` is the sum of one small trait per
//! aggregate. Reads that need no transaction use the `*Reads` traits on a connection pool.
//!
//! Each aggregate's records, `*Tx` trait and `*Reads` trait live in a file of their own (ledger,
//! events, notifications, coops, trust, governance, compute, and the coop's log); this module
//! holds the unit of work and the store-wide traits, and re-exports every port, so each is
//! named `ports::X`.
//!
//! Nothing here knows SQL or HTTP.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use gateway_core::{CoopId, Error};

mod compute;
mod coops;
mod events;
mod governance;
mod ledger;
mod log;
mod notifications;
mod trust;

pub use compute::*;
pub use coops::*;
pub use events::*;
pub use governance::*;
pub use ledger::*;
pub use log::*;
pub use notifications::*;
pub use trust::*;

/// A boxed, sendable future borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A unit of work as the transactor sees it. It answers only whether it succeeded, so one writer
/// can run jobs of every result type in one batch; [`transaction`] hands the typed result back
/// through a channel of the job's own type, read only once the store has committed.
pub type Job = Box<dyn for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<(), Error>> + Send>;

/// "Coop `coop_id` has committed events up to `seq`": the signal the event stream wakes on. The
/// events themselves are read from the outbox by sequence number, so a lost or duplicated
/// signal costs a read, never an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoopSignal {
    /// The coop.
    pub coop_id: CoopId,
    /// A sequence number it has reached.
    pub seq: u64,
}

/// Announces committed events: in-process after each commit, and (PostgreSQL) from other
/// replicas through LISTEN/NOTIFY.
pub trait EventFeed: Send + Sync + fmt::Debug {
    /// A receiver of every signal from now on. A receiver that falls behind gets `Lagged` and
    /// should re-read the outbox by sequence number.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<CoopSignal>;
}

/// Told after a commit that changed who belongs to a coop or in which role, so that caches in
/// front of the store (the per-request membership check) forget what they knew of that coop.
pub trait MembershipObserver: Send + Sync + fmt::Debug {
    /// The coop's members or roles changed.
    fn membership_changed(&self, coop: &CoopId);
}

/// Whether the store answers, for health and readiness probes.
#[async_trait]
pub trait StoreHealth: Send + Sync + fmt::Debug {
    /// The backend's name as reported by `/v1/health`: `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Succeeds when a trivial query round-trips.
    async fn ping(&self) -> Result<(), Error>;

    /// Whether the store can commit now, judged from the latest commits and write probes: an
    /// error (503) from the first commit that failed for the store's own reasons (a full or
    /// stalled disk, a database that refuses writes or is gone) until one succeeds again.
    fn writable(&self) -> Result<(), Error>;

    /// Commits a trivial write through the same path as every unit of work, and records the
    /// outcome that [`writable`](Self::writable) reports.
    async fn probe_write(&self) -> Result<(), Error>;
}

/// Runs units of work atomically and durably: when `run` returns `Ok`, the job's writes
/// are committed (and on disk, except in the in-memory mode); when the job fails, none of its
/// writes remain.
#[async_trait]
pub trait Transactor: Send + Sync + fmt::Debug {
    /// Runs one job and commits it. Use [`transaction`] instead.
    async fn run(&self, job: Job) -> Result<(), Error>;
}

/// Runs `job` in one store transaction and returns its result.
pub async fn transaction<T, F>(transactor: &dyn Transactor, job: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<T, Error>> + Send + 'static,
{
    let (result, mut committed) = tokio::sync::oneshot::channel::<T>();
    // The store may run the job on a task of its own: it carries the request's signing state.
    let unsigned = unsigned::current();
    let job: Job = Box::new(move |tx: &mut dyn Tx| {
        let future = job(tx);
        Box::pin(unsigned::carry(unsigned, async move {
            let value = future.await?;
            // Delivered to the caller only if the store then commits (below).
            let _ = result.send(value);
            Ok(())
        }))
    });
    transactor.run(job).await?;
    committed.try_recv().map_err(|_| Error::Internal("a committed unit of work left no result".into()))
}

/// Whether the current request is a critical operation that arrived without a signature
/// (INTERFACE.md §11). The HTTP edge refuses one early when the token's coop requires signatures;
/// the decision that counts is taken again in the unit of work, from the coop record it reads
/// anyway ([`crate::coops::require_coop`], [`crate::coops::lock_coop`], or
/// [`crate::coops::require_signature`] where it reads none), so that a settings change that
/// commits between the edge's read and the write cannot let an unsigned operation through.
pub mod unsigned {
    use std::future::Future;

    use gateway_core::Error;

    use super::CoopRecord;

    tokio::task_local! {
        static UNSIGNED: bool;
    }

    /// Runs `future` (a request's handling) as an unsigned critical operation.
    pub async fn critical<F: Future>(future: F) -> F::Output {
        carry(true, future).await
    }

    /// Whether the current task runs an unsigned critical operation.
    pub fn current() -> bool {
        UNSIGNED.try_with(|unsigned| *unsigned).unwrap_or(false)
    }

    /// Runs `future` (a unit of work, wherever the store polls it) with the signing state
    /// [`current`] gave where the unit of work was asked for.
    pub(crate) async fn carry<F: Future>(unsigned: bool, future: F) -> F::Output {
        UNSIGNED.scope(unsigned, future).await
    }

    /// `record` when the operation may change it: refused when it is unsigned and the coop
    /// requires signed requests.
    pub fn permit(record: CoopRecord) -> Result<CoopRecord, Error> {
        if record.settings.require_signed_requests && current() { Err(Error::SignatureRequired) } else { Ok(record) }
    }
}

/// The number of the last event a request's units of work appended, for the answer's
/// `ICN-Event-Seq` (INTERFACE.md §12): the HTTP layer runs each request inside [`appended::track`],
/// and the store calls [`appended::record`] after each commit that appended events.
pub mod appended {
    use std::cell::Cell;
    use std::future::Future;

    tokio::task_local! {
        static LAST: Cell<Option<u64>>;
    }

    /// Runs `future`, and gives with its output the number of the last event its units of work
    /// appended (the highest, should it append to the coop more than once).
    pub async fn track<F: Future>(future: F) -> (F::Output, Option<u64>) {
        LAST.scope(Cell::new(None), async move {
            let output = future.await;
            (output, LAST.with(Cell::get))
        })
        .await
    }

    /// Notes that a unit of work of the current request committed event `seq` (nothing outside
    /// [`track`]).
    pub fn record(seq: u64) {
        let _ = LAST.try_with(|last| last.set(Some(last.get().map_or(seq, |s| s.max(seq)))));
    }
}

/// Everything one transaction can touch.
pub trait Tx: LedgerTx + EventTx + NotificationTx + CoopTx + TrustTx + GovTx + ComputeTx + LogTx + Send {}

impl<T: LedgerTx + EventTx + NotificationTx + CoopTx + TrustTx + GovTx + ComputeTx + LogTx + Send> Tx for T {}
