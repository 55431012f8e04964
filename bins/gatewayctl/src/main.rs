//! `gatewayctl`, the command line a cooperative member uses: a key, a login, payments, trust,
//! governance with offline receipt verification, compute tasks and the live event stream,
//! all through the `gateway-client` SDK.
//!
//! This file only parses, runs and turns failures into advice and an exit status: 0 success,
//! 1 failure (the message says what to do), 2 usage error (from clap), 3 a receipt or a log
//! proof that does not verify, or a log audit that found a mismatch. It keeps no state but the
//! key file, the token cache (see `files`) and, when asked, the log audits' state, and it never
//! talks to the gateway except through the SDK.

mod advice;
mod cli;
mod commands;
mod files;
mod output;
mod receipt;
mod spinner;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{}", advice::explain(&error));
            if error.downcast_ref::<commands::InvalidReceipt>().is_some()
                || error.downcast_ref::<commands::LogInvalid>().is_some()
            {
                ExitCode::from(commands::EXIT_INVALID_RECEIPT)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
