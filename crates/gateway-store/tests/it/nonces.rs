//! Request-signature nonces in the shared PostgreSQL table (`SharedNonces`): one claim per
//! digest, even when many replicas claim it at once; kept a minute past the signature's expiry,
//! then reusable and pruned; a bound per signer that refuses rather than forgets. Runs when
//! `GATEWAY_TEST_POSTGRES_URL` is set (SKIPPED otherwise); SQLite has no shared nonces.

use std::sync::Arc;

use gateway_store::{KEEP_PAST_EXPIRY_MS, NonceClaim, SharedNonces, Store, StoreSpec};

const NOW: u64 = 1_800_000_000_000;

/// A store on a fresh schema, its shared nonces and the schema's URL.
async fn shared(name: &str) -> Option<(Store, SharedNonces, String)> {
    let Some(url) = gateway_store::testing::fresh_postgres_schema(name).await else {
        eprintln!("SKIPPED {name}: GATEWAY_TEST_POSTGRES_URL is not set");
        return None;
    };
    let store = Store::open(&StoreSpec::Postgres(url.clone())).await.unwrap();
    let nonces = store.shared_nonces().expect("PostgreSQL shares nonces");
    Some((store, nonces, url))
}

fn digest(n: u8) -> [u8; 32] {
    [n; 32]
}

#[tokio::test]
async fn a_nonce_is_claimed_once_and_kept_a_minute_past_its_expiry() {
    let Some((_store, nonces, _)) = shared("nonces_once").await else { return };
    let (signer, expires) = (digest(200), NOW + 60_000);
    assert_eq!(nonces.claim(&digest(1), &signer, expires, NOW, 10).await.unwrap(), NonceClaim::Claimed);
    assert_eq!(nonces.claim(&digest(1), &signer, expires, NOW + 1, 10).await.unwrap(), NonceClaim::Held);
    // Another signer's claim of the same digest is a replay too: the digest covers the signer.
    assert_eq!(nonces.claim(&digest(1), &digest(201), expires, NOW + 1, 10).await.unwrap(), NonceClaim::Held);
    assert_eq!(nonces.claim(&digest(2), &signer, expires, NOW + 1, 10).await.unwrap(), NonceClaim::Claimed);
    // Still kept after the expiry, for replicas whose clocks are behind; taken over after.
    let kept_until = expires + KEEP_PAST_EXPIRY_MS;
    assert_eq!(
        nonces.claim(&digest(1), &signer, kept_until + 60_000, kept_until - 1, 10).await.unwrap(),
        NonceClaim::Held
    );
    assert_eq!(
        nonces.claim(&digest(1), &signer, kept_until + 60_000, kept_until, 10).await.unwrap(),
        NonceClaim::Claimed
    );
    assert_eq!(
        nonces.claim(&digest(1), &signer, kept_until + 60_000, kept_until + 1, 10).await.unwrap(),
        NonceClaim::Held
    );
    // Pruning removes only what is no longer kept: digest 2's row, not digest 1's new one.
    assert_eq!(nonces.prune(kept_until).await.unwrap(), 1);
    assert_eq!(
        nonces.claim(&digest(1), &signer, kept_until + 60_000, kept_until + 2, 10).await.unwrap(),
        NonceClaim::Held
    );
}

#[tokio::test]
async fn a_signer_at_its_bound_is_refused_and_nothing_is_forgotten() {
    let Some((_store, nonces, _)) = shared("nonces_bound").await else { return };
    let signer = digest(100);
    for n in 0..3u8 {
        let claim = nonces.claim(&digest(n), &signer, NOW + 10_000 + u64::from(n), NOW, 3).await.unwrap();
        assert_eq!(claim, NonceClaim::Claimed);
    }
    assert_eq!(
        nonces.claim(&digest(3), &signer, NOW + 60_000, NOW + 5, 3).await.unwrap(),
        NonceClaim::SignerFull { oldest_expires_at_ms: NOW + 10_000 }
    );
    for n in 0..3u8 {
        assert_eq!(nonces.claim(&digest(n), &signer, NOW + 60_000, NOW + 6, 3).await.unwrap(), NonceClaim::Held);
    }
    assert_eq!(nonces.claim(&digest(3), &digest(101), NOW + 60_000, NOW + 7, 3).await.unwrap(), NonceClaim::Claimed);
    // Once the oldest signature expired, it no longer counts: the signer has room again.
    assert_eq!(nonces.claim(&digest(4), &signer, NOW + 60_000, NOW + 10_000, 3).await.unwrap(), NonceClaim::Claimed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_concurrent_claims_of_one_nonce_on_two_pools_succeed_once() {
    let Some((_store, a, url)) = shared("nonces_race").await else { return };
    // A second store on the same schema, with its own pool, stands for another replica.
    let other = Store::open(&StoreSpec::Postgres(url)).await.unwrap();
    let b = other.shared_nonces().unwrap();
    let stores = [Arc::new(a), Arc::new(b)];
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let (nonces, barrier) = (stores[i % 2].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                nonces.claim(&digest(9), &digest(90), NOW + 60_000, NOW, 1_000).await.unwrap()
            })
        })
        .collect();
    let mut claimed = 0;
    for task in tasks {
        match task.await.unwrap() {
            NonceClaim::Claimed => claimed += 1,
            NonceClaim::Held => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(claimed, 1);
}
