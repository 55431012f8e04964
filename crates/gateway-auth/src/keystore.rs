//! The encrypted file holding the gateway's receipt master secrets.
//!
//! The gateway signs each coop's receipts with a key derived from a 32-byte **master secret**
//! (`gateway_domain::governance::derive_receipt_key`); this file holds the masters, encrypted
//! with XChaCha20-Poly1305 under a key derived from an operator's passphrase with Argon2id.
//! `gatewayd keystore rotate` adds a new master and retires the previous one, which stays in the
//! file (encrypted) so that the keys derived from it can still be derived and checked. The file
//! (format version 2) is JSON:
//!
//! ```json
//! {"version":2,"kdf":"argon2id","m_cost_kib":19456,"t_cost":2,"p_cost":1,
//!  "salt":"<16 bytes hex>","cipher":"xchacha20poly1305","nonce":"<24 bytes hex>",
//!  "masters":[{"id":0,"created_at":1735689600,"retired_at":1767225600},
//!             {"id":1,"created_at":1767225600,"retired_at":null}],
//!  "ciphertext":"<the masters' secrets, 32 bytes each in list order, + 16-byte tag, hex>"}
//! ```
//!
//! The Argon2id output (32 bytes, version 0x13) is the cipher key. The plaintext is the
//! concatenation of the masters' 32-byte secrets, in the order of `masters`. The associated data
//! binds the clear metadata: `"icn-gateway/keystore/v2"`, then the number of masters (u32 big
//! endian), then per master its `id` (u32 BE), `created_at` and `retired_at` (u64 BE each, 0 when
//! null). Ids increase strictly; the last master is the current one (`retired_at` null) and every
//! other one is retired.
//!
//! Files of format version 1 (one Ed25519 seed, its `public_key` in clear as associated data)
//! still open: their secret is master 0. The next `rotate` writes version 2.
//!
//! This module reads and writes that file and nothing else. It deliberately does not read the
//! passphrase from the environment (the caller reads `ICN_PASSPHRASE` and passes it in), does
//! not derive or sign anything, and never writes a secret anywhere but the encrypted file: the
//! unlocked [`Keyring`] stays in the calling process. Deriving the cipher key costs about 19 MiB
//! of memory and tens of milliseconds of CPU by design, so async callers should run [`init`],
//! [`unlock`] and [`rotate`] inside `tokio::task::spawn_blocking`.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use argon2::{Algorithm, Argon2, Block, Params, Version};
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use ed25519_dalek::{SECRET_KEY_LENGTH, SigningKey, VerifyingKey};
use rand::RngCore;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};
use zeroize::{Zeroize, Zeroizing};

/// The file format version this module writes.
pub const FORMAT_VERSION: u32 = 2;
/// The format of before (one secret with its public key), still read.
pub const LEGACY_FORMAT_VERSION: u32 = 1;

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
/// The most masters a keystore holds (a rotation a day for decades).
const MAX_MASTERS: usize = 65_536;

const KDF: &str = "argon2id";
const CIPHER: &str = "xchacha20poly1305";
const AAD_LABEL: &[u8] = b"icn-gateway/keystore/v2";
const SALT_LEN: usize = 16;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// The length of a master secret.
pub const MASTER_LEN: usize = 32;

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
        "a keystore already exists at {}: refusing to overwrite it (to change the master secret, \
         use `gatewayd keystore rotate`, which keeps the retired ones)",
        .0.display()
    )]
    AlreadyExists(PathBuf),
    /// The passphrase is empty, which would protect the key with nothing.
    #[error("the keystore passphrase is empty: set ICN_PASSPHRASE to the keystore's passphrase")]
    EmptyPassphrase,
    /// Decryption failed. Authenticated encryption cannot tell a wrong passphrase from a
    /// modified salt, nonce, ciphertext or clear metadata, so both are reported here.
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

/// What the file says of a master in clear: its number and when it was created and retired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterInfo {
    /// Its number: 0 for the first, one more at each rotation.
    pub id: u32,
    /// Unix seconds; `None` for a master that came from a version-1 file.
    pub created_at: Option<u64>,
    /// Unix seconds; `None` for the current master.
    pub retired_at: Option<u64>,
}

