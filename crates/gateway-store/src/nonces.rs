//! Request-signature nonces in the shared PostgreSQL database (migration 0014,
//! `request_nonces`), for replicas that share no Redis: each nonce is claimed by one atomic
//! statement, so of several replicas seeing one signed request at once exactly one accepts it.
//!
//! This module knows digests and times only: which digest, what a signer may hold and how a
//! refusal reaches the client are `gateway-auth`'s and the caller's (the binary adapts
//! [`SharedNonces`] to `gateway_auth::NonceStore`). SQLite has no counterpart: a single gateway
//! keeps its nonces in memory.

use gateway_core::Error;
use sqlx::PgPool;

use crate::db_error;

/// How long a row outlives its signature's expiry (`expires_at_ms`): replicas' clocks may
/// differ by up to the signing profile's skew (60 s), and a replica whose clock is ahead must
/// not prune or take over a nonce that another replica would still accept.
pub const KEEP_PAST_EXPIRY_MS: u64 = 60_000;

/// The claim: insert the digest unless the signer already holds `max` nonces whose signatures
/// are valid; a row of the same digest kept past its time is taken over, any other is left
/// alone (a replay). In one statement, so the primary key decides between concurrent claims.
/// $1 digest, $2 signer, $3 the signature's expiry (ms), $4 now (ms), $5 max, $6 the time
/// before which a row is still kept (now minus [`KEEP_PAST_EXPIRY_MS`]). Answers whether it
/// was claimed, whether a kept row of the digest exists, and the signer's count and oldest
/// expiry.
const CLAIM_SQL: &str = "
WITH held AS (
    SELECT count(*) AS n, min(expires_at_ms) AS oldest
    FROM request_nonces WHERE signer = $2 AND expires_at_ms > $4
), claimed AS (
    INSERT INTO request_nonces AS r (digest, signer, expires_at_ms)
    SELECT $1, $2, $3 FROM held WHERE held.n < $5
    ON CONFLICT (digest) DO UPDATE SET signer = EXCLUDED.signer, expires_at_ms = EXCLUDED.expires_at_ms
        WHERE r.expires_at_ms <= $6
    RETURNING 1
)
SELECT
    (SELECT count(*) FROM claimed) AS claimed,
    EXISTS (SELECT 1 FROM request_nonces WHERE digest = $1 AND expires_at_ms > $6) AS held,
    held.n,
    held.oldest
FROM held";

/// Rows kept past their time. $1 now minus [`KEEP_PAST_EXPIRY_MS`].
const PRUNE_SQL: &str = "DELETE FROM request_nonces WHERE expires_at_ms <= $1";

/// What the database decided about one nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NonceClaim {
    /// This call claimed it: first seen (or its earlier row had expired).
    Claimed,
    /// An unexpired row of this digest exists: a replay.
    Held,
    /// The signer holds `max` unexpired nonces already; the oldest expires at this time (ms).
    SignerFull {
        /// When the signer's oldest nonce expires, Unix ms.
        oldest_expires_at_ms: u64,
    },
}

/// Nonce claims on the shared database; cheap to clone.
#[derive(Debug, Clone)]
pub struct SharedNonces {
    pool: PgPool,
}

impl SharedNonces {
    /// Claims `digest` of `signer` (both SHA-256 digests), whose signature expires at
    /// `expires_at_ms`, at `now_ms`, unless the signer holds `max_per_signer` nonces of valid
    /// signatures. The row is kept [`KEEP_PAST_EXPIRY_MS`] past the expiry. Concurrent claims of one
    /// digest: exactly one is [`NonceClaim::Claimed`]. Concurrent claims of one signer near its
    /// bound may pass it by the number in flight at once.
    pub async fn claim(
        &self,
        digest: &[u8; 32],
        signer: &[u8; 32],
        expires_at_ms: u64,
        now_ms: u64,
        max_per_signer: u64,
    ) -> Result<NonceClaim, Error> {
        let to_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let (claimed, held, count, oldest): (i64, bool, i64, Option<i64>) = sqlx::query_as(CLAIM_SQL)
            .bind(&digest[..])
            .bind(&signer[..])
            .bind(to_i64(expires_at_ms))
            .bind(to_i64(now_ms))
            .bind(to_i64(max_per_signer))
            .bind(to_i64(now_ms.saturating_sub(KEEP_PAST_EXPIRY_MS)))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(if claimed > 0 {
            NonceClaim::Claimed
        } else if held {
            NonceClaim::Held
        } else if count >= to_i64(max_per_signer) {
            NonceClaim::SignerFull {
                oldest_expires_at_ms: oldest.and_then(|t| u64::try_from(t).ok()).unwrap_or(now_ms),
            }
        } else {
            // Neither claimed, nor held in this statement's snapshot, nor full: a concurrent
            // claim of this digest committed first (the insert waited for it, then conflicted).
            NonceClaim::Held
        })
    }

    /// Deletes the rows no longer kept at `now_ms` (their signature expired more than
    /// [`KEEP_PAST_EXPIRY_MS`] ago); answers how many.
    pub async fn prune(&self, now_ms: u64) -> Result<u64, Error> {
        let result = sqlx::query(PRUNE_SQL)
            .bind(i64::try_from(now_ms.saturating_sub(KEEP_PAST_EXPIRY_MS)).unwrap_or(i64::MAX))
            .execute(&self.pool)
            .await
            .map_err(db_error)?;
        Ok(result.rows_affected())
    }
}

impl crate::Store {
    /// The shared nonce table, on PostgreSQL; `None` on SQLite, whose single gateway keeps its
    /// nonces in memory.
    pub fn shared_nonces(&self) -> Option<SharedNonces> {
        self.postgres_pool().map(|pool| SharedNonces { pool: pool.clone() })
    }
}
