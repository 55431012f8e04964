//! End-to-end: the real `gatewayd` binary over TCP on port 0, with a SQLite file store, a real
//! Ed25519 key, the metrics listener, and a clean stop on SIGTERM.

mod support;

use std::process::Command;
use std::time::Duration;

use ed25519_dalek::Signer;
use serde_json::json;

use support::{json_request, request, start};

#[tokio::test]
async fn login_with_a_real_key_then_stop_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut gateway = start(dir.path(), &[]);
    let (status, health) = json_request(&gateway.api, "GET", "/v1/health", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(health["store"], "sqlite");

    let (signing, did) = support::signing_key(42);
    let (_, challenge) =
        json_request(&gateway.api, "POST", "/v1/auth/challenge", Some(json!({ "did": did.to_string() })), None).await;
    let signature = hex::encode(signing.sign(challenge["nonce"].as_str().unwrap().as_bytes()).to_bytes());
    // A cooperative that does not exist yet: the bootstrap scopes are granted.
    let (status, token) = json_request(
        &gateway.api,
        "POST",
        "/v1/auth/verify",
        Some(json!({ "did": did.to_string(), "signature": signature, "coop_id": "e2e", "scopes": ["coop:read", "coop:write"] })),
        None,
    )
    .await;
    assert_eq!(status, 200, "{token}");
    let token = token["token"].as_str().unwrap();
    let (status, own) = json_request(&gateway.api, "GET", "/identity/did", None, Some(token)).await;
    assert_eq!(status, 200);
    assert_eq!(own["did"], did.to_string());

    let (status, metrics) = request(&gateway.metrics, "GET", "/metrics", None, None).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("icn_gateway_auth_challenges_total"), "{metrics}");
    assert!(metrics.contains("icn_gateway_auth_verifications_total{result=\"success\"}"), "{metrics}");

    let pid = gateway.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = gateway.child.try_wait().unwrap() {
            assert!(status.success(), "gatewayd exited with {status}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "gatewayd did not stop after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn an_empty_secret_stops_start_up_with_a_clear_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", "memory", "--listen", "127.0.0.1:0"])
        .env("ICN_GATEWAY_JWT_SECRET", "")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("JWT secret is empty"), "{stderr}");
}

/// `gatewayd config check` prints the configuration without the database password, and a
/// store that cannot be opened is reported without it too.
#[test]
fn config_check_and_start_up_errors_hide_the_database_password() {
    let url = "postgres://gateway:pa55-w0rd-secret@127.0.0.1:1/gw?connect_timeout=1";
    let check = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", url, "config", "check"])
        .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("store = postgres://gateway:***@127.0.0.1:1/gw?connect_timeout=1"), "{stdout}");
    assert!(!stdout.contains("pa55-w0rd") && !stderr.contains("pa55-w0rd"), "{stdout}{stderr}");
    assert!(!stdout.contains(&"x".repeat(32)), "{stdout}");

    let serve = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", url, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&serve.stdout), String::from_utf8_lossy(&serve.stderr));
    assert!(!serve.status.success(), "nothing listens on port 1: {stdout}{stderr}");
    assert!(stderr.contains("opening the store postgres://gateway:***@127.0.0.1:1/gw"), "{stderr}");
    assert!(!stdout.contains("pa55-w0rd") && !stderr.contains("pa55-w0rd"), "{stdout}{stderr}");
}

/// The threads of process `pid` with their allowed CPUs (`Cpus_allowed_list`) and slice, read
/// from `/proc`.
fn threads_of(pid: u32) -> Vec<(String, String, Option<Duration>)> {
    let mut threads = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = entry.unwrap().path();
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)).map(|v| v.trim().to_owned()).unwrap_or_default()
        };
        let slice = gatewayd::workers::slice_in(&std::fs::read_to_string(dir.join("sched")).unwrap_or_default());
        threads.push((field("Name:"), field("Cpus_allowed_list:"), slice));
    }
    threads
}

