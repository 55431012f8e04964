//! Benchmarks of the keyed limiter against `governor`'s keyed limiter, plus memory per key.
//!
//! Both limiters are measured in the same run, on the same 100 000 pre-populated IPv4 keys
//! visited in the same order, under the same quota (a burst of a million refilled at one per
//! second, so that every check is an admission, the common case, and every key stays live). Memory is measured as the growth of the process's resident set
//! while one million keys are inserted, each measurement in a fresh child process so that no
//! allocator state carries over. This file deliberately measures nothing of the tower layer,
//! whose cost is the limiter's plus the caller's closures.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroU32;
use std::process::Command;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use gateway_limits::{KeyedLimiter, Quota, SystemClock};
use governor::{DefaultKeyedRateLimiter, RateLimiter};

const LIVE_KEYS: usize = 100_000;
const MEMORY_KEYS: usize = 1_000_000;
const BURST: NonZeroU32 = NonZeroU32::new(1_000_000).unwrap();
const ONE: NonZeroU32 = NonZeroU32::MIN;
/// Set in the child processes that measure memory.
const MEMORY_ENV: &str = "GATEWAY_LIMITS_BENCH_MEMORY";

/// Distinct IPv4 addresses in a scattered order (an odd multiplier is a bijection on `u32`).
fn ip_keys(n: usize) -> Vec<IpAddr> {
    (0..n as u32).map(|i| IpAddr::V4(Ipv4Addr::from(i.wrapping_mul(0x9E37_79B1)))).collect()
}

/// DIDs of the length of a real `did:key` (56 characters).
fn did_keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("did:key:z6Mk{i:044}")).collect()
}

/// The benchmarks' quota, in our terms.
fn quota() -> Quota {
    Quota::with_burst_and_rate(BURST, ONE)
}

/// The benchmarks' quota, in governor's terms.
fn governor_quota() -> governor::Quota {
    governor::Quota::per_second(ONE).allow_burst(BURST)
}

fn ours(keys: &[IpAddr], quota: Quota) -> KeyedLimiter<IpAddr> {
    let limiter = KeyedLimiter::new(SystemClock::new());
    for key in keys {
        limiter.check(key, quota).unwrap();
    }
    limiter
}

fn governor(keys: &[IpAddr], quota: governor::Quota) -> DefaultKeyedRateLimiter<IpAddr> {
    let limiter = RateLimiter::keyed(quota);
    for key in keys {
        limiter.check_key(key).unwrap();
    }
    limiter
}

/// Runs `check` on `threads` threads at once, `iters` checks in all, and returns the wall time.
fn concurrently(threads: usize, iters: u64, keys: &[IpAddr], check: impl Fn(usize, &IpAddr) + Sync) -> Duration {
    let per_thread = iters.div_ceil(threads as u64);
    let barrier = Barrier::new(threads + 1);
    thread::scope(|s| {
        for t in 0..threads {
            let (barrier, check) = (&barrier, &check);
            s.spawn(move || {
                // Threads start at different points of the key list, as independent clients would.
                let offset = t * keys.len() / threads;
                barrier.wait();
                for i in 0..per_thread as usize {
                    check(t, &keys[(offset + i) % keys.len()]);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Leaving the scope joins every thread.
        start
    })
    .elapsed()
}

fn bench_checks(c: &mut Criterion) {
    let keys = ip_keys(LIVE_KEYS);
    let quota = quota();
    let ours = ours(&keys, quota);
    let governor = governor(&keys, governor_quota());
    assert_eq!(ours.len(), LIVE_KEYS);

    let mut group = c.benchmark_group("check_100k_keys_1_thread");
    group.throughput(Throughput::Elements(1));
    group.bench_function("gateway-limits", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(ours.check(&keys[i], quota)).unwrap();
        });
    });
    group.bench_function("governor", |b| {
        let mut i = 0;
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(governor.check_key(&keys[i])).unwrap();
        });
    });
    group.finish();

    let mut group = c.benchmark_group("check_100k_keys_2_threads");
    group.throughput(Throughput::Elements(1));
    group.bench_function("gateway-limits", |b| {
        b.iter_custom(|iters| {
            concurrently(2, iters, &keys, |_, key| {
                black_box(ours.check(key, quota)).unwrap();
            })
        });
    });
    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            concurrently(2, iters, &keys, |_, key| {
                black_box(governor.check_key(key)).unwrap();
            })
        });
    });
    // The machine's ceiling: each thread checks its own limiter of the same size, so nothing is
    // shared between the cores and the only limits are the cores, their caches and memory.
    let private = [ours, self::ours(&keys, quota)];
    group.bench_function("ceiling: one limiter per thread", |b| {
        b.iter_custom(|iters| {
            concurrently(2, iters, &keys, |t, key| {
                black_box(private[t].check(key, quota)).unwrap();
            })
        });
    });
    group.finish();
}

