//! The runtime's worker threads: how many there are, whether each runs on a core of its own, and
//! the scheduler slice they ask Linux for (`--workers`, `--pin-workers`, `--worker-slice-us`).
//!
//! By default the workers are tokio's: one per core this process may use, free to run on any of
//! them, with the kernel's slice. The other two settings are deployment tuning for a host (or a
//! container with a cpuset) of the gateway's own, off by default:
//!
//! - **Pinned workers.** The scheduler balances threads, not work: with two cores, two busy
//!   workers and two other busy threads, it often keeps both workers on one core, where each waits
//!   a whole tick (4 ms at 250 Hz) while the other runs, and every connection queued on the waiting
//!   one waits with it. Pinned, worker *i* runs only on the *i*-th allowed core, so the two never
//!   queue behind each other.
//! - **A short slice.** Linux 6.12 and later let a thread ask for a shorter turn (EEVDF's custom
//!   slice, 0.1–100 ms; the default is about 0.7 ms times 1 + log₂ of the cores). A shorter slice
//!   gives a worker an earlier deadline when a request wakes it, so it runs sooner, and hands the
//!   core back sooner. Its share of the CPU stays the same. An older kernel ignores the request,
//!   and the start-up log says so.
//!
//! Threads of the blocking pool, started later by a worker, would inherit its core and slice;
//! they are given back every allowed core and the kernel's slice.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// The shortest slice Linux grants (shorter requests are raised to it).
pub const MIN_SLICE: Duration = Duration::from_micros(100);
/// The longest slice Linux grants.
pub const MAX_SLICE: Duration = Duration::from_millis(100);

/// How the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerTuning {
    /// Worker threads (at least 1).
    pub workers: usize,
    /// Whether worker *i* runs only on the *i*-th CPU this process may use (modulo their number).
    pub pin: bool,
    /// The slice the workers ask the scheduler for; `None` keeps the kernel's.
    pub slice: Option<Duration>,
}

impl Default for WorkerTuning {
    fn default() -> Self {
        Self { workers: default_workers(), pin: false, slice: None }
    }
}

/// tokio's default: one worker per core this process may use.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Whether this kernel takes a thread's own slice (Linux 6.12 and later), asked on a thread of
/// its own that ends with the answer; the error says why not.
pub fn slice_supported() -> std::io::Result<()> {
    std::thread::spawn(|| request_slice(Duration::from_micros(700)))
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the probe thread panicked")))
}

/// What applying a [`WorkerTuning`] did, for the start-up log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// The CPU each pinned worker runs on, in the order the workers started.
    pub pinned: Vec<usize>,
    /// Workers whose slice the kernel took.
    pub sliced: usize,
    /// What could not be done (each once), in words; the workers run without it.
    pub problems: Vec<String>,
}

impl Applied {
    fn problem(&mut self, text: String) {
        if !self.problems.contains(&text) {
            self.problems.push(text);
        }
    }
}

/// Threads started so far and what was done to the workers among them.
#[derive(Default)]
struct Started {
    threads: usize,
    applied: Applied,
}

/// Builds the multi-threaded runtime the gateway serves on, with its workers set up as `tuning`
/// says. Returns once every worker has started.
///
/// tokio starts the workers while building the runtime, before anything can ask for a blocking
/// thread, so the first `tuning.workers` threads that start are the workers.
pub fn runtime(tuning: WorkerTuning) -> std::io::Result<(tokio::runtime::Runtime, Applied)> {
    let allowed = if tuning.pin { allowed_cpus()? } else { Vec::new() };
    let mut first = Started::default();
    if tuning.pin && tuning.workers > allowed.len() {
        first.applied.problem(format!(
            "{} workers on {} allowed CPUs: some CPUs run two pinned workers",
            tuning.workers,
            allowed.len()
        ));
    }
    let state = Arc::new((Mutex::new(first), Condvar::new()));
    let hook = Arc::clone(&state);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(tuning.workers)
        .enable_all()
        .on_thread_start(move || {
            let (lock, started_cv) = &*hook;
            let mut started = lock.lock().unwrap_or_else(PoisonError::into_inner);
            let index = started.threads;
            started.threads += 1;
            if index < tuning.workers {
                if !allowed.is_empty() {
                    let cpu = allowed[index % allowed.len()];
                    match set_affinity(&[cpu]) {
                        Ok(()) => started.applied.pinned.push(cpu),
                        Err(err) => started.applied.problem(format!("pinning a worker to CPU {cpu}: {err}")),
                    }
                }
                if let Some(slice) = tuning.slice {
                    match request_slice(slice) {
                        Ok(()) => started.applied.sliced += 1,
                        Err(err) => {
                            started.applied.problem(format!("asking for a {} µs slice: {err}", slice.as_micros()))
                        }
                    }
                }
                started_cv.notify_all();
            } else {
                // A thread started by a worker inherits its CPU and its slice. Should a reset
                // fail (the cpuset changed since the start), the thread keeps them: slower or
                // more often switched, never wrong.
                if !allowed.is_empty() {
                    let _ = set_affinity(&allowed);
                }
                if tuning.slice.is_some() {
                    let _ = reset_slice();
                }
            }
        })
        .build()?;
    let (lock, started_cv) = &*state;
    let (started, timeout) = started_cv
        .wait_timeout_while(lock.lock().unwrap_or_else(PoisonError::into_inner), Duration::from_secs(10), |s| {
            s.threads < tuning.workers
        })
        .unwrap_or_else(PoisonError::into_inner);
    if timeout.timed_out() {
        return Err(std::io::Error::other(format!(
            "{} of {} workers started within 10 s",
            started.threads, tuning.workers
        )));
    }
    Ok((runtime, started.applied.clone()))
}

