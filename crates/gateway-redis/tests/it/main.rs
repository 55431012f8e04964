//! The Redis backends against a real Redis at `GATEWAY_TEST_REDIS_URL` (`.ci/run` and
//! `cargo xtask test` set it to the local server). When the variable is set and Redis cannot be
//! reached, every test fails; when it is unset, each says loudly that it did not run.
//!
//! Each test works under a prefix of its own, so tests run in parallel on one Redis, and two
//! handles on one prefix stand for two replicas.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use gateway_auth::{Challenge, ChallengeStore, NonceStore};
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
async fn a_did_keeps_at_most_32_challenges_the_oldest_go_first() {
    let Some((a, _, _)) = replicas("challenge_cap").await else { return };
    let store = RedisChallengeStore::new(a);
    let now = 10_000;
    for i in 0..40u64 {
        store.insert(challenge(&format!("c{i:02}"), "did:key:dave", now + 60_000 + i), now).await.unwrap();
    }
    let ids: Vec<String> = store.outstanding("did:key:dave", now).await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 32);
    assert_eq!(ids.first().unwrap(), "c08");
    assert_eq!(ids.last().unwrap(), "c39");
    // Expired challenges are dropped when the next one is issued.
    store.insert(challenge("late", "did:key:dave", now + 200_000), now + 100_000).await.unwrap();
    let ids: Vec<String> =
        store.outstanding("did:key:dave", now + 100_000).await.unwrap().into_iter().map(|c| c.id).collect();
    assert_eq!(ids, ["late"]);
}

#[tokio::test]
async fn a_nonce_is_accepted_once_across_replicas() {
    let Some((a, b, prefix)) = replicas("nonces").await else { return };
    let redis = a.clone();
    let (a, b) = (RedisNonceStore::new(a), RedisNonceStore::new(b));
    assert!(a.remember("did:key:erin", "n-0123456789abcdef", 60_000, 0).await.unwrap());
    assert!(!b.remember("did:key:erin", "n-0123456789abcdef", 60_000, 10).await.unwrap(), "replayed on B");
    assert!(b.remember("did:key:frank", "n-0123456789abcdef", 60_000, 10).await.unwrap(), "another signer");
    assert_every_key_expires(&redis, &prefix).await;
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
    let err = RedisNonceStore::new(redis.clone()).remember("s", "n", 10, 0).await.unwrap_err();
    assert!(matches!(err, gateway_core::Error::ServiceUnavailable(_)), "{err:?}");
    assert!(RedisLimits::new(redis).check("k", Quota::per_minute(nz(1))).await.is_err());
}
