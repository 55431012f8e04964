//! The mutual-credit ledger: payments, batches, cross-currency conversions and oracle rates.
//!
//! Accounts are (coop, account, currency), where an account is a member's DID or a system
//! account (`coop:<id>:treasury`, `coop:<id>:exchange`). Every transfer debits one account and
//! credits another by the same amount in one transaction, so balances sum to exactly zero per
//! coop and currency at every commit. Every check happens before the first write, so a refused
//! payment writes nothing. Rate limiting and token checks are the caller's; trust gates and
//! credit limits are here.

use std::sync::Arc;

use gateway_core::{Amount, Clock, CoopId, Currency, Did, Error, PageRequest};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::coops::{lock_coop, require_coop};
use crate::events::{CoopEvent, emit, new_id};
use crate::notifications::{Note, NoteData, notify};
use crate::ports::{
    ConversionLeg, CoopBalances, CoopRecord, CoopTx, EventTx, HistoryQuery, IdempotencyRecord, LedgerReads, LedgerTx,
    NotificationTx, QuoteRecord, RateRecord, TransactionKind, TransactionRecord, Transactor, transaction,
};
use crate::trust::TrustGraph;

/// Trust needed for a payment of at least the coop's high-value threshold.
pub const HIGH_VALUE_MIN_TRUST: f64 = 0.5;
/// How long an idempotent response is replayed, seconds.
pub const IDEMPOTENCY_WINDOW_SECS: u64 = 24 * 3600;
/// How long a conversion quote is honoured, seconds.
pub const QUOTE_VALIDITY_SECS: u64 = 60;
/// Most payments in one batch.
pub const MAX_BATCH: usize = 1000;

/// The coop's treasury account.
pub fn treasury_account(coop: &CoopId) -> String {
    format!("coop:{coop}:treasury")
}

/// The coop's exchange account.
pub fn exchange_account(coop: &CoopId) -> String {
    format!("coop:{coop}:exchange")
}

/// Whether `account` is [`treasury_account`] or [`exchange_account`] of `coop` (compared in
/// place: a balance read asks on every request).
fn is_system_account(coop: &CoopId, account: &str) -> bool {
    account
        .strip_prefix("coop:")
        .and_then(|rest| rest.strip_prefix(coop.as_str()))
        .is_some_and(|kind| kind == ":treasury" || kind == ":exchange")
}

/// A payment as requested.
#[derive(Debug, Clone)]
pub struct PaymentRequest {
    /// Paying account: must be the caller's DID (checked by the caller).
    pub from: String,
    /// Receiving member's DID.
    pub to: String,
    /// Positive amount.
    pub amount: Amount,
    /// Currency; the coop's default when absent.
    pub currency: Option<Currency>,
    /// Free text.
    pub memo: Option<String>,
    /// The request's signature, kept on the record as evidence (INTERFACE.md §11).
    pub request_signature: Option<gateway_core::RequestSignature>,
}

/// A conversion as requested.
#[derive(Debug, Clone)]
pub struct ConversionRequest {
    /// Paying member (the caller).
    pub from: String,
    /// Receiving member.
    pub to: String,
    /// Debited from the payer, in `from_currency`.
    pub amount: Amount,
    /// Source currency.
    pub from_currency: Currency,
    /// Target currency.
    pub to_currency: Currency,
    /// Upper bound on the net target amount (the specification's slippage bound).
    pub max_target_amount: Option<Amount>,
    /// Lower bound on the net target amount.
    pub min_target_amount: Option<Amount>,
    /// A live quote whose rate and fee to use. A quote is single-use and bound to the member
    /// who asked for it and to its amount: another member's quote is 403 (`details.reason =
    /// "quote_of_another_member"`), another amount 400 (field `amount`), a second use 409.
    pub quote_id: Option<String>,
    /// The request's signature, kept on the record as evidence (INTERFACE.md §11).
    pub request_signature: Option<gateway_core::RequestSignature>,
}

/// The outcome of one batch item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchItemResult {
    /// The transaction, on success.
    pub record: Option<TransactionRecord>,
    /// The failure, otherwise.
    pub error: Option<Error>,
}

/// An `Idempotency-Key` and the hash of the request it came with.
#[derive(Debug, Clone)]
pub struct Idempotency {
    /// Key scoped to coop and caller.
    pub key: String,
    /// SHA-256 hex of method, path and body.
    pub request_hash: String,
}

