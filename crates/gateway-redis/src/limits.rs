//! The rate-limit layers counted in Redis: one Lua script per check, run atomically by the
//! server with the server's clock, so every replica counts against one allowance.
//!
//! - GCRA (the IP bucket, the per-DID minute): the key holds the instant, in microseconds of
//!   Redis time, at which its bucket is full again, exactly like the local limiter's `u64`, and
//!   expires at that instant.
//! - The velocity hour: a sorted set of the payer's admitted payments scored by their time; the
//!   script drops those older than an hour, counts the rest, and admits `n` more (all or none).
//!   The set expires an hour after its latest payment.
//!
//! Clocks: the scripts read `TIME` on the server, so replicas with skewed clocks still agree.

use std::num::NonZeroU32;
use std::time::Duration;

use gateway_limits::{
    Admission, BackendFuture, BackendUnavailable, Denial, Quota, SharedBackend, SharedPermit, VELOCITY_WINDOW,
    VelocityDenied,
};
use rand::RngCore;
use redis::Script;

use crate::connection::{Redis, Unavailable};

/// One GCRA step. KEYS[1]: the key; ARGV[1]: the refill interval, ARGV[2]: the bucket's
/// window (burst × interval), both in microseconds. Answers `{1, used}` (admitted; `used` is the
/// time until the bucket is full again) or `{0, wait}` (refused; `wait` until admitted).
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local new_tat = tat + interval
local allowed_from = new_tat - window
if now < allowed_from then
  return {0, allowed_from - now}
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return {1, new_tat - now}
";

/// Velocity admission. KEYS[1]: the payer's set; ARGV[1]: the hourly limit, ARGV[2]: how many
/// payments, ARGV[3]: the window in microseconds, ARGV[4..]: one id per payment. Answers
/// `{1, count}` (admitted, `count` in the window now) or `{0, count, wait}`.
const ADMIT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local limit = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if count + n > limit then
  local wait = window
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if oldest[2] then wait = tonumber(oldest[2]) + window - now end
  return {0, count, wait}
end
for i = 1, n do
  redis.call('ZADD', KEYS[1], now, ARGV[3 + i])
end
redis.call('PEXPIRE', KEYS[1], math.ceil(window / 1000))
return {1, count + n}
";

/// Seeding the velocity windows. ARGV[1]: the key prefix of the windows, ARGV[2]: the window in
/// microseconds, ARGV[3]: the number of the chunk's first payment, then pairs (payer, age in
/// seconds). Each payment is added with the score it had (now minus its age) under a member of
/// its own (`seed:<number>`), NX.
const SEED: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local prefix = ARGV[1]
local window = tonumber(ARGV[2])
local base = tonumber(ARGV[3])
local added = 0
for i = 4, #ARGV, 2 do
  local key = prefix .. ARGV[i]
  local age = tonumber(ARGV[i + 1]) * 1000000
  if age < window then
    added = added + redis.call('ZADD', key, 'NX', now - age, 'seed:' .. (base + (i - 4) / 2))
    redis.call('PEXPIRE', key, math.ceil((window - age) / 1000))
  end
end
return added
";

/// How many payments one seeding script carries.
const SEED_CHUNK: usize = 256;

/// How long the "windows are seeded" marker lives unless a replica refreshes it.
const SEEDED_TTL_MS: u64 = 3_600_000;

/// The limit layers in Redis.
#[derive(Debug)]
pub struct RedisLimits {
    redis: Redis,
    gcra: Script,
    admit: Script,
    seed: Script,
}

impl RedisLimits {
    /// The layers on `redis`, under its prefix (`limit:` + the layer's key).
    pub fn new(redis: Redis) -> Self {
        Self { redis, gcra: Script::new(GCRA), admit: Script::new(ADMIT), seed: Script::new(SEED) }
    }

