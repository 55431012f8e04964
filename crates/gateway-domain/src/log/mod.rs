//! The coop's log (INTERFACE.md §12): one append-only Merkle log per coop whose entries are its
//! events, signed checkpoints, and the proofs a member, an auditor or another coop checks
//! without trusting the operator.
//!
//! Events are numbered and committed by the units of work that make them (the outbox); the
//! [`Log`]'s checkpointer then, in a unit of work of its own per coop, copies the new events into
//! the log as entries, hashes them into the tiles (C2SP tlog-tiles: only tiles are stored, 32
//! bytes per entry and a 256th of that per level above), checks that the stored tiles still give
//! the root of the last signed checkpoint, and signs a checkpoint of the new tree with the
//! coop's receipt key. The log head is locked for that unit of work (PostgreSQL: `FOR UPDATE
//! SKIP LOCKED`), so one replica at a time extends a coop's log and no two checkpoints of one
//! origin can disagree.

mod entry;
mod tiles;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use gateway_core::{Clock, CoopId, Error};
use gateway_tlog::note::{Note, SIG_TYPE_ED25519, Signature, VerifierKey};
use gateway_tlog::proof::TlogProof;
use gateway_tlog::tile::{TilePath, encode_entry_bundle, tile_at};
use gateway_tlog::{Checkpoint, consistency_proof, inclusion_proof, leaf_hash, tree_root};

pub use entry::{
    EventObject, FieldDigest, LOG_OPENED, MAX_ENTRY_BYTES, OpenedEntry, Snapshot, entry_text, opened_entry,
};
pub use tiles::TileCache;
use tiles::{Source, Tiles, integrity};

use crate::governance::ReceiptKeys;
use crate::ports::{EventFeed, GovReads, LogHead, LogReads, Transactor, Tx, transaction};

/// Most events one checkpointing unit of work copies into a coop's log.
const EVENTS_PER_ROUND: u32 = 4_096;

/// How long a proof request with `wait=true` waits for a checkpoint covering its entry.
pub const PROOF_WAIT: Duration = Duration::from_secs(5);

/// How long after a witness did not answer its checkpoint is sent to it again, when no newer
/// checkpoint of the coop went to it meanwhile (a quiet coop's latest checkpoint still gets its
/// cosignatures once the witness is back).
pub const WITNESS_RETRY: Duration = Duration::from_secs(5);

/// How many bytes of hash tiles the log's reads keep in memory ([`TileCache`]): 4,096 full
/// tiles, the level-0 tiles of a million entries and every tile above them.
pub const TILE_CACHE_BYTES: usize = 32 << 20;

/// How long a proof may be answered from the coop's log head as a proof read it before, rather
/// than from the store ([`LogConfig::head_keep`]'s default).
pub const HEAD_KEEP: Duration = Duration::from_millis(100);

/// The shortest time between two rounds of one coop's log (see [`Log::run`]): a checkpoint
/// still covers a commit within 1 s (INTERFACE.md §12).
pub const ROUND_INTERVAL: Duration = Duration::from_millis(250);

/// The log's configuration.
#[derive(Debug, Clone)]
pub struct LogConfig {
    /// The gateway's log origin prefix (`gw.example.coop`): a coop's origin is
    /// `<prefix>/coops/<coop_id>`.
    pub origin: String,
    /// How often the checkpointer looks for coops whose log is behind, whatever the signals.
    pub sweep: Duration,
    /// The witnesses each new checkpoint is sent to (C2SP tlog-witness).
    pub witnesses: Vec<WitnessConfig>,
    /// How many of them must have cosigned a checkpoint before a proof waiting for one
    /// (`wait=true`) is given.
    pub quorum: usize,
    /// How long a proof may be answered against the checkpoint of a log head read that long ago
    /// (kept in memory), when that checkpoint covers its entry (and has the cosignatures `wait`
    /// asks for); else the head is read from the store. [`HEAD_KEEP`] by default.
    pub head_keep: Duration,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            origin: "localhost".into(),
            sweep: Duration::from_secs(1),
            witnesses: Vec::new(),
            quorum: 0,
            head_keep: HEAD_KEEP,
        }
    }
}

/// A witness of the coops' logs: `--witness <name>=<vkey>@<url>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessConfig {
    /// Its cosigner name (the vkey's).
    pub name: String,
    /// Its cosignature/v1 verifier key.
    pub vkey: String,
    /// Its base URL; checkpoints go to `<url>/add-checkpoint`.
    pub url: String,
}

impl std::str::FromStr for WitnessConfig {
    type Err = String;

    /// `<name>=<vkey>@<url>`: the name up to the first `=`, the URL after the last `@`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (name, rest) = text.split_once('=').ok_or_else(|| format!("'{text}' is not <name>=<vkey>@<url>"))?;
        let (vkey, url) = rest.rsplit_once('@').ok_or_else(|| format!("'{text}' is not <name>=<vkey>@<url>"))?;
        let verifier = gateway_tlog::cosignature::CosignatureVerifier::from_vkey(vkey)
            .map_err(|e| format!("witness {name}: not a cosignature/v1 vkey: {e}"))?;
        if verifier.name() != name {
            return Err(format!("witness {name}: its vkey names '{}'", verifier.name()));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("witness {name}: '{url}' is not an http(s) URL"));
        }
        Ok(Self { name: name.to_owned(), vkey: vkey.to_owned(), url: url.trim_end_matches('/').to_owned() })
    }
}

/// What a witness answered an `add-checkpoint`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WitnessAnswer {
    /// 200: the body (its cosignature lines).
    Cosigned(Vec<u8>),
    /// 409 `text/x.tlog.size`: the size it last cosigned for this log.
    Conflict(u64),
    /// 422: the consistency proof from the size it last cosigned does not verify against the
    /// root it cosigned then (the body, as a message).
    Inconsistent(String),
}

/// How checkpoints reach the witnesses (HTTP, in the server).
#[async_trait::async_trait]
pub trait WitnessTransport: Send + Sync + std::fmt::Debug {
    /// `POST <url>/add-checkpoint` with `body`; any answer but 200 and 409 is an error.
    async fn add_checkpoint(&self, url: &str, body: String) -> Result<WitnessAnswer, Error>;
}

