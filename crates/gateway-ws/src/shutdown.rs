//! Graceful shutdown of upgraded sockets, which axum does not track.
//!
//! Every connection holds a [`ConnectionGuard`] from before its upgrade until its loop ends, and
//! watches one shutdown notice. [`ShutdownHandle::shutdown`] publishes the notice (each socket
//! then sends `Shutdown` and a close frame, and gives up writing at the deadline) and waits until
//! the count of guards reaches zero or the deadline passes. Refusing new upgrades is the route
//! handlers' job; stopping the HTTP listener is the binary's.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// What every socket is told at shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShutdownNotice {
    /// Sent as `Shutdown.reason`.
    pub(crate) reason: String,
    /// Sent as `Shutdown.reconnect_after_ms`.
    pub(crate) reconnect_after_ms: Option<u64>,
    /// When sockets stop trying to write their last frames.
    pub(crate) deadline: Instant,
}

/// Starts the shutdown of every event-stream socket of a [`crate::WsState`]; cheap to clone.
#[derive(Clone)]
pub struct ShutdownHandle {
    inner: Arc<Inner>,
}

struct Inner {
    notice: watch::Sender<Option<Arc<ShutdownNotice>>>,
    active: watch::Sender<usize>,
}

impl fmt::Debug for ShutdownHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShutdownHandle")
            .field("shutting_down", &self.is_shutting_down())
            .field("active_connections", &self.active_connections())
            .finish()
    }
}

impl ShutdownHandle {
    pub(crate) fn new() -> Self {
        Self { inner: Arc::new(Inner { notice: watch::Sender::new(None), active: watch::Sender::new(0) }) }
    }

    /// Tells every socket to send `Shutdown{reason, reconnect_after_ms}` and a close frame
    /// (1001), refuses new upgrades from now on (503), and returns once every socket has closed
    /// or `deadline` has passed, with the number of sockets still open (0 after a clean drain).
    /// Sockets still open at the deadline drop their connection right after it.
    ///
    /// A second call keeps the first notice and waits again with its own deadline.
    pub async fn shutdown(
        &self,
        reason: impl Into<String>,
        reconnect_after_ms: Option<u64>,
        deadline: Duration,
    ) -> usize {
        let deadline = Instant::now() + deadline;
        let reason = reason.into();
        self.inner.notice.send_if_modified(|notice| {
            if notice.is_some() {
                return false;
            }
            *notice = Some(Arc::new(ShutdownNotice { reason, reconnect_after_ms, deadline }));
            true
        });
        let mut active = self.inner.active.subscribe();
        let _ = tokio::time::timeout_at(deadline, async { active.wait_for(|n| *n == 0).await.map(|_| ()) }).await;
        self.active_connections()
    }

    /// Whether shutdown has begun (new upgrades are then refused).
    pub fn is_shutting_down(&self) -> bool {
        self.inner.notice.borrow().is_some()
    }

    /// Sockets currently open (or accepted and being upgraded).
    pub fn active_connections(&self) -> usize {
        *self.inner.active.borrow()
    }

    pub(crate) fn notices(&self) -> watch::Receiver<Option<Arc<ShutdownNotice>>> {
        self.inner.notice.subscribe()
    }

    /// Counts a connection until the guard is dropped.
    pub(crate) fn track(&self) -> ConnectionGuard {
        self.inner.active.send_modify(|n| *n += 1);
        crate::metrics::connection_opened();
        ConnectionGuard { inner: self.inner.clone() }
    }
}

/// Keeps a connection counted by its [`ShutdownHandle`] and in the connection gauges.
pub(crate) struct ConnectionGuard {
    inner: Arc<Inner>,
}

impl fmt::Debug for ConnectionGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnectionGuard")
    }
}

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.inner.active.send_modify(|n| *n = n.saturating_sub(1));
        crate::metrics::connection_closed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn shutdown_waits_for_guards_until_the_deadline() {
        let handle = ShutdownHandle::new();
        assert_eq!(handle.shutdown("idle", None, Duration::from_secs(1)).await, 0, "nothing to wait for");

        let handle = ShutdownHandle::new();
        let guard = handle.track();
        let mut notices = handle.notices();
        let waiter = tokio::spawn({
            let handle = handle.clone();
            async move { handle.shutdown("deploy", Some(250), Duration::from_secs(10)).await }
        });
        notices.changed().await.unwrap();
        let notice = notices.borrow().clone().unwrap();
        assert_eq!((notice.reason.as_str(), notice.reconnect_after_ms), ("deploy", Some(250)));
        assert!(handle.is_shutting_down());
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(!waiter.is_finished());
        drop(guard);
        assert_eq!(waiter.await.unwrap(), 0);

        let stuck = handle.track();
        let started = Instant::now();
        assert_eq!(handle.shutdown("again", None, Duration::from_secs(2)).await, 1);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(notices.borrow().as_ref().unwrap().reason, "deploy", "the first notice stands");
        drop(stuck);
    }
}
