//! Whether the store can commit: readiness follows writes, not just reads.
//!
//! A database that still answers `SELECT 1` may refuse every write (a full disk, a read-only
//! standby) or stall on every commit. [`WriteHealth`] remembers the outcome of the latest
//! commits: every unit of work reports whether it failed for the store's own reasons, and the
//! gateway's write probe (a one-row update every second or so) keeps the verdict fresh when no
//! one else writes. A refusal of the domain (a 4xx) says nothing about the store and changes
//! nothing here.

use std::sync::Mutex;

use gateway_core::Error;

/// The message prefix of a deadlock or serialization failure: PostgreSQL aborted one of two
/// conflicting transactions, and the store itself is fine.
pub(crate) const CONFLICT_ABORTED: &str = "the store aborted a conflicting transaction";

/// The message prefix of a failure to reach the database at all: no connection (refused, reset,
/// a pool that could not open one in time) or no answer within a deadline (a frozen server).
pub(crate) const UNREACHABLE: &str = "store unreachable";

/// Whether a failure says the database cannot be reached (rather than refusing one thing).
pub(crate) fn is_unreachable(err: &Error) -> bool {
    matches!(err, Error::ServiceUnavailable(why) if why.starts_with(UNREACHABLE))
}

/// Whether PostgreSQL answers, as the write probe and readiness's ping last saw it. While the
/// latest of them could not reach it, requests are answered 503 at once instead of each waiting
/// for a connection the pool cannot open (up to a second) or for an answer that will not come.
/// Only the probe and the ping decide: a request that times out says nothing new, and they run
/// every second, so a database that is back is used again within about a second.
#[derive(Debug, Default)]
pub(crate) struct Reachability {
    /// Why the latest probe or ping could not reach the database, and since when.
    down: Mutex<Option<(String, std::time::Instant)>>,
}

impl Reachability {
    /// Records the outcome of a write probe or a ping.
    pub(crate) fn observe(&self, result: &Result<(), Error>) {
        let mut down = self.down.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(()) => *down = None,
            Err(err @ Error::ServiceUnavailable(why)) if is_unreachable(err) => {
                if down.is_none() {
                    *down = Some((why.clone(), std::time::Instant::now()));
                }
            }
            // The database answered (a refusal, a full disk): it is reachable.
            Err(_) => *down = None,
        }
    }

    /// `Ok` unless the latest probe or ping could not reach the database: then the 503 to give.
    pub(crate) fn check(&self) -> Result<(), Error> {
        match &*self.down.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            None => Ok(()),
            Some((why, since)) => Err(Error::ServiceUnavailable(format!(
                "{UNREACHABLE} for {} s ({why}); the gateway checks again every second",
                since.elapsed().as_secs()
            ))),
        }
    }
}

/// A failure that can repeat many times a second (a checkpoint on a full disk), said in the log
/// once when it starts, then at most once per [`Streak::QUIET`] with how often it happened
/// meanwhile, and once when it ends.
#[derive(Debug, Default)]
pub(crate) struct Streak {
    /// Failures since the streak began, and when it was last said.
    failing: Option<(u64, std::time::Instant)>,
    /// Failures not yet said.
    unsaid: u64,
}

/// What [`Streak`] says about a failure or a success.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Say {
    /// Nothing: the line would repeat one said less than [`Streak::QUIET`] ago.
    Nothing,
    /// The first failure of a streak.
    Started,
    /// The streak goes on: this many failures since it was last said.
    Repeated(u64),
    /// A success after this many failures.
    Ended(u64),
}

impl Streak {
    /// The least time between two lines about one streak.
    pub(crate) const QUIET: std::time::Duration = std::time::Duration::from_secs(60);

    /// A failure at `now`.
    pub(crate) fn failed(&mut self, now: std::time::Instant) -> Say {
        match &mut self.failing {
            None => {
                self.failing = Some((1, now));
                Say::Started
            }
            Some((count, said)) => {
                *count += 1;
                self.unsaid += 1;
                if now.duration_since(*said) < Self::QUIET {
                    return Say::Nothing;
                }
                *said = now;
                Say::Repeated(std::mem::take(&mut self.unsaid))
            }
        }
    }

    /// A success.
    pub(crate) fn succeeded(&mut self) -> Say {
        self.unsaid = 0;
        match self.failing.take() {
            Some((count, _)) => Say::Ended(count),
            None => Say::Nothing,
        }
    }
}

