//! The treasurer's export (INTERFACE.md §13, docs/API.md "Treasurer export"), on every store: a
//! ledger of payments on three days (the largest and the smallest amounts), a batch with hostile
//! memos and a conversion, exported as Beancount, hledger and CSV; the files pass `bean-check`
//! and `hledger check` (when installed: `GATEWAY_TEST_BEAN_CHECK` / `GATEWAY_TEST_HLEDGER` name
//! them, else `bean-check` / `hledger` on `PATH`; a test without them says SKIPPED), close on
//! the live balances, keep every memo inside its field and every amount exact; overlapping
//! periods name the same transactions by the same ids; members export only themselves; bad
//! parameters are 400 naming the field; and, for random ledgers, every account's postings add
//! up to its live balance.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::Command;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use gateway_core::CoopId;
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{ALL_SCOPES, MEMBER_SCOPES, TestApp, did_of};

const HOSTILE: &str = "rent \"May\"\n2020-01-01 open Assets:Evil";
const DAY: u64 = 86_400;
const HEADER: &str = "id,seq,log_index,timestamp,kind,from,to,amount,currency,memo,batch_id";

/// A checker: the binary `var` names (which must then run: a CI that installed it must not
/// skip it), else `default` on `PATH`, else `None` after saying so.
fn checker(var: &str, default: &str, install: &str) -> Option<String> {
    let runs = |binary: &str| Command::new(binary).arg("--help").output().is_ok_and(|o| o.status.success());
    if let Ok(binary) = std::env::var(var) {
        assert!(runs(&binary), "{var}={binary} is set, but it does not run ({install})");
        return Some(binary);
    }
    if runs(default) {
        return Some(default.to_owned());
    }
    println!("SKIPPED: {default} not found ({install})");
    eprintln!("SKIPPED: {default} not found ({install})");
    None
}

fn bean_check() -> Option<String> {
    checker(
        "GATEWAY_TEST_BEAN_CHECK",
        "bean-check",
        "pip install 'beancount>=3,<4' into a venv and set GATEWAY_TEST_BEAN_CHECK to its bin/bean-check; .ci/run does",
    )
}

fn hledger() -> Option<String> {
    checker("GATEWAY_TEST_HLEDGER", "hledger", "apt-get install hledger; .ci/run does")
}

/// Runs a checker on `text` written to a file; panics with its output unless it passes.
fn passes(binary: &str, args: &[&str], text: &str, name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, text).unwrap();
    let mut command = Command::new(binary);
    for arg in args {
        if *arg == "FILE" {
            command.arg(&file)
        } else {
            command.arg(arg)
        };
    }
    let output = command.output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{binary} {args:?} refused {name}:\n{said}\n--- the file:\n{text}");
    said
}

/// The account name of a member (docs/API.md, "Treasurer export").
fn member_account(did: &str) -> String {
    format!("Assets:Members:M{}", &hex::encode(Sha256::digest(did.as_bytes()))[..16])
}

fn micros(text: &str) -> i128 {
    let negative = text.starts_with('-');
    let digits = text.trim_start_matches('-');
    let (units, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let frac = format!("{frac:0<6}");
    let value = units.parse::<i128>().unwrap() * 1_000_000 + frac.parse::<i128>().unwrap();
    if negative { -value } else { value }
}

/// Per (account, commodity): the sum of the postings and the asserted closing balance of a
/// Beancount or hledger export.
type Sums = HashMap<(String, String), i128>;

fn sums(text: &str) -> (Sums, Sums) {
    let (mut postings, mut asserted) = (HashMap::new(), HashMap::new());
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let account = |w: &str| w.starts_with("Assets:") || w.starts_with("Equity:");
        if line.starts_with("  ") && words.len() == 3 && account(words[0]) {
            *postings.entry((words[0].to_owned(), words[2].to_owned())).or_default() += micros(words[1]);
        } else if words.len() == 5 && words[1] == "balance" {
            asserted.insert((words[2].to_owned(), words[4].to_owned()), micros(words[3]));
        } else if line.starts_with("  ") && words.len() == 6 && words[3] == "=" {
            asserted.insert((words[0].to_owned(), words[5].to_owned()), micros(words[4]));
        }
    }
    (postings, asserted)
}

