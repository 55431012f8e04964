//! `gatewayd witness`: a C2SP tlog-witness server, so that cooperatives' gateways can witness
//! each other's transparency logs. It serves `POST /add-checkpoint` (c2sp.org/tlog-witness):
//! checks the submitted checkpoint against the log's known keys and the latest checkpoint it
//! cosigned for that log, records the new one durably, and answers its `cosignature/v1`.
//!
//! The checks and their answers are [`gateway_tlog::witness`]'s; this module adds the key file,
//! the state file and HTTP. The guide for operators is [`operators`], at the end of the file.
//!
//! Requests are handled one at a time (a mutex over the whole state): the check against the
//! recorded size, the write of the new state (a temporary file, fsync, rename, fsync of the
//! directory) and the update in memory happen under it, and the cosignature leaves only once the
//! new state is on disk. That critical section runs in a task of its own, so a client that
//! hangs up halfway cannot leave the file and the memory disagreeing.

use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use ed25519_dalek::SigningKey;
use gateway_tlog::hash::{hash_from_base64, hash_to_base64};
use gateway_tlog::note::NoteVerifier as _;
use gateway_tlog::witness::{ADD_CHECKPOINT_PATH, CONFLICT_CONTENT_TYPE};
use gateway_tlog::{
    AddCheckpointRequest, Cosigner, KnownLogs, Signature, Verifier, WitnessError, WitnessState, add_checkpoint,
};
use rand::RngCore as _;
use tokio::sync::Mutex;
use zeroize::Zeroizing;

/// The largest request body accepted (a checkpoint with 63 proof lines and 100 signatures is
/// well under 20 KiB); a larger one is answered 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7380";

/// `gatewayd witness`: serve the tlog-witness protocol.
#[derive(Debug, Clone, clap::Args)]
pub struct WitnessArgs {
    /// The witness's private key: a file holding a 32-byte Ed25519 seed in base64 on one line
    /// (64 hex digits are read too). Created, with a fresh random seed and mode 0600, if missing.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// Where to listen for `POST /add-checkpoint`. Its own setting: the gateway's
    /// `ICN_GATEWAY_LISTEN`, which a host set up for the gateway may have, does not apply.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// The state file: the latest checkpoint cosigned for each log. Created if missing; never
    /// delete or roll it back (the witness would then cosign a rollback).
    #[arg(long, value_name = "FILE")]
    pub state: PathBuf,
    /// A log to witness and a key it signs checkpoints with, `<origin>=<vkey>` (repeatable; give
    /// several keys of one origin during a key rotation).
    #[arg(long = "log", value_name = "ORIGIN=VKEY", required = true)]
    pub logs: Vec<LogKey>,
    /// The witness's name, the key name of its cosignatures (e.g. `witness.coop.example/w1`).
    #[arg(long, value_name = "NAME")]
    pub name: String,
}

/// `gatewayd witness vkey`: print the witness's verifier key.
#[derive(Debug, Clone, clap::Args)]
pub struct WitnessVkeyArgs {
    /// The witness's key file (created, with a fresh random seed and mode 0600, if missing).
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,
    /// The witness's name.
    #[arg(long, value_name = "NAME")]
    pub name: String,
}

/// A log to witness and one of its keys: `<origin>=<vkey>`, split at the first `=` (so an
/// origin cannot hold one), the vkey an Ed25519 note key (`<name>+<key ID>+<base64>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogKey {
    /// The log's origin, the first line of its checkpoints.
    pub origin: String,
    /// A key the log signs its checkpoints with.
    pub verifier: Verifier,
}

impl FromStr for LogKey {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (origin, vkey) = text.split_once('=').ok_or_else(|| format!("{text:?} is not <origin>=<vkey>"))?;
        if origin.is_empty() || origin.chars().any(|c| c < ' ') {
            return Err(format!("{origin:?} is not a log origin (a non-empty line)"));
        }
        let verifier = Verifier::from_vkey(vkey).map_err(|e| format!("the key of {origin}: {e}"))?;
        Ok(Self { origin: origin.to_owned(), verifier })
    }
}

