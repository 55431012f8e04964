//! Auditing a coop through its log (INTERFACE.md §12): does the gateway's history hold together, and
//! do the live balances follow from it?
//!
//! One audit, against the latest signed checkpoint:
//!
//! 1. **Checkpoint.** Its origin is `<prefix>/coops/<coop>` (and the saved one's, if any); it is
//!    signed by one of the log's published verifier keys (and, with a policy, accepted by it:
//!    log key and witness quorum).
//! 2. **Keys.** With a saved state, every key seen at the last audit is still published (the
//!    keys route lists retired keys too, so a key never leaves it), and a checkpoint signed by a
//!    key the last audit did not see needs a `SigningKeyRotated` entry naming that key (its hex
//!    public key or its `vkey`), or `LogOpened`'s `receipt_key`. Without a saved state the
//!    published keys are trusted as they are (trust on first use), which the report notes.
//! 3. **Tree.** Every entry is downloaded (entry bundles; a member's token), hashed, and the tree
//!    they make must have the checkpoint's root; every public hash tile must be the tree's.
//! 4. **Consistency.** With a saved state, the log must extend the saved checkpoint: the entries
//!    give the saved root at the saved size, and the gateway's RFC 9162 consistency proof from
//!    the saved checkpoint to this one verifies.
//! 5. **Entries.** Entry 0 is `LogOpened` (its balances sum to zero per currency; when it holds
//!    digests of fields, the data served apart must match them, and is replayed), entry `i` is
//!    event `after_seq + i` of this coop, every `PaymentCreated` is well formed (a conversion's
//!    gross is amount × rate and its net gross − fee).
//! 6. **Receipts.** Every `GovernanceProposalClosed` entry that carries a receipt: the receipt
//!    verifies (steps 1–5 of docs/RECEIPTS.md), is for that proposal with that outcome and
//!    tally, is signed by one of the log's keys, and that key was valid at its time (the
//!    signing-keys list). Entries without a receipt are counted and noted, not failed.
//! 7. **Ledger.** The balances replayed from `LogOpened` through every `PaymentCreated` are
//!    compared, account by account and currency by currency, with the live balances of every
//!    account the log names, every current member, and the treasury and exchange accounts.
//!
//! A coop keeps moving while it is audited: balances read after the checkpoint may include
//! payments the checkpoint does not cover yet. When only balances differ, the audit waits for
//! the log to catch up and, if the signed tree grew, audits the newer checkpoint (a few times at
//! most); differences that remain are reported.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use gateway_core::{Amount, CoopId};
use gateway_tlog::hash::hash_to_base64;
use gateway_tlog::tile::{FULL_WIDTH, MAX_TILE_LEVEL, TILE_HEIGHT, read_tile, tile_at};
use gateway_tlog::{MemoryTree, Policy, VerifierKey, verify_consistency};
use serde::Serialize;

use super::replay::Replay;
use super::{AuditState, SignedCheckpoint};
use crate::client::Client;
use crate::common::PageRequest;
use crate::error::{Error, Result};
use crate::governance::Receipt;

/// How an audit runs.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Also require the checkpoint to satisfy this C2SP tlog-policy (its log key, its witnesses
    /// and their quorum).
    pub policy: Option<Policy>,
    /// Compare every public hash tile with the tree the entries make (default: yes).
    pub check_tiles: bool,
    /// When only balances differ, how long to wait for the log to sign what the balances
    /// already show before looking again (default 1.5 s; the gateway signs within 1 s).
    pub settle: Duration,
    /// How many more times to audit a newer checkpoint when only balances differed and the log
    /// grew meanwhile (default 2).
    pub settle_rounds: u32,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self { policy: None, check_tiles: true, settle: Duration::from_millis(1_500), settle_rounds: 2 }
    }
}

