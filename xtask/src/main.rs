//! Project automation behind `cargo xtask`: the one test command, and the load harness.
//!
//! `cargo xtask test` runs the whole test suite, pointing the tests that need PostgreSQL and Redis
//! at the local servers unless `GATEWAY_TEST_POSTGRES_URL` and `GATEWAY_TEST_REDIS_URL` are
//! already set. `cargo xtask bench` builds `gatewayd` in release mode and measures it over real
//! TCP (see `bench.rs`); `cargo xtask baseline bare|jwt` serves the axum reference points its
//! `ceiling` scenario compares the gateway with (see `baseline.rs`). `cargo xtask api-check` and `cargo xtask swagger-check` check the OpenAPI
//! document against the answers (schemathesis) and the Swagger UI in headless Chromium.

mod api_check;
mod baseline;
mod bench;
mod client;
mod soak;
mod swagger_check;

use std::env;
use std::process::{Command, ExitCode};

const DEFAULT_POSTGRES_URL: &str = "postgres://postgres@127.0.0.1:5432/test";
const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("bench") => bench::main(&args[1..]),
        Some("baseline") => baseline::main(&args[1..]),
        Some("soak") => soak::main(&args[1..]),
        Some("api-check") => api_check::main(&args[1..]),
        Some("swagger-check") => swagger_check::main(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask test [cargo test args…]\n       cargo xtask api-check [--max-examples N] [--seed N]\n       cargo xtask swagger-check\n       cargo xtask bench [--quick] [--seconds N] [--connections N] [--rounds N] [--gatewayd PATH] [--scenario payments|balance|metrics|signing|cluster|postgres|ceiling|peer|login|mixed|log|export|all]\n       cargo xtask baseline bare|jwt [--listen ADDR] [--body JSON]\n       cargo xtask soak [--minutes N]"
            );
            ExitCode::from(2)
        }
    }
}

/// Runs `cargo test --workspace` with the PostgreSQL and Redis URLs the tests read.
fn test(extra: &[String]) -> ExitCode {
    let mut command = cargo();
    command.args(["test", "--workspace", "--locked"]).args(extra);
    let mut urls = Vec::new();
    for (var, default) in
        [("GATEWAY_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL), ("GATEWAY_TEST_REDIS_URL", DEFAULT_REDIS_URL)]
    {
        if env::var_os(var).is_none() {
            command.env(var, default);
        }
        let value = env::var(var).unwrap_or_else(|_| default.to_owned());
        urls.push(format!("{var}={}", without_password(&value)));
    }
    let postgres = env::var("GATEWAY_TEST_POSTGRES_URL").unwrap_or_else(|_| DEFAULT_POSTGRES_URL.to_owned());
    drop_earlier_test_schemas(&postgres);
    // Said at once, before cargo's first line: a first run builds for minutes before any test runs.
    let extra = extra.iter().map(|arg| format!(" {arg}")).collect::<String>();
    eprintln!(
        "xtask test: building the workspace's tests (several minutes on a first run), then running them: \
         the storage tests on memory, SQLite and PostgreSQL ({}), the Redis and cluster tests on Redis ({}); \
         cargo test --workspace --locked{extra}",
        urls[0], urls[1]
    );
    run(&mut command)
}

/// Drops the schemas the tests of earlier runs made in the test database (each storage test on
/// PostgreSQL makes one, `<prefix>_<32 hex digits>`, and leaves it for inspection): without this
/// the database grows by hundreds of schemas a run. One schema a transaction (a schema's objects
/// take a lock each). Without `psql` or the server, it says so and the tests run anyway. A test
/// suite running at the same time on the same database loses its schemas: one run at a time.
fn drop_earlier_test_schemas(url: &str) {
    const DROP: &str = r"DO $drop$
DECLARE s TEXT;
BEGIN
    PERFORM set_config('client_min_messages', 'warning', false);
    FOR s IN SELECT nspname FROM pg_namespace WHERE nspname ~ '_[0-9a-f]{32}$' LOOP
        EXECUTE format('DROP SCHEMA %I CASCADE', s);
        COMMIT;
    END LOOP;
END
$drop$";
    let dropped = Command::new("psql")
        .args([url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", DROP])
        .stdout(std::process::Stdio::null())
        .status();
    if !dropped.is_ok_and(|status| status.success()) {
        eprintln!(
            "xtask test: could not drop the schemas earlier test runs left in {} (psql missing or the server \
             unreachable): the tests run anyway",
            without_password(url)
        );
    }
}

/// `url` with the password of its `user:password@` part, if any, shown as `***`.
fn without_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let Some(at) = authority.rfind('@') else { return url.to_owned() };
    match authority[..at].split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{}", &rest[at..]),
        None => url.to_owned(),
    }
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

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn a_test_url_is_shown_without_its_password() {
        assert_eq!(
            without_password("postgres://postgres:test-only@127.0.0.1:5432/test"),
            "postgres://postgres:***@127.0.0.1:5432/test"
        );
        assert_eq!(
            without_password("postgres://postgres@127.0.0.1:5432/test"),
            "postgres://postgres@127.0.0.1:5432/test"
        );
        assert_eq!(without_password("redis://:secret@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(without_password("redis+unix:///run/redis.sock"), "redis+unix:///run/redis.sock");
    }
}
