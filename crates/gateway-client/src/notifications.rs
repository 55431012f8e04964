//! Notification routes: the caller's own notifications, marking one or all read. Nothing here
//! is per coop: a notification carries its coop in `coop_id`.

use gateway_core::JsonText;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::common::{PageRequest, Pagination};
use crate::error::Result;

/// A notification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    /// Id.
    pub id: String,
    /// `payment_received`, `member_added`, `proposal_opened`, `proposal_closed`,
    /// `task_finished`, …
    pub kind: String,
    /// Short text.
    pub title: String,
    /// Longer text.
    pub body: String,
    /// Kind-specific data, as the exact text the gateway sent.
    #[serde(default)]
    pub data: JsonText,
    /// The coop it is about.
    #[serde(default)]
    pub coop_id: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
    /// Whether it was read.
    pub read: bool,
    /// When.
    #[serde(default)]
    pub read_at: Option<u64>,
}

/// A page of notifications, newest first, with the unread count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotificationPage {
    /// The notifications.
    pub notifications: Vec<Notification>,
    /// Where the page sits.
    pub pagination: Pagination,
    /// Unread notifications in total.
    pub unread_count: u64,
}

#[derive(Deserialize)]
struct Marked {
    marked: u64,
}

impl Client {
    /// `GET /v1/notifications`.
    pub async fn notifications(&self, unread_only: bool, page: PageRequest) -> Result<NotificationPage> {
        let call = Call::new(Method::GET, &["v1", "notifications"])
            .query("unread_only", unread_only.then_some("true"))
            .query("limit", page.limit)
            .query("offset", page.offset);
        self.call_json(call).await
    }

    /// `POST /v1/notifications/{id}/read`.
    pub async fn mark_notification_read(&self, id: &str) -> Result<Notification> {
        self.call_json(Call::new(Method::POST, &["v1", "notifications", id, "read"])).await
    }

    /// `POST /v1/notifications/read-all`: how many were marked.
    pub async fn mark_all_notifications_read(&self) -> Result<u64> {
        Ok(self.call_json::<Marked>(Call::new(Method::POST, &["v1", "notifications", "read-all"])).await?.marked)
    }
}