/// One thing that does not check out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[serde(tag = "check", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Mismatch {
    /// The checkpoint: its origin, its signature, the policy.
    #[error("checkpoint: {detail}")]
    Checkpoint {
        /// What is wrong.
        detail: String,
    },
    /// The log's verifier keys against those seen before.
    #[error("keys: {detail}")]
    Key {
        /// What is wrong.
        detail: String,
    },
    /// The log does not extend the saved checkpoint.
    #[error("consistency with the saved checkpoint: {detail}")]
    Consistency {
        /// What is wrong.
        detail: String,
    },
    /// The entries or the tiles do not make the signed tree.
    #[error("tree: {detail}")]
    Tree {
        /// What is wrong.
        detail: String,
    },
    /// An entry that is malformed, out of sequence or self-contradictory.
    #[error("entry {index}: {detail}")]
    Entry {
        /// The entry's index in the log.
        index: u64,
        /// What is wrong.
        detail: String,
    },
    /// A live balance that is not the one the log gives.
    #[error("balance of {account} in {currency}: the log gives {replayed}, the gateway reports {live}")]
    Balance {
        /// The account.
        account: String,
        /// The currency.
        currency: String,
        /// The balance replayed from the log.
        replayed: Amount,
        /// The balance the gateway reports.
        live: Amount,
    },
    /// A receipt in a `GovernanceProposalClosed` entry that does not verify.
    #[error("receipt of proposal {proposal_id} (entry {index}): {detail}")]
    Receipt {
        /// The entry.
        index: u64,
        /// The proposal.
        proposal_id: String,
        /// What is wrong.
        detail: String,
    },
}

/// The checkpoint of the saved state the audit compared with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PreviousCheckpoint {
    /// Its tree size.
    pub size: u64,
    /// Its root, base64.
    pub root: String,
}

/// What an audit found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditReport {
    /// The coop.
    pub coop: String,
    /// The log's origin.
    pub origin: String,
    /// The audited checkpoint's tree size (entries, `LogOpened` included).
    pub size: u64,
    /// Its root, base64.
    pub root: String,
    /// The verifier key that signed it (`vkey`), when one of the published keys did.
    pub signed_by: Option<String>,
    /// With a policy: the witnesses whose cosignatures verified.
    pub witnessed_by: Vec<String>,
    /// The saved checkpoint it was compared with.
    pub previous: Option<PreviousCheckpoint>,
    /// The event `LogOpened` follows.
    pub after_seq: Option<u64>,
    /// Entries per event type.
    pub events: BTreeMap<String, u64>,
    /// Accounts whose live balances were compared.
    pub accounts_checked: u64,
    /// (Account, currency) balances compared.
    pub balances_checked: u64,
    /// Receipts found in the log that verified.
    pub receipts_verified: u64,
    /// `GovernanceProposalClosed` entries without a receipt.
    pub receipts_absent: u64,
    /// How many checkpoints were audited (more than one when the log grew during the audit).
    pub rounds: u32,
    /// What the auditor should know that is not a failure.
    pub notes: Vec<String>,
    /// Everything that does not check out; empty when the audit passed.
    pub mismatches: Vec<Mismatch>,
    /// The state to keep for the next audit: the checkpoint verified and the keys published,
    /// present only when the audit passed.
    #[serde(skip)]
    pub new_state: Option<AuditState>,
}

impl AuditReport {
    fn new(coop: &CoopId, signed: &SignedCheckpoint) -> Self {
        Self {
            coop: coop.to_string(),
            origin: signed.origin().to_owned(),
            size: signed.size(),
            root: hash_to_base64(signed.root()),
            signed_by: None,
            witnessed_by: Vec::new(),
            previous: None,
            after_seq: None,
            events: BTreeMap::new(),
            accounts_checked: 0,
            balances_checked: 0,
            receipts_verified: 0,
            receipts_absent: 0,
            rounds: 1,
            notes: Vec::new(),
            mismatches: Vec::new(),
            new_state: None,
        }
    }

