//! The event outbox's ports.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{CoopId, Error, JsonText};

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
