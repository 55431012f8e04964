//! `compute submit|status|list`. Submitting waits for the result (with a spinner on a
//! terminal) unless `--no-wait`; the task itself runs on the gateway's executors. A task that
//! ended without success (failed, out of fuel, timed out, cancelled) is printed, then reported
//! as an error, so that `gatewayctl` exits 1.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use gateway_client::{PageRequest, Task, TaskQuery, TaskSubmission};

use super::{Context, LoggedIn};
use crate::cli::ComputeCommand;
use crate::output::{Table, short_did, time};
use crate::spinner::Spinner;

fn task_text(task: &Task) -> String {
    let mut text = format!(
        "{} [{}]\nsubmitted  {} UTC by {}\nexecutor   {}\nfinished   {}\nfuel limit {}",
        task.task_id,
        task.status,
        time(task.submitted_at),
        task.submitter,
        task.executor.as_deref().unwrap_or("-"),
        task.finished_at.map(|t| format!("{} UTC", time(t))).unwrap_or_else(|| "-".into()),
        task.fuel_limit
    );
    if let Some(result) = &task.result {
        text.push_str(&format!("\noutcome    {}", result.outcome));
        if let Some(fuel) = result.fuel_used {
            text.push_str(&format!(" ({fuel} fuel)"));
        }
        if !result.output.is_null() {
            text.push_str(&format!("\noutput     {}", result.output));
        }
        if let Some(error) = &result.error {
            text.push_str(&format!("\nerror      {error}"));
        }
    }
    text
}

/// The error of a task that ended without success, returned after its result is printed so
/// that the exit status says so; `None` for a success or a task that has not ended.
fn unsuccessful(task: &Task) -> Option<anyhow::Error> {
    let outcome = task.result.as_ref().map(|result| result.outcome.as_str());
    let detail = task.result.as_ref().and_then(|result| result.error.as_deref()).map(|e| format!(": {e}"));
    let why = match (task.status.as_str(), outcome) {
        (_, Some("success")) => return None,
        (_, Some("out_of_fuel")) => {
            format!("ran out of fuel (limit {}): submit it again with a larger --fuel", task.fuel_limit)
        }
        (_, Some("timeout")) | ("timed_out", None) => "timed out: no executor finished it in time".to_owned(),
        (_, Some("cancelled")) | ("cancelled", None) => "was cancelled".to_owned(),
        (_, Some("failed")) | ("failed", None) => format!("failed{}", detail.unwrap_or_default()),
        (_, Some(other)) => format!("ended with outcome {other}{}", detail.unwrap_or_default()),
        _ => return None,
    };
    Some(anyhow::anyhow!("task {} {why}", task.task_id))
}

/// Prints a task, then fails if it ended without success.
fn show_task(out: crate::output::Output, task: &Task, human: impl FnOnce() -> String) -> anyhow::Result<()> {
    out.show(task, human)?;
    match unsuccessful(task) {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

pub(crate) async fn run(context: &Context, session: &LoggedIn, command: ComputeCommand) -> anyhow::Result<()> {
    let client = &session.client;
    let out = context.out;
    match command {
        ComputeCommand::Submit { file, inputs, fuel, priority, no_wait, timeout } => {
            let code = std::fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
            let contract: serde_json::Value = serde_json::from_str(&code)
                .with_context(|| format!("{} is not a JSON CCL contract", file.display()))?;
            let mut submission = TaskSubmission::ccl(&contract, inputs.into_iter().collect::<BTreeMap<_, _>>(), fuel);
            submission.priority = priority;
            let submitted = client.submit_task(&submission).await.context("submitting the task")?;
            if no_wait {
                return out.show(&submitted, || {
                    format!(
                        "submitted task {} ({}); follow it with `gatewayctl compute status {}`",
                        submitted.task_id, submitted.status, submitted.task_id
                    )
                });
            }
            let spinner = Spinner::start(&format!("task {} submitted; waiting for its result", submitted.task_id));
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            let task = loop {
                let task = client.task(&submitted.task_id).await?;
                if task.is_finished() || tokio::time::Instant::now() >= deadline {
                    break task;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            };
            spinner.stop();
            show_task(out, &task, || {
                let pending = if task.is_finished() {
                    String::new()
                } else {
                    format!(
                        "\n(not finished after {timeout} s; check later with `gatewayctl compute status {}`)",
                        task.task_id
                    )
                };
                format!("{}{pending}", task_text(&task))
            })
        }
        ComputeCommand::Status { id } => {
            let task = client.task(&id).await?;
            show_task(out, &task, || task_text(&task))
        }
        ComputeCommand::List { status, page } => {
            let query = TaskQuery { status, page: PageRequest { limit: Some(page.limit), offset: Some(page.offset) } };
            let tasks = client.tasks(&query).await?;
            out.show(&tasks, || {
                let mut table = Table::new(&["TASK", "STATUS", "SUBMITTER", "SUBMITTED (UTC)", "OUTCOME"]);
                for t in &tasks.tasks {
                    table.row(vec![
                        t.task_id.clone(),
                        t.status.clone(),
                        short_did(&t.submitter),
                        time(t.submitted_at),
                        t.result.as_ref().map(|r| r.outcome.clone()).unwrap_or_else(|| "-".into()),
                    ]);
                }
                table.render("no tasks")
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(status: &str, result: Option<serde_json::Value>) -> Task {
        let mut task = serde_json::json!({
            "task_id": "t1",
            "task_hash": "00",
            "status": status,
            "submitter": "did:key:z6Mk",
            "fuel_limit": 1000,
            "priority": "normal",
            "submitted_at": 0,
        });
        if let Some(result) = result {
            task["result"] = result;
        }
        serde_json::from_value(task).unwrap()
    }

    fn failure(status: &str, result: Option<serde_json::Value>) -> Option<String> {
        unsuccessful(&task(status, result)).map(|error| error.to_string())
    }

    #[test]
    fn a_task_that_did_not_succeed_is_an_error() {
        use serde_json::json;
        assert_eq!(failure("completed", Some(json!({"outcome": "success", "output": 3}))), None);
        assert_eq!(failure("pending", None), None);
        assert_eq!(failure("claimed", None), None);
        assert_eq!(
            failure("failed", Some(json!({"outcome": "failed", "error": "division by zero"}))).as_deref(),
            Some("task t1 failed: division by zero")
        );
        assert_eq!(
            failure("failed", Some(json!({"outcome": "out_of_fuel", "fuel_used": 1000}))).as_deref(),
            Some("task t1 ran out of fuel (limit 1000): submit it again with a larger --fuel")
        );
        assert_eq!(failure("timed_out", None).as_deref(), Some("task t1 timed out: no executor finished it in time"));
        assert_eq!(
            failure("cancelled", Some(json!({"outcome": "cancelled"}))).as_deref(),
            Some("task t1 was cancelled")
        );
        assert_eq!(failure("failed", None).as_deref(), Some("task t1 failed"));
    }
}
