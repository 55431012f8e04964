//! The encrypted file holding the gateway's governance signing key.
//!
//! The Ed25519 secret is encrypted with XChaCha20-Poly1305 under a key derived from an
//! operator's passphrase with Argon2id; the public key is stored in clear (so the gateway can
//! publish it without the passphrase) and bound to the ciphertext as associated data, so that
//! swapping it for another key is detected. The file is JSON:
//!
//! ```json
//! {"version":1,"kdf":"argon2id","m_cost_kib":19456,"t_cost":2,"p_cost":1,
//!  "salt":"<16 bytes hex>","cipher":"xchacha20poly1305","nonce":"<24 bytes hex>",
//!  "ciphertext":"<32-byte secret + 16-byte tag, hex>","public_key":"<32 bytes hex>"}
//! ```
//!
//! The Argon2id output (32 bytes, version 0x13) is the cipher key; the plaintext is the 32-byte
//! Ed25519 seed; the associated data is the 32 raw public-key bytes.
//!
//! This module reads and writes that file and nothing else. It deliberately does not read the
//! passphrase from the environment (the caller reads `ICN_PASSPHRASE` and passes it in), does
//! not sign anything, and never writes the secret anywhere but the encrypted file: the unlocked
//! [`SigningKey`] stays in the calling process. Deriving the key costs about 19 MiB of memory
//! and tens of milliseconds of CPU by design, so async callers should run [`init`], [`unlock`]
//! and [`write()`] inside `tokio::task::spawn_blocking`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use argon2::{Algorithm, Argon2, Block, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ed25519_dalek::{SECRET_KEY_LENGTH, SigningKey, VerifyingKey};
use rand::RngCore;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, Zeroizing};

/// The file format version this module writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Argon2id memory cost in KiB for new keystores: 19 MiB, the OWASP recommendation for
/// Argon2id with two passes, expensive for an attacker guessing passphrases on stolen files
/// while unlocking once at start-up stays well under a second.
pub const M_COST_KIB: u32 = 19 * 1024;
/// Argon2id passes for new keystores (OWASP: 2 with 19 MiB).
pub const T_COST: u32 = 2;
/// Argon2id lanes for new keystores.
pub const P_COST: u32 = 1;

/// The largest memory cost a keystore file may ask for (1 GiB). Parameters are read from the
/// file before the passphrase is checked, so without a bound a damaged or hostile file could
/// make unlocking exhaust the host's memory or time.
const MAX_M_COST_KIB: u32 = 1024 * 1024;
/// The largest number of passes a keystore file may ask for.
const MAX_T_COST: u32 = 16;
/// The largest number of lanes a keystore file may ask for.
const MAX_P_COST: u32 = 16;

const KDF: &str = "argon2id";
const CIPHER: &str = "xchacha20poly1305";
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;

/// Why a keystore could not be created, opened or read. Each message tells the operator what
/// to do next.
#[derive(Debug, thiserror::Error)]
pub enum KeystoreError {
    /// There is no file at the path.
    #[error(
        "no keystore at {}: create one with `gatewayd keystore init` or fix --keystore",
        .0.display()
    )]
    Missing(PathBuf),
    /// `init` found a file already at the path and left it untouched.
    #[error(
        "a keystore already exists at {}: refusing to overwrite it (move it away first if you \
         really mean to replace the governance key)",
        .0.display()
    )]
    AlreadyExists(PathBuf),
    /// The passphrase is empty, which would protect the key with nothing.
    #[error("the keystore passphrase is empty: set ICN_PASSPHRASE to the keystore's passphrase")]
    EmptyPassphrase,
    /// Decryption failed. Authenticated encryption cannot tell a wrong passphrase from a
    /// modified salt, nonce, ciphertext or public key, so both are reported here.
    #[error(
        "the passphrase does not open this keystore: check ICN_PASSPHRASE (if it is right, the \
         file was modified; restore it from a backup)"
    )]
    WrongPassphrase,
    /// The file is not a keystore this gateway can read (bad JSON, wrong version or algorithm,
    /// bad lengths, out-of-range parameters, a secret that does not match its public key).
    #[error("the keystore file is corrupt ({0}): restore it from a backup")]
    Corrupt(String),
    /// Reading or writing the file failed.
    #[error("keystore I/O error: {0} (check the path, its directory and their permissions)")]
    Io(#[from] io::Error),
}

