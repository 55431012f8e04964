//! The compute tasks' ports.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, PageRequest};
use serde_json::Value;

/// Where a compute task is in its life. Spelled as text only at the store and wire boundaries
/// ([`TaskStatus::as_str`], [`TaskStatus::parse`]), so a misspelt state cannot compile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Waiting for an executor.
    Pending,
    /// Claimed by an executor, not yet completed.
    Claimed,
    /// Being run (the `running` filter matches it and `claimed`).
    Running,
    /// Ended with a result.
    Completed,
    /// Ended with a failure (including running out of fuel).
    Failed,
    /// Cancelled by its submitter.
    Cancelled,
    /// Its claims ran out of time.
    TimedOut,
}

impl TaskStatus {
    /// Every status.
    pub const ALL: [TaskStatus; 7] = [
        TaskStatus::Pending,
        TaskStatus::Claimed,
        TaskStatus::Running,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
        TaskStatus::TimedOut,
    ];

    /// The wire and storage spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Pending => "pending",
            TaskStatus::Claimed => "claimed",
            TaskStatus::Running => "running",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
            TaskStatus::TimedOut => "timed_out",
        }
    }

    /// The status spelled `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Whether an executor holds the task (`claimed` or `running`).
    pub const fn is_claimed(self) -> bool {
        matches!(self, TaskStatus::Claimed | TaskStatus::Running)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a task ended (`result.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskOutcome {
    /// The code ran to its end.
    Success,
    /// The code failed.
    Failed,
    /// The code used up its fuel.
    OutOfFuel,
    /// No executor completed it in time.
    Timeout,
    /// Its submitter cancelled it.
    Cancelled,
}

impl TaskOutcome {
    /// Every outcome.
    pub const ALL: [TaskOutcome; 5] = [
        TaskOutcome::Success,
        TaskOutcome::Failed,
        TaskOutcome::OutOfFuel,
        TaskOutcome::Timeout,
        TaskOutcome::Cancelled,
    ];

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            TaskOutcome::Success => "success",
            TaskOutcome::Failed => "failed",
            TaskOutcome::OutOfFuel => "out_of_fuel",
            TaskOutcome::Timeout => "timeout",
            TaskOutcome::Cancelled => "cancelled",
        }
    }

    /// The outcome spelled `text`, if any.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|o| o.as_str() == text)
    }

    /// The status a task ends in with this outcome.
    pub const fn status(self) -> TaskStatus {
        match self {
            TaskOutcome::Success => TaskStatus::Completed,
            TaskOutcome::Failed | TaskOutcome::OutOfFuel => TaskStatus::Failed,
            TaskOutcome::Timeout => TaskStatus::TimedOut,
            TaskOutcome::Cancelled => TaskStatus::Cancelled,
        }
    }
}

impl fmt::Display for TaskOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of an ended task: `{"outcome", "output", "error", "fuel_used"}` on the wire.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TaskResult {
    /// How it ended.
    pub outcome: TaskOutcome,
    /// The output (any JSON; `null` when there is none).
    pub output: Value,
    /// Why it failed.
    pub error: Option<String>,
    /// Fuel spent.
    pub fuel_used: u64,
}

/// A compute task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// Id.
    pub task_id: String,
    /// Cooperative of the submitter's token.
    pub coop_id: CoopId,
    /// SHA-256 hex of the canonical task.
    pub task_hash: String,
    /// Where it is in its life.
    pub status: TaskStatus,
    /// Who submitted it.
    pub submitter: Did,
    /// Who claimed it (a DID, or `builtin`).
    pub executor: Option<String>,
    /// `ccl`.
    pub code_type: String,
    /// The serialised contract.
    pub code: String,
    /// String inputs.
    pub inputs: Value,
    /// Fuel bound.
    pub fuel_limit: u64,
    /// `low`, `normal` or `high`.
    pub priority: String,
    /// Unix seconds.
    pub submitted_at: u64,
    /// When claimed.
    pub claimed_at: Option<u64>,
    /// When the current claim times out.
    pub deadline: Option<u64>,
    /// Claims so far.
    pub attempts: u32,
    /// When it ended.
    pub finished_at: Option<u64>,
    /// Set once it ended.
    pub result: Option<TaskResult>,
}

/// Compute task writes.
#[async_trait]
pub trait ComputeTx: Send {
    /// Stores a new task.
    async fn insert_task(&mut self, task: &TaskRecord) -> Result<(), Error>;
    /// A task of the coop.
    async fn task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error>;
    /// A task of the coop, holding its row until the transaction ends (`FOR UPDATE` on
    /// PostgreSQL; a plain read under SQLite's single writer), so that concurrent claims,
    /// completions and cancellations of one task decide on its latest status one after the other.
    async fn lock_task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error>;
    /// Replaces a task's mutable fields.
    async fn update_task(&mut self, task: &TaskRecord) -> Result<(), Error>;
}

/// Compute task reads.
#[async_trait]
pub trait ComputeReads: Send + Sync + fmt::Debug {
    /// One task, read without queuing behind the writer.
    async fn task(&self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error>;
    /// A page of a coop's tasks (newest first) with these statuses (all when empty), and the total.
    async fn tasks(
        &self,
        coop: &CoopId,
        statuses: &[TaskStatus],
        page: PageRequest,
    ) -> Result<(Vec<TaskRecord>, u64), Error>;
    /// The oldest pending tasks of any coop, highest priority first.
    async fn pending_tasks(&self, limit: u32) -> Result<Vec<(CoopId, String)>, Error>;
    /// Claimed tasks whose deadline has passed.
    async fn expired_claims(&self, now: u64) -> Result<Vec<(CoopId, String)>, Error>;
}
