//! Notifications: written in the same transaction as the change that causes them, read and
//! marked read only by their recipient, and only through a token of the coop they concern
//! (a DID in two coops sees each coop's notifications with that coop's token only).
//!
//! A notification for many recipients at once (a proposal opened or closed, to every member of
//! its domain, possibly thousands) is stored in that transaction as one *fan-out* row, so the
//! change it accompanies commits at the cost of one row, not one per recipient. The fan-out is
//! expanded into per-recipient notifications right after the commit ([`spawn_expansion`]), by a
//! periodic sweep that catches any left behind by a crash, and, so that a recipient always reads
//! what was committed before their request, by every notification read or update that finds
//! one pending.

use std::sync::Arc;

use gateway_core::{Amount, Clock, CoopId, Currency, Did, Error, JsonText, PageRequest, Role};
use serde::Serialize;

use crate::events::new_id;
use crate::ports::{
    NotificationFanout, NotificationReads, NotificationRecord, NotificationTx, Transactor, transaction,
};

/// How long a notification is kept once read: 30 days.
pub const READ_RETENTION_SECS: u64 = 30 * 86_400;

/// How long any notification is kept, read or not: 90 days.
pub const RETENTION_SECS: u64 = 90 * 86_400;

/// What a notification says.
#[derive(Debug, Clone)]
pub struct Note {
    /// Short title.
    pub title: String,
    /// Human text.
    pub body: String,
    /// Its kind and structured data.
    pub data: NoteData,
}

/// A notification's kind with its structured `data`, which serialises to the `data` object
/// the API shows (the kind itself is the notification's `kind` field).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum NoteData {
    /// `payment_received`: what the payee received (after conversion, for a conversion).
    PaymentReceived {
        /// The transaction.
        transaction_id: String,
        /// The payer's account.
        from: String,
        /// The amount credited.
        amount: Amount,
        /// Its currency.
        currency: Currency,
    },
    /// `member_added`: the coop joined and the role held.
    MemberAdded {
        /// The coop.
        coop_id: CoopId,
        /// The role given.
        role: Role,
    },
    /// `proposal_opened`: a proposal the recipient may vote on.
    ProposalOpened {
        /// The proposal.
        proposal_id: String,
        /// Its domain.
        domain_id: String,
    },
    /// `proposal_closed`: how a proposal of the recipient's domain ended.
    ProposalClosed {
        /// The proposal.
        proposal_id: String,
        /// `Approved`, `Rejected` or `NoQuorum`.
        outcome: &'static str,
    },
    /// `task_finished`: the recipient's compute task ended.
    TaskFinished {
        /// The task.
        task_id: String,
        /// Its final status.
        status: &'static str,
    },
}

impl NoteData {
    /// The notification's machine kind.
    pub const fn kind(&self) -> &'static str {
        match self {
            NoteData::PaymentReceived { .. } => "payment_received",
            NoteData::MemberAdded { .. } => "member_added",
            NoteData::ProposalOpened { .. } => "proposal_opened",
            NoteData::ProposalClosed { .. } => "proposal_closed",
            NoteData::TaskFinished { .. } => "task_finished",
        }
    }

    fn to_text(&self) -> Result<JsonText, Error> {
        JsonText::of(self).map_err(|e| Error::Internal(format!("notification data: {e}")))
    }
}

/// Stores a notification for `recipient` within the transaction.
pub async fn notify<T: NotificationTx + ?Sized>(
    tx: &mut T,
    recipient: &Did,
    coop: &CoopId,
    note: Note,
    now: u64,
) -> Result<(), Error> {
    let record = NotificationRecord {
        id: new_id(),
        recipient: recipient.clone(),
        coop_id: coop.clone(),
        kind: note.data.kind().to_owned(),
        data: note.data.to_text()?,
        title: note.title,
        body: note.body,
        created_at: now,
        read_at: None,
    };
    tx.insert_notification(&record).await
}