    /// Whether everything checked out.
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
    }

    fn mismatch(&mut self, mismatch: Mismatch) {
        self.mismatches.push(mismatch);
    }
}

impl Client {
    /// Audits `coop` through its log with the default [`AuditOptions`]; see
    /// [`Client::audit_with`].
    pub async fn audit(&self, coop: &CoopId, saved: Option<&AuditState>) -> Result<AuditReport> {
        self.audit_with(coop, saved, &AuditOptions::default()).await
    }

    /// Audits `coop` through its log (the checks are listed in this module's documentation),
    /// against `saved`, the state a previous audit returned. Needs a member's token of the coop
    /// (entries hold memos). Returns `Err` only when the audit could not run (the gateway
    /// unreachable, a refused token, an answer that is not what the route serves); everything
    /// that does not check out is a [`Mismatch`] of the report, whose `new_state` is the state
    /// to keep when the audit passed.
    pub async fn audit_with(
        &self,
        coop: &CoopId,
        saved: Option<&AuditState>,
        options: &AuditOptions,
    ) -> Result<AuditReport> {
        let mut round = 1;
        let mut grew = Vec::new();
        loop {
            let mut report = self.audit_once(coop, saved, options).await?;
            report.rounds = round;
            let only_balances =
                !report.passed() && report.mismatches.iter().all(|m| matches!(m, Mismatch::Balance { .. }));
            if only_balances && round <= options.settle_rounds {
                tokio::time::sleep(options.settle).await;
                let newer = self.log_checkpoint(coop).await?;
                if newer.size() > report.size {
                    grew.push(format!(
                        "the log grew from {} to {} entries while the balances were read: audited again",
                        report.size,
                        newer.size()
                    ));
                    round += 1;
                    continue;
                }
            }
            report.notes.splice(0..0, grew);
            return Ok(report);
        }
    }

