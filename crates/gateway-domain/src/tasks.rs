//! Compute tasks: submission, the executor protocol (claim, complete with a signature over the
//! result), cancellation, claim timeouts, and the executor built into the gateway.
//!
//! A task's `task_hash` is the SHA-256 of the RFC 8785 (JCS) form of
//! `{"code", "code_type", "coop_id", "fuel_limit", "inputs", "priority", "submitter", "task_id"}`.
//! An executor completes a task by signing, with the Ed25519 key of its DID, the versioned
//! completion message [`completion_message`] (`icn-compute-completion/v2`), which binds the
//! task hash, the output, the outcome, the fuel used and the error text, so none of them can be
//! changed after signing. An executor never claims or completes a task it submitted itself.
//! Running code is the interpreter's business ([`crate::compute::ccl`]); this module only moves
//! tasks through their states.

use std::collections::BTreeMap;
use std::sync::Arc;

use ed25519_dalek::{Signature, VerifyingKey};
use gateway_core::{Clock, CoopId, Did, DidResolver, Error, KeyDidResolver, PageRequest};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::compute::ccl;
use crate::events::{CoopEvent, emit, new_id};
use crate::notifications::{Note, NoteData, notify};
use crate::ports::{
    ComputeReads, ComputeTx, EventTx, NotificationTx, TaskOutcome, TaskRecord, TaskResult, TaskStatus, Transactor,
    transaction,
};
use crate::trust::TrustGraph;

/// Trust needed to submit a task, and to claim one as an executor.
pub const COMPUTE_MIN_TRUST: f64 = 0.3;
/// Largest fuel limit.
pub const MAX_FUEL: u64 = 10_000_000;
/// How long a claim may stay uncompleted, seconds.
pub const CLAIM_DEADLINE_SECS: u64 = 60;
/// Claims a task gets before a timeout fails it.
pub const MAX_ATTEMPTS: u32 = 2;
/// The executor name recorded for the built-in executor.
pub const BUILTIN_EXECUTOR: &str = "builtin";

/// A task as submitted.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Must be `ccl`.
    pub code_type: String,
    /// The serialised CCL contract.
    pub code: String,
    /// String inputs.
    pub inputs: BTreeMap<String, String>,
    /// Fuel bound, `1..=10_000_000`.
    pub fuel_limit: u64,
    /// `low`, `normal` (default) or `high`.
    pub priority: Option<String>,
}

/// An executor's report.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The output (any JSON).
    pub output: Value,
    /// Fuel spent, at most the limit.
    pub fuel_used: u64,
    /// Hex Ed25519 signature over [`completion_message`] of this completion.
    pub signature: String,
    /// `success` (default), `failed` or `out_of_fuel`.
    pub outcome: Option<TaskOutcome>,
    /// Error text for a failure.
    pub error: Option<String>,
}

/// Statuses a `status` filter matches: its own, and for `claimed` and `running` both (an
/// executor holds the task either way).
pub fn statuses_for(filter: &str) -> Result<Vec<TaskStatus>, Error> {
    match TaskStatus::parse(filter) {
        Some(status) if status.is_claimed() => Ok(vec![TaskStatus::Claimed, TaskStatus::Running]),
        Some(status) => Ok(vec![status]),
        None => Err(Error::bad_request_field(
            "status",
            "status is pending, claimed, running, completed, failed, cancelled or timed_out",
        )),
    }
}

impl From<ccl::Outcome> for TaskOutcome {
    fn from(outcome: ccl::Outcome) -> Self {
        match outcome {
            ccl::Outcome::Success => TaskOutcome::Success,
            ccl::Outcome::Failed => TaskOutcome::Failed,
            ccl::Outcome::OutOfFuel => TaskOutcome::OutOfFuel,
        }
    }
}

/// The JCS bytes of a value.
fn jcs<T: serde::Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, Error> {
    serde_jcs::to_vec(value).map_err(|e| Error::Internal(format!("canonical JSON: {e}")))
}