/// `IdempotencyRecord::status` of a key whose answer is decided: its body is the operation's
/// serialised `Result` (see [`Stored`]). The other values the column holds: 0 marks a key
/// claimed by a request still running, and 100–599 an answer that gateways before this format
/// stored as an HTTP status and body, replayed verbatim until it expires after 24 h.
pub const DECIDED: u16 = 1;

/// An answer of an idempotent operation, as a later request with the same key finds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Stored<T> {
    /// The operation's decided result (a success or a 409 refusal), replayed as itself.
    Decided(Result<T, Error>),
    /// An answer stored as an HTTP status and body by an earlier gateway (at most 24 h old).
    Http(StoredResponse),
}

/// An HTTP answer as earlier gateways stored it under an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// HTTP status.
    pub status: u16,
    /// Body.
    pub body: String,
}

/// What an operation answered: decided by this request, or an earlier request's answer under
/// the same `Idempotency-Key`, replayed (nothing new was done). The velocity limit counts only
/// a fresh result; a fresh refusal is an `Err`.
#[derive(Debug, Clone, PartialEq)]
pub enum Replay<T> {
    /// This request ran the operation.
    Fresh(T),
    /// An earlier request's answer.
    Replayed(Stored<T>),
}

/// Balances of one account.
#[derive(Debug, Clone)]
pub struct AccountBalances {
    /// The account.
    pub account: String,
    /// The currency asked for (or the coop's default).
    pub currency: Currency,
    /// Balance in that currency.
    pub balance: Amount,
    /// Every currency's balance.
    pub balances: Vec<(Currency, Amount)>,
}

/// The ledger service.
#[derive(Debug, Clone)]
pub struct Ledger {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn LedgerReads>,
    trust: Arc<TrustGraph>,
    clock: Arc<dyn Clock>,
}

