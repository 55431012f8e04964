//! A test gateway over an in-memory store, a manual clock and real Ed25519 keys.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use ed25519_dalek::{Signer, SigningKey};
use gateway_auth::TokenConfig;
use gateway_core::{Did, Ed25519PublicKey, ManualClock};
use gateway_http::state::AssembleOptions;
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
    pub limiter_clock: gateway_limits::ManualClock,
    /// Which store the gateway runs on.
    pub backend: Backend,
    /// The store itself, for counts no route gives (events).
    pub store: Arc<Store>,
    /// Where its data lives (the tamper tests reach it from outside).
    pub spec: StoreSpec,
    options: AssembleOptions,
    _dir: Option<tempfile::TempDir>,
}

/// The stores a rule that touches storage is tested on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    SqliteFile,
    Postgres,
}

/// A fresh PostgreSQL schema's URL, or `None` (said loudly) when the variable is unset.
pub async fn postgres_url() -> Option<String> {
    gateway_store::testing::fresh_postgres_schema("h").await
}

pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
    /// The body as sent (for answers that are not JSON).
    pub bytes: axum::body::Bytes,
}

impl Response {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("<no code>")
    }

    /// Asserts the interface's error shape and returns the code.
    pub fn assert_error(&self, status: u16, code: &str) {
        assert_eq!(self.status.as_u16(), status, "body: {}", self.body);
        assert_eq!(self.code(), code, "body: {}", self.body);
        assert!(self.body["error"].as_str().is_some_and(|m| !m.is_empty()), "message: {}", self.body);
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
        Self::build(open_enrollment, cors, 0.9, vec![]).await
    }

    /// A gateway with a given default trust score and trust anchors.
    pub async fn build(open_enrollment: bool, cors: CorsMode, trust_default: f64, anchors: Vec<Did>) -> Self {
        let keys = gateway_domain::governance::MemoryReceiptKeys::new([77; 32]);
        Self::build_with_keys(open_enrollment, cors, trust_default, anchors, Arc::new(keys)).await
    }

    pub async fn build_with_keys(
        open_enrollment: bool,
        cors: CorsMode,
        trust_default: f64,
        anchors: Vec<Did>,
        receipt_keys: Arc<dyn gateway_domain::governance::ReceiptKeys>,
    ) -> Self {
        Self::assemble(Backend::Memory, open_enrollment, cors, trust_default, anchors, receipt_keys, Duration::ZERO)
            .await
            .unwrap()
    }

    /// The default test gateway (members-only enrollment, trust 0.9) on each store: memory,
    /// a SQLite file and PostgreSQL (when `GATEWAY_TEST_POSTGRES_URL` is set). Membership answers
    /// are cached for an hour, so a test sees a change only if the change invalidates the cache.
    pub async fn every_store() -> Vec<TestApp> {
        Self::every_store_with(false, 0.9, vec![]).await
    }

    /// [`TestApp::every_store`] with the enrollment mode and trust settings given.
    pub async fn every_store_with(open_enrollment: bool, trust_default: f64, anchors: Vec<Did>) -> Vec<TestApp> {
        let mut apps = Vec::new();
        for backend in [Backend::Memory, Backend::SqliteFile, Backend::Postgres] {
            let keys = Arc::new(gateway_domain::governance::MemoryReceiptKeys::new([77; 32]));
            if let Some(app) = Self::assemble(
                backend,
                open_enrollment,
                CorsMode::Development,
                trust_default,
                anchors.clone(),
                keys,
                Duration::from_secs(3600),
            )
            .await
            {
                apps.push(app);
            }
        }
        apps
    }

    async fn assemble(
        backend: Backend,
        open_enrollment: bool,
        cors: CorsMode,
        trust_default: f64,
        anchors: Vec<Did>,
        receipt_keys: Arc<dyn gateway_domain::governance::ReceiptKeys>,
        membership_ttl: Duration,
    ) -> Option<Self> {
        let clock = ManualClock::at_secs(START);
        let limiter_clock = gateway_limits::ManualClock::new();
        let mut dir = None;
        let spec = match backend {
            Backend::Memory => StoreSpec::Memory,
            Backend::SqliteFile => {
                let d = tempfile::tempdir().unwrap();
                let spec = StoreSpec::SqliteFile(d.path().join("gw.db").display().to_string());
                dir = Some(d);
                spec
            }
            Backend::Postgres => StoreSpec::Postgres(postgres_url().await?),
        };
        let store = Arc::new(Store::open(&spec).await.unwrap());
        let opened = store.clone();
        let options = AssembleOptions {
            token: TokenConfig::with_secret(SECRET),
            challenge_ttl_secs: 300,
            open_enrollment,
            trust_anchors: anchors,
            trust_default,
            trusted_proxies: vec![],
            http: HttpConfig { cors, tls: false, version: "test", ..HttpConfig::default() },
            clock: Arc::new(clock.clone()),
            limiter_clock: Arc::new(limiter_clock.clone()),
            membership_ttl,
            receipt_keys,
            log: gateway_domain::log::LogConfig::default(),
            cluster: None,
            nonces: None,
        };
        let state = gateway_http::state::assemble(store, options.clone()).await.unwrap();
        Some(Self {
            router: gateway_http::router(state.clone()),
            state,
            clock,
            limiter_clock,
            backend,
            store: opened,
            spec,
            options,
            _dir: dir,
        })
    }

    /// The default in-memory test gateway (open enrollment, trust 0.9), with `change` applied to
    /// its options first (trusted proxies, quarantine policy, …).
    pub async fn customised(change: impl FnOnce(&mut AssembleOptions)) -> Self {
        let app = Self::new().await;
        let mut options = app.options.clone();
        change(&mut options);
        let store = Arc::new(Store::open(&StoreSpec::Memory).await.unwrap());
        let state = gateway_http::state::assemble(store.clone(), options.clone()).await.unwrap();
        Self { router: gateway_http::router(state.clone()), state, store, spec: StoreSpec::Memory, options, ..app }
    }

    /// The gateway restarted over the same durable store (a SQLite file or PostgreSQL): a new
    /// process's memory (limiters, caches) over the same data, at the same wall-clock time.
    pub async fn restart(self) -> Self {
        assert_ne!(self.backend, Backend::Memory, "an in-memory store does not survive a restart");
        drop((self.router, self.state, self.store));
        let store = Arc::new(Store::open(&self.spec).await.unwrap());
        let limiter_clock = gateway_limits::ManualClock::new();
        let options = AssembleOptions { limiter_clock: Arc::new(limiter_clock.clone()), ..self.options };
        let state = gateway_http::state::assemble(store.clone(), options.clone()).await.unwrap();
        Self {
            router: gateway_http::router(state.clone()),
            state,
            clock: self.clock,
            limiter_clock,
            backend: self.backend,
            store,
            spec: self.spec,
            options,
            _dir: self._dir,
        }
    }

    pub async fn send(&self, request: Request<Body>) -> Response {
        send(&self.router, request).await
    }

    pub async fn call(&self, method: Method, uri: &str, body: Option<Value>, token: Option<&str>) -> Response {
        self.send(build(method, uri, body, token)).await
    }

    pub async fn post(&self, uri: &str, body: Value) -> Response {
        self.call(Method::POST, uri, Some(body), None).await
    }

    pub async fn challenge(&self, did: &Did) -> Value {
        let response = self.post("/v1/auth/challenge", json!({ "did": did.to_string() })).await;
        assert_eq!(response.status, StatusCode::OK, "{}", response.body);
        response.body
    }

    /// Full login; returns the token response body.
    pub async fn login(&self, signing: &SigningKey, did: &Did, coop: &str, scopes: &[&str]) -> Value {
        // A second per login on the limiter's clock, so the per-IP login bucket (burst 20,
        // 2 per second) never refuses a test's setup; tests of that limit call the routes
        // themselves.
        self.limiter_clock.advance(Duration::from_secs(1));
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
        self.login(&signing, &did, coop, scopes).await["token"].as_str().unwrap().to_owned()
    }
}

