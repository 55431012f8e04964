//! Workers that hand their core back: a turn on the core, between two polls of a connection.
//!
//! Linux switches a running thread for another runnable one on the same core only at a
//! scheduler tick (every 4 ms at `CONFIG_HZ=250`), or when the other wakes with an earlier
//! deadline. A worker that always has another connection to serve keeps its core until that
//! tick, and a thread waiting on the core meanwhile waits the whole tick: a proxy in front of
//! the gateway, a sidecar, a load generator, the store's writer. When that thread is the one
//! that takes the answers or sends the next requests, every request in its hands waits with it:
//! on two cores shared with `wrk`, the workers' long stints put the p99 of balance reads at one
//! tick (docs/PERFORMANCE.md, "Seventh pass").
//!
//! A worker given a turn ([`take_turns`]; `gatewayd --worker-yield-us`) yields its core
//! (`sched_yield(2)`) once it has run that long since it last woke or yielded: after the poll
//! of a connection that ends the turn, never inside one. With no other thread waiting on its
//! core, the call returns at once: on a host of the gateway's own it costs one system call a
//! turn and changes nothing else. A thread without a turn (tests, the blocking pool, another
//! runtime) never yields.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

thread_local! {
    /// This thread's turn, if it takes turns.
    static TURN: Cell<Option<Duration>> = const { Cell::new(None) };
    /// When this thread's current turn began: when it last woke or yielded.
    static SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
    /// How often this thread has yielded.
    static YIELDS: Cell<u64> = const { Cell::new(0) };
}

/// The calling thread takes turns of `turn` from now on (a worker, from the runtime's
/// `on_thread_start`); `None` stops it.
pub fn take_turns(turn: Option<Duration>) {
    TURN.set(turn);
    SINCE.set(turn.map(|_| Instant::now()));
}

/// The calling thread woke (the runtime's `on_thread_unpark`): a new turn begins.
pub fn woke() {
    if TURN.get().is_some() {
        SINCE.set(Some(Instant::now()));
    }
}

/// The calling thread's turn, if it takes turns.
pub fn turn() -> Option<Duration> {
    TURN.get()
}

/// How often the calling thread has yielded its core.
pub fn yields() -> u64 {
    YIELDS.get()
}

/// Yields the calling thread's core if its turn is over, and begins the next one. Called after
/// each poll of a connection ([`InTurns`]); nothing may be held that another thread waits for.
pub fn end_of_poll() {
    let (Some(turn), Some(since)) = (TURN.get(), SINCE.get()) else {
        return;
    };
    if since.elapsed() >= turn {
        std::thread::yield_now();
        YIELDS.set(YIELDS.get() + 1);
        SINCE.set(Some(Instant::now()));
    }
}

pin_project_lite::pin_project! {
    /// A connection's future, after each poll of which the worker's turn may end.
    pub(crate) struct InTurns<F> {
        #[pin]
        inner: F,
    }
}

impl<F> InTurns<F> {
    pub(crate) fn new(inner: F) -> Self {
        Self { inner }
    }
}

impl<F: Future> Future for InTurns<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = self.project().inner.poll(cx);
        end_of_poll();
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own, so that the thread-local turn starts unset.
    fn on_a_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        std::thread::spawn(f).join().expect("the test thread panicked")
    }

    fn spin(duration: Duration) {
        let start = Instant::now();
        while start.elapsed() < duration {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn a_thread_yields_once_its_turn_is_over_and_then_begins_another() {
        let yields = on_a_thread(|| {
            take_turns(Some(Duration::from_millis(2)));
            end_of_poll();
            let early = yields();
            spin(Duration::from_millis(3));
            end_of_poll();
            let late = yields();
            // A new turn began at the yield: not over yet.
            end_of_poll();
            (early, late, yields())
        });
        assert_eq!(yields, (0, 1, 1));
    }

    #[test]
    fn waking_begins_a_new_turn() {
        let yields = on_a_thread(|| {
            take_turns(Some(Duration::from_millis(2)));
            spin(Duration::from_millis(3));
            woke();
            end_of_poll();
            yields()
        });
        assert_eq!(yields, 0);
    }

    #[test]
    fn a_thread_without_a_turn_never_yields() {
        let yields = on_a_thread(|| {
            woke();
            spin(Duration::from_millis(3));
            end_of_poll();
            take_turns(Some(Duration::from_millis(1)));
            take_turns(None);
            spin(Duration::from_millis(2));
            woke();
            end_of_poll();
            yields()
        });
        assert_eq!(yields, 0);
    }

    #[test]
    fn a_future_in_turns_yields_after_the_poll_that_ends_the_turn() {
        let (output, yields) = on_a_thread(|| {
            take_turns(Some(Duration::from_millis(1)));
            let mut polls = 0;
            let future = InTurns::new(std::future::poll_fn(|cx| {
                polls += 1;
                spin(Duration::from_millis(2));
                if polls < 3 {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                } else {
                    Poll::Ready(polls)
                }
            }));
            let output = block_on(future);
            (output, yields())
        });
        assert_eq!((output, yields), (3, 3));
    }

    /// A minimal executor: polls `future` on this thread until it is ready.
    fn block_on<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
        }
    }
}