/// `--workers 2 --pin-workers true --worker-slice-us 300`: two workers, each on one CPU of its
/// own, both with a 300 µs slice; the start-up log says so; the gateway serves as before. Needs
/// Linux 6.12 or later (EEVDF's custom slice): on an older kernel it says SKIPPED and passes.
#[tokio::test]
async fn pinned_workers_with_a_short_slice_serve() {
    if let Err(err) = gatewayd::workers::slice_supported() {
        eprintln!("SKIPPED pinned_workers_with_a_short_slice_serve: {err}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path(), &["--workers", "2", "--pin-workers", "true", "--worker-slice-us", "300"]);
    let (status, _) = json_request(&gateway.api, "GET", "/v1/health", None, None).await;
    assert_eq!(status, 200);
    let (sliced, others): (Vec<_>, Vec<_>) = threads_of(gateway.child.id())
        .into_iter()
        .partition(|(_, _, slice)| *slice == Some(Duration::from_micros(300)));
    assert_eq!(sliced.len(), 2, "two threads with the 300 µs slice: {sliced:?}");
    let mut cpus: Vec<&str> = sliced.iter().map(|(_, cpus, _)| cpus.as_str()).collect();
    cpus.sort_unstable();
    cpus.dedup();
    // The gateway inherits this process's CPUs; with one, both workers share it.
    let allowed = gatewayd::workers::allowed_cpus().unwrap().len();
    assert_eq!(cpus.len(), allowed.min(2), "each worker on a CPU of its own: {sliced:?}");
    assert!(cpus.iter().all(|list| list.parse::<usize>().is_ok()), "one CPU each: {sliced:?}");
    // Every other thread (the main one, the store's, blocking ones, a scan's while it runs) may
    // run on every CPU the gateway may: none keeps a worker's.
    let own = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let all = own.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim();
    assert!(others.iter().all(|(_, cpus, _)| cpus == all), "the other threads on CPUs {all}: {others:?}");
    let logs = gateway.logs.lock().unwrap().join("\n");
    assert!(
        logs.contains("runtime started workers=2 pinned_cpus=[")
            && logs.contains("slice_us=300 workers_with_the_slice=2"),
        "{logs}"
    );
    assert!(!logs.lines().any(|l| l.contains("WARN") && (l.contains("slice") || l.contains("pinning"))), "{logs}");
}

/// Out-of-range worker settings stop start-up with a message naming the setting; `config check`
/// prints the resolved ones.
#[test]
fn worker_settings_are_checked_and_shown() {
    let check = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_gatewayd"))
            .args(args)
            .args(["config", "check"])
            .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
            .output()
            .unwrap()
    };
    for (args, message) in [
        (&["--workers", "0"][..], "--workers must be at least 1"),
        (&["--workers", "5000"][..], "--workers 5000: at most 1024"),
        (&["--worker-slice-us", "50"][..], "--worker-slice-us 50: between 100 and 100000"),
        (&["--worker-slice-us", "100001"][..], "--worker-slice-us 100001: between 100 and 100000"),
    ] {
        let output = check(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success() && stderr.contains(message), "{args:?}: {stderr}");
    }
    let output = check(&["--workers", "3", "--pin-workers", "true", "--worker-slice-us", "250"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("workers = 3\npin_workers = true\nworker_slice_us = 250"), "{stdout}");
    // The per-poll yield is gone: the flag is refused, not ignored.
    let output = check(&["--worker-yield-us", "500"]);
    assert!(!output.status.success(), "{}", String::from_utf8_lossy(&output.stdout));
    let output = check(&[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("pin_workers = false\nworker_slice_us = 0"), "{stdout}");
}

/// `config check` with a Redis URL builds the Redis handle as start-up does (which starts a
/// task, so it needs a runtime), and does not connect: nothing listens on port 1.
#[test]
fn config_check_accepts_a_redis_url_without_connecting() {
    let output = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--redis", "redis://127.0.0.1:1/0", "config", "check"])
        .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("redis = redis://127.0.0.1:1/0"), "{stdout}");
}

/// `config check --connect` does what start-up does with the outside world and refuses what it
/// would refuse: an unreachable PostgreSQL, a missing database, `sslmode=require` on a server
/// without TLS, a wrong keystore passphrase. Plain `config check` reads only the configuration.
#[test]
fn config_check_connect_refuses_what_start_up_would() {
    let dir = tempfile::tempdir().unwrap();
    let check = |args: &[&str], env: &[(&str, &str)]| {
        let output = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
            .args(args)
            .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
            .env_remove("ICN_PASSPHRASE")
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            output.status.success(),
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
        )
    };
    let unreachable = ["--store", "postgres://postgres@127.0.0.1:1/test"];
    let (ok, said) = check(&[&unreachable[..], &["config", "check"]].concat(), &[]);
    assert!(ok, "without --connect the check stays offline: {said}");
    let (ok, said) = check(&[&unreachable[..], &["config", "check", "--connect"]].concat(), &[]);
    assert!(!ok && said.contains("opening the store"), "{said}");
    let db = dir.path().join("gw.db");
    let sqlite = format!("sqlite:{}", db.display());
    let (ok, said) = check(&["--store", &sqlite, "config", "check", "--connect"], &[]);
    assert!(ok && said.contains("opens") && db.exists(), "{said}");
    // A keystore the passphrase does not open is refused, as start-up refuses it.
    let keystore = dir.path().join("ks.json");
    let init = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["keystore", "init", "--keystore", keystore.to_str().unwrap()])
        .env("ICN_PASSPHRASE", "the right passphrase")
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let with_keystore = ["--store", &sqlite, "--keystore", keystore.to_str().unwrap(), "config", "check", "--connect"];
    let (ok, said) = check(&with_keystore, &[("ICN_PASSPHRASE", "wrong")]);
    assert!(!ok && said.contains("refusing to start"), "{said}");
    let (ok, said) = check(&with_keystore, &[("ICN_PASSPHRASE", "the right passphrase")]);
    assert!(ok && said.contains("keystore: unlocks"), "{said}");
    // With the PostgreSQL of the tests: a database that does not exist, and TLS it does not speak.
    let Ok(url) = std::env::var("GATEWAY_TEST_POSTGRES_URL") else {
        eprintln!(
            "SKIPPED the PostgreSQL part of config_check_connect_refuses_what_start_up_would: GATEWAY_TEST_POSTGRES_URL is not set"
        );
        return;
    };
    let base = url.rsplit_once('/').map_or(url.as_str(), |(base, _)| base);
    let missing = format!("{base}/no_such_database_for_the_check");
    let (ok, said) = check(&["--store", &missing, "config", "check", "--connect"], &[]);
    assert!(!ok && said.contains("opening the store"), "{said}");
    let tls = format!("{url}{}sslmode=require", if url.contains('?') { '&' } else { '?' });
    let (ok, said) = check(&["--store", &tls, "config", "check", "--connect"], &[]);
    assert!(!ok && said.contains("opening the store"), "{said}");
}

