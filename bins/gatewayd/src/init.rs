//! `gatewayd init`: the first minute of a new gateway. Writes `gateway.toml` (the commented
//! example with a fresh random JWT secret, readable by its owner only) and, when a keystore
//! passphrase is given, a keystore for signed receipts; names the founder's DID as the first
//! trust anchor, so that the founder can open proposals and submit compute tasks at once.
//!
//! It refuses to overwrite an existing `gateway.toml` (unless `--force`) or keystore, and starts
//! nothing. It never writes through a symlink: the file is written as a new temporary file
//! beside the target (mode 0600, created exclusively) and renamed over it, so `--force` on a
//! `gateway.toml` that is a symlink replaces the link and leaves the file it pointed to alone.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use gateway_core::Did;
use rand::RngCore;

/// The commented example every setting is documented in; `init` fills in its own values.
const EXAMPLE: &str = include_str!("../../../gateway.example.toml");

/// Writes `dir/gateway.toml` (and `dir/keystore.json` when `ICN_PASSPHRASE` is set).
pub fn run(dir: &Path, founder: Option<&str>, force: bool) -> anyhow::Result<()> {
    let passphrase = std::env::var(crate::PASSPHRASE_VAR).ok().filter(|p| !p.is_empty()).map(zeroize::Zeroizing::new);
    run_with(dir, founder, force, passphrase)
}

/// Writes `dir/gateway.toml` (and `dir/keystore.json` when `passphrase` is given: `gatewayd`
/// reads it from `--passphrase-file`, the systemd credential or `ICN_PASSPHRASE`).
pub fn run_with(
    dir: &Path,
    founder: Option<&str>,
    force: bool,
    passphrase: Option<zeroize::Zeroizing<String>>,
) -> anyhow::Result<()> {
    let founder = founder
        .map(|text| Did::parse(text).map_err(|e| anyhow::anyhow!("--founder {text}: not a DID ({e})")))
        .transpose()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let config = dir.join("gateway.toml");
    // `symlink_metadata`: a symlink, even a dangling one, is an existing file here.
    if config.symlink_metadata().is_ok() && !force {
        bail!(
            "{} exists: keep it, or run `gatewayd init --force` to replace it (its secret changes)",
            config.display()
        );
    }
    let keystore = dir.join("keystore.json");
    let secret = {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        hex::encode(bytes)
    };
    let text = render(&secret, founder.as_ref(), passphrase.is_some() || keystore.exists());
    write_private(&config, &text)?;
    println!("wrote {} (JWT secret: 32 random bytes; readable by you only)", config.display());
    match (&passphrase, keystore.exists()) {
        (_, true) => println!("kept the existing {}", keystore.display()),
        (Some(passphrase), false) => {
            let master = gateway_auth::keystore::init(&keystore, passphrase)?;
            println!(
                "wrote {} (receipt master {}; unlocked with the same passphrase: --passphrase-file, the systemd credential {} or {})",
                keystore.display(),
                master.id,
                crate::PASSPHRASE_CREDENTIAL,
                crate::PASSPHRASE_VAR
            );
        }
        (None, false) => println!(
            "no keystore: proposals will close without signed receipts; to sign them, set {} and run `gatewayd keystore init --keystore {}`, then add keystore = \"keystore.json\" to gateway.toml",
            crate::PASSPHRASE_VAR,
            keystore.display()
        ),
    }
    match &founder {
        Some(did) => {
            println!("trust anchor: {did} (trust 1.0: the founder can open proposals and submit compute tasks)")
        }
        None => println!(
            "no trust anchor: every DID has trust 0.0, so nobody can open a proposal or submit a compute task; run `gatewayd init --force --founder <your DID>` (`gatewayctl key show` prints it)"
        ),
    }
    println!("start it: gatewayd --config {}", config.display());
    Ok(())
}

/// The example with the secret, the store, the anchor and the keystore set.
fn render(secret: &str, founder: Option<&Did>, keystore: bool) -> String {
    let mut text = String::from(
        "# Written by `gatewayd init`. It holds the JWT secret: keep it readable by the gateway only.\n\n",
    );
    for line in EXAMPLE.lines() {
        let set = if line.starts_with("# jwt_secret = ") {
            Some(format!("jwt_secret = \"{secret}\""))
        } else if line.starts_with("# store = ") {
            Some("store = \"sqlite:gateway.db\"".to_owned())
        } else if line.starts_with("# trust_anchor = ") {
            founder.map(|did| format!("trust_anchor = [\"{did}\"]"))
        } else if line.starts_with("# keystore = ") && keystore {
            Some("keystore = \"keystore.json\"".to_owned())
        } else if line.starts_with("# log_origin = ") {
            Some(format!("log_origin = \"{}\"", host_name()))
        } else {
            None
        };
        text.push_str(&set.unwrap_or_else(|| line.to_owned()));
        text.push('\n');
    }
    text
}

