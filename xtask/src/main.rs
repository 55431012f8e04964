//! Project automation behind `cargo xtask`: the one test command, and the load harness.
//!
//! `cargo xtask test` runs the whole test suite, pointing the tests that need PostgreSQL at the
//! local server unless `GATEWAY_TEST_POSTGRES_URL` is already set. `cargo xtask bench` builds `gatewayd` in release mode and measures it over real
//! TCP (see `bench.rs`).

mod api_check;
mod bench;
mod client;

use std::env;
use std::process::{Command, ExitCode};

const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some("api-check") => api_check::main(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask test [cargo test args…]\n       cargo xtask api-check [--max-examples N] [--seed N]\n       cargo xtask bench [--seconds N] [--connections N] [--scenario payments|balance|peer|all]"
            );
            ExitCode::from(2)
        }
    }
}

/// Runs `cargo test --workspace` with the PostgreSQL URL the storage tests read.
fn test(extra: &[String]) -> ExitCode {
    let mut command = cargo();
    command.args(["test", "--workspace", "--locked"]).args(extra);
    if env::var_os("GATEWAY_TEST_POSTGRES_URL").is_none() {
        command.env("GATEWAY_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL);
    }
    run(&mut command)
}

pub(crate) fn cargo() -> Command {
    Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(command: &mut Command) -> ExitCode {
    match command.status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("xtask: {command:?} failed with {status}");
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("xtask: could not run {command:?}: {err}");
            ExitCode::FAILURE
        }
    }
}
