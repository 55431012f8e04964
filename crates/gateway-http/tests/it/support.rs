//! A test gateway over an in-memory store, a manual clock and real Ed25519 keys.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use ed25519_dalek::{Signer, SigningKey};
use gateway_auth::challenge::MemoryChallengeStore;
use gateway_auth::{Authenticator, ScopePolicy, TokenConfig, TokenService};
use gateway_core::{Clock, Did, Ed25519PublicKey, KeyDidResolver, ManualClock};
use gateway_http::{AppState, CorsMode, HttpConfig};
use gateway_store::{Store, StoreSpec};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

pub const SECRET: &str = "test-secret-test-secret-test-secret!";
pub const START: u64 = 1_800_000_000;

pub struct TestApp {
    pub router: Router,
    pub state: AppState,
    pub clock: ManualClock,
}

pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Response {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("<no code>")
    }

    /// Asserts the contract's error shape and returns the code.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        assert_eq!(self.code(), code, "body: {}", self.body);
        assert!(
            self.body["error"].as_str().is_some_and(|m| !m.is_empty()),
            "message: {}",
            self.body
        );
        assert!(self.body["details"].is_object(), "details: {}", self.body);
    }
}

pub fn key(seed: u8) -> (SigningKey, Did) {
    let signing = SigningKey::from_bytes(&[seed; 32]);
    let did = Did::key_from_public_key(&Ed25519PublicKey(signing.verifying_key().to_bytes()));
    (signing, did)
}

impl TestApp {
    pub async fn new() -> Self {
        Self::with(true, CorsMode::Development).await
    }

    pub async fn with(open_enrollment: bool, cors: CorsMode) -> Self {
        let clock = ManualClock::at_secs(START);
        let shared_clock: Arc<dyn Clock> = Arc::new(clock.clone());
        let store = Arc::new(Store::open(&StoreSpec::Memory).await.unwrap());
        let resolver = Arc::new(KeyDidResolver);
        let tokens = Arc::new(
            TokenService::new(TokenConfig::with_secret(SECRET), shared_clock.clone()).unwrap(),
        );
        let auth = Authenticator::new(
            resolver.clone(),
            Arc::new(MemoryChallengeStore::default()),
            tokens,
            ScopePolicy::new(store.clone(), open_enrollment),
            shared_clock.clone(),
            300,
        );
        let state = AppState {
            auth,
            resolver,
            clock: shared_clock,
            store_health: store,
            config: Arc::new(HttpConfig {
                cors,
                tls: false,
                version: "test",
            }),
            started_at: Instant::now(),
        };
        Self {
            router: gateway_http::router(state.clone()),
            state,
            clock,
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Response {
        send(&self.router, request).await
    }

    pub async fn call(
        &self,
        method: Method,
        uri: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> Response {
        self.send(build(method, uri, body, token)).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> Response {
        self.call(Method::POST, uri, Some(body), None).await
    }

    pub async fn challenge(&self, did: &Did) -> Value {
        let response = self
            .post("/v1/auth/challenge", json!({ "did": did.to_string() }))
            .await;
        assert_eq!(response.status, StatusCode::OK, "{}", response.body);
        response.body
    }

    /// Full login; returns the token response body.
    pub async fn login(
        &self,
        signing: &SigningKey,
        did: &Did,
        coop: &str,
        scopes: &[&str],
    ) -> Value {
        let challenge = self.challenge(did).await;
        let nonce = challenge["nonce"].as_str().unwrap();
        let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
        let response = self
            .post(
                "/v1/auth/verify",
                json!({ "did": did.to_string(), "signature": signature, "coop_id": coop, "scopes": scopes }),
            )
            .await;
        assert_eq!(response.status, StatusCode::OK, "{}", response.body);
        response.body
    }

    pub async fn token(&self, seed: u8, coop: &str, scopes: &[&str]) -> String {
        let (signing, did) = key(seed);
        self.login(&signing, &did, coop, scopes).await["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

pub fn build(method: Method, uri: &str, body: Option<Value>, token: Option<&str>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        builder = builder.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    match body {
        Some(body) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

pub async fn send(router: &Router, request: Request<Body>) -> Response {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    Response {
        status,
        headers,
        body,
    }
}
