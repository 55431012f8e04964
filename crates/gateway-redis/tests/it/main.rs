//! The Redis backends against a real Redis at `GATEWAY_TEST_REDIS_URL` (`.ci/run` and
//! `cargo xtask test` set it to the local server). When the variable is set and Redis cannot be
//! reached, every test fails; when it is unset, each says loudly that it did not run.
//!
//! Each test works under a prefix of its own, so tests run in parallel on one Redis, and two
//! handles on one prefix stand for two replicas.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use gateway_auth::{Challenge, ChallengeStore, NonceStore, Remembered, SignedNonce};
use gateway_limits::{Quota, SharedBackend};
use gateway_redis::{Redis, RedisChallengeStore, RedisConfig, RedisLimits, RedisNonceStore};

const VAR: &str = "GATEWAY_TEST_REDIS_URL";

/// Two handles ("replicas") on one fresh prefix, or `None` (announced) when the variable is
/// unset. Panics when it is set and Redis does not answer.
async fn replicas(test: &str) -> Option<(Redis, Redis, String)> {
    let Ok(url) = std::env::var(VAR) else {
        eprintln!("SKIPPED {test}: {VAR} is not set, so this Redis test did not run");
        return None;
    };
    let prefix = format!("test:{test}:{}:", std::process::id());
    let config = RedisConfig { prefix: prefix.clone(), budget: Duration::from_millis(500), ..RedisConfig::new(&url) };
    let a = Redis::new(config.clone()).expect("a valid Redis URL");
    let b = Redis::new(config).expect("a valid Redis URL");
    a.ping().await.unwrap_or_else(|e| panic!("{VAR}={url} is set but Redis does not answer: {e}"));
    b.ping().await.unwrap();
    clear(&a, &prefix).await;
    Some((a, b, prefix))
}

async fn keys(redis: &Redis, prefix: &str) -> Vec<String> {
    let pattern = format!("{prefix}*");
    redis.run(|mut c| async move { redis::cmd("KEYS").arg(&pattern).query_async(&mut c).await }).await.unwrap()
}

async fn clear(redis: &Redis, prefix: &str) {
    for key in keys(redis, prefix).await {
        redis.run(|mut c| async move { redis::cmd("DEL").arg(&key).query_async::<i64>(&mut c).await }).await.unwrap();
    }
}

/// Every key under the prefix expires (Redis never grows without bound).
async fn assert_every_key_expires(redis: &Redis, prefix: &str) {
    let keys = keys(redis, prefix).await;
    assert!(!keys.is_empty(), "the test wrote keys");
    for key in keys {
        let k = key.clone();
        let ttl: i64 =
            redis.run(|mut c| async move { redis::cmd("PTTL").arg(&k).query_async(&mut c).await }).await.unwrap();
        assert!(ttl > 0, "{key} has no TTL ({ttl})");
    }
}

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

#[tokio::test]
async fn two_replicas_share_one_gcra_bucket() {
    let Some((a, b, prefix)) = replicas("gcra").await else { return };
    let (a, b) = (RedisLimits::new(a), RedisLimits::new(b));
    let quota = Quota::per_minute(nz(10));
    for i in 0..10 {
        let limits = if i % 2 == 0 { &a } else { &b };
        let admitted = limits.check("did:x", quota).await.unwrap().expect("within the burst");
        assert_eq!(admitted.limit, 10);
        assert_eq!(admitted.remaining, 9 - i, "one bucket across both replicas");
    }
    for limits in [&a, &b] {
        let denial = limits.check("did:x", quota).await.unwrap().expect_err("the burst is spent on both");
        assert_eq!(denial.limit, 10);
        assert!(denial.retry_after > Duration::from_secs(5) && denial.retry_after <= Duration::from_secs(6));
    }
    assert!(a.check("did:y", quota).await.unwrap().is_ok(), "keys are independent");
    assert_every_key_expires(a.redis(), &prefix).await;
}

#[tokio::test]
async fn concurrent_checks_never_admit_more_than_the_burst() {
    let Some((a, b, _)) = replicas("gcra_race").await else { return };
    let limits = [Arc::new(RedisLimits::new(a)), Arc::new(RedisLimits::new(b))];
    let quota = Quota::with_burst_and_rate(nz(20), nz(1));
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let limits = limits[i % 2].clone();
            tokio::spawn(async move { limits.check("ip:203.0.113.7", quota).await.unwrap().is_ok() })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += usize::from(task.await.unwrap());
    }
    // 64 requests inside a second or so: the burst of 20, plus at most what refilled meanwhile.
    assert!((20..=22).contains(&admitted), "{admitted} admitted");
}