impl Ledger {
    /// The service over its ports.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn LedgerReads>,
        trust: Arc<TrustGraph>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { transactor, reads, trust, clock }
    }

    /// Records a payment. Under an `Idempotency-Key` the decided result (the transaction or a
    /// 409 refusal) is stored with the payment and replayed for 24 h; the same key with another
    /// body is a conflict.
    pub async fn pay(
        &self,
        coop: &CoopId,
        request: PaymentRequest,
        key: Option<Idempotency>,
    ) -> Result<Replay<TransactionRecord>, Error> {
        self.record(coop, Transfer::Payment(request), key).await
    }

    /// Executes a conversion: the payer is debited in the source currency, the payee credited
    /// the net target amount, both through the coop's exchange account. Keyed as [`Ledger::pay`].
    pub async fn convert(
        &self,
        coop: &CoopId,
        request: ConversionRequest,
        key: Option<Idempotency>,
    ) -> Result<Replay<TransactionRecord>, Error> {
        self.record(coop, Transfer::Conversion(request), key).await
    }

    /// Runs one payment or conversion in its own unit of work; under a key, its decided result
    /// is stored in that same unit of work.
    async fn record(
        &self,
        coop: &CoopId,
        transfer: Transfer,
        key: Option<Idempotency>,
    ) -> Result<Replay<TransactionRecord>, Error> {
        let (coop, trust, now) = (coop.clone(), self.trust.clone(), self.clock.now_unix_secs());
        // The unit of work commits when the job returns `Ok`: a refusal decided under a key is
        // stored (an `Ok` holding the `Err`), any other refusal rolls back.
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                if let Some(key) = &key
                    && let Some(stored) = claim(tx, key, now).await?
                {
                    return Ok(Ok(Replay::Replayed(stored)));
                }
                let record = require_coop(tx, &coop).await?;
                let result = transfer.run(tx, &record, &trust, now).await;
                if let Some(key) = &key {
                    remember(tx, key, &result, now).await?;
                }
                match result {
                    Err(err) if key.is_none() => Err(err),
                    result => Ok(result.map(Replay::Fresh)),
                }
            })
        })
        .await?
    }

    /// Records a batch of payments by one payer. Non-atomic: each item succeeds or fails on its
    /// own. Atomic: the first failure refuses the whole batch (409 naming the item). Keyed as
    /// [`Ledger::pay`].
    pub async fn batch(
        &self,
        coop: &CoopId,
        items: Vec<PaymentRequest>,
        atomic: bool,
        key: Option<Idempotency>,
    ) -> Result<Replay<Vec<BatchItemResult>>, Error> {
        if items.is_empty() || items.len() > MAX_BATCH {
            return Err(Error::bad_request_field("payments", format!("a batch holds 1 to {MAX_BATCH} payments")));
        }
        let (coop, trust, now) = (coop.clone(), self.trust.clone(), self.clock.now_unix_secs());
        let keyed = key.clone();
        // An atomic refusal, handed out of its rolled-back unit of work so that, under a key, it
        // is stored in a second one (and only it: a 409 of the key's own claim stores nothing).
        let refused: Arc<std::sync::Mutex<Option<Error>>> = Arc::default();
        let refused_in = refused.clone();
        let outcome = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                if let Some(key) = &key
                    && let Some(stored) = claim(tx, key, now).await?
                {
                    return Ok(Replay::Replayed(stored));
                }
                let record = require_coop(tx, &coop).await?;
                lock_batch_accounts(tx, &record, &trust, &items).await?;
                let mut results = Vec::with_capacity(items.len());
                let batch_id = new_id();
                for (index, item) in items.iter().enumerate() {
                    match pay_in(tx, &record, item, &trust, now, Some(&batch_id)).await {
                        Ok(r) => results.push(BatchItemResult { record: Some(r), error: None }),
                        Err(err @ (Error::Internal(_) | Error::ServiceUnavailable(_))) => return Err(err),
                        Err(err) if atomic => {
                            // The items before the failing one were written: the whole unit
                            // of work rolls back, and a key's refusal is stored below.
                            let refusal = Error::conflict(format!("atomic batch refused: payments[{index}]: {err}"));
                            *refused_in.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                                Some(refusal.clone());
                            return Err(refusal);
                        }
                        Err(err) => results.push(BatchItemResult { record: None, error: Some(err) }),
                    }
                }
                // A batch's answer names its payments; each keeps the signed body once in the
                // store, and its history item serves it. Kept in the answer (and the stored
                // answer of a key), the body would be there once per payment.
                for evidence in results.iter_mut().filter_map(|r| r.record.as_mut()?.request_signature.as_mut()) {
                    evidence.body = None;
                }
                let result = Ok(results);
                if let Some(key) = &key {
                    remember(tx, key, &result, now).await?;
                }
                result.map(Replay::Fresh)
            })
        })
        .await;
        let refusal = refused.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        match (outcome, refusal, keyed) {
            (Err(_), Some(err), Some(key)) => {
                // An atomic refusal under a key, stored in a unit of work of its own.
                transaction(self.transactor.as_ref(), move |tx| {
                    Box::pin(async move {
                        if let Some(stored) = claim(tx, &key, now).await? {
                            return Ok(Ok(Replay::Replayed(stored)));
                        }
                        let refused: Result<Vec<BatchItemResult>, Error> = Err(err);
                        remember(tx, &key, &refused, now).await?;
                        Ok(refused.map(Replay::Fresh))
                    })
                })
                .await?
            }
            (outcome, _, _) => outcome,
        }
    }

    /// Deletes the answers stored under keys older than 24 h and the quotes that have expired
    /// (run in the background); returns how many rows went.
    pub async fn prune_expired(&self) -> Result<u64, Error> {
        let now = self.clock.now_unix_secs();
        let answers_before = now.saturating_sub(IDEMPOTENCY_WINDOW_SECS);
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move { tx.prune_expired(answers_before, now).await })
        })
        .await
    }

    /// The stored answer of an `Idempotency-Key` (a replay), `None` when the key has no live
    /// answer, or 409 when it was used with another request. Read before the velocity limit:
    /// a replay creates nothing, so it is neither refused nor counted by it.
    pub async fn stored_answer<T: DeserializeOwned>(
        &self,
        idempotency: &Idempotency,
    ) -> Result<Option<Stored<T>>, Error> {
        let not_before = self.clock.now_unix_secs().saturating_sub(IDEMPOTENCY_WINDOW_SECS);
        // A plain read (it never queues behind the writer): an answer still being decided is
        // not visible yet, and the claim inside the operation's own unit of work settles it.
        match self.reads.idempotency(&idempotency.key, not_before).await? {
            None => Ok(None),
            Some(stored) => {
                let seq = stored.event_seq;
                let replayed = answer(idempotency, stored)?;
                // The replay carries the first answer's `ICN-Event-Seq`.
                if let Some(seq) = seq {
                    crate::ports::appended::record(seq);
                }
                Ok(Some(replayed))
            }
        }
    }

    /// Each payer's payments (and conversions) recorded since `since` (Unix seconds), as
    /// (payer DID, timestamp) oldest first: what the velocity limiter is rebuilt from at start.
    pub async fn payments_since(&self, since: u64) -> Result<Vec<(String, u64)>, Error> {
        self.reads.payments_since(since).await
    }

    /// Quotes a conversion of `amount` at the coop's oracle rate and fee for `requester`; valid
    /// 60 s, once, by the requester, for that amount (see [`ConversionRequest::quote_id`]).
    pub async fn quote(
        &self,
        coop: &CoopId,
        requester: &Did,
        amount: Amount,
        from: Currency,
        to: Currency,
    ) -> Result<QuoteRecord, Error> {
        let (coop, now, requester) = (coop.clone(), self.clock.now_unix_secs(), requester.to_string());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let record = require_coop(tx, &coop).await?;
                let rate = effective_rate(tx, &coop, &from, &to).await?;
                let mut quote = price(&coop, amount, from, to, rate, record.settings.conversion_fee_ppm, now)?;
                quote.requester = Some(requester);
                tx.put_quote(&quote).await?;
                Ok(quote)
            })
        })
        .await
    }

    /// Sets a manual exchange rate for the coop.
    pub async fn set_rate(
        &self,
        coop: &CoopId,
        setter: &Did,
        from: Currency,
        to: Currency,
        rate: Amount,
    ) -> Result<RateRecord, Error> {
        if from == to {
            return Err(Error::bad_request_field("to_currency", "from_currency and to_currency must differ"));
        }
        if rate.micros() <= 0 {
            return Err(Error::bad_request_field("rate", "rate must be positive"));
        }
        let record = RateRecord {
            from_currency: from,
            to_currency: to,
            rate,
            set_by: setter.clone(),
            set_at: self.clock.now_unix_secs(),
        };
        let coop = coop.clone();
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                // Under the coop's row lock, as a settings change reads it: a rate writes no
                // event, so no later check sees a change of `require_signed_requests` that
                // commits after this read (docs/SIGNING.md).
                lock_coop(tx, &coop).await?;
                tx.put_rate(&coop, &record).await?;
                Ok(record)
            })
        })
        .await
    }

    /// The rate from one currency to another: set directly, or the inverse of the opposite rate.
    pub async fn rate(&self, coop: &CoopId, from: &Currency, to: &Currency) -> Result<RateRecord, Error> {
        if let Some(rate) = self.reads.rate(coop, from, to).await? {
            return Ok(rate);
        }
        let opposite = self.reads.rate(coop, to, from).await?;
        let opposite = opposite.ok_or_else(|| Error::not_found("rate", format!("{from}/{to}")))?;
        Ok(RateRecord {
            from_currency: from.clone(),
            to_currency: to.clone(),
            rate: inverse(opposite.rate)?,
            ..opposite
        })
    }

    /// An account's balances.
    pub async fn balance(
        &self,
        coop: &CoopId,
        account: &str,
        currency: Option<Currency>,
    ) -> Result<AccountBalances, Error> {
        let CoopBalances { default_currency, balances } =
            self.reads.coop_balances(coop, account).await?.ok_or_else(|| Error::not_found("coop", coop.as_str()))?;
        let currency = currency.unwrap_or(default_currency);
        let balance = balances.iter().find(|(c, _)| *c == currency).map(|(_, b)| *b).unwrap_or(Amount::ZERO);
        Ok(AccountBalances { account: account.to_owned(), currency, balance, balances })
    }

    /// A page of the coop's history, newest first.
    pub async fn history(&self, query: HistoryQuery) -> Result<(Vec<TransactionRecord>, u64), Error> {
        self.reads.history(&query).await
    }

    /// Sums of balances per coop and currency (zero when the ledger is sound).
    pub async fn balance_sums(&self) -> Result<Vec<(CoopId, Currency, Amount)>, Error> {
        self.reads.balance_sums().await
    }

    /// Accounts whose balance does not reconcile with their transactions (zero when sound).
    pub async fn unreconciled_accounts(&self) -> Result<u64, Error> {
        self.reads.unreconciled_accounts().await
    }

    /// Number of transactions and currencies of a coop.
    pub async fn stats(&self, coop: &CoopId) -> Result<(u64, Vec<Currency>), Error> {
        self.reads.coop_ledger_stats(coop).await
    }

    /// The page request type re-exported for callers building history queries.
    pub fn page(limit: Option<u64>, offset: Option<u64>) -> Result<PageRequest, Error> {
        PageRequest::new(limit, offset).map_err(|m| Error::bad_request_field("limit", m))
    }
}

