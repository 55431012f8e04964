//! Storage ports: the small traits through which the domain reaches its store.
//!
//! Writes go through a unit of work: a domain operation is a job run against a [`Tx`] handle
//! (one store transaction) by a [`Transactor`]. Business rules live in the job, in this crate;
//! the store only provides primitives (read this row, add to that balance, append an event), so
//! every rule is written once for every backend. `Tx` is the sum of one small trait per
//! aggregate. Reads that need no transaction use the `*Reads` traits on a connection pool.
//!
//! Nothing here knows SQL or HTTP.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Did, Error, JsonText, PageRequest, Role};
use serde_json::Value;

use crate::governance::{Effect, Outcome, ProposalPayload, ProposalStatus};

/// A boxed, sendable future borrowing for `'a`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A unit of work as the transactor sees it. It answers only whether it succeeded, so one writer
/// can run jobs of every result type in one batch; [`transaction`] hands the typed result back
/// through a channel of the job's own type, read only once the store has committed.
pub type Job = Box<dyn for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<(), Error>> + Send>;

/// "Coop `coop_id` has committed events up to `seq`": the signal the event stream wakes on. The
/// events themselves are read from the outbox by sequence number, so a lost or duplicated
/// signal costs a read, never an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoopSignal {
    /// The coop.
    pub coop_id: CoopId,
    /// A sequence number it has reached.
    pub seq: u64,
}

/// Announces committed events: in-process after each commit, and (PostgreSQL) from other
/// replicas through LISTEN/NOTIFY.
pub trait EventFeed: Send + Sync + fmt::Debug {
    /// A receiver of every signal from now on. A receiver that falls behind gets `Lagged` and
    /// should re-read the outbox by sequence number.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<CoopSignal>;
}

/// Told after a commit that changed who belongs to a coop or in which role, so that caches in
/// front of the store (the per-request membership check) forget what they knew of that coop.
pub trait MembershipObserver: Send + Sync + fmt::Debug {
    /// The coop's members or roles changed.
    fn membership_changed(&self, coop: &CoopId);
}

/// Whether the store answers, for health and readiness probes.
#[async_trait]
pub trait StoreHealth: Send + Sync + fmt::Debug {
    /// The backend's name as reported by `/v1/health`: `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Succeeds when a trivial query round-trips.
    async fn ping(&self) -> Result<(), Error>;

    /// Whether the store can commit now, judged from the latest commits and write probes: an
    /// error (503) from the first commit that failed for the store's own reasons (a full or
    /// stalled disk, a database that refuses writes or is gone) until one succeeds again.
    fn writable(&self) -> Result<(), Error>;

    /// Commits a trivial write through the same path as every unit of work, and records the
    /// outcome that [`writable`](Self::writable) reports.
    async fn probe_write(&self) -> Result<(), Error>;
}

/// Runs units of work atomically and durably: when `run` returns `Ok`, the job's writes
/// are committed (and on disk, except in the in-memory mode); when the job fails, none of its
/// writes remain.
#[async_trait]
pub trait Transactor: Send + Sync + fmt::Debug {
    /// Runs one job and commits it. Use [`transaction`] instead.
    async fn run(&self, job: Job) -> Result<(), Error>;
}

/// Runs `job` in one store transaction and returns its result.
pub async fn transaction<T, F>(transactor: &dyn Transactor, job: F) -> Result<T, Error>
where
    T: Send + 'static,
    F: for<'t> FnOnce(&'t mut dyn Tx) -> BoxFuture<'t, Result<T, Error>> + Send + 'static,
{
    let (result, mut committed) = tokio::sync::oneshot::channel::<T>();
    let job: Job = Box::new(move |tx: &mut dyn Tx| {
        let future = job(tx);
        Box::pin(async move {
            let value = future.await?;
            // Delivered to the caller only if the store then commits (below).
            let _ = result.send(value);
            Ok(())
        })
    });
    transactor.run(job).await?;
    committed.try_recv().map_err(|_| Error::Internal("a committed unit of work left no result".into()))
}

/// The number of the last event a request's units of work appended, for the answer's
/// `ICN-Event-Seq` (contract 12): the HTTP layer runs each request inside [`appended::track`],
/// and the store calls [`appended::record`] after each commit that appended events.
pub mod appended {
    use std::cell::Cell;
    use std::future::Future;

    tokio::task_local! {
        static LAST: Cell<Option<u64>>;
    }

