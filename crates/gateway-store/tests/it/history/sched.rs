//! How a round's processes are run: real threads with seeded delays, or a seeded scheduler.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use gateway_core::Error;
use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;

/// A process's operation.
pub type Job<T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;
type Slot<T> = (Job<T>, Option<Result<T, Error>>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `tokio::spawn`ed processes behind a barrier, each delayed 0–2 ms (seeded).
    Threads,
    /// One thread; the processes are polled in a seeded order and yield a seeded number of times
    /// before their operation, so an interleaving is a function of the seed.
    Seeded,
}

pub async fn run_jobs<T: Send + 'static>(mode: Mode, rng: &mut StdRng, jobs: Vec<Job<T>>) -> Vec<Result<T, Error>> {
    match mode {
        Mode::Threads => threads(rng, jobs).await,
        Mode::Seeded => seeded(rng, jobs).await,
    }
}

async fn threads<T: Send + 'static>(rng: &mut StdRng, jobs: Vec<Job<T>>) -> Vec<Result<T, Error>> {
    let barrier = Arc::new(tokio::sync::Barrier::new(jobs.len()));
    let handles: Vec<_> = jobs
        .into_iter()
        .map(|job| {
            let barrier = barrier.clone();
            let delay = Duration::from_micros(rng.gen_range(0..2_000));
            tokio::spawn(async move {
                barrier.wait().await;
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                job.await
            })
        })
        .collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.expect("a process panicked"));
    }
    results
}

/// Polls every unfinished job once per step, in an order drawn from the RNG; each job first
/// yields a drawn number of times (its place in the race).
async fn seeded<T: Send + 'static>(rng: &mut StdRng, jobs: Vec<Job<T>>) -> Vec<Result<T, Error>> {
    let mut slots: Vec<Slot<T>> = jobs
        .into_iter()
        .map(|job| {
            let yields = rng.gen_range(0..6u32);
            let job: Job<T> = Box::pin(async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                job.await
            });
            (job, None)
        })
        .collect();
    let mut order: Vec<usize> = (0..slots.len()).collect();
    std::future::poll_fn(|cx: &mut Context<'_>| {
        order.shuffle(rng);
        for &i in &order {
            let (job, done) = &mut slots[i];
            if done.is_none()
                && let Poll::Ready(result) = job.as_mut().poll(cx)
            {
                *done = Some(result);
            }
        }
        if slots.iter().all(|(_, done)| done.is_some()) { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    slots.into_iter().map(|(_, done)| done.expect("finished")).collect()
}