/// A master secret with its metadata. `Debug` never shows the secret, which is zeroed on drop.
pub struct Master {
    info: MasterInfo,
    secret: Zeroizing<[u8; MASTER_LEN]>,
}

impl Master {
    /// Its number and dates.
    pub fn info(&self) -> MasterInfo {
        self.info
    }

    /// The 32-byte secret, to derive keys from inside this process.
    pub fn secret(&self) -> &[u8; MASTER_LEN] {
        &self.secret
    }
}

impl fmt::Debug for Master {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Master").field("info", &self.info).finish_non_exhaustive()
    }
}

/// An unlocked keystore: every master, oldest first; the last one is current.
#[derive(Debug)]
pub struct Keyring {
    masters: Vec<Master>,
    version: u32,
}

impl Keyring {
    /// The master that signs now.
    pub fn current(&self) -> &Master {
        self.masters.last().expect("a keyring holds at least one master")
    }

    /// Every master, oldest first (the retired ones, then the current one).
    pub fn masters(&self) -> &[Master] {
        &self.masters
    }

    /// The format version of the file it was read from.
    pub fn version(&self) -> u32 {
        self.version
    }
}

/// The on-disk JSON shape of version 2.
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
    masters: Vec<MasterInfo>,
    ciphertext: String,
}

/// The on-disk JSON shape of version 1.
#[derive(Debug, Serialize, Deserialize)]
struct LegacyFile {
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

/// Just the version, read first to choose the shape.
#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

/// Argon2id cost parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KdfParams {
    m_cost_kib: u32,
    t_cost: u32,
    p_cost: u32,
}

const DEFAULT_PARAMS: KdfParams = KdfParams { m_cost_kib: M_COST_KIB, t_cost: T_COST, p_cost: P_COST };

/// What the ciphertext's associated data is and how the plaintext is checked.
#[derive(Debug)]
enum Layout {
    /// Version 2: the masters' metadata.
    Masters(Vec<MasterInfo>),
    /// Version 1: one seed, whose Ed25519 public key must match.
    Legacy(VerifyingKey),
}

/// A keystore file whose fields have been decoded and checked, not yet decrypted.
#[derive(Debug)]
struct Parsed {
    params: KdfParams,
    salt: [u8; SALT_LEN],
    nonce: [u8; NONCE_LEN],
    ciphertext: Vec<u8>,
    layout: Layout,
}

/// Creates a keystore at `path` holding a newly generated master secret (from the operating
/// system's random source), number 0, and returns its metadata.
///
/// Refuses to overwrite an existing file ([`KeystoreError::AlreadyExists`]), because losing a
/// master would leave the receipts signed by its keys without a way to re-derive them. The file
/// is written to a temporary file in the same directory (mode 0600 on Unix) and then linked
/// into place, so `path` either does not exist or holds a complete keystore.
pub fn init(path: &Path, passphrase: &str) -> Result<MasterInfo, KeystoreError> {
    check_passphrase(passphrase)?;
    if path.symlink_metadata().is_ok() {
        return Err(KeystoreError::AlreadyExists(path.to_owned()));
    }
    let master = new_master(0, now());
    let info = master.info;
    let bytes = seal(passphrase, &[master], DEFAULT_PARAMS)?;
    persist(path, &bytes, Persist::CreateNew)?;
    Ok(info)
}

/// Decrypts the keystore at `path` with `passphrase` (format version 1 or 2).
///
/// A tampered ciphertext, nonce, salt or clear metadata is reported as
/// [`KeystoreError::WrongPassphrase`] (the authentication tag cannot tell these apart from a
/// wrong passphrase); a file that does not have the format's structure is
/// [`KeystoreError::Corrupt`], detected before any key derivation. CPU- and memory-heavy: run
/// it in `spawn_blocking`.
pub fn unlock(path: &Path, passphrase: &str) -> Result<Keyring, KeystoreError> {
    check_passphrase(passphrase)?;
    let parsed = read(path)?;
    open(&parsed, passphrase)
}

/// The operator's master rotation: unlocks the keystore at `path`, retires its current master
/// (now), adds a newly generated one numbered after it, and writes the file back (format
/// version 2, the same passphrase and Argon2id parameters, a fresh salt and nonce), atomically:
/// a crash leaves the old keystore or the new one, never a mixture. Every retired master stays
/// in the file. Returns the new keyring.
pub fn rotate(path: &Path, passphrase: &str) -> Result<Keyring, KeystoreError> {
    rotate_at(path, passphrase, now())
}