#[tokio::test]
async fn velocity_admits_all_or_none_and_cancels() {
    let Some((a, b, prefix)) = replicas("velocity").await else { return };
    let (a, b) = (RedisLimits::new(a), RedisLimits::new(b));
    let first = a.admit_payments("p", nz(6), nz(10)).await.unwrap().unwrap();
    assert_eq!((first.count, first.limit, first.ids.len()), (6, 10, 6));
    let refused = b.admit_payments("p", nz(5), nz(10)).await.unwrap().unwrap_err();
    assert_eq!((refused.count, refused.limit), (6, 10), "all or none: nothing of the five was counted");
    assert!(refused.retry_after > Duration::from_secs(3_590) && refused.retry_after <= Duration::from_secs(3_600));
    let second = b.admit_payments("p", nz(4), nz(10)).await.unwrap().unwrap();
    assert_eq!(second.count, 10);
    assert!(a.admit_payments("p", nz(1), nz(10)).await.unwrap().is_err());
    a.cancel_payments(&second).await.unwrap();
    assert_eq!(b.admit_payments("p", nz(1), nz(10)).await.unwrap().unwrap().count, 7, "the four came back");
    assert_every_key_expires(a.redis(), &prefix).await;
}

fn challenge(id: &str, did: &str, expires: u64) -> Challenge {
    Challenge { id: id.into(), did: did.into(), nonce: format!("nonce-{id}"), expires_at_millis: expires }
}

#[tokio::test]
async fn a_challenge_issued_by_one_replica_is_consumed_once_by_another() {
    let Some((a, b, prefix)) = replicas("challenges").await else { return };
    let (a, b) = (RedisChallengeStore::new(a.clone()), RedisChallengeStore::new(b));
    let now = 1_000_000;
    a.insert(challenge("c1", "did:key:alice", now + 300_000), now).await.unwrap();
    a.insert(challenge("c2", "did:key:alice", now + 300_001), now).await.unwrap();
    let outstanding = b.outstanding("did:key:alice", now).await.unwrap();
    assert_eq!(outstanding.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["c1", "c2"]);
    assert_eq!(outstanding[0].nonce, "nonce-c1");
    assert_eq!(b.take("did:key:mallory", "c1", now).await.unwrap(), None, "another DID cannot take it");
    assert_eq!(b.take("did:key:alice", "c1", now).await.unwrap().unwrap().nonce, "nonce-c1");
    assert_eq!(a.take("did:key:alice", "c1", now).await.unwrap(), None, "once");
    assert_eq!(a.take("did:key:alice", "c2", now + 300_001).await.unwrap(), None, "expired");

    let redis =
        Redis::new(RedisConfig { prefix: prefix.clone(), ..RedisConfig::new(std::env::var(VAR).unwrap()) }).unwrap();
    a.insert(challenge("c3", "did:key:bob", now + 300_000), now).await.unwrap();
    assert_every_key_expires(&redis, &prefix).await;
}

#[tokio::test]
async fn concurrent_verifies_of_one_challenge_consume_it_once() {
    let Some((a, b, _)) = replicas("challenge_race").await else { return };
    let stores = [Arc::new(RedisChallengeStore::new(a)), Arc::new(RedisChallengeStore::new(b))];
    let now = 5_000;
    stores[0].insert(challenge("only", "did:key:carol", now + 60_000), now).await.unwrap();
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move { store.take("did:key:carol", "only", now).await.unwrap().is_some() })
        })
        .collect();
    let mut winners = 0;
    for task in tasks {
        winners += usize::from(task.await.unwrap());
    }
    assert_eq!(winners, 1);
}

