//! A progress line on stderr for operations that take a while (logging in, waiting for a
//! compute result, fetching and verifying a receipt).
//!
//! It draws only when stderr is a terminal, so scripts and pipes see nothing, and it erases
//! itself when done. It never writes to stdout.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use tokio::task::JoinHandle;

const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

/// A running spinner; dropping or [`Spinner::stop`]ping it erases the line.
#[derive(Debug)]
pub(crate) struct Spinner {
    task: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts drawing `message` (only on a terminal).
    pub(crate) fn start(message: &str) -> Self {
        if !std::io::stderr().is_terminal() {
            return Self { task: None };
        }
        let message = message.to_owned();
        let task = tokio::spawn(async move {
            let mut frame = 0;
            loop {
                eprint!("\r{} {message}", FRAMES[frame % FRAMES.len()]);
                let _ = std::io::stderr().flush();
                frame += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Self { task: Some(task) }
    }

    /// Stops and erases the line.
    pub(crate) fn stop(mut self) {
        self.clear();
    }

    fn clear(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.clear();
    }
}
