//! The notifications' ports.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, JsonText, PageRequest};

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