/// The hash of the canonical task.
pub fn task_hash(task: &TaskRecord) -> Result<String, Error> {
    /// The fields a task hash covers (JCS orders them by name).
    #[derive(serde::Serialize)]
    struct Canonical<'a> {
        code: &'a str,
        code_type: &'a str,
        coop_id: &'a CoopId,
        fuel_limit: u64,
        inputs: &'a Value,
        priority: &'a str,
        submitter: &'a Did,
        task_id: &'a str,
    }
    let canonical = Canonical {
        code: &task.code,
        code_type: &task.code_type,
        coop_id: &task.coop_id,
        fuel_limit: task.fuel_limit,
        inputs: &task.inputs,
        priority: &task.priority,
        submitter: &task.submitter,
        task_id: &task.task_id,
    };
    Ok(hex::encode(Sha256::digest(jcs(&canonical)?)))
}

/// The first line of the completion message: names the format, so a signature over one
/// version can never verify as another.
pub const COMPLETION_MESSAGE_V2: &str = "icn-compute-completion/v2";

/// The message an executor signs (`docs/COMPUTE.md`, "Completion signature"): six lines, each
/// ending in `\n`, every value of a fixed alphabet so that no field can spill into another:
///
/// ```text
/// icn-compute-completion/v2
/// task_hash=<64 lowercase hex>
/// output=<lowercase hex SHA-256 of JCS(output)>
/// outcome=<success|failed|out_of_fuel>
/// fuel_used=<decimal, no leading zeros>
/// error=<none, or lowercase hex SHA-256 of the error's UTF-8>
/// ```
///
/// The interface's original message (`task_hash ‖ SHA-256(output)`, "v1") bound neither the
/// outcome nor the fuel, so a result could be relabelled after signing; it is not accepted.
pub fn completion_message(
    task_hash: &str,
    output: &Value,
    outcome: TaskOutcome,
    fuel_used: u64,
    error: Option<&str>,
) -> Result<Vec<u8>, Error> {
    let error = error.map_or_else(|| "none".to_owned(), |e| hex::encode(Sha256::digest(e.as_bytes())));
    let output = hex::encode(Sha256::digest(jcs(output)?));
    let task_hash = task_hash.to_ascii_lowercase();
    let outcome = outcome.as_str();
    Ok(format!(
        "{COMPLETION_MESSAGE_V2}\ntask_hash={task_hash}\noutput={output}\noutcome={outcome}\nfuel_used={fuel_used}\nerror={error}\n"
    )
    .into_bytes())
}

/// The message of a completion whose signature does not verify (what the metric counts).
const INVALID_SIGNATURE: &str =
    "the signature does not verify against the executor's key over this output, outcome, fuel_used and error";

/// 403 for an executor that submitted the task itself: it would vouch for its own result.
fn own_task() -> Error {
    Error::denied("own_task", "an executor may not claim or complete a task it submitted itself")
}

/// The task, or `NOT_FOUND`, holding its row until the transaction ends: every change of a
/// task's status takes it before reading the status, so of concurrent claims exactly one finds
/// it pending and the others find it claimed (409).
async fn lock_task<T: ComputeTx + ?Sized>(tx: &mut T, coop: &CoopId, id: &str) -> Result<TaskRecord, Error> {
    tx.lock_task(coop, id).await?.ok_or_else(|| Error::not_found("task", id))
}

/// Ends a task with a result (its status follows from the outcome), its
/// `ComputeTaskCompleted` event and the submitter's notification.
async fn finish<T: ComputeTx + EventTx + NotificationTx + ?Sized>(
    tx: &mut T,
    task: &mut TaskRecord,
    result: TaskResult,
    now: u64,
) -> Result<(), Error> {
    let status = result.outcome.status();
    task.status = status;
    task.finished_at = Some(now);
    task.deadline = None;
    task.result = Some(result);
    tx.update_task(task).await?;
    emit(tx, &task.coop_id, now, CoopEvent::ComputeTaskCompleted(task)).await?;
    let note = Note {
        title: "Compute task finished".into(),
        body: format!("Your task {} ended: {status}.", task.task_id),
        data: NoteData::TaskFinished { task_id: task.task_id.clone(), status: status.as_str() },
    };
    notify(tx, &task.submitter, &task.coop_id, note, now).await
}

