//! The retry pipeline against scripted fake servers, on paused time: the delays the client
//! sleeps are checked on the virtual clock, so the tests take no wall-clock time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use gateway_client::{Client, Error, RetryPolicy};
use serde_json::json;

/// Answers each request with the next scripted status (the last one repeats).
#[derive(Clone)]
struct Script {
    statuses: Arc<Vec<u16>>,
    hits: Arc<AtomicUsize>,
    keys: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

impl Script {
    fn new(statuses: &[u16]) -> Self {
        Self { statuses: Arc::new(statuses.to_vec()), hits: Arc::default(), keys: Arc::default() }
    }

    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    fn answer(&self, headers: &HeaderMap) -> axum::response::Response {
        let n = self.hits.fetch_add(1, Ordering::SeqCst);
        self.keys.lock().unwrap().push(headers.get("idempotency-key").map(|v| v.to_str().unwrap().to_owned()));
        let status = self.statuses[n.min(self.statuses.len() - 1)];
        match status {
            200 | 201 => (StatusCode::from_u16(status).unwrap(), axum::Json(json!({
                "status": "ok", "version": "fake", "store": "memory", "uptime_secs": 1,
                "id": "t1", "kind": "payment", "from": "a", "to": "b", "amount": 1, "currency": "hours", "timestamp": 1,
            })))
                .into_response(),
            429 => (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "7")],
                axum::Json(json!({"error": "slow down", "code": "RATE_LIMIT_EXCEEDED", "details": {"layer": "did", "limit": 10, "retry_after_secs": 7}})),
            )
                .into_response(),
            other => (
                StatusCode::from_u16(other).unwrap(),
                axum::Json(json!({"error": "unavailable", "code": "SERVICE_UNAVAILABLE", "details": {}})),
            )
                .into_response(),
        }
    }
}

async fn serve(script: Script) -> String {
    let health = script.clone();
    let pay = script.clone();
    let app = Router::new()
        .route("/v1/health", get(move |headers: HeaderMap| async move { health.answer(&headers) }))
        .route("/v1/ledger/{coop}/payment", post(move |headers: HeaderMap| async move { pay.answer(&headers) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn client(url: &str, policy: RetryPolicy) -> Client {
    Client::builder(url).retry(RetryPolicy { jitter: false, ..policy }).build().unwrap()
}

async fn payment(client: &Client, key: Option<&str>) -> Result<gateway_client::Transaction, Error> {
    let from = gateway_client::Identity::from_seed([1; 32]).did().clone();
    let to = gateway_client::Identity::from_seed([2; 32]).did().clone();
    let request = gateway_client::PaymentRequest {
        from,
        to,
        amount: gateway_core::Amount::from_units(1),
        currency: None,
        memo: None,
    };
    client
        .set_session(gateway_client::Session {
            token: "t".into(),
            expires_at: u64::MAX,
            scopes: vec![],
            coop_id: Some("c".into()),
            did: String::new(),
        })
        .await;
    client.pay(&gateway_core::CoopId::parse("c").unwrap(), &request, key).await
}

#[tokio::test(start_paused = true)]
async fn reads_are_retried_with_exponential_backoff_until_they_succeed() {
    let script = Script::new(&[503, 502, 200]);
    let url = serve(script.clone()).await;
    let started = tokio::time::Instant::now();
    let health = client(&url, RetryPolicy::default()).health().await.unwrap();
    assert_eq!(health.status, "ok");
    assert_eq!(script.hits(), 3);
    let slept = started.elapsed();
    assert!(
        slept >= Duration::from_millis(600) && slept < Duration::from_millis(700),
        "200 ms + 400 ms, got {slept:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_are_bounded() {
    let script = Script::new(&[503]);
    let url = serve(script.clone()).await;
    let policy = RetryPolicy { server_retries: 2, ..RetryPolicy::default() };
    let err = client(&url, policy).health().await.unwrap_err();
    assert!(matches!(err, Error::Server { status: 503, retryable: true, .. }), "{err:?}");
    assert_eq!(script.hits(), 3, "one try and two retries");
}

#[tokio::test(start_paused = true)]
async fn payments_are_retried_only_with_an_idempotency_key() {
    let script = Script::new(&[503, 201]);
    let url = serve(script.clone()).await;
    let client = client(&url, RetryPolicy::default());
    assert!(matches!(payment(&client, None).await, Err(Error::Server { status: 503, .. })));
    assert_eq!(script.hits(), 1, "a payment without a key may have been made: never resent");

    let script = Script::new(&[503, 201]);
    let url = serve(script.clone()).await;
    let client = self::client(&url, RetryPolicy::default());
    payment(&client, Some("k-1")).await.unwrap();
    assert_eq!(script.hits(), 2);
    let keys = script.keys.lock().unwrap().clone();
    assert_eq!(keys, [Some("k-1".to_owned()), Some("k-1".to_owned())], "the retry carries the same key");
}

#[tokio::test(start_paused = true)]
async fn rate_limits_wait_for_retry_after_when_enabled() {
    let script = Script::new(&[429, 200]);
    let url = serve(script.clone()).await;
    let err = client(&url, RetryPolicy::default()).health().await.unwrap_err();
    assert!(
        matches!(err, Error::RateLimited { retry_after_secs: 7, ref layer, .. } if layer.as_deref() == Some("did"))
    );

    let script = Script::new(&[429, 200]);
    let url = serve(script.clone()).await;
    let started = tokio::time::Instant::now();
    // Even a non-repeatable request: a 429 had no effect.
    payment(&client(&url, RetryPolicy::default().with_rate_limit_retries(1)), None).await.unwrap();
    assert_eq!(script.hits(), 2);
    let slept = started.elapsed();
    assert!(slept >= Duration::from_secs(7) && slept < Duration::from_secs(8), "{slept:?}");
}
