//! Coop event kinds and the outbox write every state change makes.
//!
//! Events are written by the same transaction as the change they describe (the outbox), so a
//! client of the stream sees exactly the committed changes, numbered without gaps. Delivery is
//! `gateway-ws`'s business, not this module's.

use gateway_core::{CoopId, Error};
use serde_json::Value;

use crate::ports::Tx;

/// The detailed event kinds of the specification (`CoopEventType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoopEventType {
    /// A payment or conversion was recorded.
    PaymentCreated,
    /// A member joined.
    MemberAdded,
    /// A member left or was removed.
    MemberRemoved,
    /// A member's role or credit limit changed.
    RoleUpdated,
    /// The coop's settings changed.
    SettingsUpdated,
    /// A governance domain was created.
    GovernanceDomainCreated,
    /// A proposal was created (as a draft).
    GovernanceProposalCreated,
    /// A proposal opened for voting.
    GovernanceProposalOpened,
    /// A proposal was closed and tallied.
    GovernanceProposalClosed,
    /// A vote was cast.
    GovernanceVoteCast,
    /// A compute task was submitted.
    ComputeTaskSubmitted,
    /// An executor claimed a task.
    ComputeTaskClaimed,
    /// A task finished (success or failure).
    ComputeTaskCompleted,
    /// A task was cancelled.
    ComputeTaskCancelled,
    /// The gateway is stopping.
    Shutdown,
}

impl CoopEventType {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            CoopEventType::PaymentCreated => "PaymentCreated",
            CoopEventType::MemberAdded => "MemberAdded",
            CoopEventType::MemberRemoved => "MemberRemoved",
            CoopEventType::RoleUpdated => "RoleUpdated",
            CoopEventType::SettingsUpdated => "SettingsUpdated",
            CoopEventType::GovernanceDomainCreated => "GovernanceDomainCreated",
            CoopEventType::GovernanceProposalCreated => "GovernanceProposalCreated",
            CoopEventType::GovernanceProposalOpened => "GovernanceProposalOpened",
            CoopEventType::GovernanceProposalClosed => "GovernanceProposalClosed",
            CoopEventType::GovernanceVoteCast => "GovernanceVoteCast",
            CoopEventType::ComputeTaskSubmitted => "ComputeTaskSubmitted",
            CoopEventType::ComputeTaskClaimed => "ComputeTaskClaimed",
            CoopEventType::ComputeTaskCompleted => "ComputeTaskCompleted",
            CoopEventType::ComputeTaskCancelled => "ComputeTaskCancelled",
            CoopEventType::Shutdown => "Shutdown",
        }
    }
}

/// Appends an event to the coop's outbox within the transaction; returns its sequence number.
pub async fn emit(
    tx: &mut dyn Tx,
    coop: &CoopId,
    kind: CoopEventType,
    timestamp: u64,
    data: Value,
) -> Result<u64, Error> {
    tx.append_event(coop, kind.as_str(), timestamp, &data).await
}

/// A random 128-bit identifier, hex.
pub fn new_id() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}