/// Stores the same notification for every recipient within the transaction: as one pending
/// fan-out when there are several (call [`spawn_expansion`] after the commit).
pub async fn notify_all<T: NotificationTx + ?Sized>(
    tx: &mut T,
    recipients: &[Did],
    coop: &CoopId,
    note: Note,
    now: u64,
) -> Result<(), Error> {
    match recipients {
        [] => Ok(()),
        [one] => notify(tx, one, coop, note, now).await,
        many => {
            let fanout = NotificationFanout {
                recipients: many.to_vec(),
                coop_id: coop.clone(),
                kind: note.data.kind().to_owned(),
                data: note.data.to_text()?,
                title: note.title,
                body: note.body,
                created_at: now,
            };
            tx.insert_notification_fanout(&fanout).await
        }
    }
}

/// Expands every pending fan-out into per-recipient notifications, in one transaction; returns
/// how many notifications it created.
pub async fn expand_fanouts(transactor: &dyn Transactor) -> Result<u64, Error> {
    transaction(transactor, |tx| Box::pin(async move { tx.expand_notification_fanouts().await })).await
}

/// Expands pending fan-outs in the background, when called within a Tokio runtime (outside
/// one, the next read or the periodic sweep does it). A failure is logged and left to those.
pub fn spawn_expansion(transactor: Arc<dyn Transactor>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            if let Err(err) = expand_fanouts(transactor.as_ref()).await {
                tracing::warn!("expanding notification fan-outs failed: {err}");
            }
        });
    }
}

/// A page of notifications with counts.
#[derive(Debug, Clone)]
pub struct NotificationPage {
    /// The page.
    pub items: Vec<NotificationRecord>,
    /// All matching.
    pub total: u64,
    /// All unread of the recipient in the coop.
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

    /// The recipient's notifications of `coop`, newest first, including every fan-out
    /// committed before.
    pub async fn list(
        &self,
        recipient: &Did,
        coop: &CoopId,
        unread_only: bool,
        page: PageRequest,
    ) -> Result<NotificationPage, Error> {
        if self.reads.pending_notification_fanouts().await? {
            expand_fanouts(self.transactor.as_ref()).await?;
        }
        let (items, total, unread) = self.reads.notifications(recipient, coop, unread_only, page).await?;
        Ok(NotificationPage { items, total, unread })
    }

    /// Marks one of the recipient's notifications of `coop` read; someone else's, another
    /// coop's or a missing one is `NOT_FOUND`.
    pub async fn mark_read(&self, recipient: &Did, coop: &CoopId, id: &str) -> Result<NotificationRecord, Error> {
        let (recipient, coop, id, now) = (recipient.clone(), coop.clone(), id.to_owned(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                tx.expand_notification_fanouts().await?;
                tx.mark_notification_read(&recipient, &coop, &id, now)
                    .await?
                    .ok_or_else(|| Error::not_found("notification", id))
            })
        })
        .await
    }

    /// Marks every unread notification of the recipient in `coop` read; returns how many.
    pub async fn mark_all_read(&self, recipient: &Did, coop: &CoopId) -> Result<u64, Error> {
        let (recipient, coop, now) = (recipient.clone(), coop.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                tx.expand_notification_fanouts().await?;
                tx.mark_all_notifications_read(&recipient, &coop, now).await
            })
        })
        .await
    }

    /// Deletes notifications read more than [`READ_RETENTION_SECS`] ago and any created more
    /// than [`RETENTION_SECS`] ago; returns how many went. The gateway calls this periodically,
    /// so one member's notifications cannot grow without bound.
    pub async fn prune_old(&self) -> Result<u64, Error> {
        let now = self.clock.now_unix_secs();
        let (read_before, created_before) =
            (now.saturating_sub(READ_RETENTION_SECS), now.saturating_sub(RETENTION_SECS));
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move { tx.prune_notifications(read_before, created_before).await })
        })
        .await
    }

    /// Expands every pending fan-out now; returns how many notifications it created. The
    /// gateway calls this periodically, for fan-outs whose expansion after their commit was
    /// cut short.
    pub async fn expand_pending(&self) -> Result<u64, Error> {
        expand_fanouts(self.transactor.as_ref()).await
    }
}
