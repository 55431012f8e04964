//! The one Redis handle of a gateway: a connection manager, a time budget per operation, the
//! key prefix, and whether Redis is answering.
//!
//! The connection manager keeps one multiplexed connection and reconnects by itself after an
//! I/O error, so every operation of every request shares one socket and a restarted Redis is
//! picked up without a restart of the gateway. Each operation gets at most the budget (50 ms by
//! default). An operation that fails (a refused connection, an error reply) marks Redis as
//! down at once; one that runs out of time fails by itself, and marks Redis as down only when
//! [`MISSES_FOR_OUTAGE`] operations in a row have run out (one slow answer on a busy host is
//! not an outage, and must not turn the next requests away). While it is down, operations fail
//! at once instead of each waiting out its budget, except one attempt every
//! [`RETRY_INTERVAL`], and [`Redis::watch`] pings it in the background, so the first answer
//! after an outage brings it back up. The first failure of an outage is logged once as a
//! warning, its end once as information; every failed operation counts in
//! `icn_network_messages_failed_total{backend="redis"}`.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The key prefix when none is configured (INTERFACE.md §10).
pub const DEFAULT_PREFIX: &str = "icn:gw:";

/// How long one operation may wait for Redis (INTERFACE.md §10: at most 50 ms).
pub const DEFAULT_BUDGET: Duration = Duration::from_millis(50);

/// How many operations in a row must run out of time before Redis counts as down.
pub(crate) const MISSES_FOR_OUTAGE: u64 = 3;

/// While Redis is down, how often a request may still try it (the others fail at once).
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_millis(250);

/// How often [`Redis::watch`] pings while Redis is up (down: every [`RETRY_INTERVAL`]).
const PING_INTERVAL: Duration = Duration::from_secs(1);

/// Redis did not answer within the budget, or answered with an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Redis is unavailable: {}", self.0)
    }
}

impl std::error::Error for Unavailable {}

/// Where Redis is and how to use it.
#[derive(Clone)]
pub struct RedisConfig {
    /// `redis://[user:password@]host[:port][/db]` (or `rediss://` is refused: no TLS stack here).
    pub url: String,
    /// Prefix of every key, so several gateways (or other programs) can share one Redis.
    pub prefix: String,
    /// The most one operation may wait.
    pub budget: Duration,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("budget", &self.budget)
            .finish()
    }
}

impl RedisConfig {
    /// `url` with the default prefix and budget.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into(), prefix: DEFAULT_PREFIX.to_owned(), budget: DEFAULT_BUDGET }
    }
}

/// A shared handle on Redis (cheap to clone).
#[derive(Clone)]
pub struct Redis(Arc<Inner>);

