//! Notification routes of both families: only ever the caller's own notifications of the
//! token's coop (an identity-only token is refused by the `authenticate` middleware).

use axum::extract::State;
use gateway_domain::ports::NotificationRecord;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::caller::Authorized;
use crate::caller::scopes::AnyToken;
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{PageQuery, list};
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

fn notification_json(n: &NotificationRecord) -> Value {
    json!({
        "id": n.id,
        "kind": n.kind,
        "title": n.title,
        "body": n.body,
        "data": n.data,
        "coop_id": n.coop_id.as_str(),
        "created_at": n.created_at,
        "read": n.read_at.is_some(),
        "read_at": n.read_at,
    })
}

/// The caller's notifications of the token's coop, newest first, with their unread count.
#[utoipa::path(get, path = "/v1/notifications", tag = "notifications", security(("bearer" = [])), params(NotificationQuery),
    responses((status = 200, description = "`{notifications, pagination, unread_count}`", body = Object),
              (status = 400, description = "Invalid limit or offset", body = crate::openapi::ErrorBody),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody)))]
pub async fn list_notifications(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Query(query): Query<NotificationQuery>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?;
    let page = PageQuery { limit: query.limit, offset: query.offset }.page()?;
    let result = state.notifications.list(&caller.did, coop, query.unread_only, page).await?;
    let mut body = list("notifications", result.items.iter().map(notification_json).collect(), page.info(result.total));
    body.insert("unread_count".into(), json!(result.unread));
    Ok(Json(Value::Object(body)))
}

/// The caller's notifications (short family).
#[utoipa::path(get, path = "/notifications", tag = "notifications", security(("bearer" = [])), params(NotificationQuery),
    responses((status = 200, description = "`{notifications, pagination, unread_count}`", body = Object),
              (status = 400, description = "Invalid limit or offset", body = crate::openapi::ErrorBody),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody)))]
pub async fn short_list(
    state: State<AppState>,
    caller: Authorized<AnyToken>,
    query: Query<NotificationQuery>,
) -> ApiResult<Json<Value>> {
    list_notifications(state, caller, query).await
}

/// Marks one of the caller's notifications of the token's coop read; anyone else's, or another
/// coop's, is 404.
#[utoipa::path(post, path = "/v1/notifications/{id}/read", tag = "notifications", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The notification", body = Object),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn mark_read(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?;
    Ok(Json(notification_json(&state.notifications.mark_read(&caller.did, coop, &id).await?)))
}

/// Marks one read (short family).
#[utoipa::path(post, path = "/notifications/{id}/read", tag = "notifications", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The notification", body = Object),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn short_mark_read(
    state: State<AppState>,
    caller: Authorized<AnyToken>,
    id: Path<String>,
) -> ApiResult<Json<Value>> {
    mark_read(state, caller, id).await
}

/// Marks all of the caller's notifications of the token's coop read.
#[utoipa::path(post, path = "/v1/notifications/read-all", tag = "notifications", security(("bearer" = [])),
    responses((status = 200, description = "`{marked}`", body = Object),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody)))]
pub async fn mark_all_read(State(state): State<AppState>, caller: Authorized<AnyToken>) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?;
    Ok(Json(json!({ "marked": state.notifications.mark_all_read(&caller.did, coop).await? })))
}

/// Marks all read (short family).
#[utoipa::path(post, path = "/notifications/read-all", tag = "notifications", security(("bearer" = [])),
    responses((status = 200, description = "`{marked}`", body = Object),
              (status = 403, description = "Identity-only token", body = crate::openapi::ErrorBody)))]
pub async fn short_mark_all_read(state: State<AppState>, caller: Authorized<AnyToken>) -> ApiResult<Json<Value>> {
    mark_all_read(state, caller).await
}
