//! Request-signature nonces across replicas that share PostgreSQL and no Redis (INTERFACE.md §11:
//! "accepted once within its validity, by every replica ... without Redis through the shared
//! store"). Each replica is a full [`gatewayd::serve`] in this process on a fresh schema of the
//! test database; the test plays a replayer behind a load balancer: the same signed payment,
//! byte for byte and with the same `Host`, sent to the other replica, to both at once, and to a
//! replica started after the others stopped. Runs when `GATEWAY_TEST_POSTGRES_URL` is set
//! (fails loudly if it is set and unreachable); otherwise it says SKIPPED and passes.

mod support;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

use support::{json_request, login, serve_in_process, signing_key};

/// The `Host` the load balancer passes on to every replica, which the signature covers.
const HOST: &str = "pay.gateway.test";

/// A signed request, as bytes to send again and again.
struct Signed {
    path: String,
    body: String,
    headers: Vec<(String, String)>,
}

/// `POST path` with `body`, signed by `seed`'s key now, with `nonce`, for `token`.
fn signed(seed: u8, token: &str, path: &str, body: &Value, nonce: &str) -> Signed {
    let (key, did) = signing_key(seed);
    let body = body.to_string();
    let created =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("a clock after 1970").as_secs();
    let message = gateway_httpsig::Message { method: "POST", authority: HOST, path, query: None, headers: &[] };
    let options = gateway_httpsig::SignOptions { label: "sig1", created, expires: created + 60, nonce, keyid: &did };
    let signature = gateway_httpsig::sign(&message, body.as_bytes(), &key, &options).expect("signs");
    let headers = vec![
        ("authorization".to_owned(), format!("Bearer {token}")),
        ("content-digest".to_owned(), signature.content_digest.expect("a body")),
        ("signature-input".to_owned(), signature.signature_input),
        ("signature".to_owned(), signature.signature),
    ];
    Signed { path: path.to_owned(), body, headers }
}

/// Sends `request` to the replica at `addr` with [`HOST`] as its `Host`; status and body.
async fn send(addr: &str, request: &Signed) -> (u16, Value) {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("the replica accepts");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let mut builder = hyper::Request::builder()
        .method("POST")
        .uri(&request.path)
        .header("host", HOST)
        .header("content-type", "application/json");
    for (name, value) in &request.headers {
        builder = builder.header(name, value);
    }
    let response = sender.send_request(builder.body(Full::new(Bytes::from(request.body.clone()))).unwrap()).await;
    let response = response.expect("the replica answers");
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn assert_replayed(answer: &(u16, Value), which: &str) {
    assert_eq!(answer.0, 401, "{which}: {}", answer.1);
    assert_eq!(answer.1["code"], "AUTHENTICATION_FAILED", "{which}: {}", answer.1);
    assert_eq!(answer.1["details"]["reason"], "nonce_replayed", "{which}: {}", answer.1);
}

async fn payments(addr: &str, token: &str) -> u64 {
    let (status, history) = json_request(addr, "GET", "/v1/ledger/once/history", None, Some(token)).await;
    assert_eq!(status, 200, "{history}");
    history["pagination"]["total"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_payment_is_accepted_once_by_two_replicas_sharing_postgres_without_redis() {
    let Some(store) = gateway_store::testing::fresh_postgres_schema("signed_nonces").await else {
        eprintln!(
            "SKIPPED a_signed_payment_is_accepted_once_by_two_replicas_sharing_postgres_without_redis: GATEWAY_TEST_POSTGRES_URL is not set"
        );
        return;
    };
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    let (a, b) = (serve_in_process(&store, &flags).await, serve_in_process(&store, &flags).await);
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token = login(&a.api, 1, "once", &scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": "Once", "coop_type": "worker" })), Some(&token))
            .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops/once/members", Some(json!({ "did": signing_key(2).1 })), Some(&token))
            .await;
    assert_eq!(status, 201, "{body}");
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 40 });

    // Accepted by A; the same bytes sent to B are a replay, and so are they on A.
    let payment = signed(1, &token, "/v1/ledger/once/payment", &pay, "pay-once-0123456789abcdef");
    let first = send(&a.api, &payment).await;
    assert_eq!(first.0, 201, "{}", first.1);
    assert_replayed(&send(&b.api, &payment).await, "replica B");
    assert_replayed(&send(&a.api, &payment).await, "replica A");
    assert_eq!(payments(&b.api, &token).await, 1, "paid once");

    // Eight copies of another signed payment, split across the replicas and sent at once: one
    // is paid, the others are replays, never a 5xx.
    let raced = std::sync::Arc::new(signed(1, &token, "/v1/ledger/once/payment", &pay, "pay-race-0123456789abcdef"));
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let addr = if i % 2 == 0 { a.api.clone() } else { b.api.clone() };
            let (raced, barrier) = (raced.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                send(&addr, &raced).await
            })
        })
        .collect();
    let mut paid = 0;
    for task in tasks {
        let answer = task.await.unwrap();
        if answer.0 == 201 {
            paid += 1;
        } else {
            assert_replayed(&answer, "a racing copy");
        }
    }
    assert_eq!(paid, 1, "one of eight copies is paid");
    assert_eq!(payments(&a.api, &token).await, 2);

    // Both replicas stop; a replica started afterwards still refuses both (the nonces live in
    // the database, not in a replica's memory).
    drop((a, b));
    let c = serve_in_process(&store, &flags).await;
    assert_replayed(&send(&c.api, &payment).await, "a replica started later");
    assert_replayed(&send(&c.api, &raced).await, "a replica started later");
    assert_eq!(payments(&c.api, &token).await, 2);

    // What the database keeps is digests: neither the nonce nor the signer's DID appears.
    let pool = sqlx::PgPool::connect(&store).await.unwrap();
    let rows: Vec<(Vec<u8>, Vec<u8>)> =
        sqlx::query_as("SELECT digest, signer FROM request_nonces").fetch_all(&pool).await.unwrap();
    assert_eq!(rows.len(), 2, "one row per accepted nonce");
    assert!(rows.iter().all(|(digest, signer)| digest.len() == 32 && signer.len() == 32));
    pool.close().await;
    drop(c);
}

