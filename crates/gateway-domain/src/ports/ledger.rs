//! The ledger's ports: transactions, balances, idempotency, exchange rates, quotes and history.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Did, Error, PageRequest};

/// Kind of ledger transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransactionKind {
    /// A payment in one currency.
    Payment,
    /// A cross-currency payment through the exchange account.
    Conversion,
}

impl TransactionKind {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TransactionKind::Payment => "payment",
            TransactionKind::Conversion => "conversion",
        }
    }
}

/// The target leg of a conversion.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConversionLeg {
    /// Currency credited to the payee.
    pub to_currency: Currency,
    /// Rate applied (target units per source unit).
    pub rate: Amount,
    /// `amount × rate`.
    pub gross_target_amount: Amount,
    /// Fee kept by the exchange account.
    pub fee_amount: Amount,
    /// Credited to the payee.
    pub net_target_amount: Amount,
}

/// One ledger transaction. It serialises so that an idempotent operation's result can be
/// stored and replayed as itself.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TransactionRecord {
    /// Unique id.
    pub id: String,
    /// Cooperative.
    pub coop_id: CoopId,
    /// Payment or conversion.
    pub kind: TransactionKind,
    /// Paying account (a DID or a system account).
    pub from: String,
    /// Receiving account.
    pub to: String,
    /// Amount debited from `from`.
    pub amount: Amount,
    /// Currency of `amount`.
    pub currency: Currency,
    /// Free text.
    pub memo: Option<String>,
    /// Unix seconds.
    pub timestamp: u64,
    /// Conversions only.
    pub conversion: Option<ConversionLeg>,
    /// The signature of the request that made it, when it was signed (INTERFACE.md §11).
    #[serde(default)]
    pub request_signature: Option<gateway_core::RequestSignature>,
    /// The batch it was an item of (`POST /payments/batch`): one id shared by the batch's
    /// payments, `None` for a payment made on its own.
    #[serde(default)]
    pub batch_id: Option<String>,
}

/// A stored response for an `Idempotency-Key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// Scope and key: `<coop>\u{1f}<did>\u{1f}<key>`.
    pub key: String,
    /// SHA-256 hex of method, path and body.
    pub request_hash: String,
    /// Status of the first response.
    pub status: u16,
    /// Body of the first response.
    pub body: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The number of the last event the first request's unit of work appended, which a replay
    /// carries as `ICN-Event-Seq` (INTERFACE.md §12): the store fills it in when it writes the
    /// answer (whatever the record says), `None` when the operation appended none.
    pub event_seq: Option<u64>,
}

/// A conversion quote, honoured until `valid_until` when its id is presented.
#[derive(Debug, Clone, PartialEq)]
pub struct QuoteRecord {
    /// Id returned as `quote_id`.
    pub id: String,
    /// Cooperative.
    pub coop_id: CoopId,
    /// Source amount quoted.
    pub amount: Amount,
    /// Source currency.
    pub from_currency: Currency,
    /// Target currency.
    pub to_currency: Currency,
    /// Rate applied.
    pub rate: Amount,
    /// Fee in ppm.
    pub fee_ppm: u32,
    /// `amount × rate`.
    pub gross_target_amount: Amount,
    /// The fee.
    pub fee_amount: Amount,
    /// What the payee would receive.
    pub net_target_amount: Amount,
    /// Unix seconds.
    pub valid_until: u64,
    /// The member who asked for the quote: only they may use it, once, for exactly `amount`.
    /// `None` on a price computed for a conversion without a quote (never stored).
    pub requester: Option<String>,
}

/// An exchange rate set by an oracle writer.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRecord {
    /// Source currency.
    pub from_currency: Currency,
    /// Target currency.
    pub to_currency: Currency,
    /// Target units per source unit.
    pub rate: Amount,
    /// Who set it.
    pub set_by: Did,
    /// Unix seconds.
    pub set_at: u64,
}