/// RFC 4180 rows; panics on a line break outside quotes that is not CRLF.
fn csv_rows(text: &str) -> Vec<Vec<String>> {
    let (mut rows, mut row, mut field, mut quoted) = (Vec::new(), Vec::new(), String::new(), false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') => {
                assert_eq!(chars.next(), Some('\n'), "a CR outside quotes without its LF");
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, '\n') => panic!("a bare LF outside quotes:\n{text}"),
            (false, c) => field.push(c),
        }
    }
    assert!(row.is_empty() && field.is_empty(), "the last row does not end with CRLF");
    rows
}

async fn export(app: &TestApp, query: &str, token: &str) -> crate::support::Response {
    app.get(&format!("/v1/ledger/c1/export?{query}"), token).await
}

fn text(response: &crate::support::Response) -> String {
    assert_eq!(response.status, StatusCode::OK, "{}", String::from_utf8_lossy(&response.bytes));
    String::from_utf8(response.bytes.to_vec()).unwrap()
}

/// Tokens of admin 1 and members 2 and 3 of c1, logged in now.
async fn tokens(app: &TestApp) -> (String, String, String) {
    (
        app.token(1, "c1", &ALL_SCOPES).await,
        app.token(2, "c1", &MEMBER_SCOPES).await,
        app.token(3, "c1", &MEMBER_SCOPES).await,
    )
}

fn paid(response: crate::support::Response) -> Value {
    assert_eq!(response.status, StatusCode::CREATED, "{}", response.body);
    response.body
}

/// A payment whose amount is sent as the exact decimal text `amount` (a `Value` would go
/// through `f64`).
async fn pay(
    app: &TestApp,
    token: &str,
    from: u8,
    to: u8,
    amount: &str,
    currency: &str,
    memo: Option<&str>,
) -> crate::support::Response {
    let body = format!(
        r#"{{"from":"{}","to":"{}","amount":{amount},"currency":"{currency}","memo":{}}}"#,
        did_of(from),
        did_of(to),
        serde_json::to_string(&memo).unwrap()
    );
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/ledger/c1/payment")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    app.send(request).await
}

/// The ledger of the tests, on three days from `START` (2027-01-15): the ids of its
/// transactions by day.
async fn ledger(app: &TestApp) -> Vec<Vec<String>> {
    let (admin, _) = app.coop_with_members("c1", 1, &[2, 3]).await;
    for seed in [2, 3] {
        let uri = format!("/v1/coops/c1/members/{}/credit-limit", did_of(seed));
        let set =
            app.call(Method::PUT, &uri, Some(json!({ "credit_limit": -3_000_000_000_000i64 })), Some(&admin)).await;
        assert_eq!(set.status, StatusCode::OK, "{}", set.body);
    }
    let rate = json!({ "from_currency": "hours", "to_currency": "eur_2", "rate": 1.5 });
    assert_eq!(app.post_as("/v1/oracle/rate", rate, &admin).await.status, StatusCode::CREATED);
    let id = |answer: crate::support::Response| paid(answer)["id"].as_str().unwrap().to_owned();
    let mut days = Vec::new();
    let (_, alice, bob) = tokens(app).await;
    days.push(vec![
        id(pay(app, &alice, 2, 3, "999999999999.999999", "hours", Some("huge")).await),
        id(pay(app, &bob, 3, 2, "0.000001", "hours", None).await),
    ]);
    app.clock.advance_secs(DAY);
    let (_, alice, _) = tokens(app).await;
    let items = json!({ "payments": [
        { "to": did_of(3), "amount": 1.25, "currency": "hours", "memo": HOSTILE },
        { "to": did_of(1), "amount": 0.5, "currency": "hours", "memo": "a,b; c" },
        { "to": did_of(3), "amount": 2, "currency": "hours", "memo": "=1+1" },
    ]});
    let batch = app.post_as("/v1/ledger/c1/payments/batch", items, &alice).await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
    days.push(batch.body["results"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_owned()).collect());
    app.clock.advance_secs(DAY);
    let (_, _, bob) = tokens(app).await;
    let conversion =
        json!({ "from": did_of(3), "to": did_of(2), "amount": 10, "from_currency": "hours", "to_currency": "eur_2" });
    let converted = paid(app.post_as("/v1/ledger/c1/payment/convert", conversion, &bob).await);
    assert_eq!(converted["net_target_amount"], json!(15));
    days.push(vec![converted["id"].as_str().unwrap().to_owned()]);
    app.state.log.checkpoint(&CoopId::parse("c1").unwrap()).await.unwrap();
    days
}