/// The two single-transaction operations, so that payments and conversions share one path.
#[derive(Debug)]
enum Transfer {
    Payment(PaymentRequest),
    Conversion(ConversionRequest),
}

impl Transfer {
    async fn run<T: CoopTx + LedgerTx + EventTx + NotificationTx + ?Sized>(
        &self,
        tx: &mut T,
        coop: &CoopRecord,
        trust: &TrustGraph,
        now: u64,
    ) -> Result<TransactionRecord, Error> {
        match self {
            Transfer::Payment(request) => pay_in(tx, coop, request, trust, now, None).await,
            Transfer::Conversion(request) => convert_in(tx, coop, request, trust, now).await,
        }
    }
}

/// Claims the key in this unit of work (see [`crate::ports::LedgerTx::idempotency_claim`]):
/// `None` when this request is the key's first and must run; otherwise the stored answer to
/// replay, or 409 when the key came with another request (or is still in flight).
async fn claim<T: DeserializeOwned, X: LedgerTx + ?Sized>(
    tx: &mut X,
    idempotency: &Idempotency,
    now: u64,
) -> Result<Option<Stored<T>>, Error> {
    let not_before = now.saturating_sub(IDEMPOTENCY_WINDOW_SECS);
    match tx.idempotency_claim(&idempotency.key, &idempotency.request_hash, now, not_before).await? {
        None => Ok(None),
        Some(stored) => answer(idempotency, stored).map(Some),
    }
}

