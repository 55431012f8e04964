//! `compute submit|status|list`. Submitting waits for the result (with a spinner on a
//! terminal) unless `--no-wait`; the task itself runs on the gateway's executors.

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
            out.show(&task, || {
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
            out.show(&task, || task_text(&task))
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
