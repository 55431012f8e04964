//! Request-signature nonces in Redis: `SET <prefix>nonce:<signer>:<nonce> 1 NX PX <ms>`, so a
//! nonce is accepted once across every replica, and forgotten by Redis itself when the signature
//! that carried it expires (the lifetime is relative, so the replica's and Redis's clocks need not
//! agree).

use async_trait::async_trait;
use gateway_auth::NonceStore;
use gateway_core::Error;

use crate::connection::Redis;

/// Nonces shared by every replica through Redis.
#[derive(Debug)]
pub struct RedisNonceStore {
    redis: Redis,
}

impl RedisNonceStore {
    /// Nonces under `redis`'s prefix (`nonce:<signer>:<nonce>`).
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

#[async_trait]
impl NonceStore for RedisNonceStore {
    async fn remember(
        &self,
        signer: &str,
        nonce: &str,
        expires_at_millis: u64,
        now_millis: u64,
    ) -> Result<bool, Error> {
        let key = self.redis.key(&format!("nonce:{signer}:{nonce}"));
        // At least a second, so a nonce of a signature about to expire is still kept a moment.
        let lifetime = expires_at_millis.saturating_sub(now_millis).max(1_000);
        let set: Option<String> = self
            .redis
            .run(|mut conn| async move {
                redis::cmd("SET").arg(&key).arg(1).arg("NX").arg("PX").arg(lifetime).query_async(&mut conn).await
            })
            .await
            .map_err(|err| Error::ServiceUnavailable(format!("signed requests cannot be checked for replay: {err}")))?;
        Ok(set.is_some())
    }
}