    /// Whether the velocity windows in Redis must be seeded from the ledger: `true` exactly once
    /// per Redis lifetime (the first replica to ask after Redis started empty, or after every
    /// replica was gone for an hour), `false` afterwards. Each call keeps the marker alive for
    /// another hour, so call it periodically from every replica.
    ///
    /// Redis keeps nothing on disk here: after a restart the windows are empty, and without this
    /// every payer would get a fresh hour. Seeding may count a payment made between Redis's
    /// return and the seeding twice (the stricter side), never not at all.
    pub async fn claim_seeding(&self) -> Result<bool, Unavailable> {
        let marker = self.redis.key("limit:velocity-seeded");
        let claimed: Option<String> = self
            .redis
            .run(|mut conn| async move {
                redis::cmd("SET")
                    .arg(&marker)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(SEEDED_TTL_MS)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        if claimed.is_none() {
            let marker = self.redis.key("limit:velocity-seeded");
            self.redis
                .run(|mut conn| async move {
                    redis::cmd("PEXPIRE").arg(&marker).arg(SEEDED_TTL_MS).query_async::<i64>(&mut conn).await
                })
                .await?;
        }
        Ok(claimed.is_some())
    }

    /// Gives the seeding back (it could not be done), so that a replica claims it again.
    pub async fn release_seeding(&self) -> Result<(), Unavailable> {
        let marker = self.redis.key("limit:velocity-seeded");
        self.redis
            .run(|mut conn| async move { redis::cmd("DEL").arg(&marker).query_async::<i64>(&mut conn).await })
            .await?;
        Ok(())
    }

    /// Adds the ledger's recent payments to the velocity windows: `payments` are (payer DID, age
    /// in seconds), those an hour old or older are ignored. Returns how many were added.
    pub async fn seed_payments(&self, payments: &[(String, u64)]) -> Result<usize, Unavailable> {
        let prefix = self.redis.key(&format!("limit:{}:", gateway_limits::policy::LAYER_VELOCITY));
        let window = micros(VELOCITY_WINDOW);
        let mut added = 0;
        for (number, chunk) in payments.chunks(SEED_CHUNK).enumerate() {
            let count: i64 = self
                .redis
                .run(|mut conn| {
                    let mut invocation = self.seed.prepare_invoke();
                    invocation.arg(&prefix).arg(window).arg(number * SEED_CHUNK);
                    for (payer, age) in chunk {
                        invocation.arg(payer).arg(age);
                    }
                    async move { invocation.invoke_async(&mut conn).await }
                })
                .await?;
            added += usize::try_from(count).unwrap_or(0);
        }
        Ok(added)
    }

    /// The Redis handle these limits use.
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    async fn gcra(&self, key: &str, quota: Quota) -> Result<Result<Admission, Denial>, Unavailable> {
        let interval = micros(quota.replenish_interval());
        let limit = quota.burst().get();
        let window = interval.saturating_mul(u64::from(limit));
        let key = self.redis.key(&format!("limit:{key}"));
        let answer: Vec<i64> = self
            .redis
            .run(|mut conn| async move { self.gcra.key(&key).arg(interval).arg(window).invoke_async(&mut conn).await })
            .await?;
        match answer.as_slice() {
            [1, used] => {
                let used = (*used).max(0) as u64;
                let remaining = u32::try_from(window.saturating_sub(used) / interval.max(1)).unwrap_or(limit);
                Ok(Ok(Admission { limit, remaining, reset_after: Duration::from_micros(used) }))
            }
            [0, wait] => Ok(Err(Denial { limit, retry_after: Duration::from_micros((*wait).max(0) as u64) })),
            other => Err(Unavailable(format!("unexpected answer of the GCRA script: {other:?}"))),
        }
    }

    async fn admit(
        &self,
        key: &str,
        n: NonZeroU32,
        limit: NonZeroU32,
    ) -> Result<Result<SharedPermit, VelocityDenied>, Unavailable> {
        let ids: Vec<String> = {
            let mut rng = rand::thread_rng();
            (0..n.get())
                .map(|_| {
                    let mut id = [0u8; 12];
                    rng.fill_bytes(&mut id);
                    hex::encode(id)
                })
                .collect()
        };
        let full_key = self.redis.key(&format!("limit:{key}"));
        let window = micros(VELOCITY_WINDOW);
        let answer: Vec<i64> = self
            .redis
            .run(|mut conn| {
                let mut invocation = self.admit.key(&full_key);
                invocation.arg(limit.get()).arg(n.get()).arg(window);
                for id in &ids {
                    invocation.arg(id);
                }
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        let count = |c: i64| u32::try_from(c.max(0)).unwrap_or(u32::MAX);
        match answer.as_slice() {
            [1, admitted] => Ok(Ok(SharedPermit { key: full_key, ids, count: count(*admitted), limit: limit.get() })),
            [0, counted, wait] => Ok(Err(VelocityDenied {
                count: count(*counted),
                limit: limit.get(),
                retry_after: Duration::from_micros((*wait).max(0) as u64),
            })),
            other => Err(Unavailable(format!("unexpected answer of the velocity script: {other:?}"))),
        }
    }

    async fn cancel(&self, permit: &SharedPermit) -> Result<(), Unavailable> {
        self.redis
            .run(|mut conn| async move {
                redis::cmd("ZREM").arg(&permit.key).arg(&permit.ids).query_async::<i64>(&mut conn).await.map(|_| ())
            })
            .await
    }
}

impl SharedBackend for RedisLimits {
    fn check<'a>(&'a self, key: &'a str, quota: Quota) -> BackendFuture<'a, Result<Admission, Denial>> {
        Box::pin(async move { self.gcra(key, quota).await.map_err(unavailable) })
    }

    fn admit_payments<'a>(
        &'a self,
        key: &'a str,
        n: NonZeroU32,
        limit: NonZeroU32,
    ) -> BackendFuture<'a, Result<SharedPermit, VelocityDenied>> {
        Box::pin(async move { self.admit(key, n, limit).await.map_err(unavailable) })
    }

    fn cancel_payments<'a>(&'a self, permit: &'a SharedPermit) -> BackendFuture<'a, ()> {
        Box::pin(async move { self.cancel(permit).await.map_err(unavailable) })
    }

    fn is_available(&self) -> bool {
        self.redis.is_up()
    }
}

fn unavailable(err: Unavailable) -> BackendUnavailable {
    BackendUnavailable(err.0)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
