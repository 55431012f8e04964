//! The history: every operation's invocation and completion, in logical time.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use gateway_core::{Error, ErrorCode};

/// How an operation completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded; a short description of the value (an id, a status).
    Ok(String),
    /// It failed with this typed error; the message for the record.
    Err(ErrorCode, String),
}

/// One operation: invoked at `invoked`, completed at `completed` (logical times from one
/// counter shared by all processes, so `a.completed < b.invoked` means a happened before b).
#[derive(Debug, Clone)]
pub struct Op {
    pub process: usize,
    pub kind: &'static str,
    pub args: String,
    pub invoked: u64,
    pub completed: u64,
    pub outcome: Outcome,
}

impl Op {
    pub fn ok(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Ok(value) => Some(value),
            Outcome::Err(..) => None,
        }
    }

    pub fn code(&self) -> Option<ErrorCode> {
        match &self.outcome {
            Outcome::Ok(_) => None,
            Outcome::Err(code, _) => Some(*code),
        }
    }
}

/// A line of the raw log, as Jepsen prints it: `:invoke` then `:ok` / `:fail`.
#[derive(Debug, Clone)]
struct Line {
    time: u64,
    process: usize,
    kind: &'static str,
    text: String,
}

/// The history of one round.
#[derive(Debug, Default)]
pub struct History {
    clock: AtomicU64,
    lines: Mutex<Vec<Line>>,
    ops: Mutex<Vec<Op>>,
}

impl History {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Runs `operation` as process `process`, recording its invocation and completion;
    /// `describe` turns an ok value into the history's text.
    pub async fn run<T>(
        &self,
        process: usize,
        kind: &'static str,
        args: impl Into<String>,
        operation: impl Future<Output = Result<T, Error>>,
        describe: impl FnOnce(&T) -> String,
    ) -> Result<T, Error> {
        let args = args.into();
        let invoked = self.tick();
        self.lines.lock().unwrap().push(Line { time: invoked, process, kind, text: format!(":invoke {args}") });
        let result = operation.await;
        let completed = self.tick();
        let outcome = match &result {
            Ok(value) => Outcome::Ok(describe(value)),
            Err(e) => Outcome::Err(e.code(), e.to_string()),
        };
        let text = match &outcome {
            Outcome::Ok(v) => format!(":ok {v}"),
            Outcome::Err(code, message) => format!(":fail {} {message}", code.as_str()),
        };
        self.lines.lock().unwrap().push(Line { time: completed, process, kind, text });
        self.ops.lock().unwrap().push(Op { process, kind, args, invoked, completed, outcome });
        result
    }

    /// Completed operations, in completion order.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// Completed operations of one kind.
    pub fn of(&self, kind: &str) -> Vec<Op> {
        self.ops().into_iter().filter(|o| o.kind == kind).collect()
    }

    /// What a replay of a seed must reproduce: the order of invocations, and each process's
    /// outcome (ok, or the error code), without ids or messages. (The order of completions is
    /// left out: the SQLite store runs some reads on a blocking thread, whose timing is not the
    /// scheduler's.)
    pub fn shape(&self) -> (Vec<usize>, Vec<(usize, &'static str, String)>) {
        let mut lines = self.lines.lock().unwrap().clone();
        lines.sort_by_key(|l| l.time);
        let invoked = lines.iter().filter(|l| l.text.starts_with(":invoke")).map(|l| l.process).collect();
        let mut outcomes: Vec<(usize, &'static str, String)> = self
            .ops()
            .into_iter()
            .map(|o| {
                let outcome = o.code().map_or("ok", |c| c.as_str()).to_owned();
                (o.process, o.kind, outcome)
            })
            .collect();
        outcomes.sort();
        (invoked, outcomes)
    }

    /// The log, one line per invocation or completion (at most 80 lines).
    pub fn render(&self) -> String {
        let mut lines = self.lines.lock().unwrap().clone();
        lines.sort_by_key(|l| l.time);
        let total = lines.len();
        let mut out: Vec<String> =
            lines.iter().take(80).map(|l| format!("    {:>4} p{} {} {}", l.time, l.process, l.kind, l.text)).collect();
        if total > 80 {
            out.push(format!("    … {} more", total - 80));
        }
        out.join("\n")
    }
}
