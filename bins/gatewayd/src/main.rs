//! `gatewayd`: the cooperative gateway server.
//!
//! A thin binary: parse the configuration, initialise logging, assemble the state from the
//! library crates, bind the listeners and serve until SIGINT or SIGTERM. Everything with
//! behaviour of its own lives in the `gateway-*` crates.

mod app;
mod config;
mod tasks;

use clap::Parser;

use crate::config::{Cli, Command, ConfigAction, GatewayConfig};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_tracing();
    let config = GatewayConfig::resolve(cli.settings)?;
    match cli.command {
        None | Some(Command::Serve) => app::run(config, shutdown_signal()).await,
        Some(Command::Config { action: ConfigAction::Check }) => {
            println!("configuration is valid\n{}", config.summary());
            Ok(())
        }
    }
}

/// Logs go to stdout; `RUST_LOG` filters (default `info`), `ICN_GATEWAY_LOG_FORMAT=json` gives
/// one JSON object a line.
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi);
    if std::env::var("ICN_GATEWAY_LOG_FORMAT").is_ok_and(|f| f == "json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutdown signal received; draining");
}