/// Prints nothing: returns the vkey (`<name>+<key ID>+<base64(0x04 ‖ public key)>`) of the
/// witness's cosigning key, creating the key file if it is missing. Logs are configured to
/// trust this witness with it (e.g. a `witness` line of a tlog-policy file).
pub fn vkey(args: &WitnessVkeyArgs) -> anyhow::Result<String> {
    Ok(cosigner(&args.key, &args.name)?.vkey())
}

/// The cosigner named `name` with the seed of the key file at `path` (created if missing).
pub fn cosigner(path: &Path, name: &str) -> anyhow::Result<Cosigner> {
    let seed = load_or_create_key(path)?;
    Cosigner::new(name, SigningKey::from_bytes(&seed)).with_context(|| format!("witness name {name:?}"))
}

/// Reads the 32-byte seed of a key file: base64 (44 characters) or hex (64 digits), one line,
/// surrounding whitespace ignored. A missing file is created with a fresh random seed (from the
/// operating system), exclusively and with mode 0600, and synced with its directory.
pub fn load_or_create_key(path: &Path) -> anyhow::Result<Zeroizing<[u8; 32]>> {
    match std::fs::read_to_string(path).map(Zeroizing::new) {
        Ok(text) => {
            warn_if_readable_by_others(path);
            parse_seed(text.trim()).with_context(|| {
                format!("{}: not a 32-byte seed in base64 (or 64 hex digits) on one line", path.display())
            })
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => create_key(path),
        Err(err) => Err(err).with_context(|| format!("reading the witness key {}", path.display())),
    }
}

fn parse_seed(text: &str) -> Option<Zeroizing<[u8; 32]>> {
    if let Some(seed) = hash_from_base64(text) {
        return Some(Zeroizing::new(seed));
    }
    if text.len() == 64 {
        let mut seed = Zeroizing::new([0u8; 32]);
        hex::decode_to_slice(text, &mut seed[..]).ok()?;
        return Some(seed);
    }
    None
}

/// Creates the key file: the seed is written to a temporary file beside it (mode 0600) and
/// synced, then linked to `path`, which fails if `path` exists; so a crash never leaves a
/// truncated key file, and a key created meanwhile by another process is used, not replaced.
fn create_key(path: &Path) -> anyhow::Result<Zeroizing<[u8; 32]>> {
    let mut seed = Zeroizing::new([0u8; 32]);
    rand::rngs::OsRng.fill_bytes(&mut seed[..]);
    let line = Zeroizing::new(format!("{}\n", hash_to_base64(&seed)));
    let (temporary, mut file) =
        create_temporary(path, 0o600).with_context(|| format!("creating the witness key {}", path.display()))?;
    let written = file.write_all(line.as_bytes()).and_then(|()| file.sync_all());
    drop(file);
    let linked = written.and_then(|()| std::fs::hard_link(&temporary, path));
    let _ = std::fs::remove_file(&temporary);
    match linked {
        Ok(()) => {}
        // Another process created it meanwhile: use its key.
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => return load_or_create_key(path),
        Err(err) => return Err(err).with_context(|| format!("creating the witness key {}", path.display())),
    }
    sync_dir(path).with_context(|| format!("syncing the directory of {}", path.display()))?;
    tracing::info!(path = %path.display(), "created a new witness key");
    Ok(seed)
}

/// A new file beside `path`, `.<name>.<random>.tmp`, created exclusively with `mode` (Unix).
fn create_temporary(path: &Path, mode: u32) -> std::io::Result<(PathBuf, std::fs::File)> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("witness");
    let mut attempt = 0;
    loop {
        let mut suffix = [0u8; 8];
        rand::thread_rng().fill_bytes(&mut suffix);
        let temporary = dir.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(mode);
        }
        #[cfg(not(unix))]
        let _ = mode;
        match options.open(&temporary) {
            Ok(file) => return Ok((temporary, file)),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(err) => return Err(err),
        }
    }
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            path = %path.display(),
            mode = format_args!("{:o}", meta.permissions().mode() & 0o777),
            "the witness key file is accessible to other users: chmod 600 it"
        );
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

/// Syncs the directory holding `path`, so that a file created or renamed in it stays there
/// after a crash.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Reads a state file; a missing file is the empty state (`Ok(None)`).
pub fn load_state(path: &Path) -> anyhow::Result<Option<WitnessState>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(WitnessState::parse(&text).with_context(|| format!("state file {}", path.display()))?)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err).with_context(|| format!("reading the state file {}", path.display())),
    }
}

