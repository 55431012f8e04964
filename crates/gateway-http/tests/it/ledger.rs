//! Payments, balances, history, batches, conversions and idempotency over HTTP.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use crate::support::{TestApp, did_of};

fn pay_body(from: u8, to: u8, amount: Value) -> Value {
    json!({ "from": did_of(from), "to": did_of(to), "amount": amount, "currency": "hours", "memo": "thanks" })
}

#[tokio::test]
async fn payment_moves_credit_and_keeps_zero_sum() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let paid = app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, json!(12.5)), &tokens[0]).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
    for field in ["id", "from", "to", "amount", "currency", "memo", "timestamp"] {
        assert!(!paid.body[field].is_null(), "{field} missing: {}", paid.body);
    }
    assert_eq!(paid.body["amount"], json!(12.5));
    let payer = app.get(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &tokens[0]).await;
    assert_eq!(payer.body["balance"], json!(-12.5));
    assert_eq!(payer.body["currency"], "hours");
    assert_eq!(payer.body["balances"]["hours"], json!(-12.5));
    let payee = app.get("/ledger/balance", &tokens[1]).await;
    assert_eq!(payee.body["balance"], json!(12.5));
    assert_eq!(payee.body["did"], did_of(3));
}

#[tokio::test]
async fn amounts_are_validated_exactly() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    for bad in [json!(0), json!(-1), json!(0.0000001), json!("5"), json!(1e13), json!(null)] {
        let r = app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, bad.clone()), &tokens[0]).await;
        r.assert_error(400, "BAD_REQUEST");
        assert!(r.body["details"]["fields"]["amount"].is_array(), "{bad}: {}", r.body);
    }
    let exact = app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, json!(0.000001)), &tokens[0]).await;
    assert_eq!(exact.status, StatusCode::CREATED);
    assert_eq!(exact.body["amount"], json!(0.000001));
}

#[tokio::test]
async fn payer_must_be_the_caller_and_a_member_paying_a_member() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let theft = app.post_as("/v1/ledger/c1/payment", pay_body(3, 2, json!(1)), &tokens[0]).await;
    theft.assert_error(403, "AUTHORIZATION_FAILED");
    let to_self = app.post_as("/v1/ledger/c1/payment", pay_body(2, 2, json!(1)), &tokens[0]).await;
    to_self.assert_error(400, "BAD_REQUEST");
    let stranger = app.post_as("/v1/ledger/c1/payment", pay_body(2, 77, json!(1)), &tokens[0]).await;
    stranger.assert_error(400, "BAD_REQUEST");
    assert!(stranger.body["details"]["fields"]["to"].is_array());
    let no_from = app.post_as("/v1/ledger/c1/payment", json!({ "to": did_of(3), "amount": 1 }), &tokens[0]).await;
    assert!(no_from.body["details"]["fields"]["from"].is_array(), "{}", no_from.body);
    // Another coop in the path: refused before anything else.
    let foreign = app.post_as("/v1/ledger/c2/payment", pay_body(2, 3, json!(1)), &tokens[0]).await;
    foreign.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(foreign.body["details"]["coop_id"], "c2");
}

#[tokio::test]
async fn credit_limit_is_inclusive() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let at_limit = app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, json!(999)), &tokens[0]).await;
    assert_eq!(at_limit.status, StatusCode::CREATED, "{}", at_limit.body);
    let last = app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, json!(1)), &tokens[0]).await;
    assert_eq!(last.status, StatusCode::CREATED, "down to exactly -1000 is allowed: {}", last.body);
    let over = app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, json!(0.000001)), &tokens[0]).await;
    over.assert_error(409, "INSUFFICIENT_CREDIT");
    assert_eq!(over.body["details"]["balance"], json!(-1000));
    assert_eq!(over.body["details"]["credit_limit"], json!(-1000));
    assert_eq!(over.body["details"]["currency"], "hours");
}