    /// Runs `future`, and gives with its output the number of the last event its units of work
    /// appended (the highest, should it append to the coop more than once).
    pub async fn track<F: Future>(future: F) -> (F::Output, Option<u64>) {
        LAST.scope(Cell::new(None), async move {
            let output = future.await;
            (output, LAST.with(Cell::get))
        })
        .await
    }

    /// Notes that a unit of work of the current request committed event `seq` (nothing outside
    /// [`track`]).
    pub fn record(seq: u64) {
        let _ = LAST.try_with(|last| last.set(Some(last.get().map_or(seq, |s| s.max(seq)))));
    }
}

/// Everything one transaction can touch.
pub trait Tx: LedgerTx + EventTx + NotificationTx + CoopTx + TrustTx + GovTx + ComputeTx + LogTx + Send {}

impl<T: LedgerTx + EventTx + NotificationTx + CoopTx + TrustTx + GovTx + ComputeTx + LogTx + Send> Tx for T {}

// ---------------------------------------------------------------------------------------------
// Records

/// Settings of a cooperative.
#[derive(Debug, Clone, PartialEq)]
pub struct CoopSettings {
    /// Currency used when a payment names none.
    pub default_currency: Currency,
    /// Lowest balance a member may reach (zero or negative).
    pub credit_limit: Amount,
    /// Payments of at least this amount need trust 0.5.
    pub high_value_threshold: Amount,
    /// Conversion fee in parts per million of the gross target amount (1% = 10 000).
    pub conversion_fee_ppm: u32,
    /// Quorum for governance, percent of a domain's members.
    pub quorum_percent: u32,
    /// Whether critical operations need a valid request signature (contract 11).
    pub require_signed_requests: bool,
}

impl Default for CoopSettings {
    fn default() -> Self {
        Self {
            default_currency: Currency::parse("hours").expect("valid"),
            credit_limit: Amount::from_units(-1000),
            high_value_threshold: Amount::from_units(1000),
            conversion_fee_ppm: 0,
            quorum_percent: 50,
            require_signed_requests: false,
        }
    }
}

/// A cooperative.
#[derive(Debug, Clone, PartialEq)]
pub struct CoopRecord {
    /// Its id.
    pub id: CoopId,
    /// Display name.
    pub name: String,
    /// Kind of cooperative, e.g. `worker`.
    pub coop_type: String,
    /// Free text.
    pub description: String,
    /// Creation time, Unix seconds.
    pub created_at: u64,
    /// Its creator, the first admin.
    pub created_by: Did,
    /// Settings.
    pub settings: CoopSettings,
    /// Number of members.
    pub member_count: u64,
}

/// A member of a cooperative.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    /// The member.
    pub did: Did,
    /// Role.
    pub role: Role,
    /// When they joined, Unix seconds.
    pub joined_at: u64,
    /// Per-member credit limit override.
    pub credit_limit: Option<Amount>,
}

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
    /// The signature of the request that made it, when it was signed (contract 11).
    #[serde(default)]
    pub request_signature: Option<gateway_core::RequestSignature>,
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
}

/// A coop event as stored in the outbox.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// Cooperative.
    pub coop_id: CoopId,
    /// Per-coop sequence number: 1, 2, 3, … without gaps.
    pub seq: u64,
    /// `CoopEventType` name, e.g. `PaymentCreated`.
    pub event_type: String,
    /// Unix seconds.
    pub timestamp: u64,
    /// Kind-specific data, as the exact text it was written as.
    pub data: JsonText,
}

/// A notification to one DID.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationRecord {
    /// Unique id.
    pub id: String,
    /// Recipient.
    pub recipient: Did,
    /// Cooperative it concerns.
    pub coop_id: CoopId,
    /// Machine kind, e.g. `payment_received`.
    pub kind: String,
    /// Short title.
    pub title: String,
    /// Human text.
    pub body: String,
    /// Structured data, as the exact text it was written as.
    pub data: JsonText,
    /// Unix seconds.
    pub created_at: u64,
    /// When marked read.
    pub read_at: Option<u64>,
}

/// The same notification for many recipients, stored once until it is expanded.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationFanout {
    /// Everyone it is for, in order.
    pub recipients: Vec<Did>,
    /// Cooperative it concerns.
    pub coop_id: CoopId,
    /// Machine kind, e.g. `proposal_closed`.
    pub kind: String,
    /// Short title.
    pub title: String,
    /// Human text.
    pub body: String,
    /// Structured data, as the exact text it was written as.
    pub data: JsonText,
    /// Unix seconds.
    pub created_at: u64,
}

