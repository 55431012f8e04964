//! PostgreSQL numbers a coop's events after their commit (migration 0023): what a replica leaves
//! unnumbered is numbered by the sweep, and units of work that commit together are numbered
//! together, each answer naming its own event. Runs when `GATEWAY_TEST_POSTGRES_URL` is set.

use std::time::Duration;

use gateway_domain::ports::{EventFeed, EventReads, transaction};
use gateway_store::StoreSpec;

use crate::support::{Backend, Fixture};

/// A replica that dies between a commit and its numbering leaves the commit's events waiting
/// (`seq < 0`): another replica's sweep numbers them, after the events numbered before, without a
/// gap, and announces them; until then no reader sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_a_replica_left_unnumbered_are_numbered_by_the_sweep() {
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("swept", 2).await;
    let before = f.store.current_seq(&coop).await.unwrap();
    let mut feed = f.store.subscribe();

    // The commit of a replica that then died: its events written as the store writes them, and
    // never numbered.
    let mut dead = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap();
    let mut tx = sqlx::Connection::begin(&mut dead).await.unwrap();
    for part in ["first", "second"] {
        sqlx::query(
            "INSERT INTO events (coop_id, seq, placeholder, event_type, timestamp, data) \
             SELECT 'swept', w.p, w.p, 'Checked', 1800000000, $1 FROM (SELECT -nextval('event_placeholders') AS p) AS w",
        )
        .bind(format!(r#"{{"part":"{part}"}}"#))
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    drop(dead);
    assert_eq!(f.store.current_seq(&coop).await.unwrap(), before, "not numbered yet");
    assert!(f.store.events_after(&coop, before, 10).await.unwrap().is_empty(), "seen by no reader yet");
    assert_eq!(f.store.oldest_seq(&coop).await.unwrap(), 1, "a waiting event is no event of the outbox");

    // The sweep (once a second) numbers them and announces the coop's new counter.
    let signal = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let signal = feed.recv().await.unwrap();
            if signal.coop_id == coop && signal.seq >= before + 2 {
                return signal;
            }
        }
    })
    .await
    .expect("the sweep numbers waiting events within 5 s");
    assert_eq!(signal.seq, before + 2);
    let events = f.store.events_after(&coop, 0, 100).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (1..=before + 2).collect::<Vec<_>>(), "no gap");
    let parts: Vec<String> =
        events[before as usize..].iter().map(|e| e.data.to_value()["part"].as_str().unwrap().to_owned()).collect();
    assert_eq!(parts, ["first", "second"], "in the order they were written");

    // The next unit of work's events follow them.
    let next = transaction(f.store.as_ref(), {
        let coop = coop.clone();
        move |tx| {
            Box::pin(
                async move { tx.append_event(&coop, "Checked", 1_800_000_001, &serde_json::json!({}).into()).await },
            )
        }
    });
    let (done, seq) = gateway_domain::ports::appended::track(next).await;
    done.unwrap();
    assert_eq!(seq, Some(before + 3));
}

