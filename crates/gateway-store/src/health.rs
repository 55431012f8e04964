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
        self.record(&Err(Error::ServiceUnavailable(format!("a commit did not finish within {waited:?}"))));
    }

    /// `Ok` while the latest store-level write succeeded.
    pub(crate) fn writable(&self) -> Result<(), Error> {
        match &*self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            None => Ok(()),
            Some(why) => Err(Error::ServiceUnavailable(format!("the store cannot commit: {why}"))),
        }
    }
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
}