    async fn audit_once(
        &self,
        coop: &CoopId,
        saved: Option<&AuditState>,
        options: &AuditOptions,
    ) -> Result<AuditReport> {
        let keys = self.log_keys(coop).await?;
        let signed = self.log_checkpoint(coop).await?;
        let mut report = AuditReport::new(coop, &signed);

        // 1. The checkpoint: origin and signature.
        let suffix = format!("/coops/{coop}");
        if !signed.origin().ends_with(&suffix) {
            report
                .mismatch(Mismatch::Checkpoint { detail: format!("origin {:?} is not …{suffix}", signed.origin()) });
        }
        if let Some(saved) = saved
            && saved.origin() != signed.origin()
        {
            report.mismatch(Mismatch::Checkpoint {
                detail: format!("origin {:?}, but the saved checkpoint's is {:?}", signed.origin(), saved.origin()),
            });
            return Ok(report);
        }
        let signer = match signed.signed_by(&keys) {
            Ok(index) => keys[index].clone(),
            Err(e) => {
                report
                    .mismatch(Mismatch::Checkpoint { detail: format!("not signed by the log's published keys: {e}") });
                return Ok(report);
            }
        };
        report.signed_by = Some(signer.to_string());
        if let Some(policy) = &options.policy {
            match policy.verify_checkpoint(signed.note()) {
                Ok(verified) => {
                    report.witnessed_by = verified
                        .cosignatures
                        .iter()
                        .map(|c| String::from_utf8_lossy(policy.witnesses()[c.witness].name()).into_owned())
                        .collect();
                }
                Err(e) => {
                    report.mismatch(Mismatch::Checkpoint { detail: format!("the policy does not accept it: {e}") })
                }
            }
        }

        // 2. The keys against those seen before.
        let published: Vec<String> = keys.iter().map(ToString::to_string).collect();
        let mut unseen_signer = None;
        match saved {
            Some(saved) => {
                for key in saved.keys().iter().filter(|k| !published.contains(k)) {
                    report.mismatch(Mismatch::Key {
                        detail: format!("{key}, published at the last audit, is no longer published"),
                    });
                }
                if !saved.keys().contains(&signer.to_string()) {
                    unseen_signer = Some(signer.clone());
                }
            }
            None => report.notes.push(
                "first audit of this log: its published keys are trusted as they are (trust on first use); \
                 keep the state so that later audits hold the log to them"
                    .into(),
            ),
        }

        // 3. The tree: every entry, the root, the tiles.
        let size = signed.size();
        let entries = self.log_entries(coop, 0, size, size).await?;
        let mut tree = MemoryTree::new();
        for entry in &entries {
            tree.append_entry(entry);
        }
        let sound = tree.root() == *signed.root();
        if !sound {
            report.mismatch(Mismatch::Tree {
                detail: format!(
                    "the {size} entries make the root {}, the checkpoint signs {}",
                    hash_to_base64(&tree.root()),
                    report.root
                ),
            });
        }
        if options.check_tiles {
            self.check_tiles(coop, size, &tree, &mut report).await?;
        }

        // 4. Consistency with the saved checkpoint.
        if let Some(saved) = saved {
            self.check_consistency(coop, saved, &signed, &tree, &mut report).await?;
        }

        if !sound {
            report.notes.push("the ledger was not replayed: the entries are not the signed ones".into());
            return Ok(report);
        }

        // 5. The entries, replayed; `LogOpened`'s data served apart when its entry holds
        // digests of fields, checked against them.
        let mut replay = Replay::new(coop);
        let mut first = None;
        if let Some(entry) = entries.first()
            && super::replay::with_whole_data(entry, None).is_err()
        {
            let whole = self.log_opened_data(coop).await?;
            match super::replay::with_whole_data(entry, Some(&whole)) {
                Ok(Some((rebuilt, digested))) => {
                    report.notes.push(format!(
                        "LogOpened holds digests of {digested} of its fields; the data the gateway serves \
                         apart matches them, and the ledger is replayed from it"
                    ));
                    first = Some(rebuilt);
                }
                Ok(None) => {}
                Err(detail) => report.mismatch(Mismatch::Entry { index: 0, detail }),
            }
        }
        for (index, entry) in entries.iter().enumerate() {
            match (&first, index) {
                (Some(rebuilt), 0) => replay.apply(0, rebuilt),
                _ => replay.apply(index as u64, entry),
            }
        }
        report.after_seq = replay.after_seq;
        report.events = replay.events.clone();
        report.mismatches.append(&mut replay.mismatches);

        if let Some(signer) = unseen_signer {
            if announced(&replay, &signer) {
                report.notes.push(format!("the log now signs with {signer}, which the log itself announces"));
            } else {
                report.mismatch(Mismatch::Key {
                    detail: format!(
                        "the checkpoint is signed by {signer}, which the last audit did not see and no \
                         SigningKeyRotated entry (nor LogOpened) names"
                    ),
                });
            }
        } else if saved.is_none() && !announced(&replay, &signer) {
            report.notes.push(format!(
                "the signing key {signer} is not named by LogOpened or a SigningKeyRotated entry \
                 (nothing in the log vouches for it)"
            ));
        }

        // 6. Receipts, 7. balances.
        self.check_receipts(&replay, &keys, &mut report).await?;
        self.check_balances(coop, &replay, &mut report).await?;

        if report.passed() {
            report.new_state =
                Some(AuditState { checkpoint: signed.text().to_owned(), keys: published, parsed: signed });
        }
        Ok(report)
    }