#[tokio::test]
async fn short_family_transaction_and_history() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    for n in 1..=3 {
        let r = app
            .post_as(
                "/ledger/transaction",
                json!({ "to": did_of(3), "amount": n, "description": format!("n{n}") }),
                &tokens[0],
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
        assert_eq!(r.body["memo"], format!("n{n}"));
    }
    let history = app.get("/ledger/history?limit=2", &tokens[1]).await;
    assert_eq!(history.body["transactions"].as_array().unwrap().len(), 2);
    assert_eq!(history.body["transactions"][0]["amount"], json!(3), "newest first");
    assert_eq!(history.body["pagination"], json!({ "limit": 2, "offset": 0, "total": 3, "has_more": true }));
    let v1 = app.get("/v1/ledger/c1/history?offset=2", &tokens[1]).await;
    assert_eq!(v1.body["transactions"][0]["amount"], json!(1));
    assert_eq!(v1.body["pagination"]["has_more"], false);
    let clamped = app.get("/v1/ledger/c1/history?limit=1000", &tokens[1]).await;
    assert_eq!(clamped.body["pagination"]["limit"], 100);
    app.get("/v1/ledger/c1/history?limit=abc", &tokens[1]).await.assert_error(400, "BAD_REQUEST");
}

async fn pay_with_key(app: &TestApp, token: &str, key: &str, body: Value) -> crate::support::Response {
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/ledger/c1/payment")
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json")
        .header("idempotency-key", key)
        .body(Body::from(body.to_string()))
        .unwrap();
    app.send(request).await
}

#[tokio::test]
async fn idempotency_key_replays_and_refuses_other_bodies() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let first = pay_with_key(&app, &tokens[0], "k1", pay_body(2, 3, json!(5))).await;
    assert_eq!(first.status, StatusCode::CREATED);
    let again = pay_with_key(&app, &tokens[0], "k1", pay_body(2, 3, json!(5))).await;
    assert_eq!(again.status, StatusCode::CREATED);
    assert_eq!(again.body, first.body, "the same response, not a second payment");
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert!(!first.headers.contains_key("idempotent-replayed"));
    let balance = app.get(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &tokens[0]).await;
    assert_eq!(balance.body["balance"], json!(-5));
    let other = pay_with_key(&app, &tokens[0], "k1", pay_body(2, 3, json!(6))).await;
    other.assert_error(409, "CONFLICT");
    // A refusal is an answer too: replayed as it was.
    let refused = pay_with_key(&app, &tokens[0], "k2", pay_body(2, 3, json!(5000))).await;
    refused.assert_error(409, "INSUFFICIENT_CREDIT");
    let replayed = pay_with_key(&app, &tokens[0], "k2", pay_body(2, 3, json!(5000))).await;
    assert_eq!(replayed.body, refused.body);
}

#[tokio::test]
async fn batches_atomic_and_not() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
    let items = json!([
        { "from": did_of(2), "to": did_of(3), "amount": 10, "currency": "hours" },
        { "from": did_of(2), "to": did_of(4), "amount": 2000, "currency": "hours" },
        { "from": did_of(2), "to": did_of(4), "amount": 5, "currency": "hours" },
    ]);
    let bare = app.post_as("/v1/ledger/c1/payments/batch", items.clone(), &tokens[0]).await;
    assert_eq!(bare.status, StatusCode::OK, "{}", bare.body);
    assert_eq!(bare.body["succeeded"], 2);
    assert_eq!(bare.body["failed"], 1);
    assert_eq!(bare.body["results"][1]["success"], false);
    assert_eq!(bare.body["results"][1]["code"], "INSUFFICIENT_CREDIT");
    assert!(bare.body["results"][0]["id"].is_string());

    let atomic =
        app.post_as("/v1/ledger/c1/payments/batch", json!({ "payments": items, "atomic": true }), &tokens[0]).await;
    atomic.assert_error(409, "CONFLICT");
    assert!(atomic.body["error"].as_str().unwrap().contains("payments[1]"), "{}", atomic.body);
    let balance = app.get(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &tokens[0]).await;
    assert_eq!(balance.body["balance"], json!(-15), "the atomic batch wrote nothing");
}