#[tokio::test]
async fn a_did_at_32_challenges_is_refused_and_keeps_them_all() {
    let Some((a, b, _)) = replicas("challenge_cap").await else { return };
    let (store, other_replica) = (RedisChallengeStore::new(a), RedisChallengeStore::new(b));
    let now = 10_000;
    for i in 0..32u64 {
        store.insert(challenge(&format!("c{i:02}"), "did:key:dave", now + 60_000 + i), now).await.unwrap();
    }
    // The 33rd is 429 on either replica, with the wait until the oldest expires; none is lost.
    for replica in [&store, &other_replica] {
        match replica.insert(challenge("extra", "did:key:dave", now + 90_000), now).await.unwrap_err() {
            gateway_core::Error::RateLimited { layer, limit, retry_after_secs, .. } => {
                assert_eq!((layer, limit, retry_after_secs), (gateway_core::RateLimitLayer::Did, 32, 60));
            }
            other => panic!("expected 429, got {other:?}"),
        }
    }
    let ids: Vec<String> = store.outstanding("did:key:dave", now).await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 32);
    assert_eq!(ids.first().unwrap(), "c00");
    // Another DID is not affected; a used challenge frees its place.
    store.insert(challenge("e0", "did:key:erin", now + 60_000), now).await.unwrap();
    assert!(store.take("did:key:dave", "c05", now).await.unwrap().is_some());
    store.insert(challenge("after-use", "did:key:dave", now + 60_000), now).await.unwrap();
    // Expired challenges are dropped when the next one is issued.
    store.insert(challenge("late", "did:key:dave", now + 200_000), now + 100_000).await.unwrap();
    let ids: Vec<String> =
        store.outstanding("did:key:dave", now + 100_000).await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, ["late"]);
}

/// A signed nonce at `created` (Unix seconds), valid for a minute.
fn signed<'a>(signer: &'a str, nonce: &'a str, created_secs: u64) -> SignedNonce<'a> {
    SignedNonce { signer, nonce, created_secs, expires_secs: created_secs + 60 }
}

const T0: u64 = 1_800_000_000;

#[tokio::test]
async fn a_nonce_is_accepted_once_across_replicas() {
    let Some((a, b, prefix)) = replicas("nonces").await else { return };
    let redis = a.clone();
    let (a, b) = (RedisNonceStore::new(a), RedisNonceStore::new(b));
    let nonce = signed("did:key:erin", "n-0123456789abcdef", T0);
    assert_eq!(a.remember(nonce, T0 * 1000).await.unwrap(), Remembered::Accepted);
    assert_eq!(b.remember(nonce, T0 * 1000 + 10).await.unwrap(), Remembered::Replayed, "replayed on B");
    let other = signed("did:key:frank", "n-0123456789abcdef", T0);
    assert_eq!(b.remember(other, T0 * 1000 + 10).await.unwrap(), Remembered::Accepted, "another signer");
    // What Redis holds is digests, never the client's text; every key but the epoch marker
    // expires.
    let held = keys(&redis, &prefix).await;
    assert!(held.iter().all(|k| !k.contains("n-0123456789abcdef") && !k.contains("did:key")), "{held:?}");
    let marker = format!("{prefix}nonce-epoch");
    assert!(held.contains(&marker), "{held:?}");
    let m = marker.clone();
    redis.run(|mut c| async move { redis::cmd("DEL").arg(&m).query_async::<i64>(&mut c).await }).await.unwrap();
    assert_every_key_expires(&redis, &prefix).await;
}

/// A signer holds at most its bound of unexpired nonces, on every replica together; past it
/// each replica refuses with the wait until its oldest expires, and forgets none of them.
#[tokio::test]
async fn a_signer_at_its_bound_is_refused_and_keeps_its_nonces() {
    let Some((a, b, _)) = replicas("nonce_bound").await else { return };
    let (a, b) = (RedisNonceStore::with_max_per_signer(a, 3), RedisNonceStore::with_max_per_signer(b, 3));
    let now = T0 * 1000;
    let nonces: Vec<String> = (0..4).map(|i| format!("nonce-{i:012}")).collect();
    for (i, n) in nonces.iter().take(3).enumerate() {
        let store = if i % 2 == 0 { &a } else { &b };
        let n = SignedNonce { expires_secs: T0 + 10 + i as u64, ..signed("did:key:greedy", n, T0) };
        assert_eq!(store.remember(n, now).await.unwrap(), Remembered::Accepted);
    }
    let fourth = signed("did:key:greedy", &nonces[3], T0);
    for store in [&a, &b] {
        assert_eq!(
            store.remember(fourth, now + 500).await.unwrap(),
            Remembered::SignerFull { limit: 3, retry_after_secs: 10 }
        );
    }
    for (i, n) in nonces.iter().take(3).enumerate() {
        let n = SignedNonce { expires_secs: T0 + 10 + i as u64, ..signed("did:key:greedy", n, T0) };
        assert_eq!(b.remember(n, now + 600).await.unwrap(), Remembered::Replayed, "none was forgotten");
    }
    assert_eq!(a.remember(signed("did:key:other", &nonces[3], T0), now).await.unwrap(), Remembered::Accepted);
    assert_eq!(a.remember(fourth, now + 10_000).await.unwrap(), Remembered::Accepted, "a place freed");
}