/// A failed [`write_state`], and whether the new file had already replaced the old one (only
/// the directory's sync failed, so the new state may or may not survive a crash).
#[derive(Debug)]
pub struct WriteStateError {
    /// Whether the rename happened: readers of the file see the new state.
    pub replaced: bool,
    /// What failed.
    pub source: std::io::Error,
}

impl std::fmt::Display for WriteStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "writing the witness state: {}", self.source)
    }
}

impl std::error::Error for WriteStateError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Writes the state file atomically and durably: a new temporary file beside it (created
/// exclusively), written and fsynced, renamed over the file, then the directory fsynced. A
/// reader, or the witness after a crash, sees the old state or the new one, never a mix.
pub fn write_state(path: &Path, state: &WitnessState) -> Result<(), WriteStateError> {
    let failed = |source| WriteStateError { replaced: false, source };
    let (temporary, mut file) = create_temporary(path, 0o644).map_err(failed)?;
    let written = file.write_all(state.to_text().as_bytes()).and_then(|()| file.sync_all());
    drop(file);
    if let Err(err) = written.and_then(|()| std::fs::rename(&temporary, path)) {
        let _ = std::fs::remove_file(&temporary);
        return Err(failed(err));
    }
    sync_dir(path).map_err(|source| WriteStateError { replaced: true, source })
}

/// A witness: its cosigning key, the logs it witnesses, and its state (in memory and in its
/// file).
#[derive(Debug)]
pub struct Witness {
    cosigner: Cosigner,
    logs: KnownLogs,
    state_path: PathBuf,
    state: Mutex<WitnessState>,
}

impl Witness {
    /// A witness with its state from `state_path`; a missing state file is created (empty), so
    /// that an unwritable location fails here rather than at the first request.
    pub fn open(cosigner: Cosigner, logs: KnownLogs, state_path: impl Into<PathBuf>) -> anyhow::Result<Self> {
        let state_path = state_path.into();
        let state = match load_state(&state_path)? {
            Some(state) => state,
            None => {
                let state = WitnessState::new();
                write_state(&state_path, &state).with_context(|| format!("creating {}", state_path.display()))?;
                tracing::info!(path = %state_path.display(), "created an empty witness state file");
                state
            }
        };
        for (origin, log) in state.iter() {
            if !logs.contains(origin) {
                tracing::warn!(origin, size = log.size, "the state file records a log that is not configured");
            }
        }
        Ok(Self { cosigner, logs, state_path, state: Mutex::new(state) })
    }

    /// The witness the command line describes: its key file read (or created), its state file
    /// loaded (or created).
    pub fn from_args(args: &WitnessArgs) -> anyhow::Result<Self> {
        let cosigner = cosigner(&args.key, &args.name)?;
        let mut logs = KnownLogs::new();
        for log in &args.logs {
            if log.verifier.name() != log.origin {
                tracing::warn!(
                    origin = log.origin,
                    key = log.verifier.name(),
                    "the key name of this log's key is not its origin (tlog-checkpoint recommends it is)"
                );
            }
            logs.add(log.origin.clone(), log.verifier.clone());
        }
        Self::open(cosigner, logs, &args.state)
    }

    /// The cosigning key.
    pub fn cosigner(&self) -> &Cosigner {
        &self.cosigner
    }

    /// The logs witnessed.
    pub fn logs(&self) -> &KnownLogs {
        &self.logs
    }

    /// A copy of the state in memory (the file holds the same, or is being replaced by a newer
    /// one).
    pub async fn state(&self) -> WitnessState {
        self.state.lock().await.clone()
    }

    /// Handles one request: checks it, persists the new state, and returns the cosignature.
    /// Requests are serialised; the state is on disk before this returns the cosignature.
    pub async fn submit(&self, request: &AddCheckpointRequest) -> Result<Signature, SubmitError> {
        let mut state = self.state.lock().await;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| SubmitError::Internal("the clock is before 1970".into()))?
            .as_secs();
        let (update, cosignature) =
            add_checkpoint(&state, &self.logs, &self.cosigner, request, now).map_err(SubmitError::Refused)?;
        let next = state.with(&update);
        let path = self.state_path.clone();
        let to_write = next.clone();
        let written = tokio::task::spawn_blocking(move || write_state(&path, &to_write))
            .await
            .map_err(|e| SubmitError::Internal(format!("the state writer failed: {e}")))?;
        if let Err(err) = written {
            if err.replaced {
                // The file already says `next`; so must the memory, or a later request could be
                // checked against an older state than the one a restart would load.
                *state = next;
            }
            return Err(SubmitError::Internal(err.to_string()));
        }
        *state = next;
        Ok(cosignature)
    }
}