/// The CPUs the calling thread may run on, in order.
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    let set = rustix::thread::sched_getaffinity(None)?;
    Ok((0..rustix::thread::CpuSet::MAX_CPU).filter(|&cpu| set.is_set(cpu)).collect())
}

#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> std::io::Result<Vec<usize>> {
    Err(std::io::Error::other("pinning workers is a Linux setting"))
}

/// Lets the calling thread run on `cpus` only.
#[cfg(target_os = "linux")]
fn set_affinity(cpus: &[usize]) -> std::io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    Ok(rustix::thread::sched_setaffinity(None, &set)?)
}

#[cfg(not(target_os = "linux"))]
fn set_affinity(_cpus: &[usize]) -> std::io::Result<()> {
    Err(std::io::Error::other("pinning workers is a Linux setting"))
}

/// The slice the calling thread runs with (`se.slice` of `/proc/thread-self/sched`), when the
/// kernel shows it.
pub fn current_slice() -> Option<Duration> {
    slice_in(&std::fs::read_to_string("/proc/thread-self/sched").ok()?)
}

/// The slice in the text of a thread's `/proc/…/sched` file (`se.slice`, in nanoseconds).
pub fn slice_in(sched: &str) -> Option<Duration> {
    sched
        .lines()
        .find_map(|line| line.strip_prefix("se.slice")?.split(':').nth(1)?.trim().parse().ok())
        .map(Duration::from_nanos)
}

/// The calling thread's scheduling policy (field 41 of `/proc/thread-self/stat`).
fn current_policy() -> std::io::Result<u32> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat")?;
    // The command name (field 2) is in parentheses and may hold anything: count from its end.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    after_name
        .split_whitespace()
        .nth(41 - 3)
        .and_then(|field| field.parse().ok())
        .ok_or_else(|| std::io::Error::other("no policy in /proc/thread-self/stat"))
}

/// `SCHED_OTHER` and `SCHED_BATCH`: the policies a slice applies to.
const FAIR_POLICIES: [u32; 2] = [0, 3];

/// Asks the scheduler for `slice` (clamped to [`MIN_SLICE`]..=[`MAX_SLICE`]) for the calling
/// thread, keeping its policy (normal or batch) and nice value, and checks that the kernel took
/// it.
#[cfg(target_os = "linux")]
fn request_slice(slice: Duration) -> std::io::Result<()> {
    let slice = slice.clamp(MIN_SLICE, MAX_SLICE);
    set_fair_slice(u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX))?;
    match current_slice() {
        Some(taken) if taken == slice => Ok(()),
        Some(_) => Err(std::io::Error::other(
            "this kernel does not take a thread's own slice (Linux 6.12 and later do); the workers keep its default",
        )),
        None => Err(std::io::Error::other(
            "asked, but this kernel does not show a thread's slice (/proc/thread-self/sched), so whether it took it is unknown",
        )),
    }
}

#[cfg(not(target_os = "linux"))]
fn request_slice(_slice: Duration) -> std::io::Result<()> {
    Err(std::io::Error::other("a thread's own slice is a Linux setting"))
}

/// Gives the calling thread the kernel's default slice back.
#[cfg(target_os = "linux")]
fn reset_slice() -> std::io::Result<()> {
    set_fair_slice(0)
}

#[cfg(not(target_os = "linux"))]
fn reset_slice() -> std::io::Result<()> {
    Ok(())
}

