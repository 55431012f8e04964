//! Compute tasks: [`ComputeTx`], the `compute_tasks` row and its stored result.

use async_trait::async_trait;
use gateway_core::{CoopId, Error};
use gateway_domain::ports::{ComputeTx, TaskRecord, TaskResult, TaskStatus};

use super::{Conn, parse_coop, parse_did, parse_json, to_i64, to_u64};

/// Columns of `compute_tasks`, in this order.
pub(crate) const TASK_COLUMNS: &str = "task_id, coop_id, task_hash, status, submitter, executor, \
     code_type, code, inputs, fuel_limit, priority, submitted_at, claimed_at, deadline, attempts, \
     finished_at, result";

/// A `compute_tasks` row: [`TASK_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TaskRow {
    task_id: String,
    coop_id: String,
    task_hash: String,
    status: String,
    submitter: String,
    executor: Option<String>,
    code_type: String,
    code: String,
    inputs: String,
    fuel_limit: i64,
    priority: String,
    submitted_at: i64,
    claimed_at: Option<i64>,
    deadline: Option<i64>,
    attempts: i64,
    finished_at: Option<i64>,
    result: Option<String>,
}

named_row!(TaskRow {
    task_id,
    coop_id,
    task_hash,
    status,
    submitter,
    executor,
    code_type,
    code,
    inputs,
    fuel_limit,
    priority,
    submitted_at,
    claimed_at,
    deadline,
    attempts,
    finished_at,
    result
});

pub(crate) fn task_from_row(row: TaskRow) -> Result<TaskRecord, Error> {
    Ok(TaskRecord {
        task_id: row.task_id,
        coop_id: parse_coop(&row.coop_id)?,
        task_hash: row.task_hash,
        status: TaskStatus::parse(&row.status)
            .ok_or_else(|| Error::Internal(format!("stored task status '{}' is unknown", row.status)))?,
        submitter: parse_did(&row.submitter)?,
        executor: row.executor,
        code_type: row.code_type,
        code: row.code,
        inputs: parse_json(&row.inputs)?,
        fuel_limit: to_u64(row.fuel_limit),
        priority: row.priority,
        submitted_at: to_u64(row.submitted_at),
        claimed_at: row.claimed_at.map(to_u64),
        deadline: row.deadline.map(to_u64),
        attempts: u32::try_from(row.attempts).unwrap_or(u32::MAX),
        finished_at: row.finished_at.map(to_u64),
        result: row.result.as_deref().map(parse_task_result).transpose()?,
    })
}

/// A stored task result (`{"outcome", "output", "error", "fuel_used"}`).
fn parse_task_result(text: &str) -> Result<TaskResult, Error> {
    serde_json::from_str(text).map_err(|e| Error::Internal(format!("stored task result does not decode: {e}")))
}

fn task_result_text(result: Option<&TaskResult>) -> Result<Option<String>, Error> {
    result
        .map(|r| serde_json::to_string(r).map_err(|e| Error::Internal(format!("task result does not encode: {e}"))))
        .transpose()
}

#[async_trait]
impl ComputeTx for Conn<'_> {
    async fn insert_task(&mut self, t: &TaskRecord) -> Result<(), Error> {
        let sql = format!(
            "INSERT INTO compute_tasks ({TASK_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
        );
        let inputs = t.inputs.to_string();
        let result = task_result_text(t.result.as_ref())?;
        self.execute(
            &sql,
            args![
                &t.task_id,
                t.coop_id.as_str(),
                &t.task_hash,
                t.status.as_str(),
                t.submitter.as_str(),
                t.executor.as_deref(),
                &t.code_type,
                &t.code,
                &inputs,
                to_i64(t.fuel_limit)?,
                &t.priority,
                to_i64(t.submitted_at)?,
                t.claimed_at.map(to_i64).transpose()?,
                t.deadline.map(to_i64).transpose()?,
                i64::from(t.attempts),
                t.finished_at.map(to_i64).transpose()?,
                result.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }

    async fn task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM compute_tasks WHERE coop_id = $1 AND task_id = $2");
        let row: Option<TaskRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(task_from_row).transpose()
    }

    async fn lock_task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM compute_tasks WHERE coop_id = $1 AND task_id = $2{}",
            self.for_update()
        );
        let row: Option<TaskRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(task_from_row).transpose()
    }

    async fn update_task(&mut self, t: &TaskRecord) -> Result<(), Error> {
        let result = task_result_text(t.result.as_ref())?;
        self.execute(
            "UPDATE compute_tasks \
             SET status = $3, executor = $4, claimed_at = $5, deadline = $6, attempts = $7, \
                 finished_at = $8, result = $9 \
             WHERE coop_id = $1 AND task_id = $2",
            args![
                t.coop_id.as_str(),
                &t.task_id,
                t.status.as_str(),
                t.executor.as_deref(),
                t.claimed_at.map(to_i64).transpose()?,
                t.deadline.map(to_i64).transpose()?,
                i64::from(t.attempts),
                t.finished_at.map(to_i64).transpose()?,
                result.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }
}