struct Inner {
    manager: ConnectionManager,
    prefix: String,
    budget: Duration,
    url: String,
    up: AtomicBool,
    /// Milliseconds since `origin` before which a down Redis is not tried again.
    retry_at: AtomicU64,
    origin: Instant,
    /// Why the current outage began, for the recovery log line.
    outage: Mutex<Option<String>>,
    /// Operations in a row that ran out of time (reset by any answer).
    misses: AtomicU64,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("url", &self.0.url)
            .field("prefix", &self.0.prefix)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// A handle on the Redis `config` names. The connection is made lazily, so a gateway starts
    /// (and serves, falling back) while Redis is down; an invalid URL is refused here.
    pub fn new(config: RedisConfig) -> Result<Self, String> {
        if config.url.starts_with("rediss://") {
            return Err(format!(
                "{}: TLS to Redis is not supported; reach Redis over a private network or a local TLS tunnel",
                redact(&config.url)
            ));
        }
        let client = redis::Client::open(config.url.as_str())
            .map_err(|e| format!("{}: not a Redis URL ({:?})", redact(&config.url), e.kind()))?;
        let manager_config = ConnectionManagerConfig::new()
            // One quick attempt per reconnection: the budget, not the manager, bounds how long a
            // request waits, and the next operation after a failure starts a new attempt.
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(100))
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_secs(1)));
        let manager = ConnectionManager::new_lazy_with_config(client, manager_config)
            .map_err(|e| format!("{}: {:?}", redact(&config.url), e.kind()))?;
        Ok(Self(Arc::new(Inner {
            manager,
            prefix: config.prefix,
            budget: config.budget,
            url: redact(&config.url),
            up: AtomicBool::new(true),
            retry_at: AtomicU64::new(0),
            origin: Instant::now(),
            outage: Mutex::new(None),
            misses: AtomicU64::new(0),
        })))
    }

    /// The full key of `suffix`.
    pub fn key(&self, suffix: &str) -> String {
        let mut key = String::with_capacity(self.0.prefix.len() + suffix.len());
        key.push_str(&self.0.prefix);
        key.push_str(suffix);
        key
    }

    /// Whether Redis answered the latest operation or ping.
    pub fn is_up(&self) -> bool {
        self.0.up.load(Ordering::Relaxed)
    }

    /// The URL, with any password replaced by `***`.
    pub fn url(&self) -> &str {
        &self.0.url
    }

    /// Runs one operation within the budget. While Redis is down, fails at once except for one
    /// attempt every [`RETRY_INTERVAL`].
    pub async fn run<T, F, Fut>(&self, op: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        if !self.is_up() {
            let now = self.millis();
            let retry_at = self.0.retry_at.load(Ordering::Relaxed);
            let next = now + RETRY_INTERVAL.as_millis() as u64;
            if now < retry_at
                || self.0.retry_at.compare_exchange(retry_at, next, Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                return Err(Unavailable(self.outage_reason()));
            }
        }
        self.attempt(op).await
    }

    /// One ping within the budget, whatever the current state; the outcome updates it.
    pub async fn ping(&self) -> Result<(), Unavailable> {
        self.attempt(|mut conn| async move { redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ()) })
            .await
    }

    /// Opens the connection and pings, waiting up to `within` rather than the per-operation
    /// budget: the first operation also connects (and loads scripts), which a busy host may not
    /// finish within 50 ms. Called once before a replica serves, so that a slow connect at
    /// start-up is not taken for an outage. The outcome updates the state like any ping.
    pub async fn warm_up(&self, within: Duration) -> Result<(), Unavailable> {
        self.run_within(within, |mut conn| async move {
            redis::cmd("PING").query_async::<String>(&mut conn).await.map(|_| ())
        })
        .await
    }

    /// One operation given `within` instead of the per-operation budget, whatever the current
    /// state (the outcome updates it): for the few start-up operations that also load a script.
    pub async fn run_within<T, F, Fut>(&self, within: Duration, op: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.attempt_within(within, op).await
    }

    /// Pings Redis forever: every second while it is up (so an outage shows in health even
    /// without traffic), every [`RETRY_INTERVAL`] while it is down (so it comes back up without
    /// waiting for a request to try).
    pub async fn watch(self) {
        loop {
            let _ = self.ping().await;
            tokio::time::sleep(if self.is_up() { PING_INTERVAL } else { RETRY_INTERVAL }).await;
        }
    }

    async fn attempt<T, F, Fut>(&self, op: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        self.attempt_within(self.0.budget, op).await
    }

    async fn attempt_within<T, F, Fut>(&self, within: Duration, op: F) -> Result<T, Unavailable>
    where
        F: FnOnce(ConnectionManager) -> Fut,
        Fut: Future<Output = redis::RedisResult<T>>,
    {
        let outcome = match tokio::time::timeout(within, op(self.0.manager.clone())).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err((describe(&err), true)),
            Err(_) => {
                let misses = self.0.misses.fetch_add(1, Ordering::Relaxed) + 1;
                Err((format!("no answer within {} ms", within.as_millis()), misses >= MISSES_FOR_OUTAGE))
            }
        };
        match outcome {
            Ok(value) => {
                self.0.misses.store(0, Ordering::Relaxed);
                self.mark_up();
                Ok(value)
            }
            Err((why, outage)) => {
                metrics::counter!("icn_network_messages_failed_total", "backend" => "redis").increment(1);
                if outage {
                    self.mark_down(&why);
                }
                Err(Unavailable(why))
            }
        }
    }

    fn mark_up(&self) {
        if !self.0.up.swap(true, Ordering::Relaxed) {
            let why = self.0.outage.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            tracing::info!(
                redis = %self.0.url,
                "Redis answers again (it had failed: {}); limits, logins and nonces are shared again",
                why.unwrap_or_default()
            );
        }
    }

    fn mark_down(&self, why: &str) {
        self.0.retry_at.store(self.millis() + RETRY_INTERVAL.as_millis() as u64, Ordering::Relaxed);
        if self.0.up.swap(false, Ordering::Relaxed) {
            *self.0.outage.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(why.to_owned());
            tracing::warn!(
                redis = %self.0.url,
                "Redis is unreachable ({why}): logins answer 503, request limits fall back to this replica's own, \
                 payments follow the velocity fallback; retrying every {} ms",
                RETRY_INTERVAL.as_millis()
            );
        }
    }

    fn outage_reason(&self) -> String {
        self.0
            .outage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "down".to_owned())
    }

    fn millis(&self) -> u64 {
        self.0.origin.elapsed().as_millis() as u64
    }
}