/// `gatewayd init` and `gatewayd keystore …` write files with the defaults: a server option
/// given to them would be silently lost, so it is refused, naming it, and nothing is written.
/// What they use (`--founder`, `--force`, `--dir`, `--keystore` for the keystore commands,
/// `--passphrase-file`) is accepted.
#[test]
fn init_refuses_server_options_it_would_ignore() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
            .args(args)
            .env_remove("ICN_PASSPHRASE")
            .current_dir(dir.path())
            .output()
            .unwrap();
        (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    for (args, named) in [
        (&["init", "--store", "postgres://db/gw"][..], "--store"),
        (&["init", "--redis", "redis://cache", "--listen", "0.0.0.0:80"][..], "--listen, --redis"),
        (&["--trusted-proxy", "10.0.0.1", "init"][..], "--trusted-proxy"),
        (&["keystore", "init", "--keystore", "ks.json", "--store", "memory"][..], "--store"),
        (&["log", "fsck", "--redis", "redis://cache"][..], "--redis"),
        (&["--listen", "0.0.0.0:80", "log", "fsck"][..], "--listen"),
    ] {
        let (ok, said) = run(args);
        assert!(!ok && said.contains("does not use") && said.contains(named), "{args:?}: {said}");
    }
    assert!(!dir.path().join("gateway.toml").exists(), "nothing written");
    assert!(!dir.path().join("ks.json").exists(), "nothing written");
    let (ok, said) = run(&["init", "--founder", "did:key:z6MkgAnvkP45uNxwCKeNdt6wrYkEjpYX4f7Nrd8MQqFL8Fbn"]);
    assert!(ok, "{said}");
    assert!(dir.path().join("gateway.toml").exists());
}

