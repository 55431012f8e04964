//! A typed async SDK of the cooperative gateway.
//!
//! [`Client`] covers every route of INTERFACE.md (the `/v1` family, plus the short-family
//! routes whose behaviour differs: the caller's own balance and create-and-open proposals),
//! logs in with an Ed25519 [`Identity`] by challenge and signature, renews its token shortly
//! before it expires, parses the error body into the interface's client-side classes
//! ([`Error`]), retries what is safe to retry ([`RetryPolicy`]), and follows a cooperative's
//! event stream with automatic reconnection and backfill ([`Client::subscribe`]).
//!
//! ```no_run
//! # async fn example() -> Result<(), gateway_client::Error> {
//! use gateway_client::{Client, Identity, PaymentRequest};
//! use gateway_core::{Amount, CoopId, Did, Scope};
//!
//! let client = Client::new("http://127.0.0.1:8080")?;
//! let me = Identity::generate();
//! let coop = CoopId::parse("bakery").unwrap();
//! client.login(me.clone(), coop.clone(), &[Scope::LedgerRead, Scope::LedgerWrite]).await?;
//! let to = Did::parse("did:key:z6MkfriendKey").unwrap();
//! let payment = PaymentRequest {
//!     from: me.did().clone(),
//!     to,
//!     amount: Amount::parse_payment("2.5").unwrap(),
//!     currency: None,
//!     memo: Some("bread".into()),
//! };
//! let transaction = client.pay(&coop, &payment, Some("order-42")).await?;
//! println!("paid: {}", transaction.id);
//! # Ok(()) }
//! ```
//!
//! The coop's log (INTERFACE.md §12): [`Client::log_checkpoint`], [`Client::log_proof`] and the
//! other `log_*` routes, [`verify_proof`] to check a proof of an entry offline against a C2SP
//! tlog-policy, and [`Client::audit`] to check a coop's whole history (signatures, tree,
//! consistency with the last audit, receipts) and replay its ledger against the live balances.
//!
//! The SDK is deliberately light: it depends on `gateway-core` for identifiers, scopes and
//! exact amounts, on `gateway-tlog` (pure transparency-log primitives) for the log, and on no
//! server crate. It checks the receipts it finds in a coop's log (the audit), but does not
//! otherwise verify governance receipts (that is `gateway_domain::governance::verify_receipt`,
//! which `gatewayctl` uses), does not store tokens or keys on disk, and has no blocking API.

mod auth;
mod client;
mod common;
mod compute;
mod coops;
mod error;
mod events;
mod evidence;
mod governance;
mod identity;
mod info;
mod ledger;
mod log;
mod notifications;
mod retry;
mod signing;
mod tls;
mod trust;

pub use auth::{Challenge, Session, TokenResponse, VerifyRequest};
pub use client::{Client, ClientBuilder, Credentials, DEFAULT_REFRESH_MARGIN};
pub use common::{PageRequest, Pagination};
pub use compute::{Completion, SubmittedTask, Task, TaskPage, TaskQuery, TaskResult, TaskSubmission};
pub use coops::{Coop, CoopPage, CoopSettings, CoopStats, Member, MemberPage, NewCoop, SettingsPatch};
pub use error::{Error, Result, TrustShortfall};
pub use events::{CoopEvent, StreamItem, SubscribeOptions, Subscription};
pub use evidence::{EvidenceError, PaymentFields, VoteFields, verify_payment, verify_vote};
pub use governance::{
    Delegation, Delegations, Domain, DomainPage, EffectiveVote, NewDelegation, NewDomain, NewProposal, Proposal,
    ProposalPage, ProposalQuery, Receipt, SigningKey, SigningKeys, TallyCounts, VoteChoice, VoteResult, Votes,
};
pub use identity::{DidForm, Identity, KeyFile, completion_message};
pub use info::{DidDocument, Health, PublicKeyInfo, VerificationMethod};
pub use ledger::{
    Balance, BatchItemResult, BatchResult, ConversionRequest, HistoryQuery, PaymentRequest, Quote, QuoteRequest, Rate,
    Transaction, TransactionPage,
};
pub use log::{
    AuditOptions, AuditReport, AuditState, LogEntry, LogError, Mismatch, PreviousCheckpoint, SignedCheckpoint,
    VerifiedProof, WitnessCosignature, parse_log_keys, parse_policy, verify_parsed, verify_proof,
};
pub use notifications::{Notification, NotificationPage};
pub use retry::{Attempts, RetryPolicy};
pub use trust::{EdgeDirection, EdgeUpdate, ListedEdge, TrustEdge, TrustEdges, TrustScore};

/// The transparency-log primitives the log's types are built on (C2SP signed notes,
/// checkpoints, tiles, tlog-proof, tlog-policy; RFC 6962 trees), re-exported so that callers
/// use the same version.
pub use gateway_tlog as tlog;

/// Every scope a member's role allows (all but `coop:write` and `oracle:write`): what a member
/// asks for at login unless it needs less.
pub const MEMBER_SCOPES: [gateway_core::Scope; 10] = [
    gateway_core::Scope::LedgerRead,
    gateway_core::Scope::LedgerWrite,
    gateway_core::Scope::CoopRead,
    gateway_core::Scope::GovRead,
    gateway_core::Scope::GovWrite,
    gateway_core::Scope::TrustRead,
    gateway_core::Scope::TrustWrite,
    gateway_core::Scope::ComputeSubmit,
    gateway_core::Scope::ComputeExecute,
    gateway_core::Scope::OracleRead,
];

/// The scopes a login may ask for in a cooperative that does not exist yet, to create it.
pub const BOOTSTRAP_SCOPES: [gateway_core::Scope; 2] = [gateway_core::Scope::CoopRead, gateway_core::Scope::CoopWrite];