/// The coop's log: the checkpointer and the reads behind the log routes.
#[derive(Debug, Clone)]
pub struct Log {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn LogReads>,
    gov: Arc<dyn GovReads>,
    keys: Arc<dyn ReceiptKeys>,
    clock: Arc<dyn Clock>,
    config: LogConfig,
    transport: Option<Arc<dyn WitnessTransport>>,
    /// The tree size each witness last cosigned, by coop and witness name.
    witnessed: Arc<std::sync::Mutex<std::collections::HashMap<(CoopId, String), u64>>>,
    /// Coops whose checkpoint is with the witnesses now.
    witnessing: Arc<std::sync::Mutex<BTreeSet<CoopId>>>,
    /// Coops whose latest checkpoint a witness did not answer (unreachable, or an error status):
    /// the size, and when to send it again.
    unanswered: Arc<std::sync::Mutex<std::collections::BTreeMap<CoopId, (u64, std::time::Instant)>>>,
    /// The hash tiles proofs and tile reads loaded.
    tile_cache: Arc<TileCache>,
    /// Coops an entry bundle read found changed: their checkpointing stays stopped until the
    /// process restarts (after the operator has restored the log and `fsck` finds it sound).
    tampered: Arc<std::sync::Mutex<BTreeSet<CoopId>>>,
    /// The log heads proofs read last, by coop, and when ([`LogConfig::head_keep`]).
    heads: Arc<std::sync::Mutex<std::collections::HashMap<CoopId, Arc<ProofHead>>>>,
}

/// A log head as a proof reads it: its checkpoint parsed once, and how many of the configured
/// witnesses have cosigned it.
#[derive(Debug)]
struct ProofHead {
    head: LogHead,
    /// The latest signed checkpoint, parsed (or why it does not parse).
    note: Option<Result<Note, String>>,
    /// The configured witnesses whose cosignature it carries, counted when a proof that waits
    /// for the quorum first asks.
    witnessed: std::sync::OnceLock<usize>,
    /// When it was read from the store.
    read_at: std::time::Instant,
}

/// How many kept log heads ([`Log::proof_head`]) make the next store read drop those past
/// [`LogConfig::head_keep`].
const KEPT_HEADS: usize = 1_024;

/// What one checkpointing round did for a coop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// Nothing new (or another replica holds the log now).
    Idle,
    /// Entries were added and a checkpoint of `size` signed.
    Signed {
        /// The new tree size.
        size: u64,
    },
    /// Entries were added, but no checkpoint could be signed (no receipt key).
    Unsigned {
        /// The new tree size.
        size: u64,
        /// Why.
        reason: &'static str,
    },
}