/// A directed trust edge.
#[derive(Debug, Clone, PartialEq)]
pub struct TrustEdge {
    /// Who trusts.
    pub source: Did,
    /// Whom.
    pub target: Did,
    /// `0 ..= 1`.
    pub score: f64,
    /// Unix seconds.
    pub updated_at: u64,
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

// ---------------------------------------------------------------------------------------------
// Transaction primitives, one trait per aggregate

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
    /// Stores (or replaces an expired) idempotent response.
    async fn idempotency_put(&mut self, record: &IdempotencyRecord) -> Result<(), Error>;
    /// Claims an `Idempotency-Key` for this transaction: drops the key's expired answer (older
    /// than `not_before`), then inserts a placeholder row (status 0) unless the key is taken.
    /// `None`: claimed (the caller must overwrite the placeholder with
    /// [`LedgerTx::idempotency_put`] before committing, or roll back). `Some`: the key's live
    /// record. On PostgreSQL a concurrent claim of the same key blocks on the unique index until
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

/// The event outbox.
#[async_trait]
pub trait EventTx: Send {
    /// Appends an event with the coop's next sequence number. Numbers follow the commit order
    /// without gaps; a store may assign the number only at the end of the unit of work (so that
    /// the coop's sequence is held for as short a time as possible), which is why it is not
    /// returned.
    async fn append_event(
        &mut self,
        coop: &CoopId,
        event_type: &str,
        timestamp: u64,
        data: &JsonText,
    ) -> Result<(), Error>;

    /// Deletes events older than `older_than` (Unix seconds), keeping at least each coop's
    /// last `keep_last`; returns how many were deleted.
    async fn prune_events(&mut self, keep_last: u64, older_than: u64) -> Result<u64, Error>;
}

/// Notification writes.
#[async_trait]
pub trait NotificationTx: Send {
    /// Stores a notification.
    async fn insert_notification(&mut self, notification: &NotificationRecord) -> Result<(), Error>;
    /// Stores one notification for many recipients as a single pending fan-out (a close
    /// notifies every member of its domain); [`expand_notification_fanouts`] turns it into
    /// one notification per recipient later, in a transaction of its own.
    ///
    /// [`expand_notification_fanouts`]: NotificationTx::expand_notification_fanouts
    async fn insert_notification_fanout(&mut self, fanout: &NotificationFanout) -> Result<(), Error>;
    /// Turns every pending fan-out into one unread notification per recipient (each with a
    /// fresh id) and removes it, in order; returns how many notifications were created. Two
    /// concurrent calls never expand the same fan-out twice.
    async fn expand_notification_fanouts(&mut self) -> Result<u64, Error>;
    /// Marks one of the recipient's notifications of `coop` read; `None` when it is not theirs
    /// or concerns another coop.
    async fn mark_notification_read(
        &mut self,
        recipient: &Did,
        coop: &CoopId,
        id: &str,
        at: u64,
    ) -> Result<Option<NotificationRecord>, Error>;
    /// Marks all of the recipient's unread notifications of `coop` read; returns how many.
    async fn mark_all_notifications_read(&mut self, recipient: &Did, coop: &CoopId, at: u64) -> Result<u64, Error>;
    /// Deletes the notifications read before `read_before` and every one created before
    /// `created_before` (Unix seconds); returns how many went.
    async fn prune_notifications(&mut self, read_before: u64, created_before: u64) -> Result<u64, Error>;
}

/// Cooperative and member writes (and reads that must see the transaction).
#[async_trait]
pub trait CoopTx: Send {
    /// The coop, if it exists.
    async fn coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error>;
    /// The coop, if it exists, holding its row (`FOR UPDATE` on PostgreSQL; SQLite's single
    /// writer already serialises every write) until the transaction ends. Taken by membership
    /// changes before they count admins, so that two of them on one coop are serialised; never
    /// by payments, which must not queue behind each other on the coop row.
    async fn lock_coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error>;
    /// The member, if it is one.
    async fn member(&mut self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error>;
    /// Which of these DIDs are members, in one query (order not kept).
    async fn members_among(&mut self, coop: &CoopId, dids: &[&Did]) -> Result<Vec<MemberRecord>, Error>;
    /// Creates a coop (the caller checked it does not exist).
    async fn insert_coop(&mut self, coop: &CoopRecord) -> Result<(), Error>;
    /// Replaces a coop's settings.
    async fn update_settings(&mut self, coop: &CoopId, settings: &CoopSettings) -> Result<(), Error>;
    /// Adds a member.
    async fn insert_member(&mut self, coop: &CoopId, member: &MemberRecord) -> Result<(), Error>;
    /// Changes a member's role and credit-limit override.
    async fn update_member(&mut self, coop: &CoopId, member: &MemberRecord) -> Result<(), Error>;
    /// Removes a member.
    async fn delete_member(&mut self, coop: &CoopId, did: &Did) -> Result<(), Error>;
    /// Number of admins.
    async fn count_admins(&mut self, coop: &CoopId) -> Result<u64, Error>;
    /// The DIDs of every member of the coop, in DID order.
    async fn member_dids(&mut self, coop: &CoopId) -> Result<Vec<Did>, Error>;
}

/// Trust edge writes.
#[async_trait]
pub trait TrustTx: Send {
    /// Sets or replaces an edge; returns whether one existed.
    async fn upsert_edge(&mut self, edge: &TrustEdge) -> Result<bool, Error>;
    /// Removes an edge; returns whether it existed.
    async fn delete_edge(&mut self, source: &Did, target: &Did) -> Result<bool, Error>;
}

/// A governance domain.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainRecord {
    /// Cooperative.
    pub coop_id: CoopId,
    /// Id within the coop.
    pub domain_id: String,
    /// Display name.
    pub name: String,
    /// Who may vote.
    pub members: Vec<Did>,
    /// Quorum override (else the coop's setting).
    pub quorum_percent: Option<u32>,
    /// Default rule of its proposals (`majority` when absent).
    pub rule: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
}

/// A proposal as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposalRecord {
    /// Id.
    pub id: String,
    /// Cooperative.
    pub coop_id: CoopId,
    /// Domain.
    pub domain_id: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// What it changes when approved.
    pub payload: ProposalPayload,
    /// Decision rule.
    pub rule: String,
    /// Author.
    pub author: Did,
    /// Where it is in its life.
    pub status: ProposalStatus,
    /// Seconds of voting once opened.
    pub voting_duration_secs: u64,
    /// Unix seconds.
    pub created_at: u64,
    /// When opened.
    pub opened_at: Option<u64>,
    /// When voting ends.
    pub closes_at: Option<u64>,
    /// When closed.
    pub closed_at: Option<u64>,
    /// The outcome, once closed.
    pub outcome: Option<Outcome>,
    /// `(for, against, abstain)`, once closed.
    pub tally: Option<(u64, u64, u64)>,
    /// Why no receipt was stored at close, if none was.
    pub receipt_unavailable: Option<String>,
    /// What closing it did to the coop: set when an approved proposal with an effect closed.
    pub effect: Option<Effect>,
}