/// The process's resident set in bytes, from `/proc/self/status`.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line");
    kib * 1024
}

/// Inserts `MEMORY_KEYS` keys into the limiter named by `what` and prints the resident-set
/// growth per key. Runs in a child process. The quota keeps every key live for an hour, so
/// none can be evicted while the table fills.
fn measure_memory(what: &str) {
    let quota = Quota::per_hour(ONE);
    let (before, after) = match what {
        "gateway-limits/ip" => {
            let keys = ip_keys(MEMORY_KEYS);
            let before = resident_bytes();
            let limiter = ours(&keys, quota);
            let after = resident_bytes();
            assert_eq!(limiter.len(), MEMORY_KEYS);
            (before, after)
        }
        "governor/ip" => {
            let keys = ip_keys(MEMORY_KEYS);
            let before = resident_bytes();
            let limiter = governor(&keys, governor::Quota::per_hour(ONE));
            let after = resident_bytes();
            assert_eq!(limiter.len(), MEMORY_KEYS);
            (before, after)
        }
        "gateway-limits/did" => {
            let keys = did_keys(MEMORY_KEYS);
            let before = resident_bytes();
            let limiter: KeyedLimiter<Box<str>> = KeyedLimiter::new(SystemClock::new());
            for key in &keys {
                limiter.check(key.as_str(), quota).unwrap();
            }
            let after = resident_bytes();
            assert_eq!(limiter.len(), MEMORY_KEYS);
            (before, after)
        }
        other => panic!("unknown memory measurement {other}"),
    };
    let growth = after.saturating_sub(before);
    println!(
        "memory/{what}: {} keys, resident set +{:.1} MiB, {:.1} bytes per key",
        MEMORY_KEYS,
        growth as f64 / (1024.0 * 1024.0),
        growth as f64 / MEMORY_KEYS as f64
    );
}

fn bench_memory() {
    let exe = std::env::current_exe().expect("bench executable");
    for what in ["gateway-limits/ip", "gateway-limits/did", "governor/ip"] {
        let output = Command::new(&exe).env(MEMORY_ENV, what).output().expect("memory child process");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        print!("{}", String::from_utf8_lossy(&output.stdout));
    }
}

/// One check, given the thread's index and the key.
type Check<'a> = &'a (dyn Fn(usize, &IpAddr) + Sync);

/// Scaling to two cores, measured in interleaved rounds.
///
/// On a virtual machine the speed of a core drifts by tens of per cent over a minute, which
/// criterion's one-benchmark-after-another order turns into bias between the one-thread and
/// two-thread figures. Here every round measures each configuration once, in turn, and the
/// medians over the rounds are reported, so drift affects every configuration alike.
fn bench_scaling() {
    const ROUNDS: usize = 9;
    const CHECKS: u64 = 4_000_000;
    let keys = ip_keys(LIVE_KEYS);
    let quota = quota();
    let ours = [self::ours(&keys, quota), self::ours(&keys, quota)];
    let governor = self::governor(&keys, governor_quota());
    let configurations: [(&str, usize, Check<'_>); 5] = [
        ("gateway-limits, 1 thread", 1, &|_, key| {
            black_box(ours[0].check(key, quota)).unwrap();
        }),
        ("gateway-limits, 2 threads", 2, &|_, key| {
            black_box(ours[0].check(key, quota)).unwrap();
        }),
        ("governor, 1 thread", 1, &|_, key| {
            black_box(governor.check_key(key)).unwrap();
        }),
        ("governor, 2 threads", 2, &|_, key| {
            black_box(governor.check_key(key)).unwrap();
        }),
        ("ceiling: 2 threads, one gateway-limits limiter each", 2, &|t, key| {
            black_box(ours[t].check(key, quota)).unwrap();
        }),
    ];
    let mut samples = vec![Vec::with_capacity(ROUNDS); configurations.len()];
    for _ in 0..ROUNDS {
        for (i, (_, threads, check)) in configurations.iter().enumerate() {
            let elapsed = concurrently(*threads, CHECKS, &keys, check);
            samples[i].push(elapsed.as_nanos() as f64 / CHECKS as f64);
        }
    }
    for ((name, _, _), mut times) in configurations.iter().zip(samples) {
        times.sort_by(f64::total_cmp);
        let median = times[ROUNDS / 2];
        println!(
            "scaling/{name}: median {median:.1} ns per check ({:.2} M checks/s), range [{:.1}, {:.1}] over {ROUNDS} rounds",
            1e3 / median,
            times[0],
            times[ROUNDS - 1]
        );
    }
}

fn main() {
    if let Ok(what) = std::env::var(MEMORY_ENV) {
        measure_memory(&what);
        return;
    }
    bench_memory();
    bench_scaling();
    let mut criterion = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30)
        .configure_from_args();
    bench_checks(&mut criterion);
    criterion.final_summary();
}