/// The on-disk JSON shape.
#[derive(Debug, Serialize, Deserialize)]
struct KeystoreFile {
    version: u32,
    kdf: String,
    m_cost_kib: u32,
    t_cost: u32,
    p_cost: u32,
    salt: String,
    cipher: String,
    nonce: String,
    ciphertext: String,
    public_key: String,
}

/// Argon2id cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KdfParams {
    m_cost_kib: u32,
    t_cost: u32,
    p_cost: u32,
}

const DEFAULT_PARAMS: KdfParams = KdfParams { m_cost_kib: M_COST_KIB, t_cost: T_COST, p_cost: P_COST };

/// A keystore file whose fields have been decoded and checked, not yet decrypted.
#[derive(Debug)]
struct Parsed {
    params: KdfParams,
    salt: [u8; SALT_LEN],
    nonce: [u8; NONCE_LEN],
    ciphertext: Vec<u8>,
    public_key: VerifyingKey,
}

/// Creates a keystore at `path` holding a newly generated key (from the operating system's
/// random source), and returns its public key.
///
/// Refuses to overwrite an existing file ([`KeystoreError::AlreadyExists`]), because losing the
/// governance key would leave every past receipt without a key to check it against. The file
/// is written to a temporary file in the same directory (mode 0600 on Unix) and then linked
/// into place, so `path` either does not exist or holds a complete keystore.
pub fn init(path: &Path, passphrase: &str) -> Result<VerifyingKey, KeystoreError> {
    check_passphrase(passphrase)?;
    if path.symlink_metadata().is_ok() {
        return Err(KeystoreError::AlreadyExists(path.to_owned()));
    }
    let key = SigningKey::generate(&mut OsRng);
    let bytes = seal(passphrase, &key, DEFAULT_PARAMS)?;
    persist(path, &bytes, Persist::CreateNew)?;
    Ok(key.verifying_key())
}

/// Decrypts the keystore at `path` with `passphrase`.
///
/// A tampered ciphertext, nonce, salt or public key is reported as
/// [`KeystoreError::WrongPassphrase`] (the authentication tag cannot tell these apart from a
/// wrong passphrase); a file that does not have the format's structure is
/// [`KeystoreError::Corrupt`], detected before any key derivation. CPU- and memory-heavy: run
/// it in `spawn_blocking`.
pub fn unlock(path: &Path, passphrase: &str) -> Result<SigningKey, KeystoreError> {
    check_passphrase(passphrase)?;
    let parsed = read(path)?;
    open(&parsed, passphrase)
}

/// Writes `key` to `path` under `passphrase`, atomically replacing any keystore already there
/// (used for key rotation, and to change the passphrase). A fresh salt and nonce are drawn for
/// every write. The new file is complete on disk before it replaces the old one, so a crash
/// leaves either the old keystore or the new one, never a mixture.
pub fn write(path: &Path, passphrase: &str, key: &SigningKey) -> Result<(), KeystoreError> {
    check_passphrase(passphrase)?;
    let bytes = seal(passphrase, key, DEFAULT_PARAMS)?;
    persist(path, &bytes, Persist::Replace)
}

/// The public key of the keystore at `path`, read without the passphrase so the gateway can
/// publish its signing key before (or without) unlocking.
///
/// The value is not authenticated until the keystore is unlocked: [`unlock`] fails if it was
/// swapped, since it is the ciphertext's associated data.
pub fn public_key(path: &Path) -> Result<VerifyingKey, KeystoreError> {
    Ok(read(path)?.public_key)
}

fn check_passphrase(passphrase: &str) -> Result<(), KeystoreError> {
    if passphrase.is_empty() { Err(KeystoreError::EmptyPassphrase) } else { Ok(()) }
}

/// Derives the 32-byte cipher key. Argon2's working memory is allocated here rather than
/// inside the crate so that it can be wiped afterwards: it holds material derived from the
/// passphrase.
fn derive_key(
    passphrase: &str,
    salt: &[u8; SALT_LEN],
    params: KdfParams,
) -> Result<Zeroizing<[u8; 32]>, KeystoreError> {
    let argon_params = Params::new(params.m_cost_kib, params.t_cost, params.p_cost, Some(32))
        .map_err(|e| KeystoreError::Corrupt(format!("invalid Argon2id parameters: {e}")))?;
    let mut blocks = vec![Block::new(); argon_params.block_count()];
    let argon = Argon2::new(Algorithm::Argon2id, Version::V0x13, argon_params);
    let mut out = Zeroizing::new([0u8; 32]);
    let result =
        argon.hash_password_into_with_memory(passphrase.as_bytes(), salt, out.as_mut_slice(), blocks.as_mut_slice());
    for block in &mut blocks {
        block.as_mut().zeroize();
    }
    result.map_err(|e| KeystoreError::Corrupt(format!("key derivation failed: {e}")))?;
    Ok(out)
}

