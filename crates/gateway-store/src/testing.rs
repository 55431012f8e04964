//! Support for the workspace's tests that run against PostgreSQL, and a count tests check.
//!
//! Every test suite that runs a rule on PostgreSQL gets its database the same way: the server
//! named by `GATEWAY_TEST_POSTGRES_URL`, a fresh schema per test so tests never see each other's
//! rows. Unset, the PostgreSQL run is skipped and says so on standard error; set but
//! unreachable, the test fails.

/// The variable naming the test PostgreSQL server.
pub const POSTGRES_VAR: &str = "GATEWAY_TEST_POSTGRES_URL";

/// A store URL whose `search_path` is a schema created for this test (named `<prefix>_<id>`),
/// or `None` when [`POSTGRES_VAR`] is unset.
///
/// # Panics
///
/// When the variable is set and the server cannot be reached or the schema created.
pub async fn fresh_postgres_schema(prefix: &str) -> Option<String> {
    let Ok(url) = std::env::var(POSTGRES_VAR) else {
        eprintln!("{POSTGRES_VAR} is not set: SKIPPING the PostgreSQL run of this test");
        return None;
    };
    let schema = format!("{prefix}_{}", gateway_domain::events::new_id());
    let pool = sqlx::PgPool::connect(&url).await.unwrap_or_else(|e| {
        panic!(
            "{POSTGRES_VAR} is set but PostgreSQL cannot be used at {}: {e}\n\
                 Is the server running, does the database exist, and may the URL's role log in over TCP? \
                 Create the database once: `createdb -h 127.0.0.1 -U postgres test` \
                 (or `psql -h 127.0.0.1 -U postgres -c 'CREATE DATABASE test'`); on Debian and Ubuntu \
                 `sudo -u postgres createdb test`, and give the role a password and put it in the URL \
                 (README, \"The two commands\"). Or unset {POSTGRES_VAR} to skip the PostgreSQL runs",
            crate::redact_url(&url)
        )
    });
    sqlx::query(&format!("CREATE SCHEMA {schema}")).execute(&pool).await.unwrap_or_else(|e| {
        panic!(
            "cannot create schema {schema}: {e}\nThe role of {POSTGRES_VAR} must be allowed to create schemas \
                 in its database: its owner (`createdb -O <role> test`), or `GRANT CREATE ON DATABASE test TO <role>`"
        )
    });
    pool.close().await;
    let separator = if url.contains('?') { '&' } else { '?' };
    Some(format!("{url}{separator}options=-c%20search_path%3D{schema}"))
}

/// How many signed request bodies `store` keeps (`signed_bodies`, INTERFACE.md §11's evidence):
/// one per signed request that made a payment or vote, however many records keep its evidence.
///
/// # Errors
///
/// When the store cannot be read.
pub async fn signed_body_count(store: &crate::Store) -> Result<u64, gateway_core::Error> {
    let count: i64 = store.read_one("SELECT COUNT(*) FROM signed_bodies", &[]).await?;
    Ok(crate::conn::to_u64(count))
}

/// Runs `sql` on the store's database from outside the gateway, as someone holding the database
/// could (the log's tamper tests): a SQLite file through its own connection, PostgreSQL through
/// its own pool.
///
/// # Panics
///
/// For the in-memory store, which nothing outside the process can reach, and when the
/// statement fails.
pub async fn tamper(spec: &crate::StoreSpec, sql: &str) {
    match spec {
        crate::StoreSpec::Memory => panic!("an in-memory store cannot be reached from outside the gateway"),
        crate::StoreSpec::SqliteFile(path) => {
            let db = rusqlite::Connection::open(path).expect("the SQLite file opens");
            db.execute_batch(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        crate::StoreSpec::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.expect("PostgreSQL answers");
            sqlx::raw_sql(sql).execute(&pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            pool.close().await;
        }
    }
}

/// The one integer `sql` answers, read from outside the gateway (a store's shape in a test).
pub async fn scalar(spec: &crate::StoreSpec, sql: &str) -> i64 {
    match spec {
        crate::StoreSpec::Memory => panic!("an in-memory store cannot be reached from outside the gateway"),
        crate::StoreSpec::SqliteFile(path) => {
            let db = rusqlite::Connection::open(path).expect("the SQLite file opens");
            db.query_row(sql, [], |row| row.get(0)).unwrap_or_else(|e| panic!("{sql}: {e}"))
        }
        crate::StoreSpec::Postgres(url) => {
            let pool = sqlx::PgPool::connect(url).await.expect("PostgreSQL answers");
            let value: i64 = sqlx::query_scalar(sql).fetch_one(&pool).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
            pool.close().await;
            value
        }
    }
}
