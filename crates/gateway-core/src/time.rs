//! Wall-clock time as an injectable dependency.
//!
//! Token expiry, challenge lifetimes and record timestamps read the time through [`Clock`] so
//! that tests move time with [`ManualClock`] instead of sleeping. Monotonic time for rate
//! limiting lives in `gateway-limits`, which has its own clock so it can be embedded alone.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current Unix time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_unix_millis(&self) -> u64;

    /// Whole seconds since the Unix epoch.
    fn now_unix_secs(&self) -> u64 {
        self.now_unix_millis() / 1000
    }
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_millis(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }
}

/// A clock that only moves when told to; clones share the same time.
#[derive(Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `unix_secs`.
    pub fn at_secs(unix_secs: u64) -> Self {
        Self(Arc::new(AtomicU64::new(unix_secs * 1000)))
    }

    /// Moves the clock forward.
    pub fn advance_secs(&self, secs: u64) {
        self.0.fetch_add(secs * 1000, Ordering::SeqCst);
    }

    /// Moves the clock forward by milliseconds.
    pub fn advance_millis(&self, millis: u64) {
        self.0.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ManualClock({} ms)", self.now_unix_millis())
    }
}