#[tokio::test]
async fn conversions_with_rates_fees_and_slippage_bounds() {
    let app = TestApp::new().await;
    let (admin, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let no_rate = app
        .post_as(
            "/v1/ledger/c1/payment/convert/quote",
            json!({ "amount": 10, "from_currency": "hours", "to_currency": "eur" }),
            &tokens[0],
        )
        .await;
    no_rate.assert_error(404, "NOT_FOUND");
    let rate = app
        .post_as("/v1/oracle/rate", json!({ "from_currency": "hours", "to_currency": "eur", "rate": 2.5 }), &admin)
        .await;
    assert_eq!(rate.status, StatusCode::CREATED, "{}", rate.body);
    let fee = app
        .call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "conversion_fee_percent": 1 })), Some(&admin))
        .await;
    assert_eq!(fee.status, StatusCode::OK, "{}", fee.body);
    let got = app.get("/v1/oracle/rate/eur/hours", &tokens[0]).await;
    assert_eq!(got.body["rate"], json!(0.4), "the inverse of the opposite rate");

    let quote = app
        .post_as(
            "/v1/ledger/c1/payment/convert/quote",
            json!({ "amount": 10, "from_currency": "hours", "to_currency": "eur" }),
            &tokens[0],
        )
        .await;
    assert_eq!(quote.body["rate"], json!(2.5));
    assert_eq!(quote.body["gross_target_amount"], json!(25));
    assert_eq!(quote.body["fee_amount"], json!(0.25));
    assert_eq!(quote.body["net_target_amount"], json!(24.75));
    let convert = |extra: Value| {
        let mut body =
            json!({ "from": did_of(2), "to": did_of(3), "amount": 10, "from_currency": "hours", "to_currency": "eur" });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    let too_much =
        app.post_as("/v1/ledger/c1/payment/convert", convert(json!({ "max_target_amount": 24 })), &tokens[0]).await;
    too_much.assert_error(409, "SLIPPAGE_EXCEEDED");
    assert_eq!(too_much.body["details"], json!({ "net_target_amount": 24.75, "bound": 24 }));
    let too_little =
        app.post_as("/v1/ledger/c1/payment/convert", convert(json!({ "min_target_amount": 25 })), &tokens[0]).await;
    too_little.assert_error(409, "SLIPPAGE_EXCEEDED");
    let done = app
        .post_as(
            "/v1/ledger/c1/payment/convert",
            convert(json!({ "quote_id": quote.body["quote_id"], "max_target_amount": 30 })),
            &tokens[0],
        )
        .await;
    assert_eq!(done.status, StatusCode::CREATED, "{}", done.body);
    assert_eq!(done.body["kind"], "conversion");
    let conversion_fields = json!({ "to_currency": "eur", "rate": 2.5, "gross_target_amount": 25, "fee_amount": 0.25, "net_target_amount": 24.75 });
    for (field, value) in conversion_fields.as_object().unwrap() {
        assert_eq!(&done.body[field], value, "{field} in {}", done.body);
    }
    // The history shows the same record; a payment has none of the conversion fields.
    let history = app.get("/v1/ledger/c1/history", &tokens[0]).await;
    let listed = &history.body["transactions"][0];
    assert_eq!(listed, &done.body, "the history lists the conversion as it was answered");
    let pay = app
        .post_as("/v1/ledger/c1/payment", json!({ "from": did_of(2), "to": did_of(3), "amount": 1 }), &tokens[0])
        .await;
    assert_eq!(pay.status, StatusCode::CREATED, "{}", pay.body);
    for field in conversion_fields.as_object().unwrap().keys() {
        assert!(pay.body.get(field).is_none(), "a payment has no {field}: {}", pay.body);
    }
    // The document describes the conversion fields the answers carry.
    let doc = app.call(Method::GET, "/api-docs/openapi.json", None, None).await.body;
    let documented = &doc["components"]["schemas"]["TransactionDto"]["properties"];
    for field in conversion_fields.as_object().unwrap().keys() {
        assert!(documented[field].is_object(), "TransactionDto documents {field}");
    }
    let payee = app.get(&format!("/v1/ledger/c1/balance/{}?currency=eur", did_of(3)), &tokens[1]).await;
    assert_eq!(payee.body["balance"], json!(24.75));
    let exchange = app.get("/v1/ledger/c1/balance/coop:c1:exchange?currency=hours", &tokens[0]).await;
    assert_eq!(exchange.body["balances"], json!({ "hours": 10, "eur": -24.75 }), "each currency stays zero-sum");
}