/// `sched_setattr(2)` on the calling thread with `runtime_ns` as the slice it asks for (0: the
/// kernel's default), keeping its policy, which must be normal or batch, and its nice value.
#[cfg(target_os = "linux")]
fn set_fair_slice(runtime_ns: u64) -> std::io::Result<()> {
    let policy = current_policy()?;
    if !FAIR_POLICIES.contains(&policy) {
        return Err(std::io::Error::other(format!(
            "the thread runs under scheduling policy {policy}: a slice applies to the normal and batch policies only"
        )));
    }
    let nice = rustix::process::getpriority_process(None)?;
    sched_setattr(policy, nice, runtime_ns)
}

/// `sched_setattr(2)` on the calling thread: `policy` (a fair one), `nice`, and `runtime_ns` as
/// the slice it asks for (Linux 6.12+; older kernels ignore the field for these policies).
///
/// The one `unsafe` of the workspace: neither the standard library nor rustix wraps this call.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn sched_setattr(policy: u32, nice: i32, runtime_ns: u64) -> std::io::Result<()> {
    /// `struct sched_attr` as of `SCHED_ATTR_SIZE_VER0` (48 bytes).
    #[repr(C)]
    struct SchedAttr {
        size: u32,
        sched_policy: u32,
        sched_flags: u64,
        sched_nice: i32,
        sched_priority: u32,
        sched_runtime: u64,
        sched_deadline: u64,
        sched_period: u64,
    }
    const _: () = assert!(std::mem::size_of::<SchedAttr>() == 48);
    let attr = SchedAttr {
        size: 48,
        sched_policy: policy,
        sched_flags: 0,
        sched_nice: nice,
        sched_priority: 0,
        sched_runtime: runtime_ns,
        sched_deadline: 0,
        sched_period: 0,
    };
    // SAFETY: `attr` is a valid, initialised `struct sched_attr` of the size its `size` field
    // gives, which lives across the call; the kernel only reads it. Thread 0 is the caller; the
    // flags argument is 0.
    let result = unsafe {
        libc::syscall(libc::SYS_sched_setattr, libc::c_long::from(0), &raw const attr, libc::c_long::from(0))
    };
    if result == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