fn answer<T: DeserializeOwned>(idempotency: &Idempotency, stored: IdempotencyRecord) -> Result<Stored<T>, Error> {
    if stored.request_hash != idempotency.request_hash {
        return Err(Error::conflict("the Idempotency-Key was already used with another request"));
    }
    match stored.status {
        0 => Err(Error::conflict("a request with this Idempotency-Key is still in progress")),
        DECIDED => serde_json::from_str(&stored.body)
            .map(Stored::Decided)
            .map_err(|e| Error::Internal(format!("the stored answer of an Idempotency-Key does not read back: {e}"))),
        status => Ok(Stored::Http(StoredResponse { status, body: stored.body })),
    }
}

/// Whether a refusal is the ledger's decision (409: credit, slippage, atomic batch, state),
/// stored under an `Idempotency-Key`, rather than a refusal of the request itself (400, 403,
/// 404) or a fault, which store nothing.
fn is_decision(err: &Error) -> bool {
    err.code().status() == 409
}

/// Stores a decided result under the key, in the operation's unit of work. A fault or a
/// refusal of the request itself is returned instead, so the unit of work rolls back, the key's
/// claim with it, and the key can be used again.
async fn remember<T: Serialize, X: LedgerTx + ?Sized>(
    tx: &mut X,
    idempotency: &Idempotency,
    result: &Result<T, Error>,
    now: u64,
) -> Result<(), Error> {
    if let Err(err) = result
        && !is_decision(err)
    {
        return Err(err.clone());
    }
    let body = serde_json::to_string(result)
        .map_err(|e| Error::Internal(format!("an idempotent result does not serialise: {e}")))?;
    let record = IdempotencyRecord {
        key: idempotency.key.clone(),
        request_hash: idempotency.request_hash.clone(),
        status: DECIDED,
        body,
        created_at: now,
        event_seq: None,
    };
    tx.idempotency_put(&record).await
}

/// The payer's floor: the member's override, else the coop's limit.
/// The payer's floor (its override, else the coop's limit) and the payee's DID, checking both
/// are members, with one query.
async fn payer_floor_and_payee<T: CoopTx + ?Sized>(
    tx: &mut T,
    coop: &CoopRecord,
    payer: &str,
    payee: &str,
) -> Result<(Amount, Did), Error> {
    let payer = Did::parse(payer).map_err(|e| Error::bad_request_field("from", format!("invalid DID: {e}")))?;
    let payee = Did::parse(payee).map_err(|e| Error::bad_request_field("to", format!("invalid DID: {e}")))?;
    let members = tx.members_among(&coop.id, &[&payer, &payee]).await?;
    let payer_record = members
        .iter()
        .find(|m| m.did == payer)
        .ok_or_else(|| Error::forbidden(format!("{payer} is not a member of cooperative '{}'", coop.id)))?;
    if !members.iter().any(|m| m.did == payee) {
        return Err(Error::bad_request_field("to", format!("{payee} is not a member of cooperative '{}'", coop.id)));
    }
    Ok((payer_record.credit_limit.unwrap_or(coop.settings.credit_limit), payee))
}