/// Why [`Witness::submit`] gave no cosignature.
#[derive(Debug)]
pub enum SubmitError {
    /// The request was refused; the error gives the status.
    Refused(WitnessError),
    /// The witness failed (its clock, its disk): 500.
    Internal(String),
}

impl std::fmt::Display for SubmitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(err) => err.fmt(f),
            Self::Internal(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for SubmitError {}

/// The witness's routes: `POST /add-checkpoint` (the submission prefix is the root), request
/// bodies capped at [`MAX_BODY_BYTES`].
pub fn router(witness: Arc<Witness>) -> Router {
    Router::new()
        .route(ADD_CHECKPOINT_PATH, post(add_checkpoint_handler))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(witness)
}

async fn add_checkpoint_handler(State(witness): State<Arc<Witness>>, body: Bytes) -> Response {
    let request = match AddCheckpointRequest::parse(&body) {
        Ok(request) => request,
        Err(err) => {
            tracing::debug!(error = %err, "refused an add-checkpoint request");
            return refusal(&err);
        }
    };
    // The check, the write and the update run in a task of their own: if the client hangs up,
    // this handler is dropped but the task finishes, so memory and file never disagree.
    let task = {
        let (witness, request) = (witness.clone(), request.clone());
        tokio::spawn(async move { witness.submit(&request).await })
    };
    let checkpoint = request.checkpoint();
    match task.await {
        Ok(Ok(cosignature)) => {
            tracing::info!(
                origin = checkpoint.origin(),
                old = request.old_size(),
                size = checkpoint.size(),
                "cosigned a checkpoint"
            );
            text_response(StatusCode::OK, "text/plain; charset=utf-8", cosignature.line())
        }
        Ok(Err(SubmitError::Refused(err))) => {
            // A log whose checkpoint does not extend the one cosigned before may be
            // misbehaving: keep the request, it may be evidence.
            if matches!(err, WitnessError::BadProof(_) | WitnessError::RootMismatch { .. }) {
                tracing::warn!(
                    origin = checkpoint.origin(),
                    error = %err,
                    request = %String::from_utf8_lossy(&body),
                    "refused an inconsistent checkpoint (possible log misbehaviour)"
                );
            } else {
                tracing::info!(origin = checkpoint.origin(), error = %err, "refused an add-checkpoint request");
            }
            refusal(&err)
        }
        Ok(Err(SubmitError::Internal(message))) => {
            tracing::error!(origin = checkpoint.origin(), error = message, "add-checkpoint failed");
            text_response(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "internal error\n".into())
        }
        Err(err) => {
            tracing::error!(error = %err, "add-checkpoint task failed");
            text_response(StatusCode::INTERNAL_SERVER_ERROR, "text/plain; charset=utf-8", "internal error\n".into())
        }
    }
}

fn refusal(err: &WitnessError) -> Response {
    let status = StatusCode::from_u16(err.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let content_type = if err.conflict_size().is_some() { CONFLICT_CONTENT_TYPE } else { "text/plain; charset=utf-8" };
    text_response(status, content_type, err.body())
}

fn text_response(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))], body).into_response()
}

/// Serves the witness on `args.listen` until SIGINT or SIGTERM.
pub async fn serve(args: WitnessArgs) -> anyhow::Result<()> {
    serve_until(args, crate::shutdown_signal()).await
}

/// Serves the witness on `args.listen` until `shutdown` resolves, then finishes the requests
/// in flight.
pub async fn serve_until(args: WitnessArgs, shutdown: impl Future<Output = ()> + Send + 'static) -> anyhow::Result<()> {
    let witness = Arc::new(Witness::from_args(&args)?);
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("the listener's address")?;
    // The same first line as `gatewayd`'s, for scripts that start it on port 0.
    println!("listening on http://{addr}");
    tracing::info!(
        %addr,
        vkey = witness.cosigner().vkey(),
        logs = ?witness.logs().origins().collect::<Vec<_>>(),
        "witness listening (POST /add-checkpoint)"
    );
    axum::serve(listener, router(witness)).with_graceful_shutdown(shutdown).await.context("serving the witness")?;
    tracing::info!("witness stopped");
    Ok(())
}

