//! Request-signature nonces in Redis, so a nonce is accepted once across every replica, and
//! once even when Redis loses its data.
//!
//! A nonce is kept as `<prefix>nonce:<hex of its digest>` (`gateway_auth::nonce::nonce_digest`
//! of signer and nonce: 64 hex digits whatever the client sent), set `NX` with a lifetime until
//! its signature expires (relative, so the replica's and Redis's clocks need not agree). Each
//! signer's held nonces are counted in a sorted set, `<prefix>nonce-signer:<hex of the signer's
//! digest>` (scored by expiry, expiring with its last member), which bounds them per signer.
//!
//! Redis can forget: a restart without persistence, `FLUSHALL`, a failover to a replica that
//! had not caught up. So a marker key, `<prefix>nonce-epoch` (no lifetime), holds the Unix
//! second from which this Redis remembers every nonce; when a check finds it missing, Redis has
//! lost its memory (or is new), and the check sets it to the next whole second after now. A
//! signature created before the marker is refused, whatever its nonce. The marker, the nonce
//! and the signer's count are read and written by one script, so no replica can slip between
//! the loss and the marker. Evicting nonce keys under memory pressure would break single use
//! without losing the marker: Redis must run with `maxmemory-policy noeviction`
//! (docs/DEPLOYMENT.md).

use async_trait::async_trait;
use gateway_auth::NonceStore;
use gateway_auth::nonce::{MAX_NONCES_PER_SIGNER, Remembered, SignedNonce, epoch_at, signer_digest};
use gateway_core::Error;
use redis::Script;

use crate::connection::{Redis, Unavailable};

/// The marker's key, under the prefix.
const EPOCH_KEY: &str = "nonce-epoch";

/// The marker, set when missing. KEYS[1]: the marker; ARGV[1]: the epoch to set. Answers the
/// epoch in force.
const BEGIN: &str = r"
local epoch = tonumber(redis.call('GET', KEYS[1]))
if epoch == nil then
  epoch = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
end
return epoch
";

/// The check. KEYS: the marker, the nonce's key, the signer's sorted set. ARGV: the epoch to
/// set if the marker is missing (s), the signature's `created` (s), now (ms), the expiry (ms,
/// the set's score), the nonce's lifetime (ms), the per-signer bound, the set's member.
/// Answers `{outcome, epoch, wait_ms}`: 0 accepted, 1 replayed, 2 predates the epoch, 3 the
/// signer is at its bound (`wait_ms` until its oldest nonce expires).
const REMEMBER: &str = r"
local epoch = tonumber(redis.call('GET', KEYS[1]))
if epoch == nil then
  epoch = tonumber(ARGV[1])
  redis.call('SET', KEYS[1], ARGV[1])
end
if tonumber(ARGV[2]) < epoch then
  return {2, epoch, 0}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {1, epoch, 0}
end
local now = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[6]) then
  local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  return {3, epoch, math.max(tonumber(oldest[2]) - now, 1)}
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[5])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[7])
local last = redis.call('ZRANGE', KEYS[3], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[3], math.max(tonumber(last[2]) - now, 1))
return {0, epoch, 0}
";

/// Nonces shared by every replica through Redis.
#[derive(Debug)]
pub struct RedisNonceStore {
    redis: Redis,
    max_per_signer: usize,
    begin: Script,
    remember: Script,
}

impl RedisNonceStore {
    /// Nonces under `redis`'s prefix, [`MAX_NONCES_PER_SIGNER`] per signer.
    pub fn new(redis: Redis) -> Self {
        Self::with_max_per_signer(redis, MAX_NONCES_PER_SIGNER)
    }

    /// Nonces under `redis`'s prefix, at most `max_per_signer` unexpired ones per signer.
    pub fn with_max_per_signer(redis: Redis, max_per_signer: usize) -> Self {
        Self { redis, max_per_signer, begin: Script::new(BEGIN), remember: Script::new(REMEMBER) }
    }

    /// Sets the marker if Redis has none (a new Redis, or one that lost its data), as a
    /// starting gateway does before it serves; answers the epoch in force, Unix seconds.
    pub async fn begin(&self, now_millis: u64) -> Result<u64, Error> {
        let marker = self.redis.key(EPOCH_KEY);
        // Once, at start-up: the script's first use loads it, so it gets more than the budget.
        self.redis
            .run_within(std::time::Duration::from_secs(2), |mut conn| async move {
                self.begin.key(&marker).arg(epoch_at(now_millis)).invoke_async::<u64>(&mut conn).await
            })
            .await
            .map_err(unavailable)
    }
}

#[async_trait]
impl NonceStore for RedisNonceStore {
    async fn remember(&self, nonce: SignedNonce<'_>, now_millis: u64) -> Result<Remembered, Error> {
        let marker = self.redis.key(EPOCH_KEY);
        let digest = hex::encode(nonce.digest());
        let key = self.redis.key(&format!("nonce:{digest}"));
        let signer = self.redis.key(&format!("nonce-signer:{}", hex::encode(signer_digest(nonce.signer))));
        let expires = nonce.expires_millis();
        // At least a second, so a nonce of a signature about to expire is still kept a moment.
        let lifetime = expires.saturating_sub(now_millis).max(1_000);
        let (outcome, epoch, wait_millis): (u8, u64, u64) = self
            .redis
            .run(|mut conn| async move {
                self.remember
                    .key(&marker)
                    .key(&key)
                    .key(&signer)
                    .arg(epoch_at(now_millis))
                    .arg(nonce.created_secs)
                    .arg(now_millis)
                    .arg(expires)
                    .arg(lifetime)
                    .arg(self.max_per_signer)
                    .arg(&digest)
                    .invoke_async(&mut conn)
                    .await
            })
            .await
            .map_err(unavailable)?;
        Ok(match outcome {
            0 => Remembered::Accepted,
            1 => Remembered::Replayed,
            2 => Remembered::Predates { epoch_secs: epoch },
            3 => Remembered::SignerFull { limit: self.max_per_signer, retry_after_secs: wait_millis.div_ceil(1000) },
            other => return Err(Error::Internal(format!("the nonce script answered {other}"))),
        })
    }
}

/// Redis could not be asked: the request is refused (503) rather than let a replay through.
fn unavailable(err: Unavailable) -> Error {
    Error::ServiceUnavailable(format!("signed requests cannot be checked for replay: {err}"))
}
