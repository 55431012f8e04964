//! Governance arithmetic: vote choices, delegation, the tally, decision rules, and signed
//! decision receipts.
//!
//! Everything here is a pure function of its inputs. The module deliberately does no storage, no
//! HTTP and no clock reading: the caller loads the members, the votes and the delegations of a
//! proposal, passes the tally time in, and stores what comes back. It also does not hold the
//! governance signing key's file or passphrase; signing goes through the [`DecisionSigner`] seam,
//! so the key can live wherever the caller unlocked it (see `gateway_auth::keystore`).
//!
//! The pieces, in the order a proposal is closed:
//!
//! 1. [`Choice`] and [`DelegationScope`] parse what clients send.
//! 2. [`tally()`] resolves delegation chains and counts weighted votes into a [`Tally`].
//! 3. [`decide`] applies the quorum and the proposal's [`Rule`] to get an [`Outcome`].
//! 4. [`sign_receipt`] binds the outcome, the counts and the [`votes_hash`] into a [`Receipt`],
//!    which anyone can check with [`verify_receipt`] (the format is in `docs/RECEIPTS.md`).

mod choice;
mod delegation;
mod error;
mod keys;
mod proposal;
mod receipt;
mod rules;
mod service;
mod tally;

pub use choice::Choice;
pub use delegation::{Delegation, DelegationScope};
pub use error::ParseError;
pub(crate) use keys::coop_signer;
pub use keys::{
    KEYSTORE_OUTDATED, MasterSecret, RECEIPT_KEY_LABEL, ReceiptSigner, derive_receipt_key, receipt_key_info,
};
pub use proposal::{
    COOP_DOMAIN, Effect, MAX_DESCRIPTION_CHARS, MAX_TEXT_CHARS, MembershipAction, ProposalPayload, ProposalStatus,
};
pub use receipt::{
    DecisionSigner, Ed25519DecisionSigner, Receipt, ReceiptError, canonical_bytes, sign_receipt, verify_receipt,
    votes_hash,
};
pub use rules::{DEFAULT_QUORUM_PERCENT, Outcome, Rule, decide};
pub use service::{
    DEFAULT_VOTING_SECS, DomainChange, Governance, MemoryReceiptKeys, NewDomain, NewProposal, PROPOSAL_MIN_TRUST,
    PROPOSAL_WINDOW_SECS, PROPOSALS_PER_WINDOW, ReceiptKeys, VoteOutcome, VotesView,
};
pub use tally::{DirectVote, EffectiveVote, Tally, tally};