/// A delegation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationRecord {
    /// Id.
    pub id: String,
    /// Cooperative.
    pub coop_id: CoopId,
    /// Who delegates.
    pub delegator: Did,
    /// To whom.
    pub delegate: Did,
    /// `blanket`, `domain:<id>` or `proposal:<id>`.
    pub scope: String,
    /// Unix seconds, exclusive.
    pub expires_at: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
}

/// A receipt signing key, current or retired.
///
/// Each coop signs with its own key, derived from the keystore's master secret number `master`
/// at the coop's key generation `generation` (`governance::derive_receipt_key`). Rows from
/// before per-coop keys (one key for the whole gateway) have no coop, master or generation:
/// they are listed to every coop, since they signed every coop's receipts.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningKeyRecord {
    /// 32-byte Ed25519 key, hex.
    pub public_key: String,
    /// Its `did:key`.
    pub did: String,
    /// Unix seconds, inclusive.
    pub valid_from: u64,
    /// Unix seconds, exclusive; `None` for the current key.
    pub valid_until: Option<u64>,
    /// The coop whose key it is; `None` for the gateway-wide key of before per-coop keys.
    pub coop_id: Option<CoopId>,
    /// The number of the keystore master secret it was derived from.
    pub master: Option<u32>,
    /// The coop's key generation it was derived for.
    pub generation: Option<u32>,
}

