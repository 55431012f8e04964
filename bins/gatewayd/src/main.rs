//! `gatewayd`: the cooperative gateway server.
//!
//! A thin binary: parse the configuration, initialise logging, bind the listeners and call the
//! library's [`gatewayd::serve`] until SIGINT or SIGTERM.

use anyhow::Context as _;
use clap::{CommandFactory, FromArgMatches};

/// mimalloc rather than the system allocator: under load, glibc's malloc and free took about a
/// sixth of the gateway's CPU time (docs/PERFORMANCE.md). Built with `no_thp`: mimalloc would
/// otherwise ask for transparent huge pages, and each touched 2 MB page counts whole in the
/// resident set (an idle gateway then holds 35 MB instead of 22 MB). Built with `override`: the
/// C code's `malloc` and `free` are mimalloc's too, so the bundled SQLite's allocations (about a
/// tenth of the store writer's time with glibc's) take the same fast path.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use gatewayd::config::{
    Cli, Command, ConfigAction, GatewayConfig, KeystoreAction, LogAction, LogFormat, WitnessAction,
};

/// Runs the command; an error is printed as one message (with its causes, never a backtrace,
/// whatever `RUST_BACKTRACE` says) and the exit status is 1.
fn main() -> std::process::ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    match refuse_unused_settings(&cli, &matches).and_then(|()| run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The settings `gatewayd init` and `gatewayd keystore …` use; any other server option given on
/// their command line is refused rather than silently ignored (they write files with the
/// defaults: set the rest in `gateway.toml`, or when serving).
fn refuse_unused_settings(cli: &Cli, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let (name, used): (&str, &[&str]) = match &cli.command {
        Some(Command::Init { .. }) => ("init", &["passphrase_file"]),
        Some(Command::Keystore { action: KeystoreAction::Init }) => ("keystore init", &["keystore", "passphrase_file"]),
        Some(Command::Keystore { action: KeystoreAction::Rotate }) => {
            ("keystore rotate", &["keystore", "passphrase_file"])
        }
        _ => return Ok(()),
    };
    let mut levels = vec![matches];
    while let Some((_, sub)) = levels.last().and_then(|m| m.subcommand()) {
        levels.push(sub);
    }
    let given: Vec<String> = Cli::command()
        .get_arguments()
        .filter(|arg| arg.is_global_set() && !used.contains(&arg.get_id().as_str()))
        .filter(|arg| {
            levels.iter().any(|m| m.value_source(arg.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine))
        })
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect();
    if given.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "gatewayd {name} does not use {}: it writes its files with the defaults; set these in gateway.toml (or give them when serving)",
        given.join(", ")
    )
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Keystore { action: KeystoreAction::Init }) => {
            return keystore_init(cli.settings.keystore, cli.settings.passphrase_file.as_deref());
        }
        Some(Command::Keystore { action: KeystoreAction::Rotate }) => {
            return keystore_rotate(cli.settings.keystore, cli.settings.passphrase_file.as_deref());
        }
        Some(Command::Init { dir, founder, force }) => {
            let passphrase = gatewayd::passphrase(cli.settings.passphrase_file.as_deref())?.map(|(secret, _)| secret);
            return gatewayd::init::run_with(&dir, founder.as_deref(), force, passphrase);
        }
        Some(Command::Witness { action: Some(WitnessAction::Vkey(args)), .. }) => {
            println!("{}", gatewayd::witness::vkey(&args)?);
            return Ok(());
        }
        Some(Command::Witness { action: None, serve }) => {
            let args = serve.context("gatewayd witness needs --key, --state, --name and --log")?;
            let _log_writer = init_tracing(cli.settings.log_format.unwrap_or_default());
            let runtime = tokio::runtime::Runtime::new().context("cannot start the runtime")?;
            return runtime.block_on(gatewayd::witness::serve(args));
        }
        _ => {}
    }
    let config = GatewayConfig::resolve(cli.settings)?;
    // Held to the end: dropping it writes out the lines still queued.
    let _log_writer = init_tracing(config.log_format);
    match cli.command {
        None | Some(Command::Serve) => {
            // The configuration says how the runtime's workers run, so it is built after it.
            let (runtime, applied) = gatewayd::workers::runtime(config.workers).context("cannot start the runtime")?;
            log_workers(&config.workers, &applied);
            runtime.block_on(async {
                let listeners = gatewayd::Listeners::bind(&config).await?;
                gatewayd::serve(config, listeners, shutdown_signal()).await
            })?;
            tracing::info!("stopped");
            Ok(())
        }
        Some(Command::Config { action: ConfigAction::Check { connect } }) => {
            // The check builds the Redis handle, which starts a task: it needs a runtime, one
            // thread of it.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the runtime")?;
            let warnings = {
                let _runtime = runtime.enter();
                config.check()?
            };
            if connect {
                runtime.block_on(gatewayd::connect_check(&config))?;
            }
            for warning in &warnings {
                println!("warning: {warning}");
            }
            let verdict = if warnings.is_empty() {
                "configuration is valid"
            } else {
                "configuration is valid, with the warnings above"
            };
            println!("{verdict}\n{}", config.summary());
            Ok(())
        }
        Some(Command::Log { action: LogAction::Fsck { coop } }) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the runtime")?;
            if runtime.block_on(gatewayd::coop_log::fsck(&config, coop.as_deref()))? {
                Ok(())
            } else {
                anyhow::bail!("the logs above do not match their signed checkpoints")
            }
        }
        Some(Command::Keystore { .. } | Command::Init { .. } | Command::Witness { .. }) => {
            unreachable!("handled above")
        }
    }
}