/// The compute service.
#[derive(Debug, Clone)]
pub struct Compute {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn ComputeReads>,
    trust: Arc<TrustGraph>,
    clock: Arc<dyn Clock>,
    wake: Arc<tokio::sync::Notify>,
}

impl Compute {
    /// The service over its ports.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn ComputeReads>,
        trust: Arc<TrustGraph>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { transactor, reads, trust, clock, wake: Arc::new(tokio::sync::Notify::new()) }
    }

    /// Validates and stores a task (trust ≥ 0.3).
    pub async fn submit(&self, coop: &CoopId, submitter: &Did, submission: Submission) -> Result<TaskRecord, Error> {
        let score = self.trust.score(submitter);
        if score < COMPUTE_MIN_TRUST {
            return Err(Error::InsufficientTrust { required: COMPUTE_MIN_TRUST, actual: score });
        }
        if submission.code_type != "ccl" {
            return Err(Error::bad_request_field("code_type", "code_type must be \"ccl\""));
        }
        ccl::parse_contract(&submission.code).map_err(|e| Error::bad_request_field(&e.field, e.message.clone()))?;
        if !(1..=MAX_FUEL).contains(&submission.fuel_limit) {
            return Err(Error::bad_request_field("fuel_limit", format!("fuel_limit is 1 to {MAX_FUEL}")));
        }
        let priority = submission.priority.unwrap_or_else(|| "normal".into());
        if !matches!(priority.as_str(), "low" | "normal" | "high") {
            return Err(Error::bad_request_field("priority", "priority is low, normal or high"));
        }
        let now = self.clock.now_unix_secs();
        let mut task = TaskRecord {
            task_id: new_id(),
            coop_id: coop.clone(),
            task_hash: String::new(),
            status: TaskStatus::Pending,
            submitter: submitter.clone(),
            executor: None,
            code_type: submission.code_type,
            code: submission.code,
            inputs: serde_json::to_value(&submission.inputs)
                .map_err(|e| Error::Internal(format!("task inputs: {e}")))?,
            fuel_limit: submission.fuel_limit,
            priority,
            submitted_at: now,
            claimed_at: None,
            deadline: None,
            attempts: 0,
            finished_at: None,
            result: None,
        };
        task.task_hash = task_hash(&task)?;
        let task = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                // A token may name a coop that does not exist (open enrollment): 404, no task.
                crate::coops::require_coop(tx, &task.coop_id).await?;
                tx.insert_task(&task).await?;
                emit(tx, &task.coop_id, now, CoopEvent::ComputeTaskSubmitted(&task)).await?;
                Ok(task)
            })
        })
        .await?;
        self.wake.notify_one();
        Ok(task)
    }

    /// A task.
    pub async fn get(&self, coop: &CoopId, id: &str) -> Result<TaskRecord, Error> {
        self.reads.task(coop, id).await?.ok_or_else(|| Error::not_found("task", id))
    }

    /// A page of tasks, optionally filtered by status.
    pub async fn list(
        &self,
        coop: &CoopId,
        status: Option<&str>,
        page: PageRequest,
    ) -> Result<(Vec<TaskRecord>, u64), Error> {
        let statuses = status.map(statuses_for).transpose()?.unwrap_or_default();
        self.reads.tasks(coop, &statuses, page).await
    }

    /// Cancels a pending or claimed task; only its submitter may.
    pub async fn cancel(&self, coop: &CoopId, caller: &Did, id: &str) -> Result<TaskRecord, Error> {
        let (coop, caller, id, now) = (coop.clone(), caller.clone(), id.to_owned(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut task = lock_task(tx, &coop, &id).await?;
                if task.submitter != caller {
                    return Err(Error::denied("not_the_submitter", "only the submitter may cancel a task"));
                }
                if !(task.status == TaskStatus::Pending || task.status.is_claimed()) {
                    return Err(Error::conflict(format!("task '{id}' is {} and cannot be cancelled", task.status)));
                }
                task.status = TaskStatus::Cancelled;
                task.finished_at = Some(now);
                task.deadline = None;
                task.result = Some(TaskResult {
                    outcome: TaskOutcome::Cancelled,
                    output: Value::Null,
                    error: None,
                    fuel_used: 0,
                });
                tx.update_task(&task).await?;
                emit(tx, &coop, now, CoopEvent::ComputeTaskCancelled(&task)).await?;
                Ok(task)
            })
        })
        .await
    }

    /// Claims a pending task for an executor DID, whose trust must be at least
    /// [`COMPUTE_MIN_TRUST`].
    pub async fn claim(&self, coop: &CoopId, executor: &Did, id: &str) -> Result<TaskRecord, Error> {
        let score = self.trust.score(executor);
        if score < COMPUTE_MIN_TRUST {
            return Err(Error::InsufficientTrust { required: COMPUTE_MIN_TRUST, actual: score });
        }
        self.claim_as(coop, executor.as_str(), id).await
    }

    /// Claims a pending task for an executor (a DID, or [`BUILTIN_EXECUTOR`]).
    async fn claim_as(&self, coop: &CoopId, executor: &str, id: &str) -> Result<TaskRecord, Error> {
        let (coop, executor, id, now) = (coop.clone(), executor.to_owned(), id.to_owned(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut task = lock_task(tx, &coop, &id).await?;
                if task.submitter.as_str() == executor {
                    return Err(own_task());
                }
                if task.status != TaskStatus::Pending {
                    return Err(Error::conflict(format!("task '{id}' is {}, not pending", task.status)));
                }
                task.status = TaskStatus::Claimed;
                task.executor = Some(executor);
                task.claimed_at = Some(now);
                task.deadline = Some(now + CLAIM_DEADLINE_SECS);
                task.attempts += 1;
                tx.update_task(&task).await?;
                emit(tx, &coop, now, CoopEvent::ComputeTaskClaimed(&task)).await?;
                Ok(task)
            })
        })
        .await
    }

    /// Completes a task claimed by `executor`, checking its signature over the result. Only the
    /// executor holding the claim may: anyone else is refused (403) whatever the task's state.
    pub async fn complete(
        &self,
        coop: &CoopId,
        executor: &Did,
        id: &str,
        completion: Completion,
    ) -> Result<TaskRecord, Error> {
        let outcome = completion.outcome.unwrap_or(TaskOutcome::Success);
        if !matches!(outcome, TaskOutcome::Success | TaskOutcome::Failed | TaskOutcome::OutOfFuel) {
            return Err(Error::bad_request_field("outcome", "outcome is success, failed or out_of_fuel"));
        }
        let signature: [u8; 64] = hex::decode(&completion.signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| Error::bad_request_field("signature", "signature must be 128 hex characters"))?;
        let key = KeyDidResolver.resolve(executor)?;
        let (coop, executor, id, now) = (coop.clone(), executor.clone(), id.to_owned(), self.clock.now_unix_secs());
        let completed = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut task = lock_task(tx, &coop, &id).await?;
                if task.submitter == executor {
                    return Err(own_task());
                }
                if task.executor.as_deref().is_some_and(|holder| holder != executor.as_str()) {
                    return Err(Error::denied(
                        "not_the_executor",
                        "only the executor that claimed the task may complete it",
                    ));
                }
                if !task.status.is_claimed() {
                    return Err(Error::conflict(format!("task '{id}' is {}, not claimed", task.status)));
                }
                if completion.fuel_used > task.fuel_limit {
                    return Err(Error::bad_request_field("fuel_used", "fuel_used exceeds the task's fuel_limit"));
                }
                let message = completion_message(
                    &task.task_hash,
                    &completion.output,
                    outcome,
                    completion.fuel_used,
                    completion.error.as_deref(),
                )?;
                let valid = VerifyingKey::from_bytes(&key.0)
                    .map(|k| k.verify_strict(&message, &Signature::from_bytes(&signature)).is_ok())
                    .unwrap_or(false);
                if !valid {
                    return Err(Error::bad_request_field("signature", INVALID_SIGNATURE));
                }
                let result = TaskResult {
                    outcome,
                    output: completion.output,
                    error: completion.error,
                    fuel_used: completion.fuel_used,
                };
                finish(tx, &mut task, result, now).await?;
                Ok(task)
            })
        })
        .await;
        // Counted here, once per refused request, in the caller's thread: the transaction may run
        // on the store's writer and be retried.
        if let Err(Error::BadRequest { message, .. }) = &completed
            && message == INVALID_SIGNATURE
        {
            metrics::counter!("icn_compute_signatures_invalid_total").increment(1);
        }
        completed
    }

    /// Handles claims past their deadline: back to pending once, then timed out. Returns how
    /// many timed out.
    pub async fn expire_claims(&self) -> Result<usize, Error> {
        let now = self.clock.now_unix_secs();
        let due = self.reads.expired_claims(now).await?;
        let count = due.len();
        for (coop, id) in due {
            let returned = transaction(self.transactor.as_ref(), move |tx| {
                Box::pin(async move {
                    let mut task = lock_task(tx, &coop, &id).await?;
                    if !task.status.is_claimed() || task.deadline.is_none_or(|d| d > now) {
                        return Ok(false);
                    }
                    if task.attempts < MAX_ATTEMPTS {
                        task.status = TaskStatus::Pending;
                        task.executor = None;
                        task.claimed_at = None;
                        task.deadline = None;
                        tx.update_task(&task).await?;
                        Ok(true)
                    } else {
                        let result = TaskResult {
                            outcome: TaskOutcome::Timeout,
                            output: Value::Null,
                            error: Some("the executor did not complete in time".into()),
                            fuel_used: 0,
                        };
                        finish(tx, &mut task, result, now).await?;
                        Ok(false)
                    }
                })
            })
            .await?;
            metrics::counter!("icn_compute_tasks_timeout_total").increment(1);
            if returned {
                self.wake.notify_one();
            }
        }
        Ok(count)
    }

    /// Runs one pending task with the built-in interpreter, if there is one; returns whether it did.
    pub async fn run_one_builtin(&self) -> Result<bool, Error> {
        let Some((coop, id)) = self.reads.pending_tasks(1).await?.into_iter().next() else {
            return Ok(false);
        };
        let task = match self.claim_as(&coop, BUILTIN_EXECUTOR, &id).await {
            Ok(task) => task,
            // Another executor took it first.
            Err(Error::Conflict { .. }) => return Ok(true),
            Err(err) => return Err(err),
        };
        let inputs: BTreeMap<String, String> = serde_json::from_value(task.inputs.clone()).unwrap_or_default();
        let (code, fuel) = (task.code.clone(), task.fuel_limit);
        let run = tokio::task::spawn_blocking(move || {
            ccl::parse_contract(&code).map(|contract| ccl::run(&contract, &inputs, fuel))
        })
        .await
        .map_err(|e| Error::Internal(format!("the interpreter stopped: {e}")))?;
        let result = match run {
            Ok(r) => TaskResult {
                outcome: r.outcome.into(),
                output: r.output.unwrap_or(Value::Null),
                error: r.error,
                fuel_used: r.fuel_used,
            },
            Err(e) => TaskResult {
                outcome: TaskOutcome::Failed,
                output: Value::Null,
                error: Some(e.to_string()),
                fuel_used: 0,
            },
        };
        let now = self.clock.now_unix_secs();
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut current = lock_task(tx, &coop, &id).await?;
                // Cancelled (or timed out) while it ran: the earlier end stands.
                if !current.status.is_claimed() || current.executor.as_deref() != Some(BUILTIN_EXECUTOR) {
                    return Ok(());
                }
                finish(tx, &mut current, result, now).await
            })
        })
        .await?;
        Ok(true)
    }

    /// Runs the built-in executor until the process ends: woken by submissions, and every
    /// second as a fallback (tasks submitted through another replica).
    pub async fn run_builtin_executor(self) {
        loop {
            match self.run_one_builtin().await {
                Ok(true) => continue,
                Ok(false) => {}
                Err(err) => tracing::warn!("the built-in executor failed: {err}"),
            }
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.wake.notified()).await;
        }
    }
}