/// This machine's host name, for the coops' log origin (`localhost` when it has none that
/// would do): change it in the file to the gateway's public name before the first coop.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_ascii_lowercase())
        .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Writes `text` to `path` with mode 0600 (the secret is in it), without ever opening `path`
/// itself: a fresh temporary file in the same directory, created exclusively (`O_CREAT|O_EXCL`,
/// which refuses to follow or reuse anything already there), written and synced, then renamed
/// over `path`. A symlink at `path` is replaced by the new file, and its target is not touched;
/// a reader sees the old file or the new one, never half of one.
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    for _ in 0..16 {
        let mut suffix = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut suffix);
        let temporary = dir.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = match options.open(&temporary) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(err) => return Err(err).with_context(|| format!("writing {}", temporary.display())),
        };
        let written = (|| -> std::io::Result<()> {
            #[cfg(unix)]
            {
                // The umask may have narrowed the mode further; never wider than 0600.
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            file.write_all(text.as_bytes())?;
            file.sync_all()?;
            drop(file);
            std::fs::rename(&temporary, path)
        })();
        if let Err(err) = written {
            let _ = std::fs::remove_file(&temporary);
            return Err(err).with_context(|| format!("writing {}", path.display()));
        }
        return Ok(());
    }
    bail!("writing {}: could not create a temporary file beside it", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    const FOUNDER: &str = "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX";

    #[test]
    fn init_writes_a_private_config_that_resolves_with_the_founder_as_anchor() {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), Some(FOUNDER), false).unwrap();
        let path = dir.path().join("gateway.toml");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let config = crate::GatewayConfig::resolve(Settings { config: Some(path.clone()), ..Settings::default() })
            .expect("the written file resolves on its own");
        assert_eq!(config.jwt_secret.len(), 64);
        assert_eq!(config.trust_anchors.iter().map(ToString::to_string).collect::<Vec<_>>(), [FOUNDER]);
        assert!(config.check().unwrap().is_empty(), "no warnings: {:?}", config.check());
        let err = run(dir.path(), None, false).unwrap_err().to_string();
        assert!(err.contains("exists") && err.contains("--force"), "{err}");
        run(dir.path(), None, true).unwrap();
        let again = crate::GatewayConfig::resolve(Settings { config: Some(path), ..Settings::default() }).unwrap();
        assert_ne!(again.jwt_secret, config.jwt_secret, "a fresh secret");
        assert!(again.trust_anchors.is_empty());
    }

    /// `--force` on a `gateway.toml` that is a symlink to another file: the other file keeps its
    /// bytes and mode, and `gateway.toml` becomes a regular private file. Without `--force`,
    /// even a dangling symlink counts as an existing file.
    #[cfg(unix)]
    #[test]
    fn force_replaces_a_symlink_and_never_writes_through_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let victim = elsewhere.path().join("authorized_keys");
        std::fs::write(&victim, "ssh-ed25519 AAAA precious\n").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let config = dir.path().join("gateway.toml");
        std::os::unix::fs::symlink(&victim, &config).unwrap();

        let err = run(dir.path(), None, false).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
        run(dir.path(), Some(FOUNDER), true).unwrap();

        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "ssh-ed25519 AAAA precious\n");
        assert_eq!(std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777, 0o644);
        let written = std::fs::symlink_metadata(&config).unwrap();
        assert!(written.file_type().is_file(), "a regular file, not a link: {:?}", written.file_type());
        assert_eq!(written.permissions().mode() & 0o777, 0o600);
        assert!(std::fs::read_to_string(&config).unwrap().contains(FOUNDER));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");

        let dangling = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dangling.path().join("nowhere"), dangling.path().join("gateway.toml")).unwrap();
        assert!(run(dangling.path(), None, false).unwrap_err().to_string().contains("exists"));
        assert!(!dangling.path().join("nowhere").exists(), "nothing written through the dangling link");
    }

    #[test]
    fn a_founder_that_is_not_a_did_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(dir.path(), Some("alice"), false).unwrap_err().to_string();
        assert!(err.contains("--founder alice: not a DID"), "{err}");
        assert!(!dir.path().join("gateway.toml").exists());
    }
}