/// Each subcommand's help lists the options it uses, not the thirty-odd server settings: an
/// operator reading `gatewayd init --help` learns what init does with what. Serving and `config
/// check`, which use every setting, list them all.
#[test]
fn subcommand_help_names_only_the_subcommands_options() {
    let help = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_gatewayd")).args(args).arg("--help").output().unwrap();
        assert!(output.status.success(), "{args:?}: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8(output.stdout).unwrap();
        let mut options: Vec<String> = text
            .lines()
            .filter(|line| line.trim_start().starts_with('-'))
            .filter_map(|line| line.split_whitespace().find(|word| word.starts_with("--")))
            .map(|word| word.trim_end_matches(',').to_owned())
            .collect();
        options.sort();
        options
    };
    let expect = |args: &[&str], options: &[&str]| {
        let mut want: Vec<String> = options.iter().map(|o| (*o).to_owned()).chain(["--help".to_owned()]).collect();
        want.sort();
        assert_eq!(help(args), want, "gatewayd {}", args.join(" "));
    };
    expect(&["init"], &["--dir", "--founder", "--force", "--passphrase-file"]);
    expect(&["keystore", "init"], &["--keystore", "--passphrase-file"]);
    expect(&["keystore", "rotate"], &["--keystore", "--passphrase-file"]);
    expect(
        &["log", "fsck"],
        &["--coop", "--config", "--store", "--postgres-max-connections", "--log-origin", "--log-format", "--dev"],
    );
    expect(&["witness", "vkey"], &["--key", "--name"]);
    expect(&["witness"], &["--key", "--listen", "--state", "--log", "--name", "--log-format"]);
    for serving in [&["serve"][..], &["config", "check"]] {
        let options = help(serving);
        for setting in ["--store", "--redis", "--listen", "--trusted-proxy", "--keystore", "--witness", "--workers"] {
            assert!(options.iter().any(|o| o == setting), "{serving:?} lists {setting}: {options:?}");
        }
    }
}

/// `gatewayd log fsck` checks the store it is given and never creates one: a mistyped SQLite path
/// is an error naming it (and leaves no file behind), not a new empty database whose zero logs are
/// "sound".
#[test]
fn log_fsck_refuses_a_store_that_does_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("typo.db");
    let output = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", &format!("sqlite:{}", missing.display()), "log", "fsck"])
        .env_remove("ICN_GATEWAY_STORE")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{said}");
    assert!(said.contains("there is no database at") && said.contains("typo.db"), "{said}");
    assert!(!missing.exists(), "fsck created the database it was to check");
}

/// The start-up log says where the API documentation is, next to where it listens, and the
/// database's absolute path.
#[tokio::test]
async fn start_up_names_the_api_docs_and_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path(), &[]);
    let (status, _) = json_request(&gateway.api, "GET", "/v1/health", None, None).await;
    assert_eq!(status, 200);
    let docs = format!("API documentation on http://{}/swagger-ui/", gateway.api);
    // Lines reach the log through the writer thread: give it a moment.
    for _ in 0..40 {
        if gateway.logs.lock().unwrap().iter().any(|l| l.contains(&docs)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let logs = gateway.logs.lock().unwrap().join("\n");
    assert!(logs.contains(&docs), "{logs}");
    let database = std::path::absolute(dir.path().join("gw.db")).unwrap();
    assert!(logs.contains(&format!("store=sqlite:{}", database.display())), "{logs}");
}
