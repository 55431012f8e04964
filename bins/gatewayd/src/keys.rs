//! The governance signing key of a running gateway, from the encrypted keystore.
//!
//! The keystore is unlocked once at start with `ICN_PASSPHRASE` (Argon2id, on a blocking
//! thread). A missing or wrong passphrase leaves the gateway running without receipts, with the
//! reason in the log and in every `RECEIPT_UNAVAILABLE` answer. The secret never leaves the
//! process; the passphrase is kept (zeroised on drop) only to re-encrypt the key on rotation.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use gateway_core::Error;
use gateway_domain::governance::{DecisionSigner, Ed25519DecisionSigner, ReceiptKeys};
use zeroize::Zeroizing;

/// The environment variable holding the keystore passphrase.
pub(crate) const PASSPHRASE_VAR: &str = "ICN_PASSPHRASE";

/// Receipt keys backed by the keystore file.
#[derive(Debug)]
pub(crate) struct KeystoreKeys {
    path: Option<PathBuf>,
    passphrase: Option<Zeroizing<String>>,
    current: RwLock<Option<Arc<Ed25519DecisionSigner>>>,
    missing_reason: &'static str,
}

impl KeystoreKeys {
    /// Unlocks the keystore at `path` (if any) with the passphrase from the environment.
    pub(crate) async fn load(path: Option<PathBuf>) -> Self {
        let passphrase = std::env::var(PASSPHRASE_VAR).ok().filter(|p| !p.is_empty()).map(Zeroizing::new);
        let Some(file) = path.clone() else {
            tracing::info!("no --keystore: proposals close without signed receipts (reason no_keystore)");
            return Self { path, passphrase, current: RwLock::new(None), missing_reason: "no_keystore" };
        };
        let Some(secret) = passphrase.clone() else {
            tracing::warn!(
                "{PASSPHRASE_VAR} is not set: the keystore stays locked and receipts are unavailable (reason keystore_locked)"
            );
            return Self { path, passphrase, current: RwLock::new(None), missing_reason: "keystore_locked" };
        };
        let unlocked = tokio::task::spawn_blocking(move || gateway_auth::keystore::unlock(&file, &secret)).await;
        match unlocked {
            Ok(Ok(key)) => {
                tracing::info!(
                    public_key = hex::encode(key.verifying_key().to_bytes()),
                    "governance signing key unlocked"
                );
                Self {
                    path,
                    passphrase,
                    current: RwLock::new(Some(Arc::new(key.into()))),
                    missing_reason: "keystore_locked",
                }
            }
            Ok(Err(err)) => {
                tracing::error!(
                    "the keystore could not be unlocked: {err}; receipts are unavailable (reason keystore_locked)"
                );
                Self { path, passphrase, current: RwLock::new(None), missing_reason: "keystore_locked" }
            }
            Err(err) => {
                tracing::error!("unlocking the keystore failed: {err}");
                Self { path, passphrase, current: RwLock::new(None), missing_reason: "keystore_locked" }
            }
        }
    }
}

impl ReceiptKeys for KeystoreKeys {
    fn signer(&self) -> Result<Arc<dyn DecisionSigner>, &'static str> {
        match self.current.read().expect("keys lock").as_ref() {
            Some(signer) => Ok(signer.clone()),
            None => Err(self.missing_reason),
        }
    }

    fn rotate(&self) -> Result<[u8; 32], Error> {
        let (Some(path), Some(passphrase)) = (&self.path, &self.passphrase) else {
            return Err(Error::conflict("no unlocked keystore to rotate"));
        };
        let key = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
        gateway_auth::keystore::write(path, passphrase, &key)
            .map_err(|e| Error::Internal(format!("writing the rotated key: {e}")))?;
        let public = key.verifying_key().to_bytes();
        *self.current.write().expect("keys lock") = Some(Arc::new(key.into()));
        tracing::info!(public_key = hex::encode(public), "governance signing key rotated");
        Ok(public)
    }
}