    /// Every hash tile of the tree of `size` against the tree the entries make.
    async fn check_tiles(&self, coop: &CoopId, size: u64, tree: &MemoryTree, report: &mut AuditReport) -> Result<()> {
        for level in 0..=MAX_TILE_LEVEL {
            let shift = u32::from(level) * u32::from(TILE_HEIGHT);
            let hashes = if shift >= 64 { 0 } else { size >> shift };
            if hashes == 0 {
                break;
            }
            for index in 0..hashes.div_ceil(u64::from(FULL_WIDTH)) {
                let Some(tile) = tile_at(size, level, index) else { continue };
                let served = self.log_tile(coop, level, index, tile.width()).await?;
                let expected = read_tile(tile, tree).map_err(|e| Error::Usage(format!("tile {}: {e}", tile.path())))?;
                if served != expected {
                    report.mismatch(Mismatch::Tree {
                        detail: format!("the public tile {} is not the entries' hashes", tile.path()),
                    });
                }
            }
        }
        Ok(())
    }

    /// The log against the saved checkpoint: locally (the entries' tree at the saved size) and
    /// through the gateway's consistency proof.
    async fn check_consistency(
        &self,
        coop: &CoopId,
        saved: &AuditState,
        signed: &SignedCheckpoint,
        tree: &MemoryTree,
        report: &mut AuditReport,
    ) -> Result<()> {
        let (old, old_root) = (saved.size(), *saved.root());
        report.previous = Some(PreviousCheckpoint { size: old, root: hash_to_base64(&old_root) });
        let size = signed.size();
        if old > size {
            report.mismatch(Mismatch::Consistency {
                detail: format!("the log has {size} entries, fewer than the {old} of the saved checkpoint"),
            });
            return Ok(());
        }
        match tree.root_at(old) {
            Ok(root) if root == old_root => {}
            Ok(root) => report.mismatch(Mismatch::Consistency {
                detail: format!(
                    "at size {old} the log's entries make the root {}, the saved checkpoint has {}",
                    hash_to_base64(&root),
                    hash_to_base64(&old_root)
                ),
            }),
            Err(e) => report.mismatch(Mismatch::Consistency { detail: format!("size {old}: {e}") }),
        }
        if old > 0 && old < size {
            let proof = self.log_consistency(coop, old, size).await?;
            if let Err(e) = verify_consistency(old, size, &old_root, signed.root(), &proof) {
                report.mismatch(Mismatch::Consistency {
                    detail: format!(
                        "the gateway's consistency proof from {old} to {size} entries does not verify: {e}"
                    ),
                });
            }
        }
        Ok(())
    }

    /// The receipts the closed proposals of the log carry.
    async fn check_receipts(&self, replay: &Replay, keys: &[VerifierKey], report: &mut AuditReport) -> Result<()> {
        let with_receipt: Vec<_> = replay.closed.iter().filter(|c| c.receipt.is_some()).collect();
        report.receipts_absent = (replay.closed.len() - with_receipt.len()) as u64;
        if report.receipts_absent > 0 {
            report.notes.push(format!(
                "{} GovernanceProposalClosed entr{} carry no receipt (this gateway does not write receipts \
                 into the log yet): not checked; `gatewayctl proposal verify` checks a receipt through the \
                 proof route",
                report.receipts_absent,
                if report.receipts_absent == 1 { "y does" } else { "ies do" }
            ));
        }
        if with_receipt.is_empty() {
            return Ok(());
        }
        let validity = match self.signing_keys().await {
            Ok(list) => Some(list),
            Err(e @ (Error::Authorization { .. } | Error::NotFound { .. })) => {
                report.notes.push(format!(
                    "the signing-keys list is not available ({e}): receipt keys were checked against the log's keys \
                     but not their validity dates"
                ));
                None
            }
            Err(e) => return Err(e),
        };
        for closed in with_receipt {
            let fail = |detail: String| Mismatch::Receipt {
                index: closed.index,
                proposal_id: closed.proposal_id.clone(),
                detail,
            };
            let receipt: Receipt = match serde_json::from_value(closed.receipt.clone().unwrap_or_default()) {
                Ok(receipt) => receipt,
                Err(e) => {
                    report.mismatch(fail(format!("not a receipt: {e}")));
                    continue;
                }
            };
            let mut problems = Vec::new();
            if receipt.proposal_id != closed.proposal_id {
                problems.push(format!("the receipt is for proposal {}", receipt.proposal_id));
            }
            if closed.outcome.as_ref().is_some_and(|o| *o != receipt.outcome) {
                problems.push(format!("the receipt says {}, the entry {:?}", receipt.outcome, closed.outcome));
            }
            if closed.tally.as_ref().is_some_and(|t| *t != receipt.tally) {
                problems.push("the receipt's tally is not the entry's".into());
            }
            match super::receipt::verify(&receipt) {
                Err(e) => problems.push(e),
                Ok(public_key) => {
                    if !keys.iter().any(|k| k.public_key() == public_key) {
                        problems.push(format!("signed by {}, which is not one of the log's keys", receipt.signer));
                    }
                    if let Some(list) = &validity {
                        let listed = list.keys.iter().filter(|k| k.public_key == receipt.public_key);
                        if !listed.clone().any(|k| k.valid_at(receipt.timestamp)) {
                            problems.push(format!(
                                "its key was not the coop's signing key at {} (the signing-keys list)",
                                receipt.timestamp
                            ));
                        }
                    }
                }
            }
            if problems.is_empty() {
                report.receipts_verified += 1;
            }
            for problem in problems {
                report.mismatch(fail(problem));
            }
        }
        Ok(())
    }

