//! Request-signature nonces in the shared PostgreSQL database, for replicas without Redis: the
//! adapter from `gateway-store`'s [`SharedNonces`] (digests and times) to `gateway-auth`'s
//! [`NonceStore`] (signers, nonces, outcomes). It lives in the binary because neither crate
//! may know the other.
//!
//! The database is durable, so its epoch is 0: no signature predates it. A row is kept a minute
//! past its signature's expiry (`gateway_store::KEEP_PAST_EXPIRY_MS`: replicas' clocks may
//! differ). Rows past that are pruned at most once a minute per replica, in the background.

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use gateway_auth::NonceStore;
use gateway_auth::nonce::{MAX_NONCES_PER_SIGNER, Remembered, SignedNonce, signer_digest};
use gateway_core::Error;
use gateway_store::{NonceClaim, SharedNonces};

/// How often a replica prunes expired rows.
const PRUNE_EVERY_MS: u64 = 60_000;

/// Nonces every replica sees, in the shared database.
#[derive(Debug)]
pub(crate) struct DatabaseNonces {
    nonces: SharedNonces,
    /// When this replica last pruned, Unix ms.
    pruned_at: AtomicU64,
}

impl DatabaseNonces {
    pub(crate) fn new(nonces: SharedNonces) -> Self {
        Self { nonces, pruned_at: AtomicU64::new(0) }
    }

    /// Starts a prune in the background when the last is a minute old (one caller wins).
    fn prune_if_due(&self, now_millis: u64) {
        let last = self.pruned_at.load(Ordering::Relaxed);
        if now_millis.saturating_sub(last) < PRUNE_EVERY_MS
            || self.pruned_at.compare_exchange(last, now_millis, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        let nonces = self.nonces.clone();
        tokio::spawn(async move {
            if let Err(err) = nonces.prune(now_millis).await {
                tracing::warn!("pruning expired request nonces: {err}");
            }
        });
    }
}

#[async_trait]
impl NonceStore for DatabaseNonces {
    async fn remember(&self, nonce: SignedNonce<'_>, now_millis: u64) -> Result<Remembered, Error> {
        self.prune_if_due(now_millis);
        let claim = self
            .nonces
            .claim(
                &nonce.digest(),
                &signer_digest(nonce.signer),
                nonce.expires_millis(),
                now_millis,
                MAX_NONCES_PER_SIGNER as u64,
            )
            .await?;
        Ok(match claim {
            NonceClaim::Claimed => Remembered::Accepted,
            NonceClaim::Held => Remembered::Replayed,
            NonceClaim::SignerFull { oldest_expires_at_ms } => Remembered::SignerFull {
                limit: MAX_NONCES_PER_SIGNER,
                retry_after_secs: oldest_expires_at_ms.saturating_sub(now_millis).div_ceil(1000).max(1),
            },
        })
    }
}
