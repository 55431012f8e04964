//! Compute routes of both families: submit, list, get, cancel, and the executor protocol.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gateway_core::Error;
use gateway_domain::ports::{TaskOutcome, TaskRecord, TaskResult};
use gateway_domain::tasks::{Completion, Submission};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::caller::CoopCaller;
use crate::caller::scopes::{AnyToken, ComputeExecute, ComputeSubmit};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{PageQuery, PaginationDto};
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
    /// Hex Ed25519 signature of the executor's DID key over the completion message
    /// `icn-compute-completion/v2`, which binds `task_hash`, the output, `outcome`, `fuel_used`
    /// and `error` (docs/COMPUTE.md, "Completion signature").
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

/// The result of an ended task.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TaskResultDto {
    /// `success`, `failed`, `out_of_fuel`, `timeout` or `cancelled`.
    pub outcome: String,
    /// The output (any JSON; `null` when there is none).
    #[schema(value_type = Object)]
    pub output: Value,
    /// Why it failed; `null` otherwise.
    pub error: Option<String>,
    /// Fuel spent.
    pub fuel_used: u64,
}

impl From<&TaskResult> for TaskResultDto {
    fn from(result: &TaskResult) -> Self {
        Self {
            outcome: result.outcome.as_str().to_owned(),
            output: result.output.clone(),
            error: result.error.clone(),
            fuel_used: result.fuel_used,
        }
    }
}

/// A compute task.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TaskDto {
    /// Id.
    pub task_id: String,
    /// SHA-256 hex of the canonical task.
    pub task_hash: String,
    /// `pending`, `claimed`, `running`, `completed`, `failed`, `cancelled` or `timed_out`.
    pub status: String,
    /// Submitter DID.
    pub submitter: String,
    /// Who claimed it (a DID, or `builtin`); `null` until claimed.
    pub executor: Option<String>,
    /// `ccl`.
    pub code_type: String,
    /// Fuel bound.
    pub fuel_limit: u64,
    /// `low`, `normal` or `high`.
    pub priority: String,
    /// String inputs: string keys to string values.
    #[schema(value_type = Object)]
    pub inputs: Value,
    /// Unix seconds.
    pub submitted_at: u64,
    /// When claimed; `null` until then.
    pub claimed_at: Option<u64>,
    /// When it ended; `null` until then.
    pub finished_at: Option<u64>,
    /// Set once it ended; `null` until then.
    pub result: Option<TaskResultDto>,
}

impl From<&TaskRecord> for TaskDto {
    fn from(t: &TaskRecord) -> Self {
        Self {
            task_id: t.task_id.clone(),
            task_hash: t.task_hash.clone(),
            status: t.status.as_str().to_owned(),
            submitter: t.submitter.as_str().to_owned(),
            executor: t.executor.clone(),
            code_type: t.code_type.clone(),
            fuel_limit: t.fuel_limit,
            priority: t.priority.clone(),
            inputs: t.inputs.clone(),
            submitted_at: t.submitted_at,
            claimed_at: t.claimed_at,
            finished_at: t.finished_at,
            result: t.result.as_ref().map(TaskResultDto::from),
        }
    }
}

/// A claimed task, with what the executor needs to run it.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct ClaimedTaskDto {
    /// The task.
    #[serde(flatten)]
    pub task: TaskDto,
    /// The serialised contract.
    pub code: String,
    /// When the claim times out, Unix seconds.
    pub deadline: Option<u64>,
}

/// The answer to a submission.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct SubmittedTaskDto {
    /// Id.
    pub task_id: String,
    /// SHA-256 hex of the canonical task.
    pub task_hash: String,
    /// `pending`.
    pub status: String,
}

/// A page of the coop's tasks, newest first.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TaskPage {
    /// The tasks.
    pub tasks: Vec<TaskDto>,
    /// Where this page is.
    pub pagination: PaginationDto,
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

/// Submits a compute task (trust ≥ 0.3).
#[utoipa::path(post, path = "/v1/compute/submit", tag = "compute", security(("bearer" = [])), request_body = SubmitBody,
    responses((status = 201, description = "`{task_id, task_hash, status: pending}`", body = SubmittedTaskDto),
              (status = 400, body = crate::openapi::ErrorBody), (status = 403, body = crate::openapi::ErrorBody),
              (status = 404, description = "The token's cooperative does not exist", body = crate::openapi::ErrorBody)))]
