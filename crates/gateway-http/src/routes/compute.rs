//! Compute routes of both families: submit, list, get, cancel, and the executor protocol.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gateway_core::Error;
use gateway_domain::ports::{TaskOutcome, TaskRecord};
use gateway_domain::tasks::{Completion, Submission};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::caller::Authorized;
use crate::caller::scopes::{AnyToken, ComputeExecute, ComputeSubmit};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{PageQuery, list};
use crate::state::AppState;

/// A task submission.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SubmitBody {
    /// Must be `ccl`.
    pub code_type: String,
    /// The JSON-serialised CCL contract (`name`, `participants`, `currency`, `state_vars`, `rules`, `triggers`).
    pub code: String,
    /// Inputs: string keys to string values.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// Fuel bound, 1 to 10 000 000.
    pub fuel_limit: u64,
    /// `low`, `normal` (default) or `high`.
    pub priority: Option<String>,
}

/// An executor's completion.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CompleteBody {
    /// The output (any JSON).
    #[schema(value_type = Object)]
    pub output: Value,
    /// Fuel spent.
    pub fuel_used: u64,
    /// Hex Ed25519 signature over `task_hash ‖ SHA-256(JCS(output))`.
    pub signature: String,
    /// `success` (default), `failed` or `out_of_fuel`.
    pub outcome: Option<String>,
    /// Error text for a failure.
    pub error: Option<String>,
}

/// Task list filter.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct TaskFilters {
    /// `pending`, `claimed`/`running`, `completed`, `failed`, `cancelled`, `timed_out`.
    pub status: Option<String>,
    /// Page size.
    pub limit: Option<u64>,
    /// Items to skip.
    pub offset: Option<u64>,
}

fn task_json(t: &TaskRecord) -> Value {
    json!({
        "task_id": t.task_id,
        "task_hash": t.task_hash,
        "status": t.status.as_str(),
        "submitter": t.submitter.as_str(),
        "executor": t.executor,
        "code_type": t.code_type,
        "fuel_limit": t.fuel_limit,
        "priority": t.priority,
        "inputs": t.inputs,
        "submitted_at": t.submitted_at,
        "claimed_at": t.claimed_at,
        "finished_at": t.finished_at,
        "result": t.result,
    })
}

/// The inputs must be string → string; report a non-string value by its key.
fn submission(body: Value) -> ApiResult<SubmitBody> {
    if let Some(Value::Object(inputs)) = body.get("inputs") {
        for (key, value) in inputs {
            if !value.is_string() {
                return Err(Error::bad_request_field(
                    &format!("inputs.{key}"),
                    format!("inputs.{key} must be a string"),
                )
                .into());
            }
        }
    }
    crate::extract::parse_json(body.to_string().as_bytes())
}

async fn submit_task(state: &AppState, caller: &crate::Caller, body: Value) -> ApiResult<Response> {
    let coop = caller.coop()?.clone();
    let body = submission(body)?;
    let task = state
        .compute
        .submit(
            &coop,
            &caller.did,
            Submission {
                code_type: body.code_type,
                code: body.code,
                inputs: body.inputs,
                fuel_limit: body.fuel_limit,
                priority: body.priority,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({ "task_id": task.task_id, "task_hash": task.task_hash, "status": task.status.as_str() })),
    )
        .into_response())
}

/// Submits a compute task (trust ≥ 0.3).
#[utoipa::path(post, path = "/v1/compute/submit", tag = "compute", security(("bearer" = [])), request_body = SubmitBody,
    responses((status = 201, description = "`{task_id, task_hash, status: pending}`", body = Object),
              (status = 400, body = crate::openapi::ErrorBody), (status = 403, body = crate::openapi::ErrorBody),
              (status = 404, description = "The token's cooperative does not exist", body = crate::openapi::ErrorBody)))]
pub async fn submit(
    State(state): State<AppState>,
    caller: Authorized<ComputeSubmit>,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    submit_task(&state, &caller, body).await
}

/// Submits a compute task (short family).
#[utoipa::path(post, path = "/compute/tasks", tag = "compute", security(("bearer" = [])), request_body = SubmitBody,
    responses((status = 201, description = "`{task_id, task_hash, status: pending}`", body = Object),
              (status = 404, description = "The token's cooperative does not exist", body = crate::openapi::ErrorBody)))]
pub async fn short_submit(
    State(state): State<AppState>,
    caller: Authorized<ComputeSubmit>,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    submit_task(&state, &caller, body).await
}

async fn list_of(state: &AppState, caller: &crate::Caller, filters: TaskFilters) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let page = PageQuery { limit: filters.limit, offset: filters.offset }.page()?;
    let (tasks, total) = state.compute.list(&coop, filters.status.as_deref(), page).await?;
    Ok(Json(Value::Object(list("tasks", tasks.iter().map(task_json).collect(), page.info(total)))))
}