/// The latest verdict on the store's writes.
#[derive(Debug, Default)]
pub(crate) struct WriteHealth {
    /// Why the latest store-level write failed, until a commit succeeds.
    failing: Mutex<Option<String>>,
}

impl WriteHealth {
    /// Records the outcome of a unit of work or probe.
    pub(crate) fn record(&self, result: &Result<(), Error>) {
        let mut failing = self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Ok(()) => {
                if let Some(why) = failing.take() {
                    tracing::info!("the store commits again (it had failed: {why})");
                }
            }
            Err(Error::ServiceUnavailable(why)) if !why.starts_with(CONFLICT_ABORTED) => {
                if failing.is_none() {
                    tracing::warn!("the store cannot commit: {why}; not ready until a commit succeeds");
                }
                *failing = Some(why.clone());
            }
            Err(_) => {}
        }
    }

    /// Records that a probe did not finish in time (a stalled disk or database).
    pub(crate) fn record_stall(&self, waited: std::time::Duration) {
        self.record(&Err(stalled("a commit", waited)));
    }

    /// `Ok` while the latest store-level write succeeded.
    pub(crate) fn writable(&self) -> Result<(), Error> {
        match &*self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            None => Ok(()),
            Some(why) => Err(Error::ServiceUnavailable(format!("the store cannot commit: {why}"))),
        }
    }
}

/// The failure of a probe (`what`: a commit, a read) that did not finish within `waited`.
pub(crate) fn stalled(what: &str, waited: std::time::Duration) -> Error {
    Error::ServiceUnavailable(format!("{UNREACHABLE}: {what} did not finish within {waited:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_fail_until_a_commit_succeeds() {
        let health = WriteHealth::default();
        assert!(health.writable().is_ok());
        health.record(&Err(Error::conflict("INSUFFICIENT_CREDIT is the domain's")));
        health.record(&Err(Error::ServiceUnavailable(format!("{CONFLICT_ABORTED}; retry: deadlock"))));
        assert!(health.writable().is_ok(), "refusals and aborted conflicts say nothing about the store");
        health.record(&Err(Error::ServiceUnavailable("store unavailable: database or disk is full".into())));
        let err = health.writable().unwrap_err();
        assert!(matches!(&err, Error::ServiceUnavailable(m) if m.contains("disk is full")), "{err:?}");
        health.record(&Err(Error::not_found("coop", "x")));
        assert!(health.writable().is_err(), "a refusal is not a successful commit");
        health.record(&Ok(()));
        assert!(health.writable().is_ok());
        health.record_stall(std::time::Duration::from_secs(2));
        assert!(health.writable().is_err());
    }

    #[test]
    fn only_an_unreachable_database_makes_requests_fail_at_once() {
        let reach = Reachability::default();
        assert!(reach.check().is_ok());
        reach.observe(&Err(Error::ServiceUnavailable("store unavailable: database or disk is full".into())));
        assert!(reach.check().is_ok(), "a full disk answers: reads still work");
        reach.observe(&Err(Error::ServiceUnavailable(format!("{UNREACHABLE}: pool timed out"))));
        let err = reach.check().unwrap_err();
        assert!(is_unreachable(&err), "{err:?}");
        assert!(err.to_string().contains("pool timed out"), "{err}");
        reach.observe(&Err(stalled("a commit", std::time::Duration::from_secs(2))));
        assert!(reach.check().unwrap_err().to_string().contains("pool timed out"), "the streak's first cause");
        reach.observe(&Ok(()));
        assert!(reach.check().is_ok(), "the next probe that gets through ends it");
    }

    #[test]
    fn a_repeating_failure_is_said_once_a_minute_and_when_it_ends() {
        let start = std::time::Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        let mut streak = Streak::default();
        assert_eq!(streak.succeeded(), Say::Nothing);
        assert_eq!(streak.failed(at(0)), Say::Started);
        // 61 failures a second for a minute: nothing more until a minute has passed.
        let mut said = 0;
        for i in 1..3660 {
            if streak.failed(at(i * 16)) != Say::Nothing {
                said += 1;
            }
        }
        assert_eq!(said, 0, "nothing within the first minute");
        assert_eq!(streak.failed(at(60_000)), Say::Repeated(3660));
        assert_eq!(streak.failed(at(60_016)), Say::Nothing);
        assert_eq!(streak.succeeded(), Say::Ended(3662));
        assert_eq!(streak.succeeded(), Say::Nothing);
        assert_eq!(streak.failed(at(60_100)), Say::Started, "a new streak is said at once");
    }
}