fn check_trust(trust: &TrustGraph, coop: &CoopRecord, payer: &str, amount: Amount) -> Result<(), Error> {
    if amount < coop.settings.high_value_threshold {
        return Ok(());
    }
    let score = Did::parse(payer).map(|d| trust.score(&d)).unwrap_or(0.0);
    if score < HIGH_VALUE_MIN_TRUST {
        return Err(Error::InsufficientTrust { required: HIGH_VALUE_MIN_TRUST, actual: score });
    }
    Ok(())
}

/// The checks of a payment that read nothing from the store, in the order [`pay_in`] makes them.
fn check_request(request: &PaymentRequest, trust: &TrustGraph, coop: &CoopRecord) -> Result<(), Error> {
    if request.from == request.to {
        return Err(Error::bad_request_field("to", "a payment needs two different accounts"));
    }
    if request.memo.as_ref().is_some_and(|m| m.chars().count() > 1000) {
        return Err(Error::bad_request_field("memo", "memo is at most 1000 characters"));
    }
    check_trust(trust, coop, &request.from, request.amount)
}

/// Locks every balance a batch will move, in one sorted pass, before its first transfer. Locked
/// item by item, two batches touching the same accounts in different orders could each hold a
/// row the other waits for, and PostgreSQL would break that deadlock by failing one of them.
/// Only the accounts of items that will reach their transfer are locked (members, passing the
/// checks that need no store read): taking a lock creates the balance row, and an item refused
/// earlier must leave no trace.
async fn lock_batch_accounts<T: CoopTx + LedgerTx + ?Sized>(
    tx: &mut T,
    coop: &CoopRecord,
    trust: &TrustGraph,
    items: &[PaymentRequest],
) -> Result<(), Error> {
    if items.len() < 2 {
        return Ok(());
    }
    let dids: std::collections::BTreeSet<Did> =
        items.iter().flat_map(|i| [&i.from, &i.to]).filter_map(|text| Did::parse(text).ok()).collect();
    let dids: Vec<&Did> = dids.iter().collect();
    let members: std::collections::BTreeSet<String> =
        tx.members_among(&coop.id, &dids).await?.into_iter().map(|m| m.did.to_string()).collect();
    let mut accounts: Vec<(String, Currency)> = items
        .iter()
        .filter(|i| members.contains(&i.from) && members.contains(&i.to) && check_request(i, trust, coop).is_ok())
        .flat_map(|i| {
            let currency = i.currency.clone().unwrap_or_else(|| coop.settings.default_currency.clone());
            [(i.from.clone(), currency.clone()), (i.to.clone(), currency)]
        })
        .collect();
    accounts.sort_by(|a, b| (a.0.as_str(), a.1.as_str()).cmp(&(b.0.as_str(), b.1.as_str())));
    accounts.dedup();
    if !accounts.is_empty() {
        tx.lock_balances(&coop.id, &accounts).await?;
    }
    Ok(())
}

/// Moves `amount` from one account to another, refusing to take `from` below `floor`.
/// Nothing is written unless every check passes.
pub async fn transfer<T: LedgerTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    from: &str,
    to: &str,
    amount: Amount,
    currency: &Currency,
    floor: Option<Amount>,
) -> Result<(), Error> {
    let balances =
        tx.lock_balances(coop, &[(from.to_owned(), currency.clone()), (to.to_owned(), currency.clone())]).await?;
    let (from_balance, to_balance) = (balances[0], balances[1]);
    let after = from_balance.checked_sub(amount).ok_or_else(|| Error::conflict("balance out of range"))?;
    if let Some(floor) = floor
        && after < floor
    {
        return Err(Error::InsufficientCredit {
            balance: from_balance,
            credit_limit: floor,
            currency: currency.to_string(),
        });
    }
    to_balance
        .checked_add(amount)
        .ok_or_else(|| Error::conflict("the payee's balance would leave the representable range"))?;
    let negative = amount.checked_neg().ok_or_else(|| Error::conflict("amount out of range"))?;
    tx.apply_deltas(coop, &[(from, currency, negative), (to, currency, amount)]).await
}