/// The slice tests need Linux 6.12 or later (EEVDF's custom slice): on an older kernel each says
/// SKIPPED with the reason and passes.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Whether this kernel takes a thread's own slice; when it does not, says SKIPPED for `test`.
    fn slices_supported(test: &str) -> bool {
        match slice_supported() {
            Ok(()) => true,
            Err(err) => {
                eprintln!("SKIPPED {test}: {err}");
                false
            }
        }
    }

    /// What a thread sees of its own set-up: the CPUs it may run on and its slice.
    fn own_setup() -> (Vec<usize>, Option<Duration>) {
        (allowed_cpus().expect("affinity"), current_slice())
    }

    /// For each of `n` tasks run at once on `runtime`'s workers, what `probe` returns on the
    /// worker that ran it (which workers run them is the scheduler's choice; every worker must
    /// show the setting).
    fn seen_by_workers<T: Send + 'static>(runtime: &tokio::runtime::Runtime, n: usize, probe: fn() -> T) -> Vec<T> {
        runtime.block_on(async {
            let barrier = Arc::new(tokio::sync::Barrier::new(n));
            let tasks: Vec<_> = (0..n)
                .map(|_| {
                    let barrier = Arc::clone(&barrier);
                    tokio::spawn(async move {
                        barrier.wait().await;
                        let seen = probe();
                        // Holding the worker lets the others steal the remaining tasks.
                        std::thread::sleep(Duration::from_millis(50));
                        seen
                    })
                })
                .collect();
            let mut seen = Vec::new();
            for task in tasks {
                seen.push(task.await.expect("task"));
            }
            seen
        })
    }

    /// What `probe` returns on a thread of the blocking pool started by a worker (not by the
    /// thread that called `block_on`, which is neither pinned nor sliced).
    fn seen_by_a_blocking_thread<T: Send + 'static>(runtime: &tokio::runtime::Runtime, probe: fn() -> T) -> T {
        runtime.block_on(async {
            tokio::spawn(async move { tokio::task::spawn_blocking(probe).await.expect("blocking task") })
                .await
                .expect("task")
        })
    }

    #[test]
    fn pinned_workers_each_run_on_one_allowed_cpu_and_blocking_threads_on_all() {
        let allowed = allowed_cpus().expect("affinity");
        let workers = allowed.len().min(4);
        let (runtime, applied) = runtime(WorkerTuning { workers, pin: true, slice: None }).expect("runtime");
        assert!(applied.problems.is_empty(), "{:?}", applied.problems);
        let mut pinned = applied.pinned.clone();
        pinned.sort_unstable();
        assert_eq!(pinned, allowed[..workers], "each worker on a CPU of its own");
        for (cpus, _) in seen_by_workers(&runtime, workers, own_setup) {
            assert_eq!(cpus.len(), 1, "a worker runs on one CPU: {cpus:?}");
            assert!(allowed.contains(&cpus[0]));
        }
        assert_eq!(
            seen_by_a_blocking_thread(&runtime, own_setup).0,
            allowed,
            "the blocking pool may use every allowed CPU"
        );
    }

    #[test]
    fn more_pinned_workers_than_cpus_share_them_and_say_so() {
        let allowed = allowed_cpus().expect("affinity");
        let workers = allowed.len() + 1;
        let (_runtime, applied) = runtime(WorkerTuning { workers, pin: true, slice: None }).expect("runtime");
        assert_eq!(applied.pinned.len(), workers);
        assert!(applied.pinned.iter().all(|cpu| allowed.contains(cpu)));
        assert_eq!(
            applied.problems,
            [format!("{workers} workers on {} allowed CPUs: some CPUs run two pinned workers", allowed.len())]
        );
    }

    #[test]
    fn unpinned_workers_may_run_anywhere_allowed() {
        let allowed = allowed_cpus().expect("affinity");
        let (runtime, applied) = runtime(WorkerTuning { workers: 2, pin: false, slice: None }).expect("runtime");
        assert_eq!(applied, Applied::default());
        for (cpus, _) in seen_by_workers(&runtime, 2, own_setup) {
            assert_eq!(cpus, allowed);
        }
    }

    #[test]
    fn workers_run_with_the_slice_they_ask_for_and_blocking_threads_without() {
        if !slices_supported("workers_run_with_the_slice_they_ask_for_and_blocking_threads_without") {
            return;
        }
        let slice = Duration::from_micros(300);
        let (runtime, applied) = runtime(WorkerTuning { workers: 2, pin: true, slice: Some(slice) }).expect("runtime");
        assert!(applied.problems.is_empty(), "{:?}", applied.problems);
        assert_eq!(applied.sliced, 2);
        for (_, taken) in seen_by_workers(&runtime, 2, own_setup) {
            assert_eq!(taken, Some(slice));
        }
        let default = current_slice();
        assert!(default.is_some() && default != Some(slice), "the test thread keeps the kernel's slice: {default:?}");
        assert_eq!(seen_by_a_blocking_thread(&runtime, own_setup), (allowed_cpus().expect("affinity"), default));
    }

    #[test]
    fn a_slice_outside_the_kernels_bounds_is_clamped_to_them() {
        if !slices_supported("a_slice_outside_the_kernels_bounds_is_clamped_to_them") {
            return;
        }
        let (runtime, applied) =
            runtime(WorkerTuning { workers: 1, pin: false, slice: Some(Duration::from_micros(10)) }).expect("runtime");
        assert!(applied.problems.is_empty(), "{:?}", applied.problems);
        assert_eq!(seen_by_workers(&runtime, 1, own_setup)[0].1, Some(MIN_SLICE));
    }

    #[test]
    fn the_slice_keeps_the_threads_nice_value_and_policy() {
        if !slices_supported("the_slice_keeps_the_threads_nice_value_and_policy") {
            return;
        }
        let seen = std::thread::spawn(|| {
            // One step nicer than now: always allowed.
            let nice = (rustix::process::getpriority_process(None).expect("nice") + 1).min(19);
            rustix::process::setpriority_process(None, nice).expect("renice");
            request_slice(Duration::from_micros(500)).expect("slice");
            let after = rustix::process::getpriority_process(None).expect("nice");
            (nice, after, current_policy().expect("policy"), current_slice())
        })
        .join()
        .expect("thread");
        assert_eq!(seen.1, seen.0, "nice value");
        assert_eq!(seen.2, 0, "still the normal policy");
        assert_eq!(seen.3, Some(Duration::from_micros(500)));
    }

    #[test]
    fn the_policy_is_read_past_a_command_name_with_spaces_and_parentheses() {
        assert_eq!(current_policy().expect("policy"), 0);
        let named = std::thread::Builder::new()
            .name("a (b) c".into())
            .spawn(|| current_policy().expect("policy"))
            .expect("thread")
            .join()
            .expect("thread");
        assert_eq!(named, 0);
    }
}
