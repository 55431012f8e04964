//! Compute routes: submitting CCL tasks, listing and reading them, cancelling, and the
//! executor protocol (claim, then complete with a signed result).
//!
//! The SDK does not parse or run CCL: INTERFACE.md travels as the JSON text the gateway
//! checks, and the gateway's built-in executor (or any executor) runs it.
//! [`Client::complete_task_signed`] computes the completion signature with
//! [`crate::Identity::sign_completion`].

use std::collections::BTreeMap;

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{Call, Client};
use crate::common::{PageRequest, Pagination};
use crate::error::Result;
use crate::identity::Identity;

/// A task submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskSubmission {
    /// Must be `ccl`.
    pub code_type: String,
    /// The CCL contract as JSON text.
    pub code: String,
    /// Inputs: string keys to string values (numeric strings become numbers in CCL).
    pub inputs: BTreeMap<String, String>,
    /// Fuel bound, 1 to 10 000 000.
    pub fuel_limit: u64,
    /// `low`, `normal` or `high`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
}

impl TaskSubmission {
    /// A CCL task with the given contract (any JSON value, sent as its text) and fuel.
    pub fn ccl(contract: &Value, inputs: BTreeMap<String, String>, fuel_limit: u64) -> Self {
        Self { code_type: "ccl".into(), code: contract.to_string(), inputs, fuel_limit, priority: None }
    }
}

/// The answer to a submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedTask {
    /// Id.
    pub task_id: String,
    /// Hex SHA-256 of the JCS form of the task (what executors sign over).
    pub task_hash: String,
    /// `pending`.
    pub status: String,
}

/// The end of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskResult {
    /// `success`, `failed`, `out_of_fuel`, `timeout` or `cancelled`.
    pub outcome: String,
    /// The output (`{"value", "state"}` for CCL), when any.
    #[serde(default)]
    pub output: Value,
    /// Error text of a failure.
    #[serde(default)]
    pub error: Option<String>,
    /// Fuel spent.
    #[serde(default)]
    pub fuel_used: Option<u64>,
}

/// A task record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Id.
    pub task_id: String,
    /// Hash executors sign over.
    pub task_hash: String,
    /// `pending`, `claimed`, `completed`, `failed`, `cancelled` or `timed_out`.
    pub status: String,
    /// Who submitted it.
    pub submitter: String,
    /// Who claimed it.
    #[serde(default)]
    pub executor: Option<String>,
    /// `ccl`.
    #[serde(default)]
    pub code_type: Option<String>,
    /// Fuel bound.
    pub fuel_limit: u64,
    /// Priority.
    pub priority: String,
    /// Inputs.
    #[serde(default)]
    pub inputs: Value,
    /// Unix seconds.
    pub submitted_at: u64,
    /// Unix seconds.
    #[serde(default)]
    pub claimed_at: Option<u64>,
    /// Unix seconds.
    #[serde(default)]
    pub finished_at: Option<u64>,
    /// `None` until the task ends.
    #[serde(default)]
    pub result: Option<TaskResult>,
    /// The contract (claim answers only).
    #[serde(default)]
    pub code: Option<String>,
    /// The claim's deadline (claim answers only).
    #[serde(default)]
    pub deadline: Option<u64>,
}

impl Task {
    /// Whether the task has ended (no further change will happen).
    pub fn is_finished(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled" | "timed_out")
    }
}

/// Task list filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskQuery {
    /// A status (`running` matches `claimed`).
    pub status: Option<String>,
    /// Which page.
    pub page: PageRequest,
}

/// A page of tasks, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPage {
    /// The tasks.
    pub tasks: Vec<Task>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// An executor's completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Completion {
    /// The output.
    pub output: Value,
    /// Fuel spent (at most the limit).
    pub fuel_used: u64,
    /// Hex Ed25519 over [`crate::completion_message`] of this completion (it covers the
    /// output, outcome, fuel used and error).
    pub signature: String,
    /// `success` (default), `failed` or `out_of_fuel`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Error text of a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Client {
    /// `POST /v1/compute/submit` (scope `compute:submit`, trust ≥ 0.3).
    pub async fn submit_task(&self, submission: &TaskSubmission) -> Result<SubmittedTask> {
        self.call_json(Call::new(Method::POST, &["v1", "compute", "submit"]).json(submission)?).await
    }

    /// `GET /v1/compute/tasks`.
    pub async fn tasks(&self, query: &TaskQuery) -> Result<TaskPage> {
        let call = Call::new(Method::GET, &["v1", "compute", "tasks"])
            .query("status", query.status.as_deref())
            .query("limit", query.page.limit)
            .query("offset", query.page.offset);
        self.call_json(call).await
    }

    /// `GET /v1/compute/tasks/{id}`.
    pub async fn task(&self, id: &str) -> Result<Task> {
        self.call_json(Call::new(Method::GET, &["v1", "compute", "tasks", id])).await
    }

    /// `POST /v1/compute/tasks/{id}/cancel` (the submitter only).
    pub async fn cancel_task(&self, id: &str) -> Result<Task> {
        self.call_json(Call::new(Method::POST, &["v1", "compute", "tasks", id, "cancel"])).await
    }

    /// `POST /v1/compute/tasks/{id}/claim` (scope `compute:execute`): the task with its code,
    /// inputs and deadline.
    pub async fn claim_task(&self, id: &str) -> Result<Task> {
        self.call_json(Call::new(Method::POST, &["v1", "compute", "tasks", id, "claim"])).await
    }

    /// `POST /v1/compute/tasks/{id}/complete` with a completion signed elsewhere.
    pub async fn complete_task(&self, id: &str, completion: &Completion) -> Result<Task> {
        self.call_json(Call::new(Method::POST, &["v1", "compute", "tasks", id, "complete"]).json(completion)?).await
    }

    /// Signs the result (output, fuel, outcome and error together) for the claimed `task` with
    /// the executor's `identity` and completes it.
    pub async fn complete_task_signed(
        &self,
        task: &Task,
        identity: &Identity,
        output: Value,
        fuel_used: u64,
        outcome: Option<&str>,
        error: Option<&str>,
    ) -> Result<Task> {
        let signature = identity.sign_completion(&task.task_hash, &output, outcome, fuel_used, error)?;
        let completion = Completion {
            output,
            fuel_used,
            signature,
            outcome: outcome.map(str::to_owned),
            error: error.map(str::to_owned),
        };
        self.complete_task(&task.task_id, &completion).await
    }
}