/// The same with Redis (`--redis`): the nonce lives in Redis, and is refused on the other
/// replica; the epoch marker the replicas set at start is left under the test's own prefix and
/// removed at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_payment_is_accepted_once_by_two_replicas_sharing_redis() {
    const NAME: &str = "a_signed_payment_is_accepted_once_by_two_replicas_sharing_redis";
    let Ok(redis_url) = std::env::var("GATEWAY_TEST_REDIS_URL") else {
        eprintln!("SKIPPED {NAME}: GATEWAY_TEST_REDIS_URL is not set");
        return;
    };
    let Some(store) = gateway_store::testing::fresh_postgres_schema("signed_nonces_redis").await else {
        eprintln!("SKIPPED {NAME}: GATEWAY_TEST_POSTGRES_URL is not set");
        return;
    };
    let prefix = format!("test:signed_nonces:{}:{}:", std::process::id(), gateway_domain::events::new_id());
    let flags = [
        "--open-enrollment",
        "true",
        "--trust-default",
        "0.9",
        "--redis",
        redis_url.as_str(),
        "--redis-prefix",
        prefix.as_str(),
    ];
    let (a, b) = (serve_in_process(&store, &flags).await, serve_in_process(&store, &flags).await);
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token = login(&a.api, 1, "once", &scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": "Once", "coop_type": "worker" })), Some(&token))
            .await;
    assert_eq!(status, 201, "{body}");
    let member = json!({ "did": signing_key(2).1 });
    let (status, body) = json_request(&a.api, "POST", "/v1/coops/once/members", Some(member), Some(&token)).await;
    assert_eq!(status, 201, "{body}");
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 });
    let payment = signed(1, &token, "/v1/ledger/once/payment", &pay, "pay-redis-0123456789abcd");
    let first = send(&b.api, &payment).await;
    assert_eq!(first.0, 201, "{}", first.1);
    assert_replayed(&send(&a.api, &payment).await, "replica A");
    assert_eq!(payments(&a.api, &token).await, 1);
    drop((a, b));
    let removed = redis_command(&redis_url, &["DEL", &format!("{prefix}nonce-epoch")]).await;
    assert_eq!(removed, ":1", "the replicas set the epoch marker at start");
}

/// One command to the Redis at `url` (`redis://host:port[/db]`, no password) in RESP; answers
/// the first line of the reply.
async fn redis_command(url: &str, args: &[&str]) -> String {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let address = url.trim_start_matches("redis://").split('/').next().unwrap();
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("Redis answers");
    let mut command = format!("*{}\r\n", args.len());
    for arg in args {
        command.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(command.as_bytes()).await.unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).await.unwrap();
    line.trim_end().to_owned()
}
