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

/// A new 128-bit identifier as 32 hex digits: the creation time in milliseconds (48 bits) and
/// then 80 random bits. Ids made later sort later, so each insert lands at the right edge of
/// the id's index instead of on a random page of it (a payment writes two such ids), and 80
/// random bits keep them unguessable.
pub fn new_id() -> String {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    id_at(millis, rand::random())
}

fn id_at(millis: u64, random: [u8; 10]) -> String {
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&millis.to_be_bytes()[2..]);
    bytes[6..].copy_from_slice(&random);
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_32_hex_digits_led_by_the_time() {
        let id = id_at(0x0123_4567_89ab, [0xff; 10]);
        assert_eq!(id, "0123456789abffffffffffffffffffff");
        let fresh = new_id();
        assert_eq!(fresh.len(), 32);
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }

    #[test]
    fn later_ids_sort_after_earlier_ones() {
        assert!(id_at(1_000, [0xff; 10]) < id_at(1_001, [0; 10]));
        let (first, second) = (new_id(), new_id());
        assert_ne!(first, second);
        assert!(first[..12] <= second[..12]);
    }
}