/// Governance writes (and reads that must see the transaction).
#[async_trait]
pub trait GovTx: Send {
    /// A domain of the coop.
    async fn domain(&mut self, coop: &CoopId, domain_id: &str) -> Result<Option<DomainRecord>, Error>;
    /// Creates a domain.
    async fn insert_domain(&mut self, domain: &DomainRecord) -> Result<(), Error>;
    /// Every domain of the coop, as stored (the coop domain's members are not stored).
    async fn domains(&mut self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error>;
    /// Replaces a domain's name, members, quorum and rule.
    async fn update_domain(&mut self, domain: &DomainRecord) -> Result<(), Error>;
    /// A proposal of the coop.
    async fn proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error>;
    /// A proposal of the coop, holding its row until the transaction ends (`FOR UPDATE` on
    /// PostgreSQL; a plain read under SQLite's single writer), so that concurrent opens, votes
    /// and closes of one proposal decide on its latest status one after the other.
    async fn lock_proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error>;
    /// Creates a proposal.
    async fn insert_proposal(&mut self, proposal: &ProposalRecord) -> Result<(), Error>;
    /// When each proposal `author` created in the coop at or after `since` (Unix seconds) was
    /// created: the per-author creation bound's window.
    async fn proposal_times_by_author(&mut self, coop: &CoopId, author: &Did, since: u64) -> Result<Vec<u64>, Error>;
    /// Replaces a proposal's mutable fields (status, times, outcome, tally, effect, and the rule
    /// that decided it).
    async fn update_proposal(&mut self, proposal: &ProposalRecord) -> Result<(), Error>;
    /// Sets a voter's vote, with the signature of the request that cast it (or none, which
    /// clears an earlier one's); returns whether it replaced an earlier vote.
    async fn upsert_vote(
        &mut self,
        proposal_id: &str,
        voter: &Did,
        choice: &str,
        at: u64,
        signature: Option<&gateway_core::RequestSignature>,
    ) -> Result<bool, Error>;
    /// The request signatures of the current votes of a proposal that were cast signed.
    async fn vote_signatures(&mut self, proposal_id: &str)
    -> Result<Vec<(Did, gateway_core::RequestSignature)>, Error>;
    /// Every direct vote of a proposal: (voter, choice).
    async fn votes(&mut self, proposal_id: &str) -> Result<Vec<(Did, String)>, Error>;
    /// Creates a delegation.
    async fn insert_delegation(&mut self, delegation: &DelegationRecord) -> Result<(), Error>;
    /// Every delegation of the coop (revoked ones excluded).
    async fn delegations(&mut self, coop: &CoopId) -> Result<Vec<DelegationRecord>, Error>;
    /// Deletes a delegation of this delegator; returns whether it existed.
    async fn delete_delegation(&mut self, coop: &CoopId, delegator: &Did, id: &str) -> Result<bool, Error>;
    /// Deletes every delegation of the coop given or received by `did`; returns how many.
    async fn delete_delegations_involving(&mut self, coop: &CoopId, did: &Did) -> Result<u64, Error>;
    /// Stores a receipt (unique per proposal and per (timestamp, proposal)).
    async fn insert_receipt(
        &mut self,
        coop: &CoopId,
        proposal_id: &str,
        timestamp: u64,
        body: &Value,
    ) -> Result<(), Error>;
    /// The coop's receipt key generation (0 until its first rotation), holding it (a row lock
    /// where the backend has them) until the transaction ends, so that a concurrent rotation
    /// and a close of the same coop are serialised.
    async fn receipt_key_generation(&mut self, coop: &CoopId) -> Result<u32, Error>;
    /// Moves the coop to its next key generation and retires its current key (valid through
    /// the second `at`); returns the new generation.
    async fn bump_receipt_key_generation(&mut self, coop: &CoopId, at: u64) -> Result<u32, Error>;
    /// The coop's current signing key (`valid_until` unset), if one is recorded.
    async fn current_signing_key(&mut self, coop: &CoopId) -> Result<Option<SigningKeyRecord>, Error>;
    /// Records `key` (which names its coop) as the coop's current key from `key.valid_from`,
    /// retiring the coop's previous current key (valid through that second).
    async fn activate_signing_key(&mut self, key: &SigningKeyRecord) -> Result<(), Error>;
}

/// Where a compute task is in its life. Spelled as text only at the store and wire boundaries
/// ([`TaskStatus::as_str`], [`TaskStatus::parse`]), so a misspelt state cannot compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Waiting for an executor.
    Pending,
    /// Claimed by an executor, not yet completed.
    Claimed,
    /// Being run (the `running` filter matches it and `claimed`).
    Running,
    /// Ended with a result.
    Completed,
    /// Ended with a failure (including running out of fuel).
    Failed,
    /// Cancelled by its submitter.
    Cancelled,
    /// Its claims ran out of time.
    TimedOut,
}