    /// The members of the coop now, every page.
    async fn all_members(&self, coop: &CoopId) -> Result<Vec<String>> {
        let mut members = Vec::new();
        let mut offset = 0;
        loop {
            let page = self.members(coop, PageRequest { limit: Some(100), offset: Some(offset) }).await?;
            let count = page.members.len() as u64;
            offset += count;
            members.extend(page.members.into_iter().map(|m| m.did));
            if !page.pagination.has_more || count == 0 {
                return Ok(members);
            }
        }
    }

    /// The replayed balances against the live ones.
    async fn check_balances(&self, coop: &CoopId, replay: &Replay, report: &mut AuditReport) -> Result<()> {
        let mut accounts: BTreeSet<String> = replay.accounts.clone();
        accounts.extend(replay.balances.keys().cloned());
        accounts.insert(format!("coop:{coop}:treasury"));
        accounts.insert(format!("coop:{coop}:exchange"));
        match self.all_members(coop).await {
            Ok(members) => accounts.extend(members),
            Err(e @ Error::Authorization { .. }) => report.notes.push(format!(
                "the member list is not readable with this token ({e}): only the accounts the log names were compared"
            )),
            Err(e) => return Err(e),
        }
        for account in accounts {
            let live = self.balance(coop, &account, None).await?;
            let mut currencies: BTreeSet<&str> = live.balances.keys().map(String::as_str).collect();
            if let Some(replayed) = replay.balances.get(&account) {
                currencies.extend(replayed.keys().map(String::as_str));
            }
            for currency in currencies {
                let replayed = replay.balance(&account, currency);
                let now = live.balances.get(currency).copied().unwrap_or(Amount::ZERO);
                report.balances_checked += 1;
                if replayed != now {
                    report.mismatch(Mismatch::Balance {
                        account: account.clone(),
                        currency: currency.to_owned(),
                        replayed,
                        live: now,
                    });
                }
            }
            report.accounts_checked += 1;
        }
        Ok(())
    }
}

/// Whether the log names `key` as a signing key: `LogOpened`'s receipt key or a
/// `SigningKeyRotated` entry (by hex public key or by `vkey`).
fn announced(replay: &Replay, key: &VerifierKey) -> bool {
    let hex = hex::encode(key.public_key());
    replay.opened_key.as_deref() == Some(hex.as_str())
        || replay.announced.contains(&hex)
        || replay.announced.contains(&key.to_string())
}