/// # Operating a witness
///
/// A witness vouches that it saw a log's checkpoint and that the checkpoint extends every
/// checkpoint of that log it vouched for before. A client holding a proof of inclusion and
/// cosignatures from enough independent witnesses (a tlog-policy quorum) then knows the log
/// did not show it a private fork. Cooperatives witness each other's logs: each runs
/// `gatewayd witness` for the logs of the others.
///
/// ## Setting up
///
/// 1. Choose a name, e.g. `witness.coop.example/w1`, and print the verifier key (the key file
///    is created on first use, a random seed, mode 0600):
///
///    ```text
///    gatewayd witness vkey --key /var/lib/gatewayd/witness.key --name witness.coop.example/w1
///    witness.coop.example/w1+1a2b3c4d+BH...
///    ```
///
///    Give this line to the logs you witness: they list it in their policy
///    (`witness <name> <vkey> [<url>]`). Back up the key file; losing it means a new key
///    that every policy must learn. Never run two witnesses with one key.
///
/// 2. Get each log's origin and vkey (its operator publishes them) and start the witness:
///
///    ```text
///    gatewayd witness --key /var/lib/gatewayd/witness.key --name witness.coop.example/w1 \
///        --state /var/lib/gatewayd/witness.state --listen 0.0.0.0:7380 \
///        --log 'log.coop-a.example=log.coop-a.example+5e1f...+AQ...' \
///        --log 'log.coop-b.example=log.coop-b.example+77aa...+AQ...'
///    ```
///
///    `--log` is repeatable; give two keys of one origin while a log rotates its key. Put it
///    behind the TLS proxy that fronts the gateway; the submission prefix is the root, so the
///    URL to give the logs is e.g. `https://witness.coop.example/`.
///
/// ## The protocol (c2sp.org/tlog-witness)
///
/// A log calls `POST /add-checkpoint` with a body of the form
///
/// ```text
/// old 20852014
/// <base64 hash>           (the consistency proof from size 20852014: up to 63 lines)
/// <base64 hash>
///
/// log.coop-a.example
/// 20852163
/// CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=
///
/// — log.coop-a.example Az3grlgtzPICa5OS8npVmf1Myq...
/// ```
///
/// `old` is the size of the checkpoint this witness last cosigned for the log (0 the first
/// time). The answers:
///
/// - `200`, `text/plain`: one line `— <witness name> <base64>`, the cosignature, which the log
///   appends to its checkpoint's signatures. The state file was updated before the answer.
/// - `400`: not a request of that form, or `old` above the checkpoint's size.
/// - `403`: no signature by a configured key of the origin verifies (or one by a configured
///   key is invalid): a forgery, or a log whose key you have not configured.
/// - `404`: the origin is not configured.
/// - `409`, `Content-Type: text/x.tlog.size`: `old` is not the size this witness last cosigned;
///   the body is that size (e.g. `20852014`). The log retries from it; a log that never talked
///   to this witness sends `old 0` first to learn it. Also answered when the checkpoint has
///   the recorded size but another root hash: the log forked.
/// - `413`: a body over 64 KiB.
/// - `422`: the consistency proof does not verify: the checkpoint does not extend the one
///   cosigned before. Either the log is broken or it is misbehaving; the request is logged at
///   `warn` (with its body) as possible evidence.
/// - `500`: the state could not be written (disk full, permissions) or the clock is wrong; no
///   cosignature was given.
///
/// ## The state file
///
/// `--state` holds, per log, the size and root hash of the latest checkpoint cosigned:
///
/// ```text
/// tlog-witness state v1
/// 20852163 CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I= log.coop-a.example
/// ```
///
/// It is replaced atomically (temporary file, fsync, rename, fsync of the directory) before
/// each cosignature is returned. It is what keeps the witness honest: restoring an old copy,
/// deleting it or sharing it between two running witnesses would let the witness cosign a
/// rollback or a fork. Run one witness process per state file. Removing a `--log` keeps its
/// line; adding it back resumes from it.
pub mod operators {}