/// Records a transaction with its `PaymentCreated` event and the payee's notification.
pub async fn record_transaction<T: LedgerTx + EventTx + NotificationTx + ?Sized>(
    tx: &mut T,
    record: &TransactionRecord,
    notify_payee: Option<&Did>,
) -> Result<(), Error> {
    tx.insert_transaction(record).await?;
    emit(tx, &record.coop_id, record.timestamp, CoopEvent::PaymentCreated(record)).await?;
    if let Some(payee) = notify_payee {
        let (amount, currency) = match &record.conversion {
            Some(leg) => (leg.net_target_amount, leg.to_currency.clone()),
            None => (record.amount, record.currency.clone()),
        };
        let note = Note {
            title: "Payment received".to_owned(),
            body: format!("{} paid you {amount} {currency}.", record.from),
            data: NoteData::PaymentReceived {
                transaction_id: record.id.clone(),
                from: record.from.clone(),
                amount,
                currency,
            },
        };
        notify(tx, payee, &record.coop_id, note, record.timestamp).await?;
    }
    Ok(())
}

async fn pay_in<T: CoopTx + LedgerTx + EventTx + NotificationTx + ?Sized>(
    tx: &mut T,
    coop: &CoopRecord,
    request: &PaymentRequest,
    trust: &TrustGraph,
    now: u64,
    batch_id: Option<&str>,
) -> Result<TransactionRecord, Error> {
    check_request(request, trust, coop)?;
    let currency = request.currency.clone().unwrap_or_else(|| coop.settings.default_currency.clone());
    let (floor, payee) = payer_floor_and_payee(tx, coop, &request.from, &request.to).await?;
    transfer(tx, &coop.id, &request.from, &request.to, request.amount, &currency, Some(floor)).await?;
    let record = TransactionRecord {
        id: new_id(),
        coop_id: coop.id.clone(),
        kind: TransactionKind::Payment,
        from: request.from.clone(),
        to: request.to.clone(),
        amount: request.amount,
        currency,
        memo: request.memo.clone(),
        timestamp: now,
        conversion: None,
        request_signature: request.request_signature.clone(),
        batch_id: batch_id.map(str::to_owned),
    };
    record_transaction(tx, &record, Some(&payee)).await?;
    Ok(record)
}

async fn effective_rate<T: LedgerTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    from: &Currency,
    to: &Currency,
) -> Result<Amount, Error> {
    if from == to {
        return Err(Error::bad_request_field("to_currency", "from_currency and to_currency must differ"));
    }
    if let Some(rate) = tx.rate(coop, from, to).await? {
        return Ok(rate.rate);
    }
    match tx.rate(coop, to, from).await? {
        Some(opposite) => inverse(opposite.rate),
        None => Err(Error::not_found("rate", format!("{from}/{to}"))),
    }
}

fn inverse(rate: Amount) -> Result<Amount, Error> {
    let micros = 1_000_000_000_000i128 / i128::from(rate.micros().max(1));
    if micros == 0 {
        return Err(Error::conflict("the inverse rate is below the ledger's precision"));
    }
    Ok(Amount::from_micros(i64::try_from(micros).map_err(|_| Error::conflict("rate out of range"))?))
}

/// Prices a conversion: gross = amount × rate, fee = gross × fee_ppm / 10⁶, net = gross − fee,
/// each rounded down to the micro-unit.
pub fn price(
    coop: &CoopId,
    amount: Amount,
    from: Currency,
    to: Currency,
    rate: Amount,
    fee_ppm: u32,
    now: u64,
) -> Result<QuoteRecord, Error> {
    let gross = i128::from(amount.micros()) * i128::from(rate.micros()) / 1_000_000;
    let fee = gross * i128::from(fee_ppm) / 1_000_000;
    let net = gross - fee;
    let to_amount = |v: i128| {
        i64::try_from(v)
            .map(Amount::from_micros)
            .map_err(|_| Error::bad_request_field("amount", "converted amount out of range"))
    };
    let (gross, fee, net) = (to_amount(gross)?, to_amount(fee)?, to_amount(net)?);
    if net.micros() <= 0 {
        return Err(Error::bad_request_field("amount", "amount too small: the converted amount rounds to zero"));
    }
    Ok(QuoteRecord {
        id: new_id(),
        coop_id: coop.clone(),
        amount,
        from_currency: from,
        to_currency: to,
        rate,
        fee_ppm,
        gross_target_amount: gross,
        fee_amount: fee,
        net_target_amount: net,
        valid_until: now + QUOTE_VALIDITY_SECS,
        requester: None,
    })
}