/// The cipher keyed by a derived key, borrowing the key rather than copying it into a temporary
/// that would not be wiped.
fn cipher_for(cipher_key: &[u8; 32]) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new_from_slice(cipher_key).expect("XChaCha20-Poly1305 keys are 32 bytes")
}

/// Encrypts `key` into the keystore's JSON bytes.
fn seal(passphrase: &str, key: &SigningKey, params: KdfParams) -> Result<Vec<u8>, KeystoreError> {
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    OsRng.fill_bytes(&mut salt);
    OsRng.fill_bytes(&mut nonce);
    let cipher_key = derive_key(passphrase, &salt, params)?;
    let cipher = cipher_for(&cipher_key);
    let public_key = key.verifying_key().to_bytes();
    let secret = Zeroizing::new(key.to_bytes());
    let ciphertext = cipher
        .encrypt(&XNonce::from(nonce), Payload { msg: secret.as_slice(), aad: &public_key })
        .map_err(|_| KeystoreError::Corrupt("encryption failed".into()))?;
    let file = KeystoreFile {
        version: FORMAT_VERSION,
        kdf: KDF.into(),
        m_cost_kib: params.m_cost_kib,
        t_cost: params.t_cost,
        p_cost: params.p_cost,
        salt: hex::encode(salt),
        cipher: CIPHER.into(),
        nonce: hex::encode(nonce),
        ciphertext: hex::encode(ciphertext),
        public_key: hex::encode(public_key),
    };
    let mut bytes = serde_json::to_vec_pretty(&file)
        .map_err(|e| KeystoreError::Corrupt(format!("cannot encode the keystore: {e}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Decrypts a parsed keystore and checks that the secret matches the stored public key.
fn open(parsed: &Parsed, passphrase: &str) -> Result<SigningKey, KeystoreError> {
    let cipher_key = derive_key(passphrase, &parsed.salt, parsed.params)?;
    let cipher = cipher_for(&cipher_key);
    let plaintext = Zeroizing::new(
        cipher
            .decrypt(
                &XNonce::from(parsed.nonce),
                Payload { msg: &parsed.ciphertext, aad: parsed.public_key.as_bytes() },
            )
            .map_err(|_| KeystoreError::WrongPassphrase)?,
    );
    let mut seed = Zeroizing::new([0u8; SECRET_KEY_LENGTH]);
    if plaintext.len() != SECRET_KEY_LENGTH {
        return Err(KeystoreError::Corrupt("the decrypted secret is not 32 bytes".into()));
    }
    seed.copy_from_slice(&plaintext);
    let key = SigningKey::from_bytes(&seed);
    if key.verifying_key() != parsed.public_key {
        return Err(KeystoreError::Corrupt("the decrypted secret does not match public_key".into()));
    }
    Ok(key)
}

/// Reads and structurally checks the keystore at `path`.
fn read(path: &Path) -> Result<Parsed, KeystoreError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(KeystoreError::Missing(path.to_owned()));
        }
        Err(e) => return Err(e.into()),
    };
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Result<Parsed, KeystoreError> {
    let corrupt = |what: String| KeystoreError::Corrupt(what);
    let file: KeystoreFile = serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a keystore file: {e}")))?;
    if file.version != FORMAT_VERSION {
        return Err(corrupt(format!("version {} is not supported (expected {FORMAT_VERSION})", file.version)));
    }
    if file.kdf != KDF {
        return Err(corrupt(format!("unsupported kdf '{}'", file.kdf)));
    }
    if file.cipher != CIPHER {
        return Err(corrupt(format!("unsupported cipher '{}'", file.cipher)));
    }
    let params = KdfParams { m_cost_kib: file.m_cost_kib, t_cost: file.t_cost, p_cost: file.p_cost };
    let in_range = (1..=MAX_P_COST).contains(&params.p_cost)
        && (1..=MAX_T_COST).contains(&params.t_cost)
        && (params.p_cost.saturating_mul(8)..=MAX_M_COST_KIB).contains(&params.m_cost_kib);
    if !in_range {
        return Err(corrupt(format!(
            "Argon2id parameters out of range (m_cost_kib {}, t_cost {}, p_cost {})",
            params.m_cost_kib, params.t_cost, params.p_cost
        )));
    }
    let salt = fixed_hex::<SALT_LEN>("salt", &file.salt)?;
    let nonce = fixed_hex::<NONCE_LEN>("nonce", &file.nonce)?;
    let public_key = fixed_hex::<32>("public_key", &file.public_key)?;
    let public_key =
        VerifyingKey::from_bytes(&public_key).map_err(|_| corrupt("public_key is not an Ed25519 public key".into()))?;
    let ciphertext = hex::decode(&file.ciphertext).map_err(|_| corrupt("ciphertext is not hex".into()))?;
    if ciphertext.len() != SECRET_KEY_LENGTH + TAG_LEN {
        return Err(corrupt(format!(
            "ciphertext is {} bytes, expected {}",
            ciphertext.len(),
            SECRET_KEY_LENGTH + TAG_LEN
        )));
    }
    Ok(Parsed { params, salt, nonce, ciphertext, public_key })
}

fn fixed_hex<const N: usize>(field: &str, text: &str) -> Result<[u8; N], KeystoreError> {
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out)
        .map_err(|_| KeystoreError::Corrupt(format!("{field} is not {N} bytes of hex")))?;
    Ok(out)
}

/// How [`persist`] puts the finished temporary file in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Persist {
    /// Fail with [`KeystoreError::AlreadyExists`] if the path exists.
    CreateNew,
    /// Atomically replace whatever is at the path.
    Replace,
}