impl TestApp {
    pub async fn get(&self, uri: &str, token: &str) -> Response {
        self.call(Method::GET, uri, None, Some(token)).await
    }

    pub async fn post_as(&self, uri: &str, body: Value, token: &str) -> Response {
        self.call(Method::POST, uri, Some(body), Some(token)).await
    }

    /// Creates `coop` with `admin_seed` as its admin and the other seeds as members; returns
    /// (admin token, member tokens) with every scope a role allows.
    ///
    /// The admin logs in twice: for a coop that does not exist yet the scope policy grants only
    /// `coop:read`/`coop:write` (unless enrollment is open), then, once admin, every scope.
    pub async fn coop_with_members(&self, coop: &str, admin_seed: u8, member_seeds: &[u8]) -> (String, Vec<String>) {
        let founder = self.token(admin_seed, coop, &["coop:read", "coop:write"]).await;
        let created = self
            .post_as("/v1/coops", json!({ "name": coop, "coop_type": "worker", "description": "test" }), &founder)
            .await;
        assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
        let admin = self.token(admin_seed, coop, &ALL_SCOPES).await;
        let mut members = Vec::new();
        for seed in member_seeds {
            let (_, did) = key(*seed);
            let added =
                self.post_as(&format!("/v1/coops/{coop}/members"), json!({ "did": did.to_string() }), &admin).await;
            assert_eq!(added.status, StatusCode::CREATED, "{}", added.body);
            members.push(self.token(*seed, coop, &MEMBER_SCOPES).await);
        }
        (admin, members)
    }
}

pub const ALL_SCOPES: [&str; 12] = [
    "ledger:read",
    "ledger:write",
    "coop:read",
    "coop:write",
    "gov:read",
    "gov:write",
    "trust:read",
    "trust:write",
    "compute:submit",
    "compute:execute",
    "oracle:read",
    "oracle:write",
];

pub const MEMBER_SCOPES: [&str; 10] = [
    "ledger:read",
    "ledger:write",
    "coop:read",
    "gov:read",
    "gov:write",
    "trust:read",
    "trust:write",
    "compute:submit",
    "compute:execute",
    "oracle:read",
];

pub fn did_of(seed: u8) -> String {
    key(seed).1.to_string()
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
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap_or(Value::Null) };
    Response { status, headers, body, bytes }
}

/// A gateway behind the trusted proxy 127.0.0.1 that quarantines an address after 3 violations
/// within a minute, for 10 minutes.
pub async fn edge_app() -> TestApp {
    TestApp::customised(|options| {
        options.trusted_proxies = vec![gateway_http::limits::parse_proxy("127.0.0.1").unwrap()];
        options.http.quarantine = gateway_limits::QuarantinePolicy {
            threshold: std::num::NonZeroU32::new(3).unwrap(),
            window: Duration::from_secs(60),
            quarantine: Duration::from_secs(600),
        };
    })
    .await
}

/// `request` as a trusted proxy forwards it for `client`.
pub fn from_client(mut request: Request<Body>, client: &str) -> Request<Body> {
    request.headers_mut().insert("x-forwarded-for", client.parse().unwrap());
    request
}