/// Tasks of the token's coop, newest first.
#[utoipa::path(get, path = "/v1/compute/tasks", tag = "compute", security(("bearer" = [])), params(TaskFilters),
    responses((status = 200, description = "`{tasks, pagination}`", body = Object),
              (status = 400, description = "Unknown status, invalid limit or offset", body = crate::openapi::ErrorBody)))]
pub async fn list_tasks(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Query(filters): Query<TaskFilters>,
) -> ApiResult<Json<Value>> {
    list_of(&state, &caller, filters).await
}

/// Tasks (short family).
#[utoipa::path(get, path = "/compute/tasks", tag = "compute", security(("bearer" = [])), params(TaskFilters),
    responses((status = 200, description = "`{tasks, pagination}`", body = Object)))]
pub async fn short_list(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Query(filters): Query<TaskFilters>,
) -> ApiResult<Json<Value>> {
    list_of(&state, &caller, filters).await
}

async fn get_of(state: &AppState, caller: &crate::Caller, id: &str) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(task_json(&state.compute.get(&coop, id).await?)))
}

/// One task.
#[utoipa::path(get, path = "/v1/compute/tasks/{id}", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The task", body = Object), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_task(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    get_of(&state, &caller, &id).await
}

/// One task (short family).
#[utoipa::path(get, path = "/compute/tasks/{id}", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The task", body = Object)))]
pub async fn short_get(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    get_of(&state, &caller, &id).await
}

async fn cancel_of(state: &AppState, caller: &crate::Caller, id: &str) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(task_json(&state.compute.cancel(&coop, &caller.did, id).await?)))
}

/// Cancels a pending or claimed task (its submitter only).
#[utoipa::path(post, path = "/v1/compute/tasks/{id}/cancel", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The cancelled task", body = Object),
              (status = 403, description = "Not the submitter (`details.reason = \"not_the_submitter\"`)", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "The task is completed, failed, cancelled or timed out: only a pending \
or claimed task can be cancelled", body = crate::openapi::ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Authorized<ComputeSubmit>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    cancel_of(&state, &caller, &id).await
}

/// Cancels a task (short family).
#[utoipa::path(post, path = "/compute/tasks/{id}/cancel", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The cancelled task", body = Object),
              (status = 409, description = "The task is completed, failed, cancelled or timed out: only a pending \
or claimed task can be cancelled", body = crate::openapi::ErrorBody)))]
pub async fn short_cancel(
    State(state): State<AppState>,
    caller: Authorized<ComputeSubmit>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    cancel_of(&state, &caller, &id).await
}

/// Claims a pending task for the calling executor (trust ≥ 0.3; deadline 60 s).
#[utoipa::path(post, path = "/v1/compute/tasks/{id}/claim", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The claimed task, with its code and inputs", body = Object),
              (status = 403, description = "Missing scope (`AUTHORIZATION_FAILED`) or trust below 0.3 (`INSUFFICIENT_TRUST`, with required and actual)", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "Not pending", body = crate::openapi::ErrorBody)))]
pub async fn claim(
    State(state): State<AppState>,
    caller: Authorized<ComputeExecute>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let task = state.compute.claim(&coop, &caller.did, &id).await?;
    let mut body = task_json(&task);
    body["code"] = json!(task.code);
    body["deadline"] = json!(task.deadline);
    Ok(Json(body))
}

/// Completes a claimed task with a signed result; only the executor that claimed it may.
#[utoipa::path(post, path = "/v1/compute/tasks/{id}/complete", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = CompleteBody,
    responses((status = 200, description = "The finished task", body = Object),
              (status = 400, description = "Bad signature, outcome or fuel_used", body = crate::openapi::ErrorBody),
              (status = 403, description = "Not the executor that claimed the task (`details.reason = \"not_the_executor\"`)", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "Not claimed", body = crate::openapi::ErrorBody)))]
pub async fn complete(
    State(state): State<AppState>,
    caller: Authorized<ComputeExecute>,
    Path(id): Path<String>,
    Json(body): Json<CompleteBody>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let outcome = body
        .outcome
        .as_deref()
        .map(|text| {
            TaskOutcome::parse(text)
                .ok_or_else(|| Error::bad_request_field("outcome", "outcome is success, failed or out_of_fuel"))
        })
        .transpose()?;
    let completion = Completion {
        output: body.output,
        fuel_used: body.fuel_used,
        signature: body.signature,
        outcome,
        error: body.error,
    };
    Ok(Json(task_json(&state.compute.complete(&coop, &caller.did, &id, completion).await?)))
}
