//! Login challenges in Redis, so a challenge issued by one replica verifies on any other, once.
//!
//! Each DID's outstanding challenges are one hash (`challenge:<did>`): field = challenge id,
//! value = `<expires_at_millis>:<nonce>`. Issuing drops expired fields, refuses a DID already at
//! the per-DID cap (429, nothing dropped), else adds the field and sets the key to expire with
//! its last challenge, all in one script. Consuming is an atomic get-and-delete of one field (a script: `HGET` then
//! `HDEL`), so of two replicas verifying the same challenge at once exactly one gets it. A
//! challenge of another DID lives under another key and can be neither read nor consumed.
//! Every failure to reach Redis is 503 `SERVICE_UNAVAILABLE`: a login that cannot be made
//! single-use is refused.

use async_trait::async_trait;
use gateway_auth::challenge::{Challenge, ChallengeStore};
use gateway_core::Error;
use redis::Script;

use crate::connection::{Redis, Unavailable};

/// The most outstanding challenges of one DID; a new one beyond it is refused (429).
pub(crate) const MAX_PER_DID: usize = 32;

/// Issue. KEYS[1]: the DID's hash; ARGV: id, value (`expires:nonce`), now (ms), cap, expires (ms).
/// Answers 0 when issued, else the milliseconds until the DID's oldest challenge expires.
/// Times are the gateway's; the key's lifetime is set relative to `now`, so Redis's own clock
/// does not matter.
const INSERT: &str = r"
local now = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local fields = redis.call('HGETALL', KEYS[1])
local live = {}
for i = 1, #fields, 2 do
  local expires = tonumber(string.match(fields[i + 1], '^(%d+):'))
  if expires == nil or expires <= now then
    redis.call('HDEL', KEYS[1], fields[i])
  else
    table.insert(live, {expires, fields[i]})
  end
end
table.sort(live, function(a, b) return a[1] < b[1] end)
if #live >= cap then
  return math.max(live[1][1] - now, 1)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local last = tonumber(ARGV[5])
for i = 1, #live do
  if live[i][1] > last then last = live[i][1] end
end
redis.call('PEXPIRE', KEYS[1], math.max(last - now, 1))
return 0
";

/// Get-and-delete. KEYS[1]: the DID's hash; ARGV[1]: the id. Answers the value or nil.
const TAKE: &str = r"
local value = redis.call('HGET', KEYS[1], ARGV[1])
if value then redis.call('HDEL', KEYS[1], ARGV[1]) end
return value
";

/// Challenges shared by every replica through Redis.
#[derive(Debug)]
pub struct RedisChallengeStore {
    redis: Redis,
    insert: Script,
    take: Script,
}

impl RedisChallengeStore {
    /// Challenges under `redis`'s prefix (`challenge:<did>`).
    pub fn new(redis: Redis) -> Self {
        Self { redis, insert: Script::new(INSERT), take: Script::new(TAKE) }
    }

    fn key(&self, did: &str) -> String {
        self.redis.key(&format!("challenge:{did}"))
    }
}

#[async_trait]
impl ChallengeStore for RedisChallengeStore {
    async fn insert(&self, challenge: Challenge, now_millis: u64) -> Result<(), Error> {
        let key = self.key(&challenge.did);
        let value = format!("{}:{}", challenge.expires_at_millis, challenge.nonce);
        self.redis
            .run(|mut conn| async move {
                self.insert
                    .key(&key)
                    .arg(&challenge.id)
                    .arg(&value)
                    .arg(now_millis)
                    .arg(MAX_PER_DID)
                    .arg(challenge.expires_at_millis)
                    .invoke_async::<u64>(&mut conn)
                    .await
            })
            .await
            .map_err(login_unavailable)
            .and_then(|wait_millis| match wait_millis {
                0 => Ok(()),
                wait => Err(gateway_auth::challenge::challenge_cap_reached(MAX_PER_DID, wait.div_ceil(1000))),
            })
    }

    async fn outstanding(&self, did: &str, now_millis: u64) -> Result<Vec<Challenge>, Error> {
        let key = self.key(did);
        let fields: Vec<(String, String)> = self
            .redis
            .run(|mut conn| async move { redis::cmd("HGETALL").arg(&key).query_async(&mut conn).await })
            .await
            .map_err(login_unavailable)?;
        let mut challenges: Vec<Challenge> = fields
            .into_iter()
            .filter_map(|(id, value)| parse(did, id, &value))
            .filter(|c| c.expires_at_millis > now_millis)
            .collect();
        challenges.sort_by_key(|c| c.expires_at_millis);
        Ok(challenges)
    }

    async fn take(&self, did: &str, id: &str, now_millis: u64) -> Result<Option<Challenge>, Error> {
        let key = self.key(did);
        let value: Option<String> = self
            .redis
            .run(|mut conn| async move { self.take.key(&key).arg(id).invoke_async(&mut conn).await })
            .await
            .map_err(login_unavailable)?;
        Ok(value.and_then(|v| parse(did, id.to_owned(), &v)).filter(|c| c.expires_at_millis > now_millis))
    }
}

fn parse(did: &str, id: String, value: &str) -> Option<Challenge> {
    let (expires, nonce) = value.split_once(':')?;
    Some(Challenge { id, did: did.to_owned(), nonce: nonce.to_owned(), expires_at_millis: expires.parse().ok()? })
}

fn login_unavailable(err: Unavailable) -> Error {
    Error::ServiceUnavailable(format!("logins are unavailable: {err}"))
}