/// A private `redis-server` on a free port, without persistence, that the test may kill.
struct PrivateRedis {
    port: u16,
    child: std::process::Child,
}

impl PrivateRedis {
    fn start(port: u16) -> Self {
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        Self { port, child }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    /// Waits until it answers.
    async fn handle(&self) -> Redis {
        let config = RedisConfig {
            prefix: "private:".into(),
            budget: Duration::from_millis(500),
            ..RedisConfig::new(format!("redis://127.0.0.1:{}", self.port))
        };
        let redis = Redis::new(config).unwrap();
        for _ in 0..100 {
            if redis.ping().await.is_ok() {
                return redis;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the private redis-server on port {} did not answer", self.port);
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `store`'s answer once its connection is back (a handle marks Redis down after a failure and
/// tries again at intervals).
async fn once_up(store: &RedisNonceStore, nonce: SignedNonce<'_>, now_millis: u64) -> Remembered {
    for _ in 0..100 {
        if let Ok(outcome) = store.remember(nonce, now_millis).await {
            return outcome;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the restarted Redis did not answer within 10 s");
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// INTERFACE.md §11: a nonce is accepted once whatever happens to Redis. A Redis that restarts empty
/// (no persistence) has forgotten every nonce; the replayed signature, with its own `created`,
/// is refused as predating the new epoch (on both replicas), and a fresh signature is accepted.
#[tokio::test]
async fn a_redis_that_restarts_empty_refuses_the_replay_and_accepts_a_fresh_signature() {
    if std::env::var(VAR).is_err() {
        eprintln!("SKIPPED redis_restart: {VAR} is not set, so this Redis test did not run");
        return;
    }
    let port = PrivateRedis::free_port();
    let mut server = PrivateRedis::start(port);
    let (a, b) = (RedisNonceStore::new(server.handle().await), RedisNonceStore::new(server.handle().await));
    let start = T0 * 1000 + 250;
    assert_eq!(a.begin(start).await.unwrap(), T0 + 1, "a starting gateway marks the next whole second");
    assert_eq!(b.begin(start + 5_000).await.unwrap(), T0 + 1, "a second replica keeps it");
    let payment = signed("did:key:payer", "pay-0123456789abcdef", T0 + 1);
    assert_eq!(a.remember(payment, start + 1_000).await.unwrap(), Remembered::Accepted);
    assert_eq!(b.remember(payment, start + 1_100).await.unwrap(), Remembered::Replayed);

    server.kill();
    let mut server = PrivateRedis::start(port);
    let redis = server.handle().await;
    let count: i64 = redis.run(|mut c| async move { redis::cmd("DBSIZE").query_async(&mut c).await }).await.unwrap();
    assert_eq!(count, 0, "the new Redis is empty");
    // The replicas' handles reconnect by themselves; the same signature (same created) again,
    // within its validity, a few seconds after the restart, on either replica.
    let later = start + 3_000;
    assert_eq!(once_up(&b, payment, later).await, Remembered::Predates { epoch_secs: T0 + 4 }, "not accepted twice");
    assert_eq!(once_up(&a, payment, later + 100).await, Remembered::Predates { epoch_secs: T0 + 4 });
    let fresh = signed("did:key:payer", "pay-fedcba9876543210", T0 + 4);
    assert_eq!(a.remember(fresh, later + 1_000).await.unwrap(), Remembered::Accepted, "a fresh signature");
    assert_eq!(b.remember(fresh, later + 1_100).await.unwrap(), Remembered::Replayed, "once");
    server.kill();
}

#[tokio::test]
async fn an_unreachable_redis_refuses_logins_as_503() {
    // Port 1: nothing listens. No shared service is involved.
    let redis =
        Redis::new(RedisConfig { budget: Duration::from_millis(50), ..RedisConfig::new("redis://127.0.0.1:1") })
            .unwrap();
    let store = RedisChallengeStore::new(redis.clone());
    let err = store.insert(challenge("c", "did:key:g", 10), 0).await.unwrap_err();
    assert!(matches!(err, gateway_core::Error::ServiceUnavailable(_)), "{err:?}");
    let err = RedisNonceStore::new(redis.clone()).remember(signed("s", "n", 0), 0).await.unwrap_err();
    assert!(matches!(err, gateway_core::Error::ServiceUnavailable(_)), "{err:?}");
    assert!(RedisLimits::new(redis).check("k", Quota::per_minute(nz(1))).await.is_err());
}