impl TaskStatus {
    /// Every status.
    pub const ALL: [TaskStatus; 7] = [
        TaskStatus::Pending,
        TaskStatus::Claimed,
        TaskStatus::Running,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::TimedOut,
    ];

    /// The wire and storage spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::TimedOut => "timed_out",
        }
    }

    /// The status spelled `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether an executor holds the task (`claimed` or `running`).
    pub const fn is_claimed(self) -> bool {
        matches!(self, TaskStatus::Claimed | TaskStatus::Running)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a task ended (`result.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    /// The code ran to its end.
    Success,
    /// The code failed.
    Failed,
    /// The code used up its fuel.
    OutOfFuel,
    /// No executor completed it in time.
    Timeout,
    /// Its submitter cancelled it.
    Cancelled,
}

impl TaskOutcome {
    /// Every outcome.
    pub const ALL: [TaskOutcome; 5] = [
        TaskOutcome::Success,
        TaskOutcome::Failed,
        TaskOutcome::OutOfFuel,
        TaskOutcome::Timeout,
        TaskOutcome::Cancelled,
    ];

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Success => "success",
            TaskOutcome::Failed => "failed",
            TaskOutcome::OutOfFuel => "out_of_fuel",
            TaskOutcome::Timeout => "timeout",
            TaskOutcome::Cancelled => "cancelled",
        }
    }

    /// The outcome spelled `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// The status a task ends in with this outcome.
    pub const fn status(self) -> TaskStatus {
        match self {
            TaskOutcome::Success => TaskStatus::Completed,
            TaskOutcome::Failed | TaskOutcome::OutOfFuel => TaskStatus::Failed,
            TaskOutcome::Timeout => TaskStatus::TimedOut,
            TaskOutcome::Cancelled => TaskStatus::Cancelled,
        }
    }
}

impl fmt::Display for TaskOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of an ended task: `{"outcome", "output", "error", "fuel_used"}` on the wire.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskResult {
    /// How it ended.
    pub outcome: TaskOutcome,
    /// The output (any JSON; `null` when there is none).
    pub output: Value,
    /// Why it failed.
    pub error: Option<String>,
    /// Fuel spent.
    pub fuel_used: u64,
}

/// A compute task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// Id.
    pub task_id: String,
    /// Cooperative of the submitter's token.
    pub coop_id: CoopId,
    /// SHA-256 hex of the canonical task.
    pub task_hash: String,
    /// Where it is in its life.
    pub status: TaskStatus,
    /// Who submitted it.
    pub submitter: Did,
    /// Who claimed it (a DID, or `builtin`).
    pub executor: Option<String>,
    /// `ccl`.
    pub code_type: String,
    /// The serialised contract.
    pub code: String,
    /// String inputs.
    pub inputs: Value,
    /// Fuel bound.
    pub fuel_limit: u64,
    /// `low`, `normal` or `high`.
    pub priority: String,
    /// Unix seconds.
    pub submitted_at: u64,
    /// When claimed.
    pub claimed_at: Option<u64>,
    /// When the current claim times out.
    pub deadline: Option<u64>,
    /// Claims so far.
    pub attempts: u32,
    /// When it ended.
    pub finished_at: Option<u64>,
    /// Set once it ended.
    pub result: Option<TaskResult>,
}

/// Compute task writes.
#[async_trait]
pub trait ComputeTx: Send {
    /// Stores a new task.
    async fn insert_task(&mut self, task: &TaskRecord) -> Result<(), Error>;
    /// A task of the coop.
    async fn task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error>;
    /// A task of the coop, holding its row until the transaction ends (`FOR UPDATE` on
    /// PostgreSQL; a plain read under SQLite's single writer), so that concurrent claims,
    /// completions and cancellations of one task decide on its latest status one after the other.
    async fn lock_task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error>;
    /// Replaces a task's mutable fields.
    async fn update_task(&mut self, task: &TaskRecord) -> Result<(), Error>;
}

// ---------------------------------------------------------------------------------------------
// Reads outside transactions

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

