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
    let matches = command().get_matches();
    let mut cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(err) => err.exit(),
    };
    // The witness's `--listen` shares its name with the gateway's global one, whose
    // `ICN_GATEWAY_LISTEN` clap would hand down to it: only the witness's own flag counts.
    if let Some(Command::Witness { serve: Some(args), .. }) = &mut cli.command
        && let Some(("witness", sub)) = matches.subcommand()
        && sub.value_source("listen") != Some(clap::parser::ValueSource::CommandLine)
    {
        args.listen = gatewayd::witness::DEFAULT_LISTEN.parse().expect("the default address parses");
    }
    match refuse_unused_settings(&matches).and_then(|()| run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The subcommands that use only some of the server settings (which are global, so that they
/// may come before a subcommand), and the settings each uses. Serving and `config check` use
/// them all. Every other setting is left out of the subcommand's `--help` and refused on its
/// command line ([`refuse_unused_settings`]) rather than silently ignored.
const PARTIAL_USERS: &[(&[&str], &[&str])] = &[
    (&["init"], &["passphrase_file"]),
    (&["keystore", "init"], &["keystore", "passphrase_file"]),
    (&["keystore", "rotate"], &["keystore", "passphrase_file"]),
    (&["keystore"], &["keystore", "passphrase_file"]),
    (&["log"], &["config", "store", "postgres_max_connections", "log_origin", "log_format", "dev"]),
    (&["log", "fsck"], &["config", "store", "postgres_max_connections", "log_origin", "log_format", "dev"]),
    (&["witness"], &["log_format"]),
    (&["witness", "vkey"], &[]),
];

/// `gatewayd`'s command line, with each subcommand's help naming only the settings it uses.
fn command() -> clap::Command {
    let mut command = Cli::command();
    let settings: Vec<clap::Arg> = command.get_arguments().filter(|arg| arg.is_global_set()).cloned().collect();
    for (path, used) in PARTIAL_USERS {
        command = hide_in(command, path, &settings, used);
    }
    command
}

/// `command` with the `settings` not `used` hidden from the help of its subcommand at `path`:
/// each is declared there again, hidden, and clap then does not copy the visible global into it.
fn hide_in(command: clap::Command, path: &[&str], settings: &[clap::Arg], used: &[&str]) -> clap::Command {
    match path {
        [] => {
            let hidden: Vec<clap::Arg> = settings
                .iter()
                .filter(|arg| !used.contains(&arg.get_id().as_str()) && !defines(&command, arg.get_id()))
                .map(|arg| arg.clone().hide(true))
                .collect();
            command.args(hidden)
        }
        [name, rest @ ..] => command.mut_subcommand(*name, |sub| hide_in(sub, rest, settings, used)),
    }
}

/// Whether `command` declares an argument `id` of its own (a witness's `--listen`).
fn defines(command: &clap::Command, id: &clap::Id) -> bool {
    command.get_arguments().any(|arg| arg.get_id() == id)
}

/// Refuses a server setting given on the command line of a subcommand that does not use it
/// ([`PARTIAL_USERS`]): `gatewayd init` and `gatewayd keystore …` write their files with the
/// defaults, `gatewayd log fsck` reads only the store, and a witness serves on its own flags.
fn refuse_unused_settings(matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let mut path = Vec::new();
    let mut levels = vec![matches];
    while let Some((name, sub)) = levels.last().and_then(|m| m.subcommand()) {
        path.push(name);
        levels.push(sub);
    }
    let Some((_, used)) = PARTIAL_USERS.iter().find(|(p, _)| *p == path.as_slice()) else { return Ok(()) };
    let cli = Cli::command();
    let own = path.iter().try_fold(&cli, |command, name| command.find_subcommand(name)).expect("a parsed path");
    let given: Vec<String> = cli
        .get_arguments()
        .filter(|arg| arg.is_global_set() && !used.contains(&arg.get_id().as_str()) && !defines(own, arg.get_id()))
        .filter(|arg| {
            levels.iter().any(|m| m.value_source(arg.get_id().as_str()) == Some(clap::parser::ValueSource::CommandLine))
        })
        .filter_map(|arg| arg.get_long().map(|long| format!("--{long}")))
        .collect();
    if given.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "gatewayd {} does not use {}: set these in gateway.toml, or give them when serving",
        path.join(" "),
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
    let mut settings = cli.settings;
    // Checking the logs serves nothing and signs nothing: no JWT secret, no keystore passphrase.
    settings.offline = matches!(cli.command, Some(Command::Log { .. }));
    let config = GatewayConfig::resolve(settings)?;
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
