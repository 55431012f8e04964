//! PostgreSQL reads have connections of their own: a read never waits behind units of work that
//! hold every write connection while they queue on a coop's row.

use std::time::{Duration, Instant};

use gateway_core::Amount;
use gateway_domain::ledger::PaymentRequest;
use gateway_domain::ports::LedgerReads;
use gateway_store::StoreSpec;

use crate::support::{Backend, Fixture, did};

/// More payments than the store has write connections are stuck in their unit of work or waiting
/// for a connection (a session of the test holds the payer's balance row); balance reads and
/// history still answer at once. Once the row is released the payments commit (any that waited
/// more than 1 s for a connection got 503, and committed nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_answer_while_writes_queue_on_a_row() {
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("c1", 3).await;
    let pay = |n: i64| PaymentRequest {
        from: did(1).to_string(),
        to: did(2).to_string(),
        amount: Amount::from_micros(n),
        currency: None,
        memo: None,
        request_signature: None,
    };
    f.ledger.pay(&coop, pay(1), None).await.unwrap();

    let mut holder = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut holder).await.unwrap();
    sqlx::query("SELECT balance FROM balances WHERE coop_id = 'c1' AND account = $1 FOR UPDATE")
        .bind(did(1).as_str())
        .execute(&mut holder)
        .await
        .unwrap();
    // The default 16 connections: 12 for units of work (the event listener holds one of them),
    // all taken by payments waiting for the row, and more payments waiting for one of them.
    let payments: Vec<_> = (0..16)
        .map(|n| {
            let (ledger, coop) = (f.ledger.clone(), coop.clone());
            let payment = pay(10 + n);
            tokio::spawn(async move { ledger.pay(&coop, payment, None).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(payments.iter().all(|p| !p.is_finished()), "the payments wait for the row");

    let started = Instant::now();
    let balances = f.store.coop_balances(&coop, did(2).as_str()).await.unwrap().expect("the coop");
    assert_eq!(balances.balances[0].1, Amount::from_micros(1), "the committed payment only");
    let query = gateway_domain::ports::HistoryQuery {
        coop: coop.clone(),
        account: None,
        currency: None,
        page: gateway_core::PageRequest::default(),
    };
    assert_eq!(f.store.history(&query).await.unwrap().1, 1);
    assert!(started.elapsed() < Duration::from_millis(500), "reads waited {:?}", started.elapsed());

    sqlx::query("ROLLBACK").execute(&mut holder).await.unwrap();
    let mut committed = 0;
    for payment in payments {
        match payment.await.unwrap() {
            Ok(_) => committed += 1,
            Err(gateway_core::Error::ServiceUnavailable(_)) => {}
            Err(err) => panic!("{err}"),
        }
    }
    assert!(committed >= 11, "the payments that held a connection commit: {committed}");
    let (_, total) = f.store.history(&query).await.unwrap();
    assert_eq!(total, 1 + committed);
}

/// The store's connections run READ COMMITTED even when the URL (or the server, or the role)
/// asks for another default: each statement of a unit of work must see every commit before it
/// (the numbering, the signing rule where a coop's writers meet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stores_connections_read_committed_whatever_the_default() {
    let Some(url) = gateway_store::testing::fresh_postgres_schema("iso").await else { return };
    let url = format!("{url}%20-c%20default_transaction_isolation%3Drepeatable%5C%20read");
    let asked = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
    let mut asked = asked;
    let default: String = sqlx::query_scalar("SHOW default_transaction_isolation").fetch_one(&mut asked).await.unwrap();
    assert_eq!(default, "repeatable read", "the URL's own connections take its option");
    let f = Fixture::at(StoreSpec::Postgres(url), None).await;
    let pool = f.store.postgres_pool().expect("a PostgreSQL store");
    let mut tx = pool.begin().await.unwrap();
    let level: String = sqlx::query_scalar("SHOW transaction_isolation").fetch_one(&mut *tx).await.unwrap();
    assert_eq!(level, "read committed");
}