fn rotate_at(path: &Path, passphrase: &str, at: u64) -> Result<Keyring, KeystoreError> {
    check_passphrase(passphrase)?;
    let parsed = read(path)?;
    let mut keyring = open(&parsed, passphrase)?;
    if keyring.masters.len() >= MAX_MASTERS {
        return Err(KeystoreError::Corrupt(format!("the keystore already holds {MAX_MASTERS} masters")));
    }
    let current = keyring.masters.last_mut().expect("a keyring holds at least one master");
    let id =
        current.info.id.checked_add(1).ok_or_else(|| KeystoreError::Corrupt("master numbers are exhausted".into()))?;
    current.info.retired_at = Some(at);
    keyring.masters.push(new_master(id, at));
    let bytes = seal(passphrase, &keyring.masters, parsed.params)?;
    persist(path, &bytes, Persist::Replace)?;
    keyring.version = FORMAT_VERSION;
    Ok(keyring)
}

/// The masters' clear metadata of the keystore at `path`, read without the passphrase (not
/// authenticated until the keystore is unlocked).
pub fn masters(path: &Path) -> Result<Vec<MasterInfo>, KeystoreError> {
    Ok(match read(path)?.layout {
        Layout::Masters(masters) => masters,
        Layout::Legacy(_) => vec![MasterInfo { id: 0, created_at: None, retired_at: None }],
    })
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn new_master(id: u32, at: u64) -> Master {
    let mut secret = Zeroizing::new([0u8; MASTER_LEN]);
    OsRng.fill_bytes(secret.as_mut_slice());
    Master { info: MasterInfo { id, created_at: Some(at), retired_at: None }, secret }
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

/// The associated data of a version-2 file: the label, the count, and each master's id,
/// `created_at` and `retired_at` (0 when null).
fn associated_data(masters: &[MasterInfo]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_LABEL.len() + 4 + masters.len() * 20);
    aad.extend_from_slice(AAD_LABEL);
    aad.extend_from_slice(&u32::try_from(masters.len()).unwrap_or(u32::MAX).to_be_bytes());
    for m in masters {
        aad.extend_from_slice(&m.id.to_be_bytes());
        aad.extend_from_slice(&m.created_at.unwrap_or(0).to_be_bytes());
        aad.extend_from_slice(&m.retired_at.unwrap_or(0).to_be_bytes());
    }
    aad
}

/// Encrypts `masters` into the keystore's version-2 JSON bytes.
fn seal(passphrase: &str, masters: &[Master], params: KdfParams) -> Result<Vec<u8>, KeystoreError> {
    let mut salt = [0u8; SALT_LEN];
    let mut nonce = [0u8; NONCE_LEN];
    OsRng.fill_bytes(&mut salt);
    OsRng.fill_bytes(&mut nonce);
    let cipher_key = derive_key(passphrase, &salt, params)?;
    let cipher = cipher_for(&cipher_key);
    let infos: Vec<MasterInfo> = masters.iter().map(|m| m.info).collect();
    let mut plaintext = Zeroizing::new(Vec::with_capacity(masters.len() * MASTER_LEN));
    for m in masters {
        plaintext.extend_from_slice(m.secret.as_slice());
    }
    let ciphertext = cipher
        .encrypt(&XNonce::from(nonce), Payload { msg: plaintext.as_slice(), aad: &associated_data(&infos) })
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
        masters: infos,
        ciphertext: hex::encode(ciphertext),
    };
    let mut bytes = serde_json::to_vec_pretty(&file)
        .map_err(|e| KeystoreError::Corrupt(format!("cannot encode the keystore: {e}")))?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Decrypts a parsed keystore; for version 1, checks that the secret matches the stored public
/// key.
fn open(parsed: &Parsed, passphrase: &str) -> Result<Keyring, KeystoreError> {
    let cipher_key = derive_key(passphrase, &parsed.salt, parsed.params)?;
    let cipher = cipher_for(&cipher_key);
    let aad = match &parsed.layout {
        Layout::Masters(masters) => associated_data(masters),
        Layout::Legacy(public_key) => public_key.as_bytes().to_vec(),
    };
    let plaintext = Zeroizing::new(
        cipher
            .decrypt(&XNonce::from(parsed.nonce), Payload { msg: &parsed.ciphertext, aad: &aad })
            .map_err(|_| KeystoreError::WrongPassphrase)?,
    );
    let secrets = plaintext.chunks_exact(MASTER_LEN).map(|chunk| {
        let mut secret = Zeroizing::new([0u8; MASTER_LEN]);
        secret.copy_from_slice(chunk);
        secret
    });
    match &parsed.layout {
        Layout::Masters(infos) => {
            if plaintext.len() != infos.len() * MASTER_LEN {
                return Err(KeystoreError::Corrupt("the decrypted secrets do not match the masters listed".into()));
            }
            let masters = infos.iter().zip(secrets).map(|(info, secret)| Master { info: *info, secret }).collect();
            Ok(Keyring { masters, version: FORMAT_VERSION })
        }
        Layout::Legacy(public_key) => {
            if plaintext.len() != SECRET_KEY_LENGTH {
                return Err(KeystoreError::Corrupt("the decrypted secret is not 32 bytes".into()));
            }
            let secret = secrets.into_iter().next().expect("one 32-byte chunk");
            if SigningKey::from_bytes(&secret).verifying_key() != *public_key {
                return Err(KeystoreError::Corrupt("the decrypted secret does not match public_key".into()));
            }
            let info = MasterInfo { id: 0, created_at: None, retired_at: None };
            Ok(Keyring { masters: vec![Master { info, secret }], version: LEGACY_FORMAT_VERSION })
        }
    }
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

fn corrupt(what: String) -> KeystoreError {
    KeystoreError::Corrupt(what)
}

/// Checks the algorithm names and the Argon2id parameters shared by both versions.
fn check_common(kdf: &str, cipher: &str, params: KdfParams) -> Result<(), KeystoreError> {
    if kdf != KDF {
        return Err(corrupt(format!("unsupported kdf '{kdf}'")));
    }
    if cipher != CIPHER {
        return Err(corrupt(format!("unsupported cipher '{cipher}'")));
    }
    let in_range = (1..=MAX_P_COST).contains(&params.p_cost)
        && (1..=MAX_T_COST).contains(&params.t_cost)
        && (params.p_cost.saturating_mul(8)..=MAX_M_COST_KIB).contains(&params.m_cost_kib);
    if !in_range {
        return Err(corrupt(format!(
            "Argon2id parameters out of range (m_cost_kib {}, t_cost {}, p_cost {})",
            params.m_cost_kib, params.t_cost, params.p_cost
        )));
    }
    Ok(())
}

fn parse(bytes: &[u8]) -> Result<Parsed, KeystoreError> {
    let version: VersionOnly =
        serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a keystore file: {e}")))?;
    match version.version {
        FORMAT_VERSION => parse_v2(bytes),
        LEGACY_FORMAT_VERSION => parse_v1(bytes),
        other => Err(corrupt(format!(
            "version {other} is not supported (expected {FORMAT_VERSION} or {LEGACY_FORMAT_VERSION})"
        ))),
    }
}

fn parse_v2(bytes: &[u8]) -> Result<Parsed, KeystoreError> {
    let file: KeystoreFile = serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a keystore file: {e}")))?;
    let params = KdfParams { m_cost_kib: file.m_cost_kib, t_cost: file.t_cost, p_cost: file.p_cost };
    check_common(&file.kdf, &file.cipher, params)?;
    let masters = file.masters;
    if masters.is_empty() || masters.len() > MAX_MASTERS {
        return Err(corrupt(format!("{} masters listed (expected 1 to {MAX_MASTERS})", masters.len())));
    }
    if !masters.windows(2).all(|pair| pair[0].id < pair[1].id) {
        return Err(corrupt("master ids do not increase".into()));
    }
    let (current, retired) = masters.split_last().expect("not empty");
    if current.retired_at.is_some() || retired.iter().any(|m| m.retired_at.is_none()) {
        return Err(corrupt("exactly the last master must be current (retired_at null)".into()));
    }
    let salt = fixed_hex::<SALT_LEN>("salt", &file.salt)?;
    let nonce = fixed_hex::<NONCE_LEN>("nonce", &file.nonce)?;
    let ciphertext = hex::decode(&file.ciphertext).map_err(|_| corrupt("ciphertext is not hex".into()))?;
    let expected = masters.len() * MASTER_LEN + TAG_LEN;
    if ciphertext.len() != expected {
        return Err(corrupt(format!("ciphertext is {} bytes, expected {expected}", ciphertext.len())));
    }
    Ok(Parsed { params, salt, nonce, ciphertext, layout: Layout::Masters(masters) })
}

fn parse_v1(bytes: &[u8]) -> Result<Parsed, KeystoreError> {
    let file: LegacyFile = serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a keystore file: {e}")))?;
    let params = KdfParams { m_cost_kib: file.m_cost_kib, t_cost: file.t_cost, p_cost: file.p_cost };
    check_common(&file.kdf, &file.cipher, params)?;
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
    Ok(Parsed { params, salt, nonce, ciphertext, layout: Layout::Legacy(public_key) })
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

    fn master(id: u32, secret: [u8; 32], retired_at: Option<u64>) -> Master {
        Master {
            info: MasterInfo { id, created_at: Some(1_000 + u64::from(id)), retired_at },
            secret: Zeroizing::new(secret),
        }
    }

    /// A version-2 keystore with one master, written with cheap parameters through the same
    /// sealing and persisting code.
    fn write_cheap(path: &Path, passphrase: &str, secret: [u8; 32], mode: Persist) {
        let bytes = seal(passphrase, &[master(0, secret, None)], CHEAP).unwrap();
        persist(path, &bytes, mode).unwrap();
    }

    /// A version-1 keystore exactly as the gateway wrote them before master secrets: the
    /// Ed25519 seed encrypted with its public key as associated data.
    fn write_v1(path: &Path, passphrase: &str, seed: [u8; 32]) {
        let key = SigningKey::from_bytes(&seed);
        let (salt, nonce) = ([4u8; SALT_LEN], [5u8; NONCE_LEN]);
        let cipher = cipher_for(&derive_key(passphrase, &salt, CHEAP).unwrap());
        let public_key = key.verifying_key().to_bytes();
        let ciphertext = cipher.encrypt(&XNonce::from(nonce), Payload { msg: &seed, aad: &public_key }).unwrap();
        let file = LegacyFile {
            version: 1,
            kdf: KDF.into(),
            m_cost_kib: CHEAP.m_cost_kib,
            t_cost: CHEAP.t_cost,
            p_cost: CHEAP.p_cost,
            salt: hex::encode(salt),
            cipher: CIPHER.into(),
            nonce: hex::encode(nonce),
            ciphertext: hex::encode(ciphertext),
            public_key: hex::encode(public_key),
        };
        fs::write(path, serde_json::to_vec_pretty(&file).unwrap()).unwrap();
    }

    fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
        let mut json: serde_json::Value = serde_json::from_slice(&fs::read(path).unwrap()).unwrap();
        edit(&mut json);
        fs::write(path, serde_json::to_vec(&json).unwrap()).unwrap();
    }

    fn secrets(keyring: &Keyring) -> Vec<[u8; 32]> {
        keyring.masters().iter().map(|m| *m.secret()).collect()
    }

    #[test]
    fn init_then_unlock_round_trips_and_a_wrong_passphrase_is_refused() {
        let dir = TempDir::new();
        let path = dir.path();
        let info = init(&path, "correct horse").unwrap();
        assert_eq!((info.id, info.retired_at), (0, None));
        assert!(info.created_at.is_some());
        assert_eq!(masters(&path).unwrap(), vec![info]);
        let keyring = unlock(&path, "correct horse").unwrap();
        assert_eq!(keyring.version(), FORMAT_VERSION);
        assert_eq!(keyring.masters().len(), 1);
        assert_eq!(keyring.current().info(), info);
        assert_ne!(*keyring.current().secret(), [0u8; 32]);
        assert!(matches!(unlock(&path, "wrong horse"), Err(KeystoreError::WrongPassphrase)));
        // Only the keystore is left in the directory: the temporary file is gone.
        assert_eq!(dir.entries(), vec!["governance.key".to_owned()]);
    }

    #[test]
    fn init_writes_the_documented_format_with_default_parameters() {
        let dir = TempDir::new();
        let path = dir.path();
        let info = init(&path, "pass").unwrap();
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
                "masters",
                "nonce",
                "p_cost",
                "salt",
                "t_cost",
                "version"
            ]
        );
        assert_eq!(json["version"], 2);
        assert_eq!(json["kdf"], "argon2id");
        assert_eq!(json["cipher"], "xchacha20poly1305");
        assert_eq!(json["m_cost_kib"], 19 * 1024);
        assert_eq!(json["t_cost"], 2);
        assert_eq!(json["p_cost"], 1);
        assert_eq!(json["salt"].as_str().unwrap().len(), 2 * 16);
        assert_eq!(json["nonce"].as_str().unwrap().len(), 2 * 24);
        assert_eq!(json["ciphertext"].as_str().unwrap().len(), 2 * (32 + 16));
        assert_eq!(
            json["masters"],
            serde_json::json!([{ "id": 0, "created_at": info.created_at, "retired_at": null }])
        );
    }

    #[test]
    fn the_associated_data_is_the_documented_encoding() {
        let infos = [
            MasterInfo { id: 0, created_at: None, retired_at: Some(7) },
            MasterInfo { id: 1, created_at: Some(7), retired_at: None },
        ];
        let expected = [
            &b"icn-gateway/keystore/v2"[..],
            &[0, 0, 0, 2],
            &[0, 0, 0, 0],
            &[0; 8],
            &[0, 0, 0, 0, 0, 0, 0, 7],
            &[0, 0, 0, 1],
            &[0, 0, 0, 0, 0, 0, 0, 7],
            &[0; 8],
        ]
        .concat();
        assert_eq!(associated_data(&infos), expected);
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
        write_cheap(&path, "pass", [0x42; 32], Persist::CreateNew);
        let text = fs::read_to_string(&path).unwrap();
        assert!(!text.contains(&hex::encode([0x42; 32])));
        assert_eq!(secrets(&unlock(&path, "pass").unwrap()), vec![[0x42; 32]]);
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
        let bytes = seal("pass", &[master(0, [1; 32], None)], CHEAP).unwrap();
        assert!(matches!(persist(&path, &bytes, Persist::CreateNew), Err(KeystoreError::AlreadyExists(_))));
        assert_eq!(fs::read(&path).unwrap(), b"precious");
        assert_eq!(dir.entries(), vec!["governance.key".to_owned()]);
    }

    #[test]
    fn a_missing_file_is_reported_as_missing() {
        let dir = TempDir::new();
        let path = dir.path();
        assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::Missing(p)) if p == path));
        assert!(matches!(masters(&path), Err(KeystoreError::Missing(p)) if p == path));
        assert!(matches!(rotate(&path, "pass"), Err(KeystoreError::Missing(p)) if p == path));
        let message = KeystoreError::Missing(path).to_string();
        assert!(message.contains("gatewayd keystore init"), "{message}");
    }

    #[test]
    fn empty_passphrases_are_refused_before_any_work() {
        let dir = TempDir::new();
        let path = dir.path();
        assert!(matches!(init(&path, ""), Err(KeystoreError::EmptyPassphrase)));
        assert!(dir.entries().is_empty(), "nothing was written");
        write_cheap(&path, "pass", [3; 32], Persist::CreateNew);
        assert!(matches!(unlock(&path, ""), Err(KeystoreError::EmptyPassphrase)));
        let before = fs::read(&path).unwrap();
        assert!(matches!(rotate(&path, ""), Err(KeystoreError::EmptyPassphrase)));
        assert_eq!(fs::read(&path).unwrap(), before);
    }

    #[test]
    fn rotate_keeps_every_retired_master() {
        let dir = TempDir::new();
        let path = dir.path();
        write_cheap(&path, "pass", [5; 32], Persist::CreateNew);
        let first = rotate_at(&path, "pass", 2_000).unwrap();
        assert_eq!(first.masters().len(), 2);
        let second = rotate_at(&path, "pass", 3_000).unwrap();
        let reread = unlock(&path, "pass").unwrap();
        assert_eq!(secrets(&reread), secrets(&second));
        let s = secrets(&reread);
        assert_eq!(s.len(), 3);
        assert_eq!(s[0], [5; 32], "the first master is kept");
        assert_eq!(s[1], secrets(&first)[1], "the second master is kept");
        assert!(s[0] != s[1] && s[1] != s[2] && s[0] != s[2], "each rotation draws a new master");
        let infos: Vec<MasterInfo> = reread.masters().iter().map(Master::info).collect();
        assert_eq!(
            infos,
            vec![
                MasterInfo { id: 0, created_at: Some(1_000), retired_at: Some(2_000) },
                MasterInfo { id: 1, created_at: Some(2_000), retired_at: Some(3_000) },
                MasterInfo { id: 2, created_at: Some(3_000), retired_at: None },
            ]
        );
        assert_eq!(reread.current().info().id, 2);
        assert_eq!(masters(&path).unwrap(), infos, "the clear metadata says the same");
        // The file's parameters are kept; the salt and nonce are fresh.
        let json: serde_json::Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(json["m_cost_kib"], CHEAP.m_cost_kib);
        assert_eq!(json["ciphertext"].as_str().unwrap().len(), 2 * (3 * 32 + 16));
        assert!(matches!(rotate(&path, "wrong"), Err(KeystoreError::WrongPassphrase)));
        assert_eq!(secrets(&unlock(&path, "pass").unwrap()), s, "a refused rotation changes nothing");
        assert_eq!(dir.entries(), vec!["governance.key".to_owned()]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        }
    }

    #[test]
    fn a_version_1_file_opens_as_master_0_and_rotates_to_version_2() {
        let dir = TempDir::new();
        let path = dir.path();
        write_v1(&path, "pass", [9; 32]);
        let keyring = unlock(&path, "pass").unwrap();
        assert_eq!(keyring.version(), LEGACY_FORMAT_VERSION);
        assert_eq!(secrets(&keyring), vec![[9; 32]], "the old secret is the master");
        assert_eq!(keyring.current().info(), MasterInfo { id: 0, created_at: None, retired_at: None });
        assert_eq!(masters(&path).unwrap(), vec![keyring.current().info()]);
        assert!(matches!(unlock(&path, "wrong"), Err(KeystoreError::WrongPassphrase)));
        // Its public key is still checked against the secret.
        edit_json(&path, |j| {
            j["public_key"] = hex::encode(SigningKey::from_bytes(&[8; 32]).verifying_key().as_bytes()).into()
        });
        assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::WrongPassphrase)));
        write_v1(&path, "pass", [9; 32]);
        let rotated = rotate_at(&path, "pass", 5_000).unwrap();
        assert_eq!(rotated.version(), FORMAT_VERSION);
        let reread = unlock(&path, "pass").unwrap();
        assert_eq!(reread.version(), FORMAT_VERSION);
        assert_eq!(secrets(&reread)[0], [9; 32], "the version-1 secret stays, as retired master 0");
        assert_eq!(reread.masters()[0].info(), MasterInfo { id: 0, created_at: None, retired_at: Some(5_000) });
        assert_eq!(reread.current().info(), MasterInfo { id: 1, created_at: Some(5_000), retired_at: None });
    }

    #[test]
    fn tampered_ciphertext_nonce_salt_or_metadata_fail_as_wrong_passphrase() {
        let dir = TempDir::new();
        let path = dir.path();
        let flip = |json: &mut serde_json::Value, field: &str| {
            let mut bytes = hex::decode(json[field].as_str().unwrap()).unwrap();
            bytes[0] ^= 1;
            json[field] = hex::encode(bytes).into();
        };
        let edits: Vec<(&str, Edit)> = vec![
            ("ciphertext", Box::new(|j| flip(j, "ciphertext"))),
            ("nonce", Box::new(|j| flip(j, "nonce"))),
            ("salt", Box::new(|j| flip(j, "salt"))),
            ("masters.id", Box::new(|j| j["masters"][0]["id"] = 7.into())),
            ("masters.created_at", Box::new(|j| j["masters"][0]["created_at"] = 1.into())),
        ];
        for (field, edit) in edits {
            write_cheap(&path, "pass", [7; 32], Persist::Replace);
            edit_json(&path, edit);
            assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::WrongPassphrase)), "{field}");
        }
        // Changing when a master was retired is detected too.
        write_cheap(&path, "pass", [7; 32], Persist::Replace);
        rotate_at(&path, "pass", 2_000).unwrap();
        edit_json(&path, |j| {
            j["masters"][0]["retired_at"] = 1_999.into();
        });
        assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::WrongPassphrase)));
    }

    #[test]
    fn structurally_broken_files_are_corrupt() {
        let dir = TempDir::new();
        let path = dir.path();
        let edits: Vec<(&str, Edit)> = vec![
            ("version", Box::new(|j| j["version"] = 3.into())),
            ("kdf", Box::new(|j| j["kdf"] = "scrypt".into())),
            ("cipher", Box::new(|j| j["cipher"] = "aes-256-gcm".into())),
            ("m_cost_kib", Box::new(|j| j["m_cost_kib"] = u32::MAX.into())),
            ("m_cost_kib low", Box::new(|j| j["m_cost_kib"] = 4.into())),
            ("t_cost", Box::new(|j| j["t_cost"] = 0.into())),
            ("p_cost", Box::new(|j| j["p_cost"] = 1000.into())),
            ("salt", Box::new(|j| j["salt"] = "abcd".into())),
            ("nonce", Box::new(|j| j["nonce"] = "zz".into())),
            ("ciphertext length", Box::new(|j| j["ciphertext"] = hex::encode([0u8; 40]).into())),
            ("no masters", Box::new(|j| j["masters"] = serde_json::json!([]))),
            ("current retired", Box::new(|j| j["masters"][0]["retired_at"] = 5.into())),
            (
                "two current",
                Box::new(|j| {
                    j["masters"] = serde_json::json!([{"id": 0, "created_at": 1, "retired_at": null}, {"id": 1, "created_at": 2, "retired_at": null}]);
                    j["ciphertext"] = hex::encode([0u8; 80]).into();
                }),
            ),
            (
                "ids not increasing",
                Box::new(|j| {
                    j["masters"] = serde_json::json!([{"id": 1, "created_at": 1, "retired_at": 2}, {"id": 1, "created_at": 2, "retired_at": null}]);
                    j["ciphertext"] = hex::encode([0u8; 80]).into();
                }),
            ),
            (
                "v1 shape under version 2",
                Box::new(|j| {
                    j.as_object_mut().unwrap().remove("masters");
                    j["public_key"] = hex::encode([1u8; 32]).into();
                }),
            ),
            (
                "missing field",
                Box::new(|j| {
                    j.as_object_mut().unwrap().remove("nonce");
                }),
            ),
        ];
        for (what, edit) in edits {
            write_cheap(&path, "pass", [9; 32], Persist::Replace);
            edit_json(&path, edit);
            assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::Corrupt(_))), "{what}");
        }
        write_v1(&path, "pass", [9; 32]);
        edit_json(&path, |j| j["public_key"] = "not hex".into());
        assert!(matches!(unlock(&path, "pass"), Err(KeystoreError::Corrupt(_))), "v1 public_key");
        fs::write(&path, b"{not json").unwrap();
        assert!(matches!(masters(&path), Err(KeystoreError::Corrupt(_))));
    }

    #[test]
    fn a_version_1_secret_that_does_not_match_its_public_key_is_corrupt() {
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
        let parsed = Parsed { params: CHEAP, salt, nonce, ciphertext, layout: Layout::Legacy(b) };
        assert!(matches!(open(&parsed, "pass"), Err(KeystoreError::Corrupt(_))));
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let dir = TempDir::new();
        let path = dir.path();
        write_cheap(&path, "pass", [0xab; 32], Persist::CreateNew);
        let text = format!("{:?}", unlock(&path, "pass").unwrap());
        assert!(!text.contains("171") && !text.contains("abab"), "{text}");
    }

    #[test]
    fn messages_tell_the_operator_what_to_do() {
        let path = PathBuf::from("/etc/icn/governance.key");
        let exists = KeystoreError::AlreadyExists(path.clone()).to_string();
        assert!(exists.contains("/etc/icn/governance.key") && exists.contains("keystore rotate"), "{exists}");
        assert!(KeystoreError::WrongPassphrase.to_string().contains("ICN_PASSPHRASE"));
        assert!(KeystoreError::EmptyPassphrase.to_string().contains("ICN_PASSPHRASE"));
        assert!(KeystoreError::Corrupt("x".into()).to_string().contains("restore it from a backup"));
    }
}