/// One start-up line on the workers, and a warning for each setting that could not be applied.
fn log_workers(tuning: &gatewayd::workers::WorkerTuning, applied: &gatewayd::workers::Applied) {
    tracing::info!(
        workers = tuning.workers,
        pinned_cpus = ?applied.pinned,
        slice_us = tuning.slice.map(|slice| slice.as_micros()),
        workers_with_the_slice = applied.sliced,
        "runtime started"
    );
    for problem in &applied.problems {
        tracing::warn!("{problem}");
    }
}

/// The passphrase for the keystore subcommands, from `--passphrase-file`, the systemd
/// credential or `ICN_PASSPHRASE` (in that order, as when serving).
fn passphrase(file: Option<&std::path::Path>, purpose: &str) -> anyhow::Result<zeroize::Zeroizing<String>> {
    gatewayd::passphrase(file)?.map(|(secret, _)| secret).ok_or_else(|| {
        anyhow::anyhow!(
            "give the passphrase {purpose}: --passphrase-file <file>, the systemd credential {} or {}",
            gatewayd::PASSPHRASE_CREDENTIAL,
            gatewayd::PASSPHRASE_VAR
        )
    })
}

/// `gatewayd keystore init --keystore <path>`: a new master secret (number 0), encrypted under
/// `ICN_PASSPHRASE`; refuses to overwrite an existing keystore.
fn keystore_init(path: Option<std::path::PathBuf>, file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let path = path.ok_or_else(|| anyhow::anyhow!("keystore init needs --keystore <path>"))?;
    let passphrase = passphrase(file, "that will protect the keystore")?;
    let master = gateway_auth::keystore::init(&path, &passphrase)?;
    println!(
        "created {}\nmaster {} (each coop's receipt key is derived from it; see docs/RECEIPTS.md)",
        path.display(),
        master.id
    );
    Ok(())
}

/// `gatewayd keystore rotate --keystore <path>`: the operator's master rotation. Retires the
/// current master (kept in the file, encrypted, so the keys derived from it can still be
/// derived) and adds a new one, under the same `ICN_PASSPHRASE`. Running gateways sign with the
/// new master after a restart; every coop then moves to a key derived from it, and its previous
/// key stays in the signing-keys list.
fn keystore_rotate(path: Option<std::path::PathBuf>, file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let path = path.ok_or_else(|| anyhow::anyhow!("keystore rotate needs --keystore <path>"))?;
    let passphrase = passphrase(file, "of the keystore")?;
    let keyring = gateway_auth::keystore::rotate(&path, &passphrase)?;
    let retired: Vec<String> = keyring.masters().iter().rev().skip(1).rev().map(|m| m.info().id.to_string()).collect();
    println!(
        "rotated {}\nmaster {} (current)\nretired masters {} (kept in the keystore)\nrestart the gateway (every replica) to sign with the new master",
        path.display(),
        keyring.current().info().id,
        retired.join(", ")
    );
    Ok(())
}

/// Lines queued for the log writer at most (a queue's slots are allocated up front: 8,192 take
/// 256 KB).
const LOG_QUEUE_LINES: usize = 8192;

/// Logs go to stdout: human-readable lines, or one JSON object a line with `--log-format json`.
/// `RUST_LOG` filters them (default `info`: one access line per request under the target
/// `gateway::access`, warnings and errors; `RUST_LOG=info,gateway::access=off` drops the access
/// lines).
///
/// A request formats its line and queues it; a thread of its own writes the queue to stdout,
/// many lines per write, so no request waits on a write to stdout (one system call per access line was
/// the largest single cost of a balance read). The queue holds up to [`LOG_QUEUE_LINES`] lines and
/// is lossless: when stdout cannot keep up, requests wait for room rather than lines being dropped.
fn init_tracing(format: LogFormat) -> tracing_appender::non_blocking::WorkerGuard {
    use tracing_subscriber::EnvFilter;
    // PostgreSQL's notices (sqlx logs a NOTICE at info) are below what the gateway's operator
    // needs: "relation already exists, skipping" at every start.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx::postgres::notice=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .buffered_lines_limit(LOG_QUEUE_LINES)
        .thread_name("log-writer")
        .finish(std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout()));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(writer);
    match format {
        // The current span (the request's, with its id) once, not again in a list of spans.
        LogFormat::Json => builder.json().with_span_list(false).init(),
        LogFormat::Text => builder.init(),
    }
    guard
}

/// The lib's shutdown signal, said in the log when it comes.
async fn shutdown_signal() {
    gatewayd::shutdown_signal().await;
    tracing::info!("shutdown signal received; draining");
}
