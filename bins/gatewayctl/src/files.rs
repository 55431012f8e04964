//! The files `gatewayctl` keeps: the key file and, beside it, the token cache.
//!
//! Both hold secrets, so both are created readable and writable by their owner only (mode
//! 0600, in a directory created 0700), and the key file is never overwritten. The token cache
//! is replaced atomically (write a temporary file, then rename) so a crash cannot leave half a
//! token. Nothing here knows the gateway's routes.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use gateway_client::{Identity, KeyFile, Session};
use serde::{Deserialize, Serialize};

/// `$XDG_CONFIG_HOME/gatewayctl/key.json`, else `$HOME/.config/gatewayctl/key.json`.
pub(crate) fn default_key_path() -> anyhow::Result<PathBuf> {
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let home = std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .context("neither XDG_CONFIG_HOME nor HOME is set: pass --key <file>")?;
            PathBuf::from(home).join(".config")
        }
    };
    Ok(config.join("gatewayctl").join("key.json"))
}

/// The token cache beside a key: `key.json` → `key.token.json`.
pub(crate) fn token_path(key: &Path) -> PathBuf {
    let stem = key.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "key".into());
    key.with_file_name(format!("{stem}.token.json"))
}

/// Creates the parent directory (0700) of a secret file.
fn private_parent(path: &Path) -> anyhow::Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    Ok(())
}

/// Writes a new key file, mode 0600; an existing file is an error, never replaced.
pub(crate) fn write_new_key(path: &Path, identity: &Identity) -> anyhow::Result<()> {
    private_parent(path)?;
    let mut file = match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            bail!("{} already exists; refusing to overwrite a key (move it away first)", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", path.display())),
    };
    let text = serde_json::to_string_pretty(&identity.to_key_file())?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    file.sync_all()?;
    Ok(())
}

/// Reads the key file.
pub(crate) fn read_key(path: &Path) -> anyhow::Result<Identity> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("no key at {}: run `gatewayctl key generate` (or pass --key <file>)", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let file: KeyFile = serde_json::from_str(&text).with_context(|| format!("{} is not a key file", path.display()))?;
    Identity::from_key_file(&file).with_context(|| format!("in {}", path.display()))
}

/// What the token cache holds: the session and the gateway it is valid for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TokenCache {
    /// The gateway's base URL as given at login.
    pub(crate) gateway: String,
    /// The token and what it grants.
    pub(crate) session: Session,
}

/// Reads the token cache, `None` when there is none.
pub(crate) fn read_token(path: &Path) -> anyhow::Result<Option<TokenCache>> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(Some(
            serde_json::from_str(&text)
                .with_context(|| format!("{} is damaged: delete it and log in again", path.display()))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Replaces the token cache atomically, mode 0600.
pub(crate) fn write_token(path: &Path, cache: &TokenCache) -> anyhow::Result<()> {
    private_parent(path)?;
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .with_context(|| format!("cannot write {}", temporary.display()))?;
        file.write_all(serde_json::to_string_pretty(cache)?.as_bytes())?;
        file.sync_all()?;
    }
    fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_token_cache_sits_beside_the_key() {
        assert_eq!(token_path(Path::new("/a/b/key.json")), Path::new("/a/b/key.token.json"));
        assert_eq!(token_path(Path::new("me")), Path::new("me.token.json"));
    }

    #[test]
    fn keys_are_private_and_never_overwritten() {
        let dir = std::env::temp_dir().join(format!("gatewayctl-files-{}", std::process::id()));
        let path = dir.join("nested").join("key.json");
        let identity = Identity::generate();
        write_new_key(&path, &identity).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        assert!(write_new_key(&path, &Identity::generate()).unwrap_err().to_string().contains("refusing"));
        assert_eq!(read_key(&path).unwrap().did(), identity.did());

        let token = token_path(&path);
        assert!(read_token(&token).unwrap().is_none());
        let cache = TokenCache {
            gateway: "http://x".into(),
            session: Session { token: "t".into(), expires_at: 1, scopes: vec![], coop_id: None, did: "d".into() },
        };
        write_token(&token, &cache).unwrap();
        write_token(&token, &cache).unwrap();
        assert_eq!(fs::metadata(&token).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read_token(&token).unwrap().unwrap().session.token, "t");
        fs::remove_dir_all(dir).unwrap();
    }
}
