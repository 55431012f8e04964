//! Notifications: written in the same transaction as the change that causes them, read and
//! marked read only by their recipient.

use std::sync::Arc;

use gateway_core::{Clock, CoopId, Did, Error, PageRequest};
use serde_json::Value;

use crate::events::new_id;
use crate::ports::{NotificationReads, NotificationRecord, Transactor, Tx, transaction};

/// What a notification says.
#[derive(Debug, Clone)]
pub struct Note {
    /// Machine kind, e.g. `payment_received`.
    pub kind: &'static str,
    /// Short title.
    pub title: String,
    /// Human text.
    pub body: String,
    /// Structured data.
    pub data: Value,
}

/// Stores a notification for `recipient` within the transaction.
pub async fn notify(tx: &mut dyn Tx, recipient: &Did, coop: &CoopId, note: Note, now: u64) -> Result<(), Error> {
    let record = NotificationRecord {
        id: new_id(),
        recipient: recipient.clone(),
        coop_id: coop.clone(),
        kind: note.kind.to_owned(),
        title: note.title,
        body: note.body,
        data: note.data,
        created_at: now,
        read_at: None,
    };
    tx.insert_notification(&record).await
}

/// Stores the same notification for every recipient within the transaction, in batches.
pub async fn notify_all(tx: &mut dyn Tx, recipients: &[Did], coop: &CoopId, note: Note, now: u64) -> Result<(), Error> {
    let records: Vec<NotificationRecord> = recipients
        .iter()
        .map(|recipient| NotificationRecord {
            id: new_id(),
            recipient: recipient.clone(),
            coop_id: coop.clone(),
            kind: note.kind.to_owned(),
            title: note.title.clone(),
            body: note.body.clone(),
            data: note.data.clone(),
            created_at: now,
            read_at: None,
        })
        .collect();
    tx.insert_notifications(&records).await
}

/// A page of notifications with counts.
#[derive(Debug, Clone)]
pub struct NotificationPage {
    /// The page.
    pub items: Vec<NotificationRecord>,
    /// All matching.
    pub total: u64,
    /// All unread of the recipient.
    pub unread: u64,
}

/// The recipient-facing operations.
#[derive(Debug, Clone)]
pub struct Notifications {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn NotificationReads>,
    clock: Arc<dyn Clock>,
}

impl Notifications {
    /// The service over its ports.
    pub fn new(transactor: Arc<dyn Transactor>, reads: Arc<dyn NotificationReads>, clock: Arc<dyn Clock>) -> Self {
        Self { transactor, reads, clock }
    }

    /// The recipient's notifications, newest first.
    pub async fn list(&self, recipient: &Did, unread_only: bool, page: PageRequest) -> Result<NotificationPage, Error> {
        let (items, total, unread) = self.reads.notifications(recipient, unread_only, page).await?;
        Ok(NotificationPage { items, total, unread })
    }

    /// Marks one read; someone else's (or a missing one) is `NOT_FOUND`.
    pub async fn mark_read(&self, recipient: &Did, id: &str) -> Result<NotificationRecord, Error> {
        let (recipient, id, now) = (recipient.clone(), id.to_owned(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                tx.mark_notification_read(&recipient, &id, now)
                    .await?
                    .ok_or_else(|| Error::not_found("notification", id))
            })
        })
        .await
    }

    /// Marks every unread one read; returns how many.
    pub async fn mark_all_read(&self, recipient: &Did) -> Result<u64, Error> {
        let (recipient, now) = (recipient.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move { tx.mark_all_notifications_read(&recipient, now).await })
        })
        .await
    }
}