impl Log {
    /// The log over a store.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn LogReads>,
        gov: Arc<dyn GovReads>,
        keys: Arc<dyn ReceiptKeys>,
        clock: Arc<dyn Clock>,
        config: LogConfig,
    ) -> Self {
        Self {
            transactor,
            reads,
            gov,
            keys,
            clock,
            config,
            transport: None,
            witnessed: Arc::default(),
            witnessing: Arc::default(),
            unanswered: Arc::default(),
            tile_cache: Arc::new(TileCache::new(TILE_CACHE_BYTES)),
            tampered: Arc::default(),
            heads: Arc::default(),
        }
    }

    /// The log, sending each new checkpoint to the configured witnesses through `transport`.
    pub fn with_witnesses(mut self, transport: Arc<dyn WitnessTransport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The store's log reads (the treasurer's export reads the entries through them).
    pub fn reads(&self) -> Arc<dyn LogReads> {
        self.reads.clone()
    }

    /// The origin (and signed-note key name) a coop's new log gets: `<--log-origin>/coops/<id>`.
    pub fn origin(&self, coop: &CoopId) -> String {
        origin_of(&self.config.origin, coop)
    }

    /// The origin of a coop's log: the one its checkpoints are signed under (a log keeps the
    /// origin of its first checkpoint when `--log-origin` changes), else [`Log::origin`].
    pub async fn kept_origin(&self, coop: &CoopId) -> Result<String, Error> {
        match self.reads.log_head(coop).await?.and_then(|head| head.checkpoint) {
            Some(note) => Ok(signed_checkpoint(coop, &note)?.origin().to_owned()),
            None => Ok(self.origin(coop)),
        }
    }

    /// Copies a coop's new events into its log and signs a checkpoint of the result (opening
    /// the log with `LogOpened` if the coop has none). An integrity failure (stored tiles that no
    /// longer give the last signed root) signs nothing and is returned as an error whose message
    /// starts with `log integrity`.
    pub async fn checkpoint(&self, coop: &CoopId) -> Result<Round, Error> {
        let keys = self.keys.clone();
        let origin = self.origin(coop);
        let now = self.clock.now_unix_secs();
        let label = coop.to_string();
        let tampered = self.tampered.lock().is_ok_and(|tampered| tampered.contains(coop));
        let result = if tampered {
            Err(integrity(coop, "a stored entry no longer hashes to its leaf (found when its bundle was read)"))
        } else {
            let coop = coop.clone();
            transaction(self.transactor.as_ref(), move |tx| {
                Box::pin(async move { round(tx, &coop, &origin, keys.as_ref(), now).await })
            })
            .await
        };
        // Every checked coop has its series from its first round, at 0 while its log is sound.
        let failures = metrics::counter!("icn_log_integrity_failures_total", "coop" => label.clone());
        if let Err(Error::Internal(message)) = &result
            && message.starts_with(tiles::INTEGRITY)
        {
            // Counted every round; said once per failing streak, by `run` (or the caller).
            failures.increment(1);
        }
        if let Ok(Round::Signed { size }) = &result
            && let Ok(coop) = CoopId::parse(&label)
        {
            self.send_to_witnesses(coop, *size);
        }
        if result.is_ok() {
            failures.increment(0);
        }
        result
    }

    /// Sends the coop's checkpoint of `size` to the witnesses in a task of its own, one at a time
    /// per coop: a slow witness delays no other coop's checkpoint (a round while one is in flight
    /// leaves its checkpoint to the next, or to [`WITNESS_RETRY`]).
    fn send_to_witnesses(&self, coop: CoopId, size: u64) {
        let Some(transport) = self.transport.clone().filter(|_| !self.config.witnesses.is_empty()) else { return };
        let first = self.witnessing.lock().map(|mut busy| busy.insert(coop.clone())).unwrap_or(false);
        if first {
            let log = self.clone();
            tokio::spawn(async move {
                let unanswered = log.witness(transport.as_ref(), &coop, size).await;
                if let Ok(mut retries) = log.unanswered.lock() {
                    if unanswered {
                        retries.insert(coop.clone(), (size, std::time::Instant::now() + WITNESS_RETRY));
                    } else if retries.get(&coop).is_some_and(|(pending, _)| *pending <= size) {
                        retries.remove(&coop);
                    }
                }
                if let Ok(mut busy) = log.witnessing.lock() {
                    busy.remove(&coop);
                }
            });
        }
    }

    /// Schedules for the witnesses, at once, every coop's published checkpoint that lacks the
    /// cosignature of a configured witness: what a witness has not cosigned is read from the
    /// stored checkpoints, so a restart (or another replica's round) forgets no checkpoint a
    /// witness did not answer.
    pub async fn resume_witnessing(&self) -> Result<usize, Error> {
        if self.transport.is_none() || self.config.witnesses.is_empty() {
            return Ok(0);
        }
        let now = std::time::Instant::now();
        let mut scheduled = 0;
        for coop in self.reads.logged_coops().await? {
            let Some(head) = self.reads.log_head(&coop).await? else { continue };
            let Some(checkpoint) = head.checkpoint else { continue };
            if self.witnessed_by(&checkpoint) < self.config.witnesses.len()
                && let Ok(mut retries) = self.unanswered.lock()
            {
                retries.entry(coop).or_insert((head.signed_size, now));
                scheduled += 1;
            }
        }
        Ok(scheduled)
    }

    /// Sends again the checkpoints a witness did not answer, once [`WITNESS_RETRY`] has passed.
    fn retry_witnesses(&self) {
        let now = std::time::Instant::now();
        let due: Vec<(CoopId, u64)> = match self.unanswered.lock() {
            Ok(retries) => {
                retries.iter().filter(|(_, (_, at))| *at <= now).map(|(c, (s, _))| (c.clone(), *s)).collect()
            }
            Err(_) => return,
        };
        for (coop, size) in due {
            self.send_to_witnesses(coop, size);
        }
    }

    /// Sends the checkpoint of `size` to every witness, with the consistency proof from the
    /// size each last cosigned, and adds the cosignatures that verify to the published note;
    /// `true` when a witness did not answer (so that it is sent again).
    async fn witness(&self, transport: &dyn WitnessTransport, coop: &CoopId, size: u64) -> bool {
        let Ok(Some(head)) = self.reads.log_head(coop).await else { return true };
        // A newer checkpoint went (or goes) to the witnesses: this one no longer needs them.
        let Some(note_text) = head.checkpoint.filter(|_| head.signed_size == size) else { return false };
        let Ok(mut note) = Note::parse(note_text.as_bytes()) else { return false };
        let mut added = 0;
        let mut unanswered = false;
        for witness in &self.config.witnesses {
            let key = (coop.clone(), witness.name.clone());
            let mut old = self.witnessed.lock().map(|w| w.get(&key).copied().unwrap_or(0)).unwrap_or(0);
            for attempt in 0..2 {
                let proof = if old == 0 || old > size {
                    Vec::new()
                } else {
                    match self.consistency_hashes(coop, old, size).await {
                        Ok(proof) => proof,
                        Err(err) => {
                            tracing::warn!(coop = %coop, witness = %witness.name, "no consistency proof from {old}: {err}");
                            unanswered = true;
                            break;
                        }
                    }
                };
                let body = gateway_tlog::witness::add_checkpoint_request(old, &proof, &note_text);
                match transport.add_checkpoint(&witness.url, body).await {
                    // A witness that cosigned a larger tree than this log has signed, or that
                    // refuses the very size it asked for (its root there is another), or the
                    // consistency proof from it: it saw another history of this log. Evidence of
                    // a fork or a rollback, never retried away.
                    Ok(WitnessAnswer::Conflict(theirs)) if theirs > size || (theirs == old && attempt > 0) => {
                        self.witness_disagrees(
                            coop,
                            &witness.name,
                            &format!("it cosigned size {theirs} of another history (this log signed {size})"),
                        );
                        break;
                    }
                    Ok(WitnessAnswer::Inconsistent(why)) => {
                        self.witness_disagrees(
                            coop,
                            &witness.name,
                            &format!("the log's consistency proof from size {old} to {size} does not verify: {why}"),
                        );
                        break;
                    }
                    Ok(WitnessAnswer::Conflict(theirs)) => old = theirs,
                    Ok(WitnessAnswer::Cosigned(body)) => {
                        match cosignatures(&witness.vkey, note.text(), &body) {
                            Ok(signatures) => {
                                for signature in signatures {
                                    if note.add_signature(signature).is_ok() {
                                        added += 1;
                                    }
                                }
                                if let Ok(mut w) = self.witnessed.lock() {
                                    w.insert(key.clone(), size);
                                }
                            }
                            Err(err) => {
                                tracing::warn!(coop = %coop, witness = %witness.name, "refused its answer: {err}")
                            }
                        }
                        break;
                    }
                    Err(err) => {
                        tracing::warn!(coop = %coop, witness = %witness.name, "did not cosign checkpoint {size}: {err}");
                        unanswered = true;
                        break;
                    }
                }
            }
        }
        if added == 0 {
            return unanswered;
        }
        let cosigned = note.to_string();
        let coop = coop.clone();
        let stored = transaction(self.transactor.as_ref(), move |tx| {
            // Only onto the checkpoint it cosigned: a newer one may have been signed since.
            Box::pin(async move { tx.replace_checkpoint(&coop, &note_text, &cosigned).await.map(|_| ()) })
        })
        .await;
        if let Err(err) = stored {
            tracing::warn!("storing a checkpoint's cosignatures: {err}");
            return true;
        }
        unanswered
    }

    /// A witness holds evidence that this log's history is not the one it cosigned: counted as
    /// an integrity failure of the coop's log (`icn_log_integrity_failures_total`, the
    /// `ICNLogIntegrity` alert) and logged as an error.
    fn witness_disagrees(&self, coop: &CoopId, witness: &str, why: &str) {
        metrics::counter!("icn_log_integrity_failures_total", "coop" => coop.to_string()).increment(1);
        tracing::error!(coop = %coop, witness = %witness, "log integrity: the witness disagrees with this log: {why}");
    }

    /// How many configured witnesses cosigned the stored checkpoint note `text`.
    fn witnessed_by(&self, text: &str) -> usize {
        let Ok(note) = Note::parse(text.as_bytes()) else { return 0 };
        self.config
            .witnesses
            .iter()
            .filter(|w| {
                gateway_tlog::cosignature::CosignatureVerifier::from_vkey(&w.vkey)
                    .is_ok_and(|verifier| note.signatures().iter().any(|s| cosigned_by(&verifier, note.text(), s)))
            })
            .count()
    }

    async fn consistency_hashes(&self, coop: &CoopId, from: u64, to: u64) -> Result<Vec<gateway_tlog::Hash>, Error> {
        let mut tiles = Tiles::default();
        tiles
            .with(coop, &mut Source::<dyn Tx>::Reads(self.reads.as_ref(), Some(&self.tile_cache)), to, |reader| {
                consistency_proof(from, to, reader)
            })
            .await
    }

    /// Runs the checkpointer until the process ends: each committed event's coop is
    /// checkpointed within a few hundred milliseconds, and every `sweep` the store is asked which
    /// coops are behind (events announced by another replica, a missed signal, a restart).
    ///
    /// A coop has at most one round every [`ROUND_INTERVAL`]: its events of that time share one
    /// round (one transaction that copies them, hashes their tiles and signs), however many coops
    /// are busy. Without it, a round per coop per batch of commits cost more than the payments
    /// themselves once many coops paid at once (docs/PERFORMANCE.md, "`postgres`").
    pub async fn run(self, feed: Arc<dyn EventFeed>) {
        let mut signals = feed.subscribe();
        if let Err(err) = self.resume_witnessing().await {
            tracing::warn!("the log could not list the checkpoints its witnesses have not cosigned: {err}");
        }
        let mut sweep = tokio::time::interval(self.config.sweep);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing: BTreeSet<CoopId> = BTreeSet::new();
        // When each coop's last round started, and the coops whose next round waits for it.
        let mut last_round: std::collections::HashMap<CoopId, tokio::time::Instant> = Default::default();
        let mut waiting: BTreeSet<CoopId> = BTreeSet::new();
        loop {
            let mut coops = BTreeSet::new();
            let next_due = waiting
                .iter()
                .filter_map(|coop| last_round.get(coop).map(|at| *at + ROUND_INTERVAL))
                .min()
                .unwrap_or_else(|| tokio::time::Instant::now() + self.config.sweep);
            tokio::select! {
                () = tokio::time::sleep_until(next_due), if !waiting.is_empty() => {}
                _ = sweep.tick() => {
                    self.retry_witnesses();
                    match self.behind().await {
                        Ok(behind) => coops.extend(behind),
                        Err(err) => tracing::warn!("the log checkpointer could not list coops: {err}"),
                    }
                }
                signal = signals.recv() => match signal {
                    Ok(signal) => { coops.insert(signal.coop_id); }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            }
            // Let the commits of the next few milliseconds join this round.
            tokio::time::sleep(Duration::from_millis(20)).await;
            while let Ok(signal) = signals.try_recv() {
                coops.insert(signal.coop_id);
            }
            // A coop whose last round is too recent waits for its turn; those whose turn came run.
            let now = tokio::time::Instant::now();
            coops.append(&mut waiting);
            let (ready, later): (Vec<CoopId>, Vec<CoopId>) =
                coops.into_iter().partition(|coop| last_round.get(coop).is_none_or(|at| *at + ROUND_INTERVAL <= now));
            waiting.extend(later);
            last_round.retain(|_, at| *at + ROUND_INTERVAL > now);
            for coop in ready {
                last_round.insert(coop.clone(), tokio::time::Instant::now());
                match self.checkpoint(&coop).await {
                    Ok(_) => {
                        failing.remove(&coop);
                    }
                    Err(err) => {
                        // Said once per coop until it recovers.
                        if failing.insert(coop.clone()) {
                            if err.to_string().contains(tiles::INTEGRITY) {
                                tracing::error!(coop = %coop, "{err}: checkpoint signing stopped for this coop");
                            } else {
                                tracing::warn!(coop = %coop, "the log checkpointer failed: {err}");
                            }
                        }
                    }
                }
            }
        }
    }

    async fn behind(&self) -> Result<Vec<CoopId>, Error> {
        // Logs with unsigned entries too, when this process can sign: a coop that went quiet
        // after a round that could not sign (its keys locked then, or another replica's) still
        // gets its checkpoint.
        self.reads.coops_behind_log(1_000, self.keys.available()).await
    }

    /// The coop's latest signed checkpoint (404 `checkpoint` before the first: none is signed
    /// without a receipt key, and a new log's first comes within a second).
    pub async fn latest_checkpoint(&self, coop: &CoopId) -> Result<String, Error> {
        let head = self.head(coop).await?;
        head.checkpoint.ok_or_else(|| Error::not_found("checkpoint", coop.as_str()))
    }

    async fn head(&self, coop: &CoopId) -> Result<LogHead, Error> {
        self.reads.log_head(coop).await?.ok_or_else(|| Error::not_found("log", coop.as_str()))
    }

    /// The coop's log head for a proof: with `kept`, the one a proof read less than
    /// [`LogConfig::head_keep`] ago if there is one, else (and then kept) the store's.
    async fn proof_head(&self, coop: &CoopId, kept: bool) -> Result<Arc<ProofHead>, Error> {
        let lock = || self.heads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if kept
            && let Some(head) = lock().get(coop)
            && head.read_at.elapsed() < self.config.head_keep
        {
            return Ok(head.clone());
        }
        let read_at = std::time::Instant::now();
        let head = self.head(coop).await?;
        let note = head.checkpoint.as_deref().map(|text| Note::parse(text.as_bytes()).map_err(|e| e.to_string()));
        let head = Arc::new(ProofHead { head, note, witnessed: std::sync::OnceLock::new(), read_at });
        let mut heads = lock();
        if heads.len() >= KEPT_HEADS {
            heads.retain(|_, kept| kept.read_at.elapsed() < self.config.head_keep);
        }
        heads.insert(coop.clone(), head.clone());
        Ok(head)
    }

    /// `LogOpened`'s data whole (JSON): kept apart when entry 0 holds digests of its largest
    /// fields, else entry 0's own `data`. An auditor checks each digest against it and replays
    /// the ledger from it. 404 when the coop has no log, or no signed checkpoint covers entry 0
    /// yet (its entry is not published either).
    pub async fn opened_data(&self, coop: &CoopId) -> Result<String, Error> {
        let head = self.head(coop).await?;
        if head.signed_size == 0 {
            return Err(Error::not_found("checkpoint", coop.as_str()));
        }
        if let Some(data) = self.reads.log_opened_data(coop).await? {
            return Ok(data);
        }
        let entries = self.reads.log_entries(coop, 0, 1).await?;
        let entry = entries.first().ok_or_else(|| integrity(coop, "entry 0 is missing"))?;
        #[derive(serde::Deserialize)]
        struct Entry<'a> {
            #[serde(borrow)]
            event: Event<'a>,
        }
        #[derive(serde::Deserialize)]
        struct Event<'a> {
            #[serde(borrow)]
            data: &'a serde_json::value::RawValue,
        }
        let entry: Entry<'_> =
            serde_json::from_str(entry).map_err(|e| integrity(coop, &format!("entry 0 cannot be read: {e}")))?;
        let data = entry.event.data.get();
        // An entry 0 that holds digests, of a log opened before its data was kept apart: the data
        // whole is gone, and its digests are not it.
        let is_digest = |value: &serde_json::value::RawValue| {
            matches!(serde_json::from_str::<serde_json::Value>(value.get()), Ok(serde_json::Value::Object(map))
                if map.len() == 2
                    && map.get("sha256").is_some_and(serde_json::Value::is_string)
                    && map.get("bytes").is_some_and(serde_json::Value::is_u64))
        };
        let fields: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            serde_json::from_str(data).map_err(|e| integrity(coop, &format!("entry 0's data: {e}")))?;
        if fields.values().any(|value| is_digest(value)) {
            return Err(Error::not_found("opened_data", coop.as_str()));
        }
        Ok(data.to_owned())
    }

    /// The verifier keys of the coop's log, current and retired, one signed-note `vkey` a line
    /// (the coop's receipt keys under the log's origin).
    pub async fn verifier_keys(&self, coop: &CoopId) -> Result<String, Error> {
        let origin = self.kept_origin(coop).await?;
        let mut text = String::new();
        for key in self.gov.signing_keys(coop).await? {
            if key.coop_id.as_ref() != Some(coop) {
                continue;
            }
            let public = hex::decode(&key.public_key).map_err(|e| Error::Internal(format!("stored key: {e}")))?;
            let vkey = VerifierKey::new(&origin, SIG_TYPE_ED25519, &public)
                .map_err(|e| Error::Internal(format!("vkey: {e}")))?;
            text.push_str(&vkey.to_string());
            text.push('\n');
        }
        Ok(text)
    }

    /// A tile of the coop's log at its signed size, by its tlog-tiles path (`0/x001/234`,
    /// `1/000.p/7`, `entries/000`): the hashes, or the entry bundle when `entries` is allowed.
    /// 404 for a tile the signed tree does not have (yet), or not at that width.
    pub async fn tile(&self, coop: &CoopId, path: &str, entries_allowed: bool) -> Result<(Vec<u8>, bool), Error> {
        let parsed = gateway_tlog::tile::parse_tile_path(&format!("tile/{path}"))
            .map_err(|e| Error::bad_request_field("path", format!("not a tile path: {e}")))?;
        let head = self.head(coop).await?;
        let (tile, is_entries) = match parsed {
            TilePath::Hashes(tile) => (tile, false),
            TilePath::Entries(tile) => (tile, true),
        };
        if is_entries && !entries_allowed {
            return Err(Error::denied("members_only", "entry bundles hold memos: members of the coop only"));
        }
        let level = if is_entries { 0 } else { tile.level() };
        if tile_at(head.signed_size, level, tile.index()).is_none_or(|t| t.width() < tile.width()) {
            return Err(Error::not_found("tile", path));
        }
        let full = tile.is_full();
        if is_entries {
            let first = tile.index() * 256;
            let entries = self.reads.log_entries(coop, first, u64::from(tile.width())).await?;
            if entries.len() != usize::from(tile.width()) {
                return Err(integrity(coop, &format!("entries {first}.. are missing")));
            }
            // Served only as they were hashed: a changed entry stops the coop's signing too.
            let leaves = self
                .tile_cache
                .read(self.reads.as_ref(), coop, 0, tile.index(), tile.width())
                .await?
                .unwrap_or_default();
            let width = usize::from(tile.width()) * 32;
            if let Err(err) = check_leaves(coop, first, &entries, leaves.get(..width).unwrap_or(&leaves)) {
                if let Ok(mut tampered) = self.tampered.lock()
                    && tampered.insert(coop.clone())
                {
                    tracing::error!(coop = %coop, "{err}: checkpoint signing stopped for this coop");
                }
                metrics::counter!("icn_log_integrity_failures_total", "coop" => coop.to_string()).increment(1);
                return Err(err);
            }
            let bundle = encode_entry_bundle(entries.iter().map(String::as_bytes))
                .map_err(|e| Error::Internal(format!("entry bundle: {e}")))?;
            return Ok((bundle, full));
        }
        let bytes = self
            .tile_cache
            .read(self.reads.as_ref(), coop, tile.level(), tile.index(), tile.width())
            .await?
            .filter(|b| b.len() >= usize::from(tile.width()) * 32)
            .ok_or_else(|| integrity(coop, &format!("tile {path} is missing")))?;
        Ok((bytes[..usize::from(tile.width()) * 32].to_vec(), full))
    }

    /// A c2sp.org/tlog-proof of the entry of event `seq` against the latest signed checkpoint,
    /// or against one that was the latest less than [`LogConfig::head_keep`] ago and covers the
    /// entry, with the cosignatures it had then (a proof against any signed checkpoint
    /// verifies, and every later checkpoint is consistent with it); with `wait`, waits up to
    /// [`PROOF_WAIT`] for a checkpoint that covers it and has the witness quorum (else 503).
    pub async fn proof(&self, coop: &CoopId, seq: u64, wait: bool) -> Result<String, Error> {
        let deadline = tokio::time::Instant::now() + PROOF_WAIT;
        let mut checked = false;
        let mut kept = true;
        loop {
            let proof_head = self.proof_head(coop, kept).await?;
            let head = &proof_head.head;
            let index = index_of(head, seq)?;
            let quorum_met = !wait
                || self.config.quorum == 0
                || *proof_head.witnessed.get_or_init(|| head.checkpoint.as_deref().map_or(0, |c| self.witnessed_by(c)))
                    >= self.config.quorum;
            if index < head.signed_size
                && quorum_met
                && let Some(note) = &proof_head.note
            {
                let note = note.clone().map_err(|e| integrity(coop, &format!("stored checkpoint: {e}")))?;
                let mut tiles = Tiles::default();
                let hashes = tiles
                    .with(
                        coop,
                        &mut Source::<dyn Tx>::Reads(self.reads.as_ref(), Some(&self.tile_cache)),
                        head.signed_size,
                        |reader| inclusion_proof(index, head.signed_size, reader),
                    )
                    .await?;
                let proof = TlogProof::new(index, hashes, note).map_err(|e| Error::Internal(format!("proof: {e}")))?;
                return Ok(proof.to_text());
            }
            // The kept head is older than the entry (or lacks the witnesses): the store's now.
            if kept {
                kept = false;
                continue;
            }
            // An event the coop has not committed: waiting would not make it (asked once).
            if wait && !checked && index >= head.size {
                checked = true;
                if seq > self.reads.last_event_seq(coop).await? {
                    return Err(Error::not_found("event", format!("{seq}: the coop has no such event")));
                }
            }
            if !wait || tokio::time::Instant::now() >= deadline {
                return Err(if wait {
                    Error::ServiceUnavailable(format!("no signed checkpoint covers event {seq} yet"))
                } else {
                    Error::not_found(
                        "event",
                        format!("{seq} (not in a signed checkpoint yet; retry, or ask with wait=true)"),
                    )
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The RFC 9162 consistency proof between tree sizes `from` and `to` (`0 < from ≤ to ≤` the
    /// signed size), one base64 hash a line.
    pub async fn consistency(&self, coop: &CoopId, from: u64, to: u64) -> Result<String, Error> {
        let head = self.head(coop).await?;
        if from == 0 || from > to {
            return Err(Error::bad_request_field("from", "from must be at least 1 and at most to"));
        }
        if to > head.signed_size {
            return Err(Error::bad_request_field(
                "to",
                format!("to must be at most the signed tree size {}", head.signed_size),
            ));
        }
        let mut tiles = Tiles::default();
        let hashes = tiles
            .with(
                coop,
                &mut Source::<dyn Tx>::Reads(self.reads.as_ref(), Some(&self.tile_cache)),
                head.signed_size,
                |reader| consistency_proof(from, to, reader),
            )
            .await?;
        let mut lines = String::new();
        gateway_tlog::hash::push_hash_lines(&hashes, &mut lines);
        Ok(lines)
    }

    /// Checks a coop's whole log against its latest signed checkpoint: every stored entry hashes
    /// to its leaf, the tiles give the signed root, and the entries follow the events. Returns
    /// what is wrong, empty when nothing is.
    pub async fn fsck(&self, coop: &CoopId) -> Result<Vec<String>, Error> {
        let Some(head) = self.reads.log_head(coop).await? else {
            return Ok(Vec::new());
        };
        let mut problems = Vec::new();
        let mut tree = gateway_tlog::MemoryTree::new();
        let mut first = 0;
        while first < head.size {
            let entries = self.reads.log_entries(coop, first, 1_024).await?;
            if entries.is_empty() {
                problems.push(format!("entries {first}..{} are missing", head.size));
                break;
            }
            for entry in &entries {
                tree.append_entry(entry.as_bytes());
            }
            first += entries.len() as u64;
        }
        // The stored leaf hashes, tile by tile, against the entries.
        let mut tiles = Tiles::default();
        for level0 in 0..head.size.div_ceil(256) {
            let stored = self.reads.log_tile(coop, 0, level0).await?.unwrap_or_default();
            for (i, chunk) in stored.chunks_exact(32).enumerate() {
                let index = level0 * 256 + i as u64;
                if index < head.size && tree.leaf(index).is_some_and(|leaf| leaf.as_slice() != chunk) {
                    problems.push(format!("entry {index} no longer hashes to its leaf"));
                }
            }
        }
        if let Some(checkpoint) = &head.checkpoint {
            match signed_checkpoint(coop, checkpoint) {
                Ok(signed) => {
                    match tree.root_at(signed.size()) {
                        Ok(root) if root == *signed.root() => {}
                        _ => problems.push(format!(
                            "the entries do not give the root of the signed checkpoint of size {}",
                            signed.size()
                        )),
                    }
                    let from_tiles = tiles
                        .with(coop, &mut Source::<dyn Tx>::Reads(self.reads.as_ref(), None), signed.size(), |reader| {
                            tree_root(signed.size(), reader)
                        })
                        .await;
                    if from_tiles.as_ref().ok() != Some(signed.root()) {
                        problems.push(format!(
                            "the stored tiles do not give the root of the signed checkpoint of size {}",
                            signed.size()
                        ));
                    }
                }
                Err(err) => problems.push(format!("the stored checkpoint does not parse: {err}")),
            }
        }
        if !problems.is_empty() {
            metrics::counter!("icn_log_integrity_failures_total", "coop" => coop.to_string()).increment(1);
        }
        Ok(problems)
    }

    /// Every coop that has a log.
    pub async fn coops(&self) -> Result<Vec<CoopId>, Error> {
        self.reads.logged_coops().await
    }
}

/// The cosignatures in a witness's answer that verify with its key over the checkpoint body.
fn cosignatures(vkey: &str, body: &str, answer: &[u8]) -> Result<Vec<Signature>, String> {
    let verifier =
        gateway_tlog::cosignature::CosignatureVerifier::from_vkey(vkey).map_err(|e| format!("witness vkey: {e}"))?;
    let signatures = gateway_tlog::witness::parse_add_checkpoint_response(answer).map_err(|e| e.to_string())?;
    let good: Vec<Signature> = signatures.into_iter().filter(|s| cosigned_by(&verifier, body, s)).collect();
    if good.is_empty() { Err("no cosignature in it verifies with the witness's key".into()) } else { Ok(good) }
}

/// Whether `signature` is `verifier`'s valid cosignature of the checkpoint `body`.
fn cosigned_by(verifier: &gateway_tlog::cosignature::CosignatureVerifier, body: &str, signature: &Signature) -> bool {
    signature.name() == verifier.name()
        && signature.key_id() == verifier.key_id()
        && verifier.verify_cosignature(body.as_bytes(), signature.signature()).is_ok()
}

/// The index of event `seq`'s entry in a log with `head` (400 for an event before the log).
fn index_of(head: &LogHead, seq: u64) -> Result<u64, Error> {
    seq.checked_sub(head.after_seq).filter(|i| *i >= 1).ok_or_else(|| {
        Error::bad_request_field(
            "seq",
            format!("event {seq} is before this coop's log began (after {})", head.after_seq),
        )
    })
}

/// The origin of a coop's log under a gateway's prefix.
pub fn origin_of(prefix: &str, coop: &CoopId) -> String {
    format!("{prefix}/coops/{coop}")
}

/// The checkpoint a stored signed note carries.
fn signed_checkpoint(coop: &CoopId, note: &str) -> Result<Checkpoint, Error> {
    let note = Note::parse(note.as_bytes()).map_err(|e| integrity(coop, &format!("stored checkpoint: {e}")))?;
    Checkpoint::parse(note.text()).map_err(|e| integrity(coop, &format!("stored checkpoint: {e}")))
}

/// Opens a new coop's log in the unit of work that creates it: `LogOpened` after event 0, with
/// the coop's settings and no members or balances yet.
pub async fn open_new<T: Tx + ?Sized>(tx: &mut T, coop: &crate::ports::CoopRecord, now: u64) -> Result<(), Error> {
    let entry = opened_entry(&Snapshot { coop, after_seq: 0, members: &[], balances: &[], receipt_key: None }, now)?;
    start(tx, &coop.id, 0, entry).await
}

/// Writes a log's head and entry 0 (and `LogOpened`'s data whole, when the entry holds digests).
async fn start<T: Tx + ?Sized>(tx: &mut T, coop: &CoopId, after_seq: u64, opened: OpenedEntry) -> Result<(), Error> {
    let mut tiles = Tiles::default();
    tiles.append(0, leaf_hash(opened.entry.as_bytes()));
    tx.insert_log_entries(coop, 0, std::slice::from_ref(&opened.entry)).await?;
    tiles.store(tx, coop).await?;
    let head = LogHead { after_seq, size: 1, signed_size: 0, checkpoint: None };
    tx.insert_log(coop, &head, opened.data.as_deref()).await
}

/// One checkpointing round of one coop, inside its unit of work.
async fn round(tx: &mut dyn Tx, coop: &CoopId, origin: &str, keys: &dyn ReceiptKeys, now: u64) -> Result<Round, Error> {
    let head = match tx.log_head(coop, true).await? {
        Some(head) => head,
        None if tx.has_log(coop).await? => return Ok(Round::Idle),
        None => {
            // A coop from before the log: its state now, with the events numbered so far. The
            // counter first: once it is held no event of the coop is committed, so everything
            // read after it (the settings included) is the state after event `after_seq`.
            let after_seq = tx.lock_event_counter(coop).await?;
            let Some(record) = tx.coop(coop).await? else {
                return Ok(Round::Idle);
            };
            let members = tx.all_members(coop).await?;
            let balances = tx.all_balances(coop).await?;
            let key = tx.current_signing_key(coop).await?;
            let snapshot = Snapshot {
                coop: &record,
                after_seq,
                members: &members,
                balances: &balances,
                receipt_key: key.as_ref(),
            };
            start(tx, coop, after_seq, opened_entry(&snapshot, now)?).await?;
            // Committed without a signature: signing takes the receipt-key row, which a close
            // takes before the coop's events, which this round holds; the next round signs.
            return Ok(Round::Unsigned { size: 1, reason: "log_opened" });
        }
    };
    let mut tiles = Tiles::default();
    tiles.load_edge(tx, coop, head.size).await?;
    // The stored tiles must still give the root the last checkpoint signed. A log keeps the
    // origin its first checkpoint was signed under, whatever `--log-origin` says now: members'
    // saved checkpoints and policies name it.
    let mut origin = origin.to_owned();
    if let Some(checkpoint) = &head.checkpoint {
        let signed = signed_checkpoint(coop, checkpoint)?;
        if signed.origin() != origin {
            tracing::debug!(coop = %coop, "the log keeps its origin {}, not {origin}", signed.origin());
            origin = signed.origin().to_owned();
        }
        let root = tiles
            .with(coop, &mut Source::Tx(&mut *tx), signed.size(), |reader| tree_root(signed.size(), reader))
            .await?;
        if root != *signed.root() || signed.size() != head.signed_size {
            return Err(integrity(
                coop,
                &format!("the stored tiles no longer give the root signed at size {}", signed.size()),
            ));
        }
    }
    // The stored entries of the partial bundle at the log's end are hashed again against their
    // leaves: an entry changed in the store stops the signing (entries in sealed bundles were
    // hashed again when sealed; `fsck` hashes every one).
    let bundle = u64::from(gateway_tlog::tile::FULL_WIDTH);
    let tail_start = head.size - head.size % bundle;
    let mut tail = tx.log_entries(coop, tail_start, head.size - tail_start).await?;
    check_leaves(coop, tail_start, &tail, tiles.stored(0, tail_start / bundle))?;
    seal_old_rows(tx, coop, tail_start).await?;
    let events = tx.events_to_log(coop, head.logged_seq(), EVENTS_PER_ROUND).await?;
    let mut entries = Vec::with_capacity(events.len());
    for (i, event) in events.iter().enumerate() {
        if event.seq != head.logged_seq() + 1 + i as u64 {
            return Err(Error::Internal(format!(
                "coop {coop}: event {} follows {} in the outbox: the log waits for the gap to be filled",
                event.seq,
                head.logged_seq() + i as u64
            )));
        }
        let entry = entry_text(event.seq, EventObject::of(event))?;
        tiles.append(head.size + i as u64, leaf_hash(entry.as_bytes()));
        entries.push(entry);
    }
    let size = head.size + entries.len() as u64;
    if size == head.signed_size {
        return Ok(Round::Idle);
    }
    if !entries.is_empty() {
        // Complete bundles are kept as bundles; the entries after the last one as rows.
        let sealed_end = size - size % bundle;
        let kept_from = head.size.max(sealed_end);
        let rows = usize::try_from(kept_from - head.size).map_err(|e| Error::Internal(e.to_string()))?;
        tx.insert_log_entries(coop, kept_from, &entries[rows..]).await?;
        if sealed_end > tail_start {
            tail.extend(entries.iter().take(rows).cloned());
            for (k, chunk) in tail.chunks_exact(usize::from(gateway_tlog::tile::FULL_WIDTH)).enumerate() {
                seal(tx, coop, tail_start / bundle + k as u64, chunk).await?;
            }
        }
        tiles.store(tx, coop).await?;
    }
    let root = tiles.with(coop, &mut Source::Tx(&mut *tx), size, |reader| tree_root(size, reader)).await?;
    let signer = match crate::governance::coop_signer(tx, keys, coop, now).await? {
        Ok(signer) => signer,
        Err(reason) => {
            tx.update_log(coop, &LogHead { size, ..head }).await?;
            return Ok(Round::Unsigned { size, reason });
        }
    };
    let body = Checkpoint::new(&origin, size, root).map_err(|e| Error::Internal(format!("checkpoint: {e}")))?.to_text();
    let key_id = gateway_tlog::note::key_id(&origin, SIG_TYPE_ED25519, &signer.public_key());
    let signature = Signature::new(&origin, key_id, signer.sign(body.as_bytes()).to_vec())
        .map_err(|e| Error::Internal(format!("checkpoint signature: {e}")))?;
    let mut note = Note::new(body).map_err(|e| Error::Internal(format!("checkpoint note: {e}")))?;
    note.add_signature(signature).map_err(|e| Error::Internal(format!("checkpoint note: {e}")))?;
    tx.update_log(
        coop,
        &LogHead { after_seq: head.after_seq, size, signed_size: size, checkpoint: Some(note.to_string()) },
    )
    .await?;
    Ok(Round::Signed { size })
}

/// Full bundles a round moves from rows to bundles when a log written before bundles were kept
/// has them (the log's newest bundles are sealed as they fill).
const OLD_BUNDLES_PER_ROUND: usize = 16;

/// Checks that `entries`, from index `first`, hash to the leaves `leaves` holds from its start.
fn check_leaves(coop: &CoopId, first: u64, entries: &[String], leaves: &[u8]) -> Result<(), Error> {
    if leaves.len() != entries.len() * 32 {
        return Err(integrity(
            coop,
            &format!(
                "entries {first}..{} are {} rows for {} leaves",
                first + entries.len() as u64,
                entries.len(),
                leaves.len() / 32
            ),
        ));
    }
    for (k, (entry, leaf)) in entries.iter().zip(leaves.chunks_exact(32)).enumerate() {
        if leaf_hash(entry.as_bytes()).as_slice() != leaf {
            return Err(integrity(coop, &format!("entry {} no longer hashes to its leaf", first + k as u64)));
        }
    }
    Ok(())
}

/// Keeps the 256 entries of bundle `index` as one entry bundle instead of their rows.
async fn seal(tx: &mut dyn Tx, coop: &CoopId, index: u64, entries: &[String]) -> Result<(), Error> {
    let bundle = encode_entry_bundle(entries.iter().map(String::as_bytes))
        .map_err(|e| Error::Internal(format!("entry bundle: {e}")))?;
    tx.seal_log_bundle(coop, index, &bundle).await
}

/// Seals up to [`OLD_BUNDLES_PER_ROUND`] full bundles still kept as rows below `tail_start`
/// (a log written before bundles), each hashed again against its stored level-0 tile first.
async fn seal_old_rows(tx: &mut dyn Tx, coop: &CoopId, tail_start: u64) -> Result<(), Error> {
    let width = u64::from(gateway_tlog::tile::FULL_WIDTH);
    for _ in 0..OLD_BUNDLES_PER_ROUND {
        let Some(first) = tx.first_entry_row(coop).await?.filter(|first| *first < tail_start) else {
            return Ok(());
        };
        let index = first / width;
        let entries = tx.log_entries(coop, index * width, width).await?;
        let leaves = tx.log_tile(coop, 0, index).await?.unwrap_or_default();
        check_leaves(coop, index * width, &entries, &leaves)?;
        seal(tx, coop, index, &entries).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The worked example of docs/LOG.md, recomputed: every value the document shows is what
    //! the code gives.

    use gateway_core::{Did, Role};
    use gateway_tlog::MemoryTree;
    use gateway_tlog::hash::hash_to_base64;

    use crate::governance::DecisionSigner;

    use super::*;
    use crate::events::CoopEvent;
    use crate::ports::{CoopRecord, CoopSettings, EventRecord, MemberRecord};

    const DOC: &str = include_str!("../../../../docs/LOG.md");
    const ALICE: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
    const BOB: &str = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2";
    const AT: u64 = 1_767_225_600;

    /// The example's values, by the name the document marks them with.
    fn example() -> Vec<(&'static str, String)> {
        let coop = CoopId::parse("bakery").unwrap();
        let record = CoopRecord {
            id: coop.clone(),
            name: "Bakery".into(),
            coop_type: "worker".into(),
            description: String::new(),
            created_at: AT,
            created_by: Did::parse(ALICE).unwrap(),
            settings: CoopSettings::default(),
            member_count: 1,
        };
        let opened =
            opened_entry(&Snapshot { coop: &record, after_seq: 0, members: &[], balances: &[], receipt_key: None }, AT)
                .unwrap()
                .entry;
        let member = |did: &str, role, seq| {
            let member = MemberRecord { did: Did::parse(did).unwrap(), role, joined_at: AT, credit_limit: None };
            let event = EventRecord {
                coop_id: coop.clone(),
                seq,
                event_type: "MemberAdded".into(),
                timestamp: AT,
                data: CoopEvent::MemberAdded(&member).data().unwrap(),
            };
            entry_text(seq, EventObject::of(&event)).unwrap()
        };
        let entries = [opened, member(ALICE, Role::Admin, 1), member(BOB, Role::Member, 2)];
        let mut tree = MemoryTree::new();
        for entry in &entries {
            tree.append_entry(entry.as_bytes());
        }
        let origin = origin_of("gw.example.coop", &coop);
        let master: [u8; 32] = std::array::from_fn(|i| i as u8);
        let key = crate::governance::derive_receipt_key(&master, &coop, 0);
        let signer = crate::governance::Ed25519DecisionSigner::new(key);
        let body = Checkpoint::new(&origin, 3, tree.root()).unwrap().to_text();
        let key_id = gateway_tlog::note::key_id(&origin, SIG_TYPE_ED25519, &signer.public_key());
        let mut note = Note::new(body.clone()).unwrap();
        note.add_signature(Signature::new(&origin, key_id, signer.sign(body.as_bytes()).to_vec()).unwrap()).unwrap();
        let vkey = VerifierKey::new(&origin, SIG_TYPE_ED25519, &signer.public_key()).unwrap().to_string();
        let proof = inclusion_proof(2, 3, &tree).unwrap();
        let tlog_proof = TlogProof::new(2, proof.clone(), note.clone()).unwrap().to_text();
        let leaves = (0..3).map(|i| hex::encode(tree.leaf(i).unwrap())).collect::<Vec<_>>().join("\n");
        vec![
            ("entry-0", entries[0].clone()),
            ("entry-1", entries[1].clone()),
            ("entry-2", entries[2].clone()),
            ("leaves", leaves),
            ("root", hash_to_base64(&tree.root())),
            ("checkpoint", note.to_string().trim_end().to_owned()),
            ("vkey", vkey),
            ("proof", tlog_proof.trim_end().to_owned()),
            ("inclusion", proof.iter().map(hash_to_base64).collect::<Vec<_>>().join("\n")),
        ]
    }

    /// The fenced block after `<!-- example: NAME -->` in the document.
    fn block(name: &str) -> Option<String> {
        let marker = format!("<!-- example: {name} -->");
        let after = &DOC[DOC.find(&marker)? + marker.len()..];
        let start = after.find("```")?;
        let body = &after[start..];
        let body = &body[body.find('\n')? + 1..];
        Some(body[..body.find("\n```")?].to_owned())
    }

    #[test]
    fn the_documents_worked_example_is_what_the_code_gives() {
        let values = example();
        if std::env::var_os("LOG_DOC_PRINT").is_some() {
            for (name, value) in &values {
                println!("<!-- example: {name} -->\n```text\n{value}\n```\n");
            }
        }
        for (name, value) in values {
            assert_eq!(block(name).as_deref(), Some(value.as_str()), "docs/LOG.md, example {name}");
        }
    }
}
