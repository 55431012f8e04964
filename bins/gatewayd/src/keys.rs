//! The receipt keys of a running gateway, from the encrypted keystore.
//!
//! The keystore is unlocked once at start with its passphrase (Argon2id, on a blocking
//! thread), read by [`passphrase`] from, first to last: `--passphrase-file` (also
//! `ICN_GATEWAY_PASSPHRASE_FILE` and the config key `passphrase_file`), the systemd credential
//! `icn-passphrase` (`LoadCredential=icn-passphrase:…`, read from `$CREDENTIALS_DIRECTORY`), and
//! the `ICN_PASSPHRASE` variable (which stays readable in `/proc/<pid>/environ`; docs/DEPLOYMENT.md). Only its current master secret is kept in memory; each coop's key is derived from
//! it on demand (`gateway_domain::governance::derive_receipt_key`). A missing or wrong
//! passphrase leaves the gateway running without receipts, with the reason in the log and in
//! every `RECEIPT_UNAVAILABLE` answer. Neither the passphrase nor the file is kept: nothing in
//! the running gateway can rewrite the keystore (the operator's `gatewayd keystore rotate` is
//! the one way to change the master).

use std::path::{Path, PathBuf};

use gateway_core::CoopId;
use gateway_domain::governance::{MasterSecret, ReceiptKeys, ReceiptSigner};
use zeroize::Zeroizing;

/// The environment variable holding the keystore passphrase (the last source [`passphrase`]
/// reads: a process's environment stays readable by its user and root).
pub const PASSPHRASE_VAR: &str = "ICN_PASSPHRASE";

/// The name of the systemd credential holding the passphrase: with `LoadCredential=icn-passphrase:<file>`
/// (or `SetCredentialEncrypted=`) the gateway reads `$CREDENTIALS_DIRECTORY/icn-passphrase`.
pub const PASSPHRASE_CREDENTIAL: &str = "icn-passphrase";

/// Where the passphrase came from, for `config check` and the start-up warnings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassphraseSource {
    /// `--passphrase-file`, `ICN_GATEWAY_PASSPHRASE_FILE` or `passphrase_file`.
    File(PathBuf),
    /// The systemd credential [`PASSPHRASE_CREDENTIAL`].
    Credential(PathBuf),
    /// [`PASSPHRASE_VAR`].
    Environment,
}

impl std::fmt::Display for PassphraseSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PassphraseSource::File(path) => write!(f, "file {}", path.display()),
            PassphraseSource::Credential(path) => write!(f, "systemd credential {}", path.display()),
            PassphraseSource::Environment => f.write_str(PASSPHRASE_VAR),
        }
    }
}

/// The keystore passphrase and where it came from, reading the process's environment
/// (`CREDENTIALS_DIRECTORY`, [`PASSPHRASE_VAR`]); see [`passphrase_from`].
pub fn passphrase(file: Option<&Path>) -> anyhow::Result<Option<(Zeroizing<String>, PassphraseSource)>> {
    let credentials = std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from);
    let variable = std::env::var(PASSPHRASE_VAR).ok().map(Zeroizing::new);
    passphrase_from(file, credentials.as_deref(), variable)
}

/// The keystore passphrase from the first source that has one: the explicit `file`, then the
/// systemd credential in `credentials_directory` (when that directory holds
/// [`PASSPHRASE_CREDENTIAL`]), then the `variable`'s value. An explicit source wins over the
/// ambient ones because the operator named it for this run. One trailing newline (`\n` or
/// `\r\n`) of a file is not part of the passphrase. An explicit file that cannot be read, or
/// any source that yields an empty passphrase, is an error rather than a locked keystore: the
/// operator asked for a passphrase and would otherwise learn of the mistake from a 404 later.
/// An empty variable counts as unset.
fn passphrase_from(
    file: Option<&Path>,
    credentials_directory: Option<&Path>,
    variable: Option<Zeroizing<String>>,
) -> anyhow::Result<Option<(Zeroizing<String>, PassphraseSource)>> {
    if let Some(path) = file {
        let secret = read_secret(path)?;
        return Ok(Some((secret, PassphraseSource::File(path.to_owned()))));
    }
    if let Some(directory) = credentials_directory.filter(|d| !d.as_os_str().is_empty()) {
        let path = directory.join(PASSPHRASE_CREDENTIAL);
        if path.is_file() {
            let secret = read_secret(&path)?;
            return Ok(Some((secret, PassphraseSource::Credential(path))));
        }
    }
    Ok(variable.filter(|v| !v.is_empty()).map(|v| (v, PassphraseSource::Environment)))
}

