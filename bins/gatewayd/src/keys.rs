//! The receipt keys of a running gateway, from the encrypted keystore.
//!
//! The keystore is unlocked once at start with `ICN_PASSPHRASE` (Argon2id, on a blocking
//! thread). Only its current master secret is kept in memory; each coop's key is derived from
//! it on demand (`gateway_domain::governance::derive_receipt_key`). A missing or wrong
//! passphrase leaves the gateway running without receipts, with the reason in the log and in
//! every `RECEIPT_UNAVAILABLE` answer. Neither the passphrase nor the file is kept: nothing in
//! the running gateway can rewrite the keystore (the operator's `gatewayd keystore rotate` is
//! the one way to change the master).

use std::path::PathBuf;

use gateway_core::CoopId;
use gateway_domain::governance::{MasterSecret, ReceiptKeys, ReceiptSigner};
use zeroize::Zeroizing;

/// The environment variable holding the keystore passphrase.
pub const PASSPHRASE_VAR: &str = "ICN_PASSPHRASE";

/// Receipt keys derived from the keystore's current master.
#[derive(Debug)]
pub(crate) struct KeystoreKeys {
    master: Option<MasterSecret>,
    missing_reason: &'static str,
}

impl KeystoreKeys {
    fn missing(reason: &'static str) -> Self {
        Self { master: None, missing_reason: reason }
    }

    /// Unlocks the keystore at `path` (if any) with `passphrase`.
    pub(crate) async fn load(path: Option<PathBuf>, passphrase: Option<Zeroizing<String>>) -> Self {
        let Some(file) = path else {
            tracing::info!("no --keystore: proposals close without signed receipts (reason no_keystore)");
            return Self::missing("no_keystore");
        };
        let Some(secret) = passphrase else {
            tracing::warn!(
                "{PASSPHRASE_VAR} is not set: the keystore stays locked and receipts are unavailable (reason keystore_locked)"
            );
            return Self::missing("keystore_locked");
        };
        let unlocked = tokio::task::spawn_blocking(move || gateway_auth::keystore::unlock(&file, &secret)).await;
        match unlocked {
            Ok(Ok(keyring)) => {
                let current = keyring.current();
                let id = current.info().id;
                tracing::info!(
                    master = id,
                    retired_masters = keyring.masters().len() - 1,
                    format_version = keyring.version(),
                    "receipt master secret unlocked: each coop signs with its own derived key"
                );
                Self { master: Some(MasterSecret::new(id, *current.secret())), missing_reason: "keystore_locked" }
            }
            Ok(Err(err)) => {
                tracing::error!(
                    "the keystore could not be unlocked: {err}; receipts are unavailable (reason keystore_locked)"
                );
                Self::missing("keystore_locked")
            }
            Err(err) => {
                tracing::error!("unlocking the keystore failed: {err}");
                Self::missing("keystore_locked")
            }
        }
    }
}

impl ReceiptKeys for KeystoreKeys {
    fn signer(&self, coop: &CoopId, generation: u32) -> Result<ReceiptSigner, &'static str> {
        match &self.master {
            Some(master) => Ok(master.signer(coop, generation)),
            None => Err(self.missing_reason),
        }
    }
}