/// The live balances of members `seeds` and the system accounts, by export name and Beancount
/// commodity.
async fn live(app: &TestApp, token: &str, seeds: &[u8]) -> Sums {
    let mut balances = HashMap::new();
    let mut accounts: Vec<(String, String)> = seeds.iter().map(|s| (did_of(*s), member_account(&did_of(*s)))).collect();
    accounts.push(("coop:c1:exchange".to_owned(), "Assets:Coop:Exchange".to_owned()));
    accounts.push(("coop:c1:treasury".to_owned(), "Assets:Coop:Treasury".to_owned()));
    for (account, name) in accounts {
        let answer = app.get(&format!("/v1/ledger/c1/balance/{account}"), token).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        // Read as exact amounts: a `Value` would go through `f64`.
        #[derive(serde::Deserialize)]
        struct Balances {
            balances: BTreeMap<String, gateway_core::Amount>,
        }
        let read: Balances = serde_json::from_slice(&answer.bytes).unwrap();
        for (currency, balance) in read.balances {
            if balance.micros() != 0 {
                balances.insert((name.clone(), currency.to_ascii_uppercase()), i128::from(balance.micros()));
            }
        }
    }
    balances
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exports_pass_their_checkers_and_close_on_the_live_balances() {
    let (bean_check, hledger) = (bean_check(), hledger());
    for app in TestApp::every_store().await {
        let backend = app.backend;
        let days = ledger(&app).await;
        let (admin, _, _) = tokens(&app).await;
        let all: Vec<&String> = days.iter().flatten().collect();

        // Beancount.
        let answer = export(&app, "format=beancount", &admin).await;
        assert_eq!(answer.headers[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(
            answer.headers[header::CONTENT_DISPOSITION],
            "attachment; filename=\"c1-2027-01-15-2027-01-18.beancount\""
        );
        let beancount = text(&answer);
        if let Some(bean_check) = &bean_check {
            let said = passes(bean_check, &["FILE"], &beancount, "c1.beancount");
            assert!(said.trim().is_empty(), "{backend:?}: bean-check said {said}");
        }
        let (postings, asserted) = sums(&beancount);
        let live = live(&app, &admin, &[1, 2, 3]).await;
        for (key, balance) in &asserted {
            assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{backend:?} {key:?}");
            assert_eq!(live.get(key).copied().unwrap_or(0), *balance, "{backend:?} {key:?} is the live balance");
        }
        for key in live.keys() {
            assert!(asserted.contains_key(key), "{backend:?}: no closing balance of {key:?}\n{beancount}");
        }
        for id in &all {
            assert_eq!(beancount.matches(&format!("  id: \"{id}\"\n")).count(), 1, "{backend:?} {id}");
        }
        assert!(beancount.contains("  999999999999.999999 HOURS\n") && beancount.contains("  0.000001 HOURS\n"));
        assert!(beancount.contains(r#" * "rent \"May\"\n2020-01-01 open Assets:Evil""#), "{beancount}");
        assert!(!beancount.lines().any(|l| l.starts_with("2020-01-01")), "{beancount}");
        assert!(beancount.contains("  seq: ") && beancount.contains("  log_index: "));

        // hledger: the same balances, and no account but the real ones.
        let journal = text(&export(&app, "format=hledger", &admin).await);
        if let Some(hledger) = &hledger {
            passes(hledger, &["-f", "FILE", "check", "-s"], &journal, "c1.journal");
            let accounts = passes(hledger, &["-f", "FILE", "accounts"], &journal, "c1.journal");
            assert!(!accounts.contains("Evil"), "{backend:?}: {accounts}");
            assert_eq!(accounts.lines().count(), 4, "three members and the exchange account: {accounts}");
        }
        let (hpostings, hasserted) = sums(&journal);
        assert_eq!(hasserted.len(), asserted.len(), "{journal}");
        for ((account, commodity), balance) in &hasserted {
            let key = (account.clone(), commodity.trim_matches('"').to_ascii_uppercase());
            assert_eq!(asserted[&key], *balance, "{backend:?}");
            assert_eq!(hpostings.get(&(account.clone(), commodity.clone())).copied().unwrap_or(0), *balance);
        }
        assert!(!journal.lines().any(|l| l.starts_with("2020-01-01")), "{journal}");

        // CSV: one row per transaction, in commit order, exact.
        let answer = export(&app, "format=csv", &admin).await;
        assert_eq!(answer.headers[header::CONTENT_TYPE], "text/csv; charset=utf-8");
        let rows = csv_rows(&text(&answer));
        assert_eq!(rows[0].join(","), HEADER);
        let ids: Vec<&String> = rows[1..].iter().map(|r| &r[0]).collect();
        assert_eq!(ids, all, "{backend:?}: every transaction once, in commit order");
        let seqs: Vec<u64> = rows[1..].iter().map(|r| r[1].parse().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        for row in &rows[1..] {
            assert_eq!(row.len(), 11, "{row:?}");
            assert_eq!(row[2].parse::<u64>().unwrap(), row[1].parse::<u64>().unwrap(), "a coop created with its log");
            assert!(row[3].ends_with('Z') && row[3].len() == 20, "{row:?}");
        }
        let by_id: BTreeMap<&str, &Vec<String>> = rows[1..].iter().map(|r| (r[0].as_str(), r)).collect();
        let row = |id: &String| by_id[id.as_str()];
        assert_eq!(row(&days[0][0])[7], "999999999999.999999");
        assert_eq!(row(&days[0][1])[7], "0.000001");
        assert_eq!(row(&days[0][1])[3], "2027-01-15T08:00:00Z");
        assert_eq!(row(&days[1][0])[9], HOSTILE);
        assert_eq!(row(&days[1][1])[9], "a,b; c");
        assert_eq!(row(&days[1][2])[9], "'=1+1", "a formula is defused");
        let expected = vec!["conversion".to_owned(), did_of(3), did_of(2), "10".into(), "hours".into()];
        assert_eq!(row(&days[2][0])[4..9].to_vec(), expected);
        // The batch's three items share one batch id; the payments made on their own and the
        // conversion have none; the history item names the same batch.
        let batch_id = &row(&days[1][0])[10];
        assert!(!batch_id.is_empty(), "{backend:?}: a batch item names its batch");
        assert!(days[1].iter().all(|id| &row(id)[10] == batch_id), "{backend:?}: one id per batch");
        assert!(days[0].iter().chain(&days[2]).all(|id| row(id)[10].is_empty()), "{backend:?}");
        assert!(beancount.contains(&format!("  batch_id: \"{batch_id}\"\n")), "{beancount}");
        let history = app.get("/v1/ledger/c1/history?limit=100", &admin).await;
        let items = history.body["transactions"].as_array().unwrap();
        let item = items.iter().find(|t| t["id"] == json!(days[1][2])).unwrap();
        assert_eq!(item["batch_id"], json!(batch_id), "{backend:?}: {item}");
        let alone = items.iter().find(|t| t["id"] == json!(days[0][0])).unwrap();
        assert!(alone.get("batch_id").is_none(), "{backend:?}: {alone}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_periods_give_the_same_ids_and_chain_their_balances() {
    let bean_check = bean_check();
    for app in TestApp::every_store().await {
        let days = ledger(&app).await;
        let (admin, _, _) = tokens(&app).await;
        let ids = |query: &'static str| {
            let (app, admin) = (&app, admin.clone());
            async move {
                let rows = csv_rows(&text(&export(app, query, &admin).await));
                rows[1..].iter().map(|r| r[0].clone()).collect::<Vec<_>>()
            }
        };
        let first_two = ids("format=csv&from=2027-01-15&to=2027-01-17").await;
        let last_two = ids("format=csv&from=2027-01-16").await;
        assert_eq!(first_two, [days[0].clone(), days[1].clone()].concat());
        assert_eq!(last_two, [days[1].clone(), days[2].clone()].concat());
        let one: HashSet<&String> = first_two.iter().collect();
        let shared: Vec<&String> = last_two.iter().filter(|id| one.contains(id)).collect();
        assert_eq!(shared, days[1].iter().collect::<Vec<_>>());

        // The middle day alone: its opening balances are the first day's closing ones.
        let first = text(&export(&app, "format=beancount&to=2027-01-16", &admin).await);
        let middle = text(&export(&app, "format=beancount&from=2027-01-16&to=2027-01-17", &admin).await);
        for file in [&first, &middle] {
            if let Some(bean_check) = &bean_check {
                passes(bean_check, &["FILE"], file, "period.beancount");
            }
        }
        let (_, closed) = sums(&first);
        assert!(middle.contains("2027-01-16 * \"Opening balances at 2027-01-16\""), "{middle}");
        let opening: Sums = middle
            .split("Opening balances at 2027-01-16\"\n")
            .nth(1)
            .unwrap()
            .lines()
            .take_while(|l| l.starts_with("  "))
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                ((w[0].to_owned(), w[2].to_owned()), micros(w[1]))
            })
            .collect();
        for (key, balance) in &closed {
            assert_eq!(opening.get(key).copied().unwrap_or(0), *balance, "{key:?}");
        }
        assert!(first.contains("2027-01-16 balance "), "{first}");
    }
}

#[tokio::test]
async fn members_export_only_their_own_account() {
    let app = TestApp::with(false, gateway_http::CorsMode::Development).await;
    ledger(&app).await;
    let (admin, alice, _) = tokens(&app).await;
    for query in [
        "format=csv".to_owned(),
        format!("format=csv&member={}", did_of(3)),
        "format=csv&member=coop:c1:exchange".into(),
    ] {
        let refused = export(&app, &query, &alice).await;
        refused.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(refused.body["details"], json!({ "reason": "admin_only" }));
    }
    let own = text(&export(&app, &format!("format=beancount&member={}", did_of(2)), &alice).await);
    let (postings, asserted) = sums(&own);
    let mine = member_account(&did_of(2));
    assert!(!asserted.is_empty() && asserted.keys().all(|(account, _)| *account == mine), "{own}");
    for (key, balance) in &asserted {
        assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{key:?}");
    }
    if let Some(bean_check) = bean_check() {
        passes(&bean_check, &["FILE"], &own, "alice.beancount");
    }
    // From a later day: her opening balance against the equity account, in both formats.
    let later = text(&export(&app, &format!("format=beancount&from=2027-01-16&member={}", did_of(2)), &alice).await);
    assert!(later.contains("  Equity:Opening-Balances  "), "{later}");
    let (postings, asserted) = sums(&later);
    for (key, balance) in &asserted {
        assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{key:?}\n{later}");
    }
    if let Some(bean_check) = bean_check() {
        passes(&bean_check, &["FILE"], &later, "alice-later.beancount");
    }
    let journal = text(&export(&app, &format!("format=hledger&from=2027-01-16&member={}", did_of(2)), &alice).await);
    if let Some(hledger) = hledger() {
        passes(&hledger, &["-f", "FILE", "check", "-s"], &journal, "alice-later.journal");
    }
    // The conversion (member 3 to 2) is hers; the batch item paid to the admin too.
    assert_eq!(csv_rows(&text(&export(&app, &format!("format=csv&member={}", did_of(2)), &alice).await)).len(), 1 + 6);
    // An admin exports any member, or a system account.
    let bobs = csv_rows(&text(&export(&app, &format!("format=csv&member={}", did_of(3)), &admin).await));
    assert_eq!(bobs.len(), 1 + 5);
    let exchange = csv_rows(&text(&export(&app, "format=csv&member=coop:c1:exchange", &admin).await));
    assert_eq!(exchange.len(), 1 + 1);
}

#[tokio::test]
async fn bad_parameters_are_400_naming_the_field() {
    let app = TestApp::with(false, gateway_http::CorsMode::Development).await;
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    for (query, field) in [
        ("format=xml", "format"),
        ("", "format"),
        ("format=csv&from=2027-02-30", "from"),
        ("format=csv&from=yesterday", "from"),
        ("format=csv&to=2027-1-5", "to"),
        ("format=csv&from=2027-01-16&to=2027-01-16", "to"),
        ("format=csv&from=2027-01-17&to=2027-01-16", "to"),
        ("format=csv&member=alice", "member"),
        ("format=csv&member=coop:c2:treasury", "member"),
    ] {
        let refused = export(&app, query, &admin).await;
        refused.assert_error(400, "BAD_REQUEST");
        assert!(refused.body["details"]["fields"][field].is_array(), "{query}: {}", refused.body);
    }
    let other = export(&app, "format=csv", &app.token(1, "c1", &["coop:read"]).await).await;
    other.assert_error(403, "AUTHORIZATION_FAILED");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// For random ledgers (payments in two currencies between three members and the admin,
    /// some refused by the credit floor, over two days), every account's postings in the export
    /// add up to its live balance, which its closing assertion states, and the CSV has every
    /// transaction once.
    #[test]
    fn every_accounts_postings_add_up_to_its_live_balance(
        payments in prop::collection::vec((1u8..5, 1u8..5, 1i64..400_000_000, any::<bool>(), 0usize..4), 1..16),
        split in 0usize..16,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let app = TestApp::new().await;
            app.coop_with_members("c1", 1, &[2, 3, 4]).await;
            let mut tokens: HashMap<u8, String> = HashMap::new();
            let mut made = 0;
            for (i, (from, to, amount, eur, memo)) in payments.iter().enumerate() {
                if i == split {
                    app.clock.advance_secs(DAY);
                    tokens.clear();
                }
                if from == to {
                    continue;
                }
                if !tokens.contains_key(from) {
                    tokens.insert(*from, app.token(*from, "c1", &MEMBER_SCOPES).await);
                }
                let memo = [None, Some(HOSTILE), Some("a;b|c,d"), Some("\\\t\r")][*memo];
                let amount = gateway_core::Amount::from_micros(*amount).to_string();
                let currency = if *eur { "eur" } else { "hours" };
                let answer = pay(&app, &tokens[from], *from, *to, &amount, currency, memo).await;
                match answer.status {
                    StatusCode::CREATED => made += 1,
                    StatusCode::CONFLICT => assert_eq!(answer.code(), "INSUFFICIENT_CREDIT"),
                    other => panic!("{other}: {}", answer.body),
                }
            }
            app.state.log.checkpoint(&CoopId::parse("c1").unwrap()).await.unwrap();
            let admin = app.token(1, "c1", &ALL_SCOPES).await;
            let live = live(&app, &admin, &[1, 2, 3, 4]).await;
            let beancount = text(&export(&app, "format=beancount", &admin).await);
            let (postings, asserted) = sums(&beancount);
            for (key, balance) in &live {
                assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{key:?}\n{beancount}");
                assert_eq!(asserted.get(key).copied().unwrap_or(0), *balance, "{key:?}\n{beancount}");
            }
            for (key, sum) in &postings {
                assert_eq!(live.get(key).copied().unwrap_or(0), *sum, "{key:?}\n{beancount}");
            }
            let rows = csv_rows(&text(&export(&app, "format=csv", &admin).await));
            assert_eq!(rows.len(), 1 + made);
            let unique: HashSet<&String> = rows[1..].iter().map(|r| &r[0]).collect();
            assert_eq!(unique.len(), made);
        });
    }
}

/// Without a receipt key no checkpoint is signed; the export still reads the log's entries, and
/// holds a payment once the log has copied it (within a second of its commit; here, on demand).
#[tokio::test]
async fn an_unsigned_log_is_exported_once_its_entries_are_there() {
    let keys = std::sync::Arc::new(gateway_domain::governance::MemoryReceiptKeys::unavailable("keystore_locked"));
    let app = TestApp::build_with_keys(false, gateway_http::CorsMode::Development, 0.9, vec![], keys).await;
    let (admin, tokens) = app.coop_with_members("c1", 1, &[2]).await;
    paid(pay(&app, &tokens[0], 2, 1, "2.5", "hours", Some("unsigned")).await);
    let early = export(&app, "format=csv", &admin).await;
    assert_eq!(early.status, StatusCode::OK);
    assert_eq!(csv_rows(&text(&early)).len(), 1, "the header alone: the log has not copied the payment yet");
    let round = app.state.log.checkpoint(&CoopId::parse("c1").unwrap()).await.unwrap();
    assert!(matches!(round, gateway_domain::log::Round::Unsigned { .. }), "{round:?}");
    let rows = csv_rows(&text(&export(&app, "format=csv", &admin).await));
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1][9], "unsigned");
    let beancount = text(&export(&app, "format=beancount", &admin).await);
    if let Some(bean_check) = bean_check() {
        passes(&bean_check, &["FILE"], &beancount, "unsigned.beancount");
    }
    let (postings, asserted) = sums(&beancount);
    assert_eq!(asserted[&(member_account(&did_of(1)), "HOURS".to_owned())], 2_500_000);
    assert_eq!(postings[&(member_account(&did_of(1)), "HOURS".to_owned())], 2_500_000);
}