/// Ledger writes within a transaction.
#[async_trait]
pub trait LedgerTx: Send {
    /// Locks the balance rows of the given accounts (in a consistent order, so concurrent
    /// transactions cannot deadlock) and returns their balances, 0 for new accounts.
    async fn lock_balances(&mut self, coop: &CoopId, accounts: &[(String, Currency)]) -> Result<Vec<Amount>, Error>;
    /// Adds each delta to its account's balance (creating accounts at 0), in one statement.
    async fn apply_deltas(&mut self, coop: &CoopId, deltas: &[(&str, &Currency, Amount)]) -> Result<(), Error>;
    /// Adds `delta` to an account's balance (creating it at 0 first).
    async fn add_to_balance(
        &mut self,
        coop: &CoopId,
        account: &str,
        currency: &Currency,
        delta: Amount,
    ) -> Result<(), Error>;
    /// Records a transaction.
    async fn insert_transaction(&mut self, record: &TransactionRecord) -> Result<(), Error>;
    /// A stored idempotent response younger than `not_before`.
    async fn idempotency_get(&mut self, key: &str, not_before: u64) -> Result<Option<IdempotencyRecord>, Error>;
    /// Stores (or replaces an expired) idempotent response, with the number of the last event
    /// this unit of work appended (known at the latest when it commits).
    async fn idempotency_put(&mut self, record: &IdempotencyRecord) -> Result<(), Error>;
    /// Claims an `Idempotency-Key` for this transaction: drops the key's expired answer (older
    /// than `not_before`), then inserts a placeholder row (status 0) unless the key is taken.
    /// `None`: claimed (the caller must overwrite the placeholder with
    /// [`LedgerTx::idempotency_put`] before committing, or roll back). `Some`: the key's live
    /// record, whose `event_seq` the store reports as the unit of work's `ICN-Event-Seq` (see
    /// [`crate::ports::appended`]). On PostgreSQL a concurrent claim of the same key blocks on the unique index until
    /// the first transaction ends, then sees its committed row (or claims the key if it rolled
    /// back); SQLite runs one writer at a time.
    async fn idempotency_claim(
        &mut self,
        key: &str,
        request_hash: &str,
        now: u64,
        not_before: u64,
    ) -> Result<Option<IdempotencyRecord>, Error>;
    /// Sets an exchange rate.
    async fn put_rate(&mut self, coop: &CoopId, rate: &RateRecord) -> Result<(), Error>;
    /// Reads an exchange rate.
    async fn rate(&mut self, coop: &CoopId, from: &Currency, to: &Currency) -> Result<Option<RateRecord>, Error>;
    /// Stores a conversion quote.
    async fn put_quote(&mut self, quote: &QuoteRecord) -> Result<(), Error>;
    /// Reads a conversion quote of the coop.
    async fn quote(&mut self, coop: &CoopId, id: &str) -> Result<Option<QuoteRecord>, Error>;
    /// Marks a quote of the coop used at `now`, unless it already was: `true` when this call
    /// used it. A conditional write, so of concurrent uses exactly one gets `true` (quotes are
    /// single-use).
    async fn use_quote(&mut self, coop: &CoopId, id: &str, now: u64) -> Result<bool, Error>;
    /// Deletes the stored answers of keys created before `answers_before` and the quotes valid
    /// only until before `quotes_before` (Unix seconds); returns how many rows went.
    async fn prune_expired(&mut self, answers_before: u64, quotes_before: u64) -> Result<u64, Error>;
}

/// A ledger history query.
#[derive(Debug, Clone)]
pub struct HistoryQuery {
    /// Cooperative.
    pub coop: CoopId,
    /// Only transactions from or to this account.
    pub account: Option<String>,
    /// Only this currency (either leg).
    pub currency: Option<Currency>,
    /// Page.
    pub page: PageRequest,
}

/// What the balance route reads: the coop's default currency and every balance an account
/// holds, ordered by currency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoopBalances {
    /// The coop's default currency.
    pub default_currency: Currency,
    /// Every currency the account holds a balance in, with the balance, by currency.
    pub balances: Vec<(Currency, Amount)>,
}

/// Ledger reads.
#[async_trait]
pub trait LedgerReads: Send + Sync + fmt::Debug {
    /// The coop's default currency and every balance of one of its accounts, by currency,
    /// read together (the hot balance route); `None` when the coop does not exist.
    async fn coop_balances(&self, coop: &CoopId, account: &str) -> Result<Option<CoopBalances>, Error>;
    /// A page of history, newest first, and the total count.
    async fn history(&self, query: &HistoryQuery) -> Result<(Vec<TransactionRecord>, u64), Error>;
    /// Sum of all balances per (coop, currency), for the zero-sum gauge: every currency an
    /// account holds, and each coop's default currency (0 before any payment).
    async fn balance_sums(&self) -> Result<Vec<(CoopId, Currency, Amount)>, Error>;
    /// An exchange rate.
    async fn rate(&self, coop: &CoopId, from: &Currency, to: &Currency) -> Result<Option<RateRecord>, Error>;
    /// Number of transactions and distinct currencies of a coop.
    async fn coop_ledger_stats(&self, coop: &CoopId) -> Result<(u64, Vec<Currency>), Error>;
    /// Accounts whose stored balance differs from the sum of their transactions' legs: the
    /// ledger's integrity audit (zero when sound).
    async fn unreconciled_accounts(&self) -> Result<u64, Error>;
    /// Every payment and conversion recorded at or after `since` (Unix seconds), as (payer,
    /// timestamp), oldest first: the velocity limiter's durable source.
    async fn payments_since(&self, since: u64) -> Result<Vec<(String, u64)>, Error>;
    /// The committed answer stored under an `Idempotency-Key` (scoped key) at or after
    /// `not_before` (Unix seconds).
    async fn idempotency(&self, key: &str, not_before: u64) -> Result<Option<IdempotencyRecord>, Error>;
}