/// A short description of a Redis error that never repeats a password (the crate's messages do
/// not carry the URL; the kind and the server's message are enough).
fn describe(err: &redis::RedisError) -> String {
    err.to_string()
}

/// The URL with its password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let masked = if userinfo.contains(':') { format!("{user}:***") } else { user.to_owned() };
            format!("{scheme}://{masked}@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://:s3cret@cache:6379/0"), "redis://:***@cache:6379/0");
        assert_eq!(redact("redis://gw:s3cret@cache"), "redis://gw:***@cache");
        assert_eq!(redact("redis://cache:6379"), "redis://cache:6379");
        let config = RedisConfig::new("redis://gw:s3cret@cache");
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[tokio::test]
    async fn bad_urls_and_tls_are_refused_at_once() {
        assert!(Redis::new(RedisConfig::new("http://cache")).is_err());
        let err = Redis::new(RedisConfig::new("rediss://:pw@cache")).unwrap_err();
        assert!(err.contains("TLS") && !err.contains("pw@"), "{err}");
    }

    /// A Redis that accepts connections and never answers: each operation runs out of time by
    /// itself, and only the third in a row declares the outage.
    #[tokio::test]
    async fn one_slow_answer_is_not_an_outage() {
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", silent.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut sockets = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                sockets.push(socket);
            }
        });
        let redis = Redis::new(RedisConfig { budget: Duration::from_millis(50), ..RedisConfig::new(url) }).unwrap();
        let get = |redis: Redis| async move {
            redis.run(|mut c| async move { redis::cmd("GET").arg("k").query_async::<()>(&mut c).await }).await
        };
        for miss in 1..MISSES_FOR_OUTAGE {
            assert!(get(redis.clone()).await.is_err(), "miss {miss} fails by itself");
            assert!(redis.is_up(), "after {miss} slow answers Redis still counts as up");
        }
        assert!(get(redis.clone()).await.is_err());
        assert!(!redis.is_up(), "{MISSES_FOR_OUTAGE} in a row are an outage");
        held.abort();
    }

    #[tokio::test]
    async fn an_unreachable_redis_fails_within_the_budget_then_at_once() {
        // Nothing listens on port 1: connections are refused.
        let redis =
            Redis::new(RedisConfig { budget: Duration::from_millis(50), ..RedisConfig::new("redis://127.0.0.1:1") })
                .unwrap();
        let started = Instant::now();
        assert!(redis.ping().await.is_err());
        assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
        assert!(!redis.is_up());
        let started = Instant::now();
        for _ in 0..100 {
            let failed =
                redis.run(|mut c| async move { redis::cmd("GET").arg("k").query_async::<()>(&mut c).await }).await;
            assert!(failed.is_err());
        }
        assert!(started.elapsed() < Duration::from_millis(200), "down: no waiting {:?}", started.elapsed());
    }
}