async fn convert_in<T: CoopTx + LedgerTx + EventTx + NotificationTx + ?Sized>(
    tx: &mut T,
    coop: &CoopRecord,
    request: &ConversionRequest,
    trust: &TrustGraph,
    now: u64,
) -> Result<TransactionRecord, Error> {
    if request.from == request.to {
        return Err(Error::bad_request_field("to", "a payment needs two different accounts"));
    }
    check_trust(trust, coop, &request.from, request.amount)?;
    let live_quote = match &request.quote_id {
        Some(id) => {
            let quote = tx.quote(&coop.id, id).await?.ok_or_else(|| Error::not_found("quote", id.as_str()))?;
            if quote.requester.as_deref() != Some(request.from.as_str()) {
                return Err(Error::denied(
                    "quote_of_another_member",
                    "a quote can only be used by the member who asked for it",
                ));
            }
            if quote.valid_until < now {
                return Err(Error::conflict(format!("quote '{id}' expired at {}", quote.valid_until)));
            }
            if quote.from_currency != request.from_currency || quote.to_currency != request.to_currency {
                return Err(Error::bad_request_field("quote_id", "the quote is for another currency pair"));
            }
            if quote.amount != request.amount {
                return Err(Error::bad_request_field(
                    "amount",
                    format!("the quote is for an amount of {}, not {}", quote.amount, request.amount),
                ));
            }
            // Last of the checks, in the conversion's own transaction: a refusal after this
            // point rolls the use back with everything else.
            if !tx.use_quote(&coop.id, id, now).await? {
                return Err(Error::conflict(format!("quote '{id}' was already used")));
            }
            Some(quote)
        }
        None => None,
    };
    let (rate, fee_ppm) = match &live_quote {
        Some(q) => (q.rate, q.fee_ppm),
        None => (
            effective_rate(tx, &coop.id, &request.from_currency, &request.to_currency).await?,
            coop.settings.conversion_fee_ppm,
        ),
    };
    let priced = price(
        &coop.id,
        request.amount,
        request.from_currency.clone(),
        request.to_currency.clone(),
        rate,
        fee_ppm,
        now,
    )?;
    let net = priced.net_target_amount;
    if let Some(bound) = request.max_target_amount
        && net > bound
    {
        return Err(Error::SlippageExceeded { net_target_amount: net, bound });
    }
    if let Some(bound) = request.min_target_amount
        && net < bound
    {
        return Err(Error::SlippageExceeded { net_target_amount: net, bound });
    }
    let (floor, payee) = payer_floor_and_payee(tx, coop, &request.from, &request.to).await?;
    let exchange = exchange_account(&coop.id);
    // Both legs' checks before either leg's writes: the payee leg cannot fail on a floor (the
    // exchange account has none), so checking the payer leg first keeps "no partial writes".
    transfer(tx, &coop.id, &request.from, &exchange, request.amount, &request.from_currency, Some(floor)).await?;
    transfer(tx, &coop.id, &exchange, &request.to, net, &request.to_currency, None).await?;
    let record = TransactionRecord {
        id: new_id(),
        coop_id: coop.id.clone(),
        kind: TransactionKind::Conversion,
        from: request.from.clone(),
        to: request.to.clone(),
        amount: request.amount,
        currency: request.from_currency.clone(),
        memo: None,
        timestamp: now,
        conversion: Some(ConversionLeg {
            to_currency: request.to_currency.clone(),
            rate,
            gross_target_amount: priced.gross_target_amount,
            fee_amount: priced.fee_amount,
            net_target_amount: net,
        }),
        request_signature: request.request_signature.clone(),
        batch_id: None,
    };
    record_transaction(tx, &record, Some(&payee)).await?;
    Ok(record)
}

/// Whether an account id names one of the coop's system accounts.
pub fn is_system(coop: &CoopId, account: &str) -> bool {
    is_system_account(coop, account)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_accounts_are_exactly_the_coops_treasury_and_exchange() {
        let coop = CoopId::parse("bakery").unwrap();
        assert!(is_system(&coop, &treasury_account(&coop)));
        assert!(is_system(&coop, &exchange_account(&coop)));
        for other in [
            "coop:bakery:treasury2",
            "coop:bakery:",
            "coop:bakery",
            "coop:baker:treasury",
            "coop:bakery-2:treasury",
            "coop:other:exchange",
            "coop:bakery:Treasury",
            "Coop:bakery:treasury",
            "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
            "",
        ] {
            assert!(!is_system(&coop, other), "{other}");
        }
        let longer = CoopId::parse("bakery-2").unwrap();
        assert!(is_system(&longer, "coop:bakery-2:exchange"));
        assert!(!is_system(&coop, "coop:bakery-2:exchange"));
    }
}