/// A passphrase file's text without one trailing newline; never empty.
fn read_secret(path: &Path) -> anyhow::Result<Zeroizing<String>> {
    let mut text = Zeroizing::new(
        std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the passphrase file {}: {e}", path.display()))?,
    );
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        anyhow::bail!("the passphrase file {} is empty", path.display());
    }
    Ok(text)
}

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

    /// Unlocks the keystore at `path` (if any) with `passphrase`. A keystore that is configured
    /// but cannot be unlocked (no passphrase, a wrong one, an unreadable file) stops start-up,
    /// unless `allow_unsigned` says to serve without receipts, which is then logged as an error.
    pub(crate) async fn load(
        path: Option<PathBuf>,
        passphrase: Option<Zeroizing<String>>,
        allow_unsigned: bool,
    ) -> anyhow::Result<Self> {
        let Some(file) = path else {
            tracing::info!("no --keystore: proposals close without signed receipts (reason no_keystore)");
            return Ok(Self::missing("no_keystore"));
        };
        let why = match passphrase {
            None => format!(
                "the keystore {} is configured but no passphrase was given (--passphrase-file, the {PASSPHRASE_CREDENTIAL} credential or {PASSPHRASE_VAR})",
                file.display()
            ),
            Some(secret) => {
                let shown = file.display().to_string();
                match tokio::task::spawn_blocking(move || gateway_auth::keystore::unlock(&file, &secret)).await {
                    Ok(Ok(keyring)) => {
                        let current = keyring.current();
                        let id = current.info().id;
                        tracing::info!(
                            master = id,
                            retired_masters = keyring.masters().len() - 1,
                            format_version = keyring.version(),
                            "receipt master secret unlocked: each coop signs with its own derived key"
                        );
                        return Ok(Self {
                            master: Some(MasterSecret::new(id, *current.secret())),
                            missing_reason: "keystore_locked",
                        });
                    }
                    Ok(Err(err)) => format!("the keystore {shown} could not be unlocked: {err}"),
                    Err(err) => format!("unlocking the keystore {shown} failed: {err}"),
                }
            }
        };
        if !allow_unsigned {
            anyhow::bail!(
                "{why}; refusing to start without receipts. Fix the passphrase, or start with --allow-unsigned-receipts true to serve with receipts unavailable (reason keystore_locked)"
            );
        }
        tracing::error!(
            "{why}; serving with receipts unavailable (reason keystore_locked), as --allow-unsigned-receipts says"
        );
        Ok(Self::missing("keystore_locked"))
    }
}

impl ReceiptKeys for KeystoreKeys {
    fn signer(&self, coop: &CoopId, generation: u32) -> Result<ReceiptSigner, &'static str> {
        match &self.master {
            Some(master) => Ok(master.signer(coop, generation)),
            None => Err(self.missing_reason),
        }
    }

    fn available(&self) -> bool {
        self.master.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(value: &str) -> Option<Zeroizing<String>> {
        Some(Zeroizing::new(value.to_owned()))
    }

    fn read(
        file: Option<&Path>,
        credentials: Option<&Path>,
        variable: Option<Zeroizing<String>>,
    ) -> Option<(String, PassphraseSource)> {
        passphrase_from(file, credentials, variable).unwrap().map(|(secret, source)| (secret.to_string(), source))
    }

    #[test]
    fn each_source_alone_and_the_trailing_newline() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pass");
        std::fs::write(&file, "from file\n").unwrap();
        assert_eq!(read(Some(&file), None, None), Some(("from file".into(), PassphraseSource::File(file.clone()))));
        std::fs::write(&file, "crlf\r\n").unwrap();
        assert_eq!(read(Some(&file), None, None).unwrap().0, "crlf");
        // Only one newline goes, and inner or leading spaces stay: they may be the passphrase's.
        std::fs::write(&file, " two lines\n\n").unwrap();
        assert_eq!(read(Some(&file), None, None).unwrap().0, " two lines\n");

        let credentials = tempfile::tempdir().unwrap();
        let credential = credentials.path().join(PASSPHRASE_CREDENTIAL);
        std::fs::write(&credential, "from systemd\n").unwrap();
        assert_eq!(
            read(None, Some(credentials.path()), None),
            Some(("from systemd".into(), PassphraseSource::Credential(credential)))
        );
        assert_eq!(read(None, None, env("from env")), Some(("from env".into(), PassphraseSource::Environment)));
        assert_eq!(read(None, None, env("")), None, "an empty variable is unset");
        assert_eq!(read(None, None, None), None);
    }

    #[test]
    fn the_file_beats_the_credential_which_beats_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pass");
        std::fs::write(&file, "file").unwrap();
        let credentials = tempfile::tempdir().unwrap();
        std::fs::write(credentials.path().join(PASSPHRASE_CREDENTIAL), "credential").unwrap();
        assert_eq!(read(Some(&file), Some(credentials.path()), env("variable")).unwrap().0, "file");
        assert_eq!(read(None, Some(credentials.path()), env("variable")).unwrap().0, "credential");
        // A credentials directory without our credential (another unit's) is passed over.
        let others = tempfile::tempdir().unwrap();
        std::fs::write(others.path().join("tls-key"), "x").unwrap();
        assert_eq!(read(None, Some(others.path()), env("variable")).unwrap().0, "variable");
    }

    #[test]
    fn a_named_file_that_is_missing_or_empty_is_an_error_not_a_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = passphrase_from(Some(&missing), None, env("variable")).unwrap_err().to_string();
        assert!(err.contains("cannot read the passphrase file"), "{err}");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        let err = passphrase_from(Some(&empty), None, env("variable")).unwrap_err().to_string();
        assert!(err.contains("is empty"), "{err}");
        let credentials = tempfile::tempdir().unwrap();
        std::fs::write(credentials.path().join(PASSPHRASE_CREDENTIAL), "").unwrap();
        assert!(passphrase_from(None, Some(credentials.path()), env("variable")).is_err());
    }
}