/// Units of work that commit while another's numbering runs are numbered together afterwards,
/// each one's events consecutive and in the order it wrote them, whatever the order in which
/// their placeholders were drawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_of_works_events_are_numbered_together() {
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("together", 2).await;
    let before = f.store.current_seq(&coop).await.unwrap();
    // Two units of work whose placeholders interleave (a1, b1, a2, b2), both committed before
    // any numbering: the numbering holds the coop's numbering lock meanwhile.
    let connect = || async { <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap() };
    let (mut lock, mut a, mut b) = (connect().await, connect().await, connect().await);
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(coop_lock_key('numbering', 'together'))")
        .execute(&mut lock)
        .await
        .unwrap();
    let insert = "INSERT INTO events (coop_id, seq, placeholder, event_type, timestamp, data) \
         SELECT 'together', w.p, w.p, 'Checked', 1800000000, $1 FROM (SELECT -nextval('event_placeholders') AS p) AS w";
    sqlx::query("BEGIN").execute(&mut a).await.unwrap();
    sqlx::query("BEGIN").execute(&mut b).await.unwrap();
    for (first, data) in [(true, "a1"), (false, "b1"), (true, "a2"), (false, "b2")] {
        let conn = if first { &mut a } else { &mut b };
        sqlx::query(insert).bind(format!(r#"{{"part":"{data}"}}"#)).execute(conn).await.unwrap();
    }
    // b commits first: a's events were written first all the same.
    sqlx::query("COMMIT").execute(&mut b).await.unwrap();
    sqlx::query("COMMIT").execute(&mut a).await.unwrap();
    // A numbering asked for now waits for the lock, then numbers both.
    let numbering = {
        let url = url.clone();
        tokio::spawn(async move {
            let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&url).await.unwrap();
            let (counter,): (i64,) = sqlx::query_as(
                "SELECT counter FROM number_events(ARRAY['together'], ARRAY[NULL::bigint]) WHERE ord = 1",
            )
            .fetch_one(&mut conn)
            .await
            .unwrap();
            counter
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!numbering.is_finished(), "the numbering waits for the coop's numbering lock");
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    assert_eq!(numbering.await.unwrap(), i64::try_from(before).unwrap() + 4);
    let events = f.store.events_after(&coop, before, 10).await.unwrap();
    let parts: Vec<String> = events.iter().map(|e| e.data.to_value()["part"].as_str().unwrap().to_owned()).collect();
    assert_eq!(parts, ["a1", "a2", "b1", "b2"], "each unit of work's events together, in the order written");
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (before + 1..=before + 4).collect::<Vec<_>>());
}

/// Each placeholder asked for gets its event's number, whether the numbering asked gave it or an
/// earlier one did (the sweep, or another replica's numbering): from the numbering's own result
/// in the first case, from the coop's events in the second. A placeholder not asked for (`NULL`)
/// gets none, every row carries the coop's counter, and the rows without `ord` are the events
/// this numbering gave a number, each with its placeholder (migration 0026).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_placeholder_asked_gets_its_events_number() {
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("asked", 2).await;
    let before = i64::try_from(f.store.current_seq(&coop).await.unwrap()).unwrap();
    let connect = || async { <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap() };
    let (mut conn, mut lock) = (connect().await, connect().await);
    let insert = "INSERT INTO events (coop_id, seq, placeholder, event_type, timestamp, data) \
         SELECT 'asked', w.p, w.p, 'Checked', 1800000000, '{}' FROM (SELECT -nextval('event_placeholders') AS p) AS w \
         RETURNING placeholder";
    // A unit of work of two events, numbered by the sweep before anyone asks for them.
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    let mut earlier = Vec::new();
    for _ in 0..2 {
        earlier.push(sqlx::query_scalar::<_, i64>(insert).fetch_one(&mut conn).await.unwrap());
    }
    sqlx::query("COMMIT").execute(&mut conn).await.unwrap();
    let swept: Option<i64> = sqlx::query_scalar("SELECT sweep_waiting('asked')").fetch_one(&mut conn).await.unwrap();
    // The replica's own sweep may have numbered them a moment before (then this one finds
    // nothing waiting, or the numbering lock taken): either way the counter covers both.
    assert!(swept.is_none_or(|counter| counter == before + 2), "{swept:?}");
    // Then one more, committed while the coop's numbering lock is held (so that no sweep takes
    // it first), numbered by the call asked once the lock is free.
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(coop_lock_key('numbering', 'asked'))").execute(&mut lock).await.unwrap();
    let later: i64 = sqlx::query_scalar(insert).fetch_one(&mut conn).await.unwrap();
    let asked = tokio::spawn({
        let earlier = earlier.clone();
        async move {
            sqlx::query_as::<_, (Option<i64>, i64, Option<i64>, Option<i64>)>(
                "SELECT ord, counter, placeholder, given \
             FROM number_events(ARRAY['asked', 'asked', 'asked', 'asked'], $1) ORDER BY ord NULLS LAST",
            )
            .bind(vec![Some(earlier[1]), Some(later), None, Some(earlier[0])])
            .fetch_all(&mut conn)
            .await
            .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    let n = before + 3;
    assert_eq!(
        asked.await.unwrap(),
        [
            (Some(1), n, Some(earlier[1]), Some(before + 2)),
            (Some(2), n, Some(later), Some(n)),
            (Some(3), n, None, None),
            (Some(4), n, Some(earlier[0]), Some(before + 1)),
            (None, n, Some(later), Some(n)),
        ]
    );
}

/// A commit that asks for its number while the replica's numbering runs, and whose event that
/// numbering numbers (it had committed when the numbering looked), gets its number from that
/// numbering's result, without waiting for another: here the next numbering could not start
/// (another session holds the coop's numbering lock next), and the answer comes all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_numbered_by_the_running_numbering_is_answered_from_it() {
    use gateway_domain::ledger::PaymentRequest;
    use gateway_domain::ports::appended;
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("running", 3).await;
    let before = f.store.current_seq(&coop).await.unwrap();
    let pay = |from: u32| PaymentRequest {
        from: crate::support::did(from).to_string(),
        to: crate::support::did(0).to_string(),
        amount: gateway_core::Amount::from_units(2),
        currency: None,
        memo: None,
        request_signature: None,
    };
    let connect = || async { <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap() };
    let (mut first_holder, mut next_holder, mut watch) = (connect().await, connect().await, connect().await);
    let lock = "SELECT pg_advisory_xact_lock(coop_lock_key('numbering', 'running'))";
    sqlx::query("BEGIN").execute(&mut first_holder).await.unwrap();
    sqlx::query(lock).execute(&mut first_holder).await.unwrap();
    let waiting_for_lock = |n: i64| {
        format!(
            "SELECT COUNT(*) >= {n} FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    };
    // The first payment commits; the replica's numbering of it waits for the lock.
    let first = tokio::spawn({
        let (ledger, coop) = (f.ledger.clone(), coop.clone());
        async move { appended::track(ledger.pay(&coop, pay(1), None)).await }
    });
    until(&mut watch, waiting_for_lock(1), "the numbering waits for the coop's numbering lock").await;
    // The second commits meanwhile and asks: it waits for the running numbering to end.
    let second = tokio::spawn({
        let (ledger, coop) = (f.ledger.clone(), coop.clone());
        async move { appended::track(ledger.pay(&coop, pay(2), None)).await }
    });
    until(
        &mut watch,
        "SELECT COUNT(*) = 2 FROM events WHERE coop_id = 'running' AND seq < 0".to_owned(),
        "both payments commit",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Another session queues for the lock behind the numbering: it holds it next.
    let next = tokio::spawn(async move {
        sqlx::query("BEGIN").execute(&mut next_holder).await.unwrap();
        sqlx::query(lock).execute(&mut next_holder).await.unwrap();
        next_holder
    });
    until(&mut watch, waiting_for_lock(2), "the other session waits for the lock too").await;
    sqlx::query("COMMIT").execute(&mut first_holder).await.unwrap();
    let (first, first_seq) = tokio::time::timeout(Duration::from_secs(5), first).await.unwrap().unwrap();
    let (second, second_seq) = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("answered from the running numbering, while the next one could not start")
        .unwrap();
    first.unwrap();
    second.unwrap();
    assert_eq!((first_seq, second_seq), (Some(before + 1), Some(before + 2)));
    let mut next_holder = next.await.unwrap();
    sqlx::query("COMMIT").execute(&mut next_holder).await.unwrap();
}

/// Waits (up to 5 s, else fails with `what`) until `sql`, a query of one boolean, is true.
async fn until(conn: &mut sqlx::PgConnection, sql: String, what: &str) {
    let wait = async {
        while !sqlx::query_scalar::<_, bool>(&sql).fetch_one(&mut *conn).await.unwrap() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), wait).await.expect(what);
}

/// The log's opening of a coop from before the log reads the coop's state as of its counter: it
/// numbers what was committed and waits (then numbers) what is being committed, so no committed
/// change is in its snapshot without its event under the counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logs_opening_holds_the_coops_events() {
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("opening", 2).await;
    let before = f.store.current_seq(&coop).await.unwrap();
    let insert = "INSERT INTO events (coop_id, seq, placeholder, event_type, timestamp, data) \
         SELECT 'opening', w.p, w.p, 'Checked', 1800000000, '{}' FROM (SELECT -nextval('event_placeholders') AS p, \
         pg_advisory_xact_lock_shared(coop_lock_key('writers', 'opening'))) AS w";
    let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap();
    // Committed, not numbered yet (its replica is about to number it, or died).
    sqlx::query(insert).execute(&mut conn).await.unwrap();
    // Being committed: written, not committed yet.
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query(insert).execute(&mut conn).await.unwrap();
    let opening = {
        let (store, coop) = (f.store.clone(), coop.clone());
        tokio::spawn(async move {
            transaction(store.as_ref(), move |tx| Box::pin(async move { tx.lock_event_counter(&coop).await })).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!opening.is_finished(), "the opening waits for the unit of work writing the coop's events");
    sqlx::query("COMMIT").execute(&mut conn).await.unwrap();
    let counter = opening.await.unwrap().unwrap();
    assert_eq!(counter, before + 2, "both numbered, under the counter the opening read");
    assert_eq!(f.store.current_seq(&coop).await.unwrap(), before + 2);
}

/// A replay that arrives while the first answer's event still waits for its number waits for it
/// too, and carries the same `ICN-Event-Seq` as the first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_before_the_numbering_carries_the_same_number() {
    use gateway_domain::ledger::{Idempotency, PaymentRequest};
    use gateway_domain::ports::appended;
    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("replayed", 2).await;
    let pay = || PaymentRequest {
        from: crate::support::did(1).to_string(),
        to: crate::support::did(0).to_string(),
        amount: gateway_core::Amount::from_units(2),
        currency: None,
        memo: None,
        request_signature: None,
    };
    let key = || Some(Idempotency { key: "replayed/k".into(), request_hash: "h".into() });
    // The coop's numbering held: the payment commits, then waits for its number.
    let mut lock = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut lock).await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(coop_lock_key('numbering', 'replayed'))")
        .execute(&mut lock)
        .await
        .unwrap();
    let first = {
        let (ledger, coop) = (f.ledger.clone(), coop.clone());
        tokio::spawn(async move { appended::track(ledger.pay(&coop, pay(), key())).await })
    };
    let committed = async {
        loop {
            let waiting: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE coop_id = 'replayed' AND seq < 0")
                .fetch_one(&mut lock)
                .await
                .unwrap();
            if waiting > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(3), committed).await.expect("the payment commits");
    let again = {
        let (ledger, coop) = (f.ledger.clone(), coop.clone());
        tokio::spawn(async move { appended::track(ledger.pay(&coop, pay(), key())).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!again.is_finished(), "the replay waits for the number");
    sqlx::query("COMMIT").execute(&mut lock).await.unwrap();
    let (first, first_seq) = first.await.unwrap();
    let (again, again_seq) = again.await.unwrap();
    assert!(matches!(first.unwrap(), gateway_domain::ledger::Replay::Fresh(_)));
    assert!(matches!(again.unwrap(), gateway_domain::ledger::Replay::Replayed(_)));
    assert_eq!(first_seq, Some(f.store.current_seq(&coop).await.unwrap()));
    assert_eq!(again_seq, first_seq, "the replay names the first answer's event");
}

/// A coop's advisory lock keys hash the schema, the kind and the coop (migration 0023), and are
/// the same after migration 0025 wrote the schema into `coop_lock_key` as a constant: a key
/// taken by a replica of either version is the key the other takes. Another schema's keys
/// differ. The schema's name holds `$body$`, a dollar quote: written into the function as it
/// is, it would end the function's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_keys_name_the_schema_and_kept_their_values() {
    let Some(url) = gateway_store::testing::fresh_postgres_schema("k$body$").await else { return };
    let a = Fixture::at(StoreSpec::Postgres(url), None).await;
    let Some(b) = Fixture::open(Backend::Postgres).await else { return };
    let key = |spec: StoreSpec, sql: &'static str| async move { gateway_store::testing::scalar(&spec, sql).await };
    let (kept, computed) = (
        key(a.spec.clone(), "SELECT coop_lock_key('writers', 'c1')").await,
        key(a.spec.clone(), "SELECT hashtextextended(current_schema() || chr(9) || 'writers' || chr(9) || 'c1', 0)")
            .await,
    );
    assert_eq!(kept, computed, "the key of 0023's definition");
    assert_ne!(kept, key(b.spec.clone(), "SELECT coop_lock_key('writers', 'c1')").await, "another schema's key");
    assert_ne!(kept, key(a.spec.clone(), "SELECT coop_lock_key('numbering', 'c1')").await, "another kind's key");
    // Migration 0027's `writer_enters`, written with the schema's name, reads that schema's coop.
    let coop = a.coop("c1", 2).await;
    a.coops.update_settings(&coop, crate::support::requiring_signatures(true)).await.unwrap();
    let refused = gateway_domain::ports::unsigned::critical(transaction(a.store.as_ref(), move |tx| {
        Box::pin(async move { crate::support::append_operation(tx, &coop).await })
    }))
    .await;
    assert!(matches!(refused, Err(gateway_core::Error::SignatureRequired)), "{refused:?}");
    // Called from another schema's connection, it still reads its own schema's coops and locks.
    let (StoreSpec::Postgres(own), StoreSpec::Postgres(other)) = (&a.spec, &b.spec) else {
        unreachable!("PostgreSQL fixtures")
    };
    let mut own = <sqlx::PgConnection as sqlx::Connection>::connect(own).await.unwrap();
    let schema: String = sqlx::query_scalar("SELECT current_schema()").fetch_one(&mut own).await.unwrap();
    let mut elsewhere = <sqlx::PgConnection as sqlx::Connection>::connect(other).await.unwrap();
    let call = format!("SELECT \"{}\".writer_enters('c1', 1)", schema.replace('"', "\"\""));
    let err = sqlx::query(&call).execute(&mut elsewhere).await.expect_err("the other schema's c1 requires signatures");
    assert_eq!(err.as_database_error().and_then(|e| e.code()).as_deref(), Some("GW401"), "{err}");
}

/// An oracle rate writes no event: it reads its coop under the coop's row lock, so a settings
/// change in flight (here a connection that holds the row and turns `require_signed_requests` on)
/// is waited for, and an unsigned rate is then refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_rate_waits_for_a_settings_change_in_flight() {
    use gateway_domain::ports::unsigned::critical;

    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let coop = f.coop("rated", 2).await;
    let mut change = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut change).await.unwrap();
    sqlx::query("SELECT id FROM coops WHERE id = 'rated' FOR UPDATE").execute(&mut change).await.unwrap();

    let (ledger, c) = (f.ledger.clone(), coop.clone());
    let currency = |code: &str| gateway_core::Currency::parse(code).unwrap();
    let rate = tokio::spawn(critical(async move {
        ledger
            .set_rate(
                &c,
                &crate::support::did(0),
                currency("hours"),
                currency("credits"),
                gateway_core::Amount::from_units(2),
            )
            .await
    }));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!rate.is_finished(), "the rate waits for the coop's row");
    sqlx::query("UPDATE coops SET require_signed_requests = 1 WHERE id = 'rated'").execute(&mut change).await.unwrap();
    sqlx::query("COMMIT").execute(&mut change).await.unwrap();
    let refused = rate.await.unwrap();
    assert!(matches!(refused, Err(gateway_core::Error::SignatureRequired)), "{refused:?}");
    let stored = f.ledger.rate(&coop, &currency("hours"), &currency("credits")).await;
    assert!(matches!(stored, Err(gateway_core::Error::NotFound { .. })), "{stored:?}");
}

/// A settings change waits for every unit of work of the coop that has already written its events
/// (migration 0027): an unsigned operation that passed the signing rule as it wrote, and has not
/// committed yet, commits before the change that turns `require_signed_requests` on, and is
/// numbered before it. The operation is held between its two coops' writes by a lock another
/// connection holds on the second coop's writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_change_waits_for_the_writers_it_would_overtake() {
    use gateway_domain::ports::unsigned::critical;

    let Some(f) = Fixture::open(Backend::Postgres).await else { return };
    let StoreSpec::Postgres(url) = &f.spec else { unreachable!("a PostgreSQL fixture") };
    let (first, second) = (f.coop("a-first", 2).await, f.coop("b-second", 2).await);
    let mut holder = <sqlx::PgConnection as sqlx::Connection>::connect(url).await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(coop_lock_key('writers', 'b-second'))").execute(&mut holder).await.unwrap();

    // Events are written coop by coop in the order of their ids: the first coop's, then the
    // second's, which waits for the holder.
    let (store, a, b) = (f.store.clone(), first.clone(), second.clone());
    let operation = tokio::spawn(critical(async move {
        transaction(store.as_ref(), move |tx| {
            Box::pin(async move {
                crate::support::append_operation(tx, &a).await?;
                crate::support::append_operation(tx, &b).await
            })
        })
        .await
    }));
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                   AND ((classid::bigint << 32) | objid::bigint) = coop_lock_key('writers', 'b-second')";
    while sqlx::query_scalar::<_, i64>(waiting).fetch_one(&mut holder).await.unwrap() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let (coops, c) = (f.coops.clone(), first.clone());
    let mut change =
        tokio::spawn(async move { coops.update_settings(&c, crate::support::requiring_signatures(true)).await });
    let overtook = tokio::time::timeout(Duration::from_millis(500), &mut change).await.is_ok();
    assert!(!overtook, "the change committed while a writer of the coop had not");
    sqlx::query("SELECT pg_advisory_unlock(coop_lock_key('writers', 'b-second'))").execute(&mut holder).await.unwrap();
    operation.await.unwrap().expect("written before the rule changed");
    change.await.unwrap().unwrap();

    let events = f.store.events_after(&first, 0, 1000).await.unwrap();
    let position = |kind: &str| events.iter().position(|e| e.event_type == kind).expect(kind);
    assert!(position("UnsignedOperation") < position("SettingsUpdated"), "{events:?}");
}
