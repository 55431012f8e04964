//! Liveness, readiness and the health summary.

use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::extract::Json;
use crate::state::AppState;

/// `GET /v1/health` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthResponse {
    /// `ok` when the store answers and commits (and Redis answers, when configured), else
    /// `degraded`.
    pub status: &'static str,
    /// Gateway version.
    pub version: &'static str,
    /// Store backend: `memory`, `sqlite` or `postgres`.
    pub store: &'static str,
    /// Seconds since start.
    pub uptime_secs: u64,
    /// `ok` or `unreachable`; present only when Redis is configured (a cluster). While it is
    /// unreachable, logins answer 503 and request limits are counted per replica.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<&'static str>,
    /// `ok` when closed proposals get signed receipts, `unavailable` when they do not (no
    /// keystore, or one the operator chose to serve locked with `--allow-unsigned-receipts`).
    pub receipts: &'static str,
}

/// Status-only answer of the probes.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProbeResponse {
    /// `ok` or `ready`.
    pub status: &'static str,
}

/// Health summary.
#[utoipa::path(get, path = "/v1/health", tag = "operations",
    responses((status = 200, description = "Health summary", body = HealthResponse)))]
pub async fn health(State(state): State<AppState>) -> Json<HealthResponse> {
    let store_ok = state.store_health.writable().is_ok() && state.store_health.ping().await.is_ok();
    let redis = state.limits.shared_backend_up();
    Json(HealthResponse {
        status: if store_ok && redis != Some(false) { "ok" } else { "degraded" },
        version: state.config.version,
        store: state.store_health.kind(),
        uptime_secs: state.started_at.elapsed().as_secs(),
        redis: redis.map(|up| if up { "ok" } else { "unreachable" }),
        receipts: if state.governance.receipts_available() { "ok" } else { "unavailable" },
    })
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "operations",
    responses((status = 200, description = "Alive", body = ProbeResponse)))]
pub async fn healthz() -> Json<ProbeResponse> {
    Json(ProbeResponse { status: "ok" })
}

/// Readiness: the store commits (the latest commit or write probe succeeded) and answers reads.
#[utoipa::path(get, path = "/readyz", tag = "operations",
    responses((status = 200, description = "Ready", body = ProbeResponse),
              (status = 503, description = "The store cannot commit or cannot be reached", body = crate::openapi::ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<ProbeResponse>> {
    state.store_health.writable()?;
    state.store_health.ping().await.map_err(|err| match err {
        gateway_core::Error::ServiceUnavailable(_) => ApiError::from(err),
        other => gateway_core::Error::ServiceUnavailable(other.to_string()).into(),
    })?;
    Ok(Json(ProbeResponse { status: "ready" }))
}