pub async fn submit(
    State(state): State<AppState>,
    caller: CoopCaller<ComputeSubmit>,
    Json(body): Json<Value>,
) -> ApiResult<Response> {
    let body = submission(body)?;
    let task = state
        .compute
        .submit(
            &caller.coop,
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
    let answer =
        SubmittedTaskDto { task_id: task.task_id, task_hash: task.task_hash, status: task.status.as_str().to_owned() };
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// Tasks of the token's coop, newest first.
#[utoipa::path(get, path = "/v1/compute/tasks", tag = "compute", security(("bearer" = [])), params(TaskFilters),
    responses((status = 200, description = "`{tasks, pagination}`", body = TaskPage),
              (status = 400, description = "Unknown status, invalid limit or offset", body = crate::openapi::ErrorBody)))]
pub async fn list_tasks(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Query(filters): Query<TaskFilters>,
) -> ApiResult<Json<TaskPage>> {
    let page = PageQuery { limit: filters.limit, offset: filters.offset }.page()?;
    let (tasks, total) = state.compute.list(&caller.coop, filters.status.as_deref(), page).await?;
    Ok(Json(TaskPage { tasks: tasks.iter().map(TaskDto::from).collect(), pagination: page.info(total).into() }))
}

/// One task.
#[utoipa::path(get, path = "/v1/compute/tasks/{id}", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The task", body = TaskDto), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_task(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<TaskDto>> {
    Ok(Json(TaskDto::from(&state.compute.get(&caller.coop, &id).await?)))
}

/// Cancels a pending or claimed task (its submitter only).
#[utoipa::path(post, path = "/v1/compute/tasks/{id}/cancel", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The cancelled task", body = TaskDto),
              (status = 403, description = "Not the submitter (`details.reason = \"not_the_submitter\"`)", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "The task is completed, failed, cancelled or timed out: only a pending \
or claimed task can be cancelled", body = crate::openapi::ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    caller: CoopCaller<ComputeSubmit>,
    Path(id): Path<String>,
) -> ApiResult<Json<TaskDto>> {
    Ok(Json(TaskDto::from(&state.compute.cancel(&caller.coop, &caller.did, &id).await?)))
}

/// Claims a pending task for the calling executor (trust ≥ 0.3; deadline 60 s; never a task
/// the caller submitted).
#[utoipa::path(post, path = "/v1/compute/tasks/{id}/claim", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The claimed task, with its code and inputs", body = ClaimedTaskDto),
              (status = 403, description = "Missing scope (`AUTHORIZATION_FAILED`), the caller submitted the task \
(`AUTHORIZATION_FAILED`, `details.reason = \"own_task\"`) or trust below 0.3 (`INSUFFICIENT_TRUST`, with required and actual)", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "Not pending", body = crate::openapi::ErrorBody)))]
pub async fn claim(
    State(state): State<AppState>,
    caller: CoopCaller<ComputeExecute>,
    Path(id): Path<String>,
) -> ApiResult<Json<ClaimedTaskDto>> {
    let coop = caller.coop.clone();
    let task = state.compute.claim(&coop, &caller.did, &id).await?;
    Ok(Json(ClaimedTaskDto { task: TaskDto::from(&task), code: task.code, deadline: task.deadline }))
}

/// Completes a claimed task with a signed result; only the executor that claimed it may.
#[utoipa::path(post, path = "/v1/compute/tasks/{id}/complete", tag = "compute", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = CompleteBody,
    responses((status = 200, description = "The finished task", body = TaskDto),
              (status = 400, description = "Bad signature (one that does not cover this output, outcome, fuel_used \
and error is counted in `icn_compute_signatures_invalid_total`), outcome or fuel_used", body = crate::openapi::ErrorBody),
              (status = 403, description = "Not the executor that claimed the task (`details.reason = \"not_the_executor\"`), \
or the caller submitted it (`\"own_task\"`)", body = crate::openapi::ErrorBody),
              (status = 404, body = crate::openapi::ErrorBody),
              (status = 409, description = "Not claimed", body = crate::openapi::ErrorBody)))]
pub async fn complete(
    State(state): State<AppState>,
    caller: CoopCaller<ComputeExecute>,
    Path(id): Path<String>,
    Json(body): Json<CompleteBody>,
) -> ApiResult<Json<TaskDto>> {
    let coop = caller.coop.clone();
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
    Ok(Json(TaskDto::from(&state.compute.complete(&coop, &caller.did, &id, completion).await?)))
}
