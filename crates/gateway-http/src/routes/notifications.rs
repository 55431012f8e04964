//! Notification routes of both families: only ever the caller's own notifications of the
//! token's coop (an identity-only token is refused by the `authenticate` middleware).

use axum::extract::State;
use gateway_core::JsonText;
use gateway_domain::ports::NotificationRecord;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::caller::CoopCaller;
use crate::caller::scopes::AnyToken;
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{PageQuery, PaginationDto};
use crate::state::AppState;

/// Filters of the notification list.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct NotificationQuery {
    /// Only unread ones.
    #[serde(default)]
    pub unread_only: bool,
    /// Page size, default 50, at most 100.
    pub limit: Option<u64>,
    /// Items to skip.
    pub offset: Option<u64>,
}

/// A notification.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct NotificationDto {
    /// Id.
    pub id: String,
    /// Machine kind, e.g. `payment_received`.
    pub kind: String,
    /// Short title.
    pub title: String,
    /// Human text.
    pub body: String,
    /// Structured data (any JSON).
    #[schema(value_type = Object)]
    pub data: JsonText,
    /// Cooperative it concerns.
    pub coop_id: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Whether it was marked read.
    pub read: bool,
    /// When marked read; `null` while unread.
    pub read_at: Option<u64>,
}

impl From<&NotificationRecord> for NotificationDto {
    fn from(n: &NotificationRecord) -> Self {
        Self {
            id: n.id.clone(),
            kind: n.kind.clone(),
            title: n.title.clone(),
            body: n.body.clone(),
            data: n.data.clone(),
            coop_id: n.coop_id.as_str().to_owned(),
            created_at: n.created_at,
            read: n.read_at.is_some(),
            read_at: n.read_at,
        }
    }
}

/// A page of the caller's notifications, with their unread count.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct NotificationPage {
    /// The notifications.
    pub notifications: Vec<NotificationDto>,
    /// Where this page is.
    pub pagination: PaginationDto,
    /// The caller's unread notifications of the coop (all of them, not only this page's).
    pub unread_count: u64,
}

/// How many notifications were marked read.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct MarkedDto {
    /// Notifications newly marked read.
    pub marked: u64,
}

/// The caller's notifications of the token's coop, newest first, with their unread count.
#[utoipa::path(get, path = "/v1/notifications", tag = "notifications", security(("bearer" = [])), params(NotificationQuery),
    responses((status = 200, description = "`{notifications, pagination, unread_count}`", body = NotificationPage),
              (status = 400, description = "Invalid limit or offset", body = crate::openapi::ErrorBody),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody)))]
pub async fn list_notifications(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Query(query): Query<NotificationQuery>,
) -> ApiResult<Json<NotificationPage>> {
    let coop = &caller.coop;
    let page = PageQuery { limit: query.limit, offset: query.offset }.page()?;
    let result = state.notifications.list(&caller.did, coop, query.unread_only, page).await?;
    Ok(Json(NotificationPage {
        notifications: result.items.iter().map(NotificationDto::from).collect(),
        pagination: page.info(result.total).into(),
        unread_count: result.unread,
    }))
}

/// Marks one of the caller's notifications of the token's coop read; anyone else's, or another
/// coop's, is 404.
#[utoipa::path(post, path = "/v1/notifications/{id}/read", tag = "notifications", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The notification", body = NotificationDto),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn mark_read(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<NotificationDto>> {
    let coop = &caller.coop;
    Ok(Json(NotificationDto::from(&state.notifications.mark_read(&caller.did, coop, &id).await?)))
}

/// Marks all of the caller's notifications of the token's coop read.
#[utoipa::path(post, path = "/v1/notifications/read-all", tag = "notifications", security(("bearer" = [])),
    responses((status = 200, description = "`{marked}`", body = MarkedDto),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody)))]
pub async fn mark_all_read(State(state): State<AppState>, caller: CoopCaller<AnyToken>) -> ApiResult<Json<MarkedDto>> {
    let coop = &caller.coop;
    Ok(Json(MarkedDto { marked: state.notifications.mark_all_read(&caller.did, coop).await? }))
}