/// Cooperative reads.
#[async_trait]
pub trait CoopReads: Send + Sync + fmt::Debug {
    /// A coop.
    async fn coop(&self, id: &CoopId) -> Result<Option<CoopRecord>, Error>;
    /// Coops the DID is a member of, a page and the total.
    async fn coops_of(&self, did: &Did, page: PageRequest) -> Result<(Vec<CoopRecord>, u64), Error>;
    /// Members of a coop, a page and the total.
    async fn members(&self, coop: &CoopId, page: PageRequest) -> Result<(Vec<MemberRecord>, u64), Error>;
    /// One member.
    async fn member(&self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error>;
}

/// Notification reads.
#[async_trait]
pub trait NotificationReads: Send + Sync + fmt::Debug {
    /// A page of the recipient's notifications of `coop` (newest first), their total, and the
    /// recipient's unread count in `coop`.
    async fn notifications(
        &self,
        recipient: &Did,
        coop: &CoopId,
        unread_only: bool,
        page: PageRequest,
    ) -> Result<(Vec<NotificationRecord>, u64, u64), Error>;
    /// Whether any fan-out is still waiting to be expanded.
    async fn pending_notification_fanouts(&self) -> Result<bool, Error>;
}

/// Trust reads.
#[async_trait]
pub trait TrustReads: Send + Sync + fmt::Debug {
    /// Every edge, for building the in-memory graph.
    async fn all_edges(&self) -> Result<Vec<TrustEdge>, Error>;
}

/// A proposal list query.
#[derive(Debug, Clone)]
pub struct ProposalQuery {
    /// Cooperative.
    pub coop: CoopId,
    /// Only this domain.
    pub domain: Option<String>,
    /// Only this status.
    pub status: Option<ProposalStatus>,
    /// Page.
    pub page: PageRequest,
}

/// Governance reads.
#[async_trait]
pub trait GovReads: Send + Sync + fmt::Debug {
    /// The DIDs of every member of the coop, in DID order (the coop domain's members).
    async fn member_dids(&self, coop: &CoopId) -> Result<Vec<Did>, Error>;
    /// Domains of a coop.
    async fn domains(&self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error>;
    /// One proposal, read without queuing behind the writer.
    async fn proposal(&self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error>;
    /// A page of proposals (newest first) and the total.
    async fn proposals(&self, query: &ProposalQuery) -> Result<(Vec<ProposalRecord>, u64), Error>;
    /// All and open proposals of a coop.
    async fn proposal_counts(&self, coop: &CoopId) -> Result<(u64, u64), Error>;
    /// Open proposals whose voting time has ended: (coop, id).
    async fn expired_proposals(&self, now: u64) -> Result<Vec<(CoopId, String)>, Error>;
    /// A stored receipt.
    async fn receipt(&self, coop: &CoopId, proposal_id: &str) -> Result<Option<Value>, Error>;
    /// The coop's signing keys, current and retired (with the gateway-wide keys of before
    /// per-coop keys), oldest first.
    async fn signing_keys(&self, coop: &CoopId) -> Result<Vec<SigningKeyRecord>, Error>;
}

/// Compute task reads.
#[async_trait]
pub trait ComputeReads: Send + Sync + fmt::Debug {
    /// One task, read without queuing behind the writer.
    async fn task(&self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error>;
    /// A page of a coop's tasks (newest first) with these statuses (all when empty), and the total.
    async fn tasks(
        &self,
        coop: &CoopId,
        statuses: &[TaskStatus],
        page: PageRequest,
    ) -> Result<(Vec<TaskRecord>, u64), Error>;
    /// The oldest pending tasks of any coop, highest priority first.
    async fn pending_tasks(&self, limit: u32) -> Result<Vec<(CoopId, String)>, Error>;
    /// Claimed tasks whose deadline has passed.
    async fn expired_claims(&self, now: u64) -> Result<Vec<(CoopId, String)>, Error>;
}

/// Event outbox reads, for the WebSocket stream.
#[async_trait]
pub trait EventReads: Send + Sync + fmt::Debug {
    /// Events of a coop with `seq > after`, in order, at most `limit`.
    async fn events_after(&self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error>;
    /// Highest assigned sequence number of a coop (0 when none).
    async fn current_seq(&self, coop: &CoopId) -> Result<u64, Error>;
    /// Lowest retained sequence number of a coop (0 when none).
    async fn oldest_seq(&self, coop: &CoopId) -> Result<u64, Error>;
    /// Deletes events that are both beyond the newest `keep_last` of their coop and older than
    /// `older_than` (Unix seconds): retention keeps whichever of the two is more. Returns how
    /// many were deleted.
    async fn prune_events(&self, keep_last: u64, older_than: u64) -> Result<u64, Error>;
}

// ---------------------------------------------------------------------------------------------
// The coop's log (contract 12)

/// Where a coop's log stands: entry 0 (`LogOpened`) follows event `after_seq`; entry `i ≥ 1` is
/// event `after_seq + i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHead {
    /// The event sequence number entry 0 follows (0 for a coop whose log began with it).
    pub after_seq: u64,
    /// Entries stored, and hashed into the tiles.
    pub size: u64,
    /// The tree size of the latest signed checkpoint (0 before the first).
    pub signed_size: u64,
    /// The latest signed checkpoint, as the signed note published (cosignatures included).
    pub checkpoint: Option<String>,
}

impl LogHead {
    /// The sequence number of the last event in the log (`after_seq` while only entry 0 is).
    pub fn logged_seq(&self) -> u64 {
        self.after_seq + self.size.saturating_sub(1)
    }
}

/// The coop's log in a unit of work: its head, entries and hash tiles. Entries and tiles are
/// only ever added (a partial tile is replaced by a wider one); nothing here deletes.
#[async_trait]
pub trait LogTx: Send {
    /// The coop's log head; with `lock`, held until the unit of work ends, and `None` also when
    /// another unit of work holds it (PostgreSQL: `FOR UPDATE SKIP LOCKED`), so that two
    /// replicas never extend one log at once.
    async fn log_head(&mut self, coop: &CoopId, lock: bool) -> Result<Option<LogHead>, Error>;
    /// Whether the coop has a log (locked or not).
    async fn has_log(&mut self, coop: &CoopId) -> Result<bool, Error>;
    /// Creates the coop's log head (its entries and tiles are written separately).
    async fn insert_log(&mut self, coop: &CoopId, head: &LogHead) -> Result<(), Error>;
    /// Moves the coop's log head.
    async fn update_log(&mut self, coop: &CoopId, head: &LogHead) -> Result<(), Error>;
    /// Stores entries `first`, `first + 1`, … of the coop's log.
    async fn insert_log_entries(&mut self, coop: &CoopId, first: u64, entries: &[String]) -> Result<(), Error>;
    /// Entries `first .. first + count` of the coop's log that exist, in order.
    async fn log_entries(&mut self, coop: &CoopId, first: u64, count: u64) -> Result<Vec<String>, Error>;
    /// The stored bytes of hash tile `(level, index)` (its hashes so far, 32 bytes each).
    async fn log_tile(&mut self, coop: &CoopId, level: u8, index: u64) -> Result<Option<Vec<u8>>, Error>;
    /// Stores (or widens) hash tile `(level, index)`.
    async fn put_log_tile(&mut self, coop: &CoopId, level: u8, index: u64, hashes: &[u8]) -> Result<(), Error>;
    /// The coop's committed events with `seq > after`, in order, at most `limit`, held from
    /// being numbered further until the unit of work ends when `lock` (the log's snapshot).
    async fn events_to_log(&mut self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error>;
    /// The coop's last event number, its counter held until the unit of work ends, so that no
    /// event is numbered while a snapshot of the coop is read.
    async fn lock_event_counter(&mut self, coop: &CoopId) -> Result<u64, Error>;
    /// Every member of the coop, by DID.
    async fn all_members(&mut self, coop: &CoopId) -> Result<Vec<MemberRecord>, Error>;
    /// Every non-zero balance of the coop: `(account, currency, balance)`, by account then
    /// currency.
    async fn all_balances(&mut self, coop: &CoopId) -> Result<Vec<(String, Currency, Amount)>, Error>;
    /// Coops whose log is behind their events, or that have none yet, at most `limit`.
    async fn coops_behind_log(&mut self, limit: u32) -> Result<Vec<CoopId>, Error>;
}

/// Log reads outside a unit of work, for the log's HTTP routes and the audits.
#[async_trait]
pub trait LogReads: Send + Sync + fmt::Debug {
    /// The coop's log head, if it has a log.
    async fn log_head(&self, coop: &CoopId) -> Result<Option<LogHead>, Error>;
    /// Entries `first .. first + count` that exist, in order.
    async fn log_entries(&self, coop: &CoopId, first: u64, count: u64) -> Result<Vec<String>, Error>;
    /// The stored bytes of hash tile `(level, index)`.
    async fn log_tile(&self, coop: &CoopId, level: u8, index: u64) -> Result<Option<Vec<u8>>, Error>;
    /// Every coop that has a log.
    async fn logged_coops(&self) -> Result<Vec<CoopId>, Error>;
}