/// A conversion quote is single-use and bound to the member who asked for it and to its amount
/// (docs/API.md, "Conversion quotes"): another member's use is 403, another amount 400, a second
/// use 409, and of two concurrent uses exactly one converts. A refused use leaves the quote
/// usable. On every store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_quotes_are_single_use_and_bound_to_requester_and_amount() {
    for app in TestApp::every_store().await {
        let backend = app.backend;
        let (admin, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let rate = json!({ "from_currency": "hours", "to_currency": "eur", "rate": 2 });
        assert_eq!(app.post_as("/v1/oracle/rate", rate, &admin).await.status, StatusCode::CREATED, "{backend:?}");
        let quote = |token: &str| {
            let body = json!({ "amount": 10, "from_currency": "hours", "to_currency": "eur" });
            let (app, token) = (&app, token.to_owned());
            async move {
                let answer = app.post_as("/v1/ledger/c1/payment/convert/quote", body, &token).await;
                assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
                answer.body["quote_id"].as_str().unwrap().to_owned()
            }
        };
        let convert = |payer: u8, amount: Value, quote_id: &str| {
            json!({ "from": did_of(payer), "to": did_of(1), "amount": amount, "from_currency": "hours",
                    "to_currency": "eur", "quote_id": quote_id })
        };
        let url = "/v1/ledger/c1/payment/convert";
        let (alice, bob) = (&tokens[0], &tokens[1]);

        // Bob presents Alice's quote: refused, and it stays Alice's.
        let alices = quote(alice).await;
        let stolen = app.post_as(url, convert(3, json!(10), &alices), bob).await;
        stolen.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(stolen.body["details"], json!({ "reason": "quote_of_another_member" }), "{backend:?}");
        // Alice with another amount, larger or smaller, or the same amount written otherwise.
        for other in [json!(11), json!(9.999999), json!(1)] {
            let wrong = app.post_as(url, convert(2, other.clone(), &alices), alice).await;
            wrong.assert_error(400, "BAD_REQUEST");
            assert!(wrong.body["details"]["fields"]["amount"].is_array(), "{backend:?} {other}: {}", wrong.body);
        }
        let once = app.post_as(url, convert(2, json!(10.0), &alices), alice).await;
        assert_eq!(once.status, StatusCode::CREATED, "{backend:?}: the refusals left it usable: {}", once.body);
        let twice = app.post_as(url, convert(2, json!(10), &alices), alice).await;
        twice.assert_error(409, "CONFLICT");
        assert!(twice.body["details"]["reason"].as_str().unwrap().contains("already used"), "{}", twice.body);
        // Even its owner's failed second use did not move money: one conversion in the history.
        let history = app.get("/v1/ledger/c1/history", alice).await;
        let conversions =
            history.body["transactions"].as_array().unwrap().iter().filter(|t| t["kind"] == "conversion").count();
        assert_eq!(conversions, 1, "{backend:?}");

        // Two concurrent uses of one quote: exactly one converts, the other is 409.
        let racing = quote(alice).await;
        let (a, b) = tokio::join!(
            app.post_as(url, convert(2, json!(10), &racing), alice),
            app.post_as(url, convert(2, json!(10), &racing), alice),
        );
        let mut statuses = [a.status.as_u16(), b.status.as_u16()];
        statuses.sort_unstable();
        assert_eq!(statuses, [201, 409], "{backend:?}: {} / {}", a.body, b.body);
        let balance = app.get(&format!("/v1/ledger/c1/balance/{}?currency=hours", did_of(2)), alice).await;
        assert_eq!(balance.body["balance"], json!(-20), "{backend:?}: two conversions of 10, not three");
    }
}

#[tokio::test]
async fn payment_events_and_notifications_are_written_with_the_payment() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    app.post_as("/v1/ledger/c1/payment", pay_body(2, 3, json!(7)), &tokens[0]).await;
    let inbox = app.get("/notifications", &tokens[1]).await;
    let kinds: Vec<&str> =
        inbox.body["notifications"].as_array().unwrap().iter().map(|n| n["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, vec!["payment_received", "member_added"]);
    assert_eq!(inbox.body["unread_count"], 2);
}