/// Writes `bytes` to a temporary file beside `path` (created exclusively, mode 0600 on Unix,
/// flushed to disk) and moves it into place. `CreateNew` uses a hard link, which fails rather
/// than overwrite; on file systems without hard links it falls back to a checked rename.
fn persist(path: &Path, bytes: &[u8], mode: Persist) -> Result<(), KeystoreError> {
    let name = path.file_name().ok_or_else(|| {
        KeystoreError::Io(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a file path", path.display())))
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(".{}.tmp-{:016x}", name.to_string_lossy(), OsRng.next_u64()));

    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let written = options.open(&tmp).and_then(|mut file| {
        file.write_all(bytes)?;
        file.sync_all()
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e.into());
    }

    let placed = match mode {
        Persist::Replace => fs::rename(&tmp, path).map_err(KeystoreError::from),
        Persist::CreateNew => match fs::hard_link(&tmp, path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(KeystoreError::AlreadyExists(path.to_owned())),
            Err(_) if path.symlink_metadata().is_ok() => Err(KeystoreError::AlreadyExists(path.to_owned())),
            Err(_) => fs::rename(&tmp, path).map_err(KeystoreError::from),
        },
    };
    // After a link (or a failure) the temporary name must go; after a rename it is already gone.
    let _ = fs::remove_file(&tmp);
    placed?;
    // Make the new directory entry durable too. Not every platform can open a directory for
    // syncing, and the data itself is already on disk, so a failure here is not an error.
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// The cheapest parameters Argon2id accepts, for tests that exercise the file handling
    /// rather than the key derivation's cost.
    const CHEAP: KdfParams = KdfParams { m_cost_kib: 8, t_cost: 1, p_cost: 1 };

    /// A change made to a keystore's JSON by a tampering test.
    type Edit<'a> = Box<dyn Fn(&mut serde_json::Value) + 'a>;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!(
                "gateway-keystore-test-{}-{n}-{:x}",
                std::process::id(),
                OsRng.next_u32()
            ));
            fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }

        fn path(&self) -> PathBuf {
            self.0.join("governance.key")
        }

        fn entries(&self) -> Vec<String> {
            let mut names: Vec<String> =
                fs::read_dir(&self.0).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
            names.sort();
            names
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A keystore written with cheap parameters through the same sealing and persisting code.
    fn write_cheap(path: &Path, passphrase: &str, key: &SigningKey, mode: Persist) {
        let bytes = seal(passphrase, key, CHEAP).unwrap();
        persist(path, &bytes, mode).unwrap();
    }

    fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut json: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        edit(&mut json);
        fs::write(path, serde_json::to_vec(&json).unwrap()).unwrap();
    }

    #[test]
    fn init_then_unlock_round_trips_and_a_wrong_passphrase_is_refused() {
        let dir = TempDir::new();
        let path = dir.path();
        let public = init(&path, "correct horse").unwrap();
        assert_eq!(public_key(&path).unwrap(), public);
        let key = unlock(&path, "correct horse").unwrap();
        assert_eq!(key.verifying_key(), public);
        assert!(matches!(unlock(&path, "wrong horse"), Err(KeystoreError::WrongPassphrase)));
        // Only the keystore is left in the directory: the temporary file is gone.
        assert_eq!(dir.entries(), vec!["governance.key".to_owned()]);
    }

    #[test]
    fn init_writes_the_documented_format_with_default_parameters() {
        let dir = TempDir::new();
        let path = dir.path();
        let public = init(&path, "pass").unwrap();
        let json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            vec![
                "cipher",
                "ciphertext",
                "kdf",
                "m_cost_kib",
                "nonce",
                "p_cost",
                "public_key",
                "salt",
                "t_cost",
                "version"
            ]
        );
        assert_eq!(json["version"], 1);
        assert_eq!(json["kdf"], "argon2id");
        assert_eq!(json["cipher"], "xchacha20poly1305");
        assert_eq!(json["m_cost_kib"], 19 * 1024);
        assert_eq!(json["t_cost"], 2);
        assert_eq!(json["p_cost"], 1);
        assert_eq!(json["salt"].as_str().unwrap().len(), 2 * 16);
        assert_eq!(json["nonce"].as_str().unwrap().len(), 2 * 24);
        assert_eq!(json["ciphertext"].as_str().unwrap().len(), 2 * (32 + 16));
        assert_eq!(json["public_key"], hex::encode(public.as_bytes()));
    }

    #[cfg(unix)]
    #[test]
    fn init_creates_the_file_with_mode_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = TempDir::new();
        let path = dir.path();
        init(&path, "pass").unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }

    #[test]
    fn the_secret_is_not_stored_in_clear() {
        let dir = TempDir::new();
        let path = dir.path();
        let key = SigningKey::from_bytes(&[0x42; 32]);
        write_cheap(&path, "pass", &key, Persist::CreateNew);
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&hex::encode(key.to_bytes())));
        assert_eq!(unlock(&path, "pass").unwrap().to_bytes(), key.to_bytes());
    }

    #[test]
    fn init_refuses_to_overwrite() {
        let dir = TempDir::new();
        let path = dir.path();
        fs::write(&path, b"precious").unwrap();
        assert!(matches!(
            init(&path, "pass"),
            Err(KeystoreError::AlreadyExists(p)) if p == path
        ));
        assert_eq!(fs::read(&path).unwrap(), b"precious");
        // The linking step refuses too, should a file appear after the check.
        let bytes = seal("pass", &SigningKey::from_bytes(&[1; 32]), CHEAP).unwrap();
        assert!(matches!(persist(&path, &bytes, Persist::CreateNew), Err(KeystoreError::AlreadyExists(_))));
        assert_eq!(fs::read(&path).unwrap(), b"precious");
        assert_eq!(dir.entries(), vec!["governance.key".to_owned()]);
    }

    #[test]
    fn a_missing_file_is_reported_as_missing() {
        let dir = TempDir::new();
        let path = dir.path();
        assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::Missing(p)) if p == path));
        assert!(matches!(public_key(&path), Err(KeystoreError::Missing(p)) if p == path));
        let message = KeystoreError::Missing(path).to_string();
        assert!(message.contains("gatewayd keystore init"), "{message}");
    }

    #[test]
    fn empty_passphrases_are_refused_before_any_work() {
        let dir = TempDir::new();
        let path = dir.path();
        let key = SigningKey::from_bytes(&[3; 32]);
        assert!(matches!(init(&path, ""), Err(KeystoreError::EmptyPassphrase)));
        assert!(matches!(write(&path, "", &key), Err(KeystoreError::EmptyPassphrase)));
        assert!(dir.entries().is_empty(), "nothing was written");
        write_cheap(&path, "pass", &key, Persist::CreateNew);
        assert!(matches!(unlock(&path, ""), Err(KeystoreError::EmptyPassphrase)));
    }

    #[test]
    fn write_replaces_an_existing_keystore() {
        let dir = TempDir::new();
        let path = dir.path();
        let old = SigningKey::from_bytes(&[5; 32]);
        let new = SigningKey::from_bytes(&[6; 32]);
        write_cheap(&path, "old pass", &old, Persist::CreateNew);
        write(&path, "new pass", &new).unwrap();
        assert_eq!(public_key(&path).unwrap(), new.verifying_key());
        assert_eq!(unlock(&path, "new pass").unwrap().to_bytes(), new.to_bytes());
        assert_eq!(dir.entries(), vec!["governance.key".to_owned()]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
    }

    #[test]
    fn tampered_ciphertext_nonce_salt_or_public_key_fail_as_wrong_passphrase() {
        let dir = TempDir::new();
        let path = dir.path();
        let key = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
        let flip = |json: &mut serde_json::Value, field: &str| {
            let mut bytes = hex::decode(json[field].as_str().unwrap()).unwrap();
            bytes[0] ^= 1;
            json[field] = hex::encode(bytes).into();
        };
        let edits: Vec<(&str, Edit)> = vec![
            ("ciphertext", Box::new(|j| flip(j, "ciphertext"))),
            ("nonce", Box::new(|j| flip(j, "nonce"))),
            ("salt", Box::new(|j| flip(j, "salt"))),
            ("public_key", Box::new(move |j| j["public_key"] = hex::encode(other.as_bytes()).into())),
        ];
        for (field, edit) in edits {
            write_cheap(&path, "pass", &key, Persist::Replace);
            edit_json(&path, edit);
            assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::WrongPassphrase)), "{field}");
        }
    }

    #[test]
    fn structurally_broken_files_are_corrupt() {
        let dir = TempDir::new();
        let path = dir.path();
        let key = SigningKey::from_bytes(&[9; 32]);
        let edits: Vec<(&str, Edit)> = vec![
            ("version", Box::new(|j| j["version"] = 2.into())),
            ("kdf", Box::new(|j| j["kdf"] = "scrypt".into())),
            ("cipher", Box::new(|j| j["cipher"] = "aes-256-gcm".into())),
            ("m_cost_kib", Box::new(|j| j["m_cost_kib"] = u32::MAX.into())),
            ("m_cost_kib low", Box::new(|j| j["m_cost_kib"] = 4.into())),
            ("t_cost", Box::new(|j| j["t_cost"] = 0.into())),
            ("p_cost", Box::new(|j| j["p_cost"] = 1000.into())),
            ("salt", Box::new(|j| j["salt"] = "abcd".into())),
            ("nonce", Box::new(|j| j["nonce"] = "zz".into())),
            ("public_key hex", Box::new(|j| j["public_key"] = "not hex".into())),
            ("ciphertext length", Box::new(|j| j["ciphertext"] = hex::encode([0u8; 40]).into())),
            (
                "missing field",
                Box::new(|j| {
                    j.as_object_mut().unwrap().remove("nonce");
                }),
            ),
        ];
        for (what, edit) in edits {
            write_cheap(&path, "pass", &key, Persist::Replace);
            edit_json(&path, edit);
            assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::Corrupt(_))), "{what}");
        }
        fs::write(&path, b"{not json").unwrap();
        assert!(matches!(public_key(&path), Err(KeystoreError::Corrupt(_))));
    }

    #[test]
    fn a_secret_that_does_not_match_its_public_key_is_corrupt() {
        // Encrypt key A's secret with key B's public key as associated data, as a buggy or
        // malicious writer might: the tag verifies, the key check must not.
        let a = SigningKey::from_bytes(&[10; 32]);
        let b = SigningKey::from_bytes(&[11; 32]).verifying_key();
        let salt = [1u8; SALT_LEN];
        let nonce = [2u8; NONCE_LEN];
        let cipher_key = derive_key("pass", &salt, CHEAP).unwrap();
        let cipher = cipher_for(&cipher_key);
        let ciphertext =
            cipher.encrypt(&XNonce::from(nonce), Payload { msg: &a.to_bytes(), aad: b.as_bytes() }).unwrap();
        let parsed = Parsed { params: CHEAP, salt, nonce, ciphertext, public_key: b };
        assert!(matches!(open(&parsed, "pass"), Err(KeystoreError::Corrupt(_))));
    }

    #[test]
    fn messages_tell_the_operator_what_to_do() {
        let path = PathBuf::from("/etc/icn/governance.key");
        assert!(KeystoreError::AlreadyExists(path.clone()).to_string().contains("/etc/icn/governance.key"));
        assert!(KeystoreError::WrongPassphrase.to_string().contains("ICN_PASSPHRASE"));
        assert!(KeystoreError::EmptyPassphrase.to_string().contains("ICN_PASSPHRASE"));
        assert!(KeystoreError::Corrupt("x".into()).to_string().contains("restore it from a backup"));
    }
}
