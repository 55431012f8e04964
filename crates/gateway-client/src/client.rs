//! The [`Client`]: one HTTP connection pool, the login state, and the request pipeline every
//! route method goes through (URL building, bearer token, automatic re-login, error parsing,
//! retries).
//!
//! The typed route methods live in the area modules (`ledger`, `governance`, …) as further
//! `impl Client` blocks; this module knows no route but the two login ones. It does not persist
//! tokens (callers such as `gatewayctl` read [`Client::session`] and store it themselves).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use gateway_core::{Clock, CoopId, Scope, SystemClock};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Mutex;

use crate::auth::{Session, VerifyRequest};
use crate::error::{Error, Result};
use crate::identity::Identity;
use crate::retry::{Attempts, RetryPolicy};

/// How long before `expires_at` a token is replaced by a fresh login, by default.
pub const DEFAULT_REFRESH_MARGIN: Duration = Duration::from_secs(60);

/// What the client logs in with when it needs a (new) token.
#[derive(Debug, Clone)]
pub struct Credentials {
    /// The key and the DID it logs in as.
    pub identity: Identity,
    /// The cooperative context; `None` asks for an identity-only token.
    pub coop_id: Option<CoopId>,
    /// The scopes to request (ignored without a coop).
    pub scopes: Vec<Scope>,
}

/// Builds a [`Client`] with non-default settings.
#[derive(Debug)]
pub struct ClientBuilder {
    base_url: String,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    refresh_margin: Duration,
    timeout: Duration,
    user_agent: String,
    sign_requests: bool,
}

impl ClientBuilder {
    /// Whether critical operations (payments, votes, member and settings changes, …; the list of
    /// INTERFACE.md §11) are sent signed with the logged-in key (default: yes). Without a key (a client
    /// given only a session) nothing is signed.
    pub fn sign_requests(mut self, sign: bool) -> Self {
        self.sign_requests = sign;
        self
    }

    /// Retry rules (default: [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The wall clock token expiry is compared with; tests pass a manual clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Re-login when fewer than this many seconds of the token remain (default 60 s).
    pub fn refresh_margin(mut self, margin: Duration) -> Self {
        self.refresh_margin = margin;
        self
    }

    /// Total time allowed for one HTTP exchange (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The `User-Agent` header (default `gateway-client/<version>`).
    pub fn user_agent(mut self, user_agent: impl Into<String>) -> Self {
        self.user_agent = user_agent.into();
        self
    }

    /// The client. Fails when the base URL is not an absolute `http`/`https` URL.
    pub fn build(self) -> Result<Client> {
        let mut base = Url::parse(&self.base_url)
            .map_err(|e| Error::Usage(format!("invalid gateway URL '{}': {e}", self.base_url)))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(Error::Usage(format!("the gateway URL must be http:// or https://, not '{}'", self.base_url)));
        }
        // A base with a path prefix (`https://host/gateway`) keeps it; segments are appended.
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let tls = crate::tls::client_config()?;
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(self.timeout)
            .user_agent(self.user_agent)
            .build()
            .map_err(|e| Error::Usage(format!("cannot build the HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                base,
                http,
                tls,
                retry: self.retry,
                clock: self.clock,
                refresh_margin_secs: self.refresh_margin.as_secs(),
                sign_requests: self.sign_requests,
                auth: Mutex::new(AuthState::default()),
                last_event_seq: AtomicU64::new(0),
            }),
        })
    }
}

/// A typed client of one gateway. Cheap to clone; clones share the connection pool and the
/// login state, so a token refreshed by one is used by all.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) base: Url,
    http: reqwest::Client,
    pub(crate) tls: Arc<rustls::ClientConfig>,
    retry: RetryPolicy,
    clock: Arc<dyn Clock>,
    refresh_margin_secs: u64,
    sign_requests: bool,
    /// An async mutex on purpose: it is held across the login exchange so that concurrent
    /// requests needing a fresh token wait for one login instead of each starting their own.
    auth: Mutex<AuthState>,
    /// The `ICN-Event-Seq` of the last successful answer that carried one (0: none yet).
    last_event_seq: AtomicU64,
}

#[derive(Default)]
struct AuthState {
    credentials: Option<Credentials>,
    session: Option<Session>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("base", &self.inner.base.as_str()).finish_non_exhaustive()
    }
}

/// A successful answer: status and body bytes.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::UnexpectedResponse { status: self.status.as_u16(), message: e.to_string() })
    }
}

/// One request as the pipeline sees it; the body is serialised once and resent as is.
#[derive(Debug)]
pub(crate) struct Call {
    method: Method,
    segments: Vec<String>,
    query: Vec<(String, String)>,
    body: Option<Vec<u8>>,
    authenticated: bool,
    idempotency_key: Option<String>,
}

impl Call {
    pub(crate) fn new(method: Method, segments: &[&str]) -> Self {
        Self {
            method,
            segments: segments.iter().map(|s| (*s).to_owned()).collect(),
            query: Vec::new(),
            body: None,
            authenticated: true,
            idempotency_key: None,
        }
    }

    pub(crate) fn public(mut self) -> Self {
        self.authenticated = false;
        self
    }

    pub(crate) fn json<B: Serialize + ?Sized>(mut self, body: &B) -> Result<Self> {
        self.body =
            Some(serde_json::to_vec(body).map_err(|e| Error::Usage(format!("cannot serialise the request: {e}")))?);
        Ok(self)
    }

    pub(crate) fn query(mut self, name: &str, value: Option<impl ToString>) -> Self {
        if let Some(value) = value {
            self.query.push((name.to_owned(), value.to_string()));
        }
        self
    }

    pub(crate) fn idempotency_key(mut self, key: Option<&str>) -> Self {
        self.idempotency_key = key.map(str::to_owned);
        self
    }

    /// Safe to send twice: reads, `PUT`/`DELETE` (idempotent by definition) and `POST`s whose
    /// repeat the gateway recognises by their `Idempotency-Key`.
    fn repeatable(&self) -> bool {
        matches!(self.method, Method::GET | Method::HEAD | Method::PUT | Method::DELETE)
            || self.idempotency_key.is_some()
    }
}

impl Client {
    /// A client of the gateway at `base_url` (e.g. `http://127.0.0.1:8080`) with default
    /// settings.
    pub fn new(base_url: &str) -> Result<Client> {
        Self::builder(base_url).build()
    }

    /// A builder for non-default settings.
    pub fn builder(base_url: &str) -> ClientBuilder {
        ClientBuilder {
            base_url: base_url.to_owned(),
            retry: RetryPolicy::default(),
            clock: Arc::new(SystemClock),
            refresh_margin: DEFAULT_REFRESH_MARGIN,
            timeout: Duration::from_secs(30),
            user_agent: concat!("gateway-client/", env!("CARGO_PKG_VERSION")).to_owned(),
            sign_requests: true,
        }
    }

    /// The gateway's base URL.
    pub fn base_url(&self) -> &Url {
        &self.inner.base
    }

    /// The sequence number of the last event an operation of this client (or of a clone of it)
    /// appended, from the `ICN-Event-Seq` header of the last successful answer that carried one
    /// (INTERFACE.md §12): what [`Client::log_proof`] proves. `None` before any such answer. With
    /// requests running concurrently on clones, it is whichever answer arrived last.
    pub fn last_event_seq(&self) -> Option<u64> {
        match self.inner.last_event_seq.load(Ordering::Relaxed) {
            0 => None,
            seq => Some(seq),
        }
    }

    /// Logs in with `identity` for `coop_id` with `scopes`, and keeps the credentials so that
    /// the token is renewed by itself shortly before it expires.
    pub async fn login(&self, identity: Identity, coop_id: CoopId, scopes: &[Scope]) -> Result<Session> {
        self.login_with(Credentials { identity, coop_id: Some(coop_id), scopes: scopes.to_vec() }).await
    }

    /// Logs in for an identity-only token (the interface's `{did, challenge_id, signature}` body): no
    /// cooperative, no scopes; it opens the identity routes only.
    pub async fn login_identity_only(&self, identity: Identity) -> Result<Session> {
        self.login_with(Credentials { identity, coop_id: None, scopes: Vec::new() }).await
    }

    /// Logs in with `credentials` now and keeps them for renewals.
    pub async fn login_with(&self, credentials: Credentials) -> Result<Session> {
        let mut auth = self.inner.auth.lock().await;
        let session = self.perform_login(&credentials).await?;
        auth.credentials = Some(credentials);
        auth.session = Some(session.clone());
        Ok(session)
    }

    /// Keeps `credentials` for future logins without logging in now (a cached session set
    /// with [`Client::set_session`] is then renewed with them when it nears expiry).
    pub async fn set_credentials(&self, credentials: Credentials) {
        self.inner.auth.lock().await.credentials = Some(credentials);
    }

    /// Uses a token obtained elsewhere (e.g. a cache) until it nears expiry.
    pub async fn set_session(&self, session: Session) {
        self.inner.auth.lock().await.session = Some(session);
    }

    /// The current session, e.g. to cache it; `None` before any login.
    pub async fn session(&self) -> Option<Session> {
        self.inner.auth.lock().await.session.clone()
    }

    /// Forgets the token and the credentials.
    pub async fn logout(&self) {
        let mut auth = self.inner.auth.lock().await;
        auth.session = None;
        auth.credentials = None;
    }

    /// A token valid for at least the refresh margin, logging in again first when the current
    /// one is missing or about to expire and credentials are known. Without credentials a
    /// token near (but not past) expiry is still handed out: it is all there is.
    pub async fn token(&self) -> Result<String> {
        let mut auth = self.inner.auth.lock().await;
        let now = self.inner.clock.now_unix_secs();
        if let Some(session) = &auth.session
            && !session.expires_within(now, self.inner.refresh_margin_secs)
        {
            return Ok(session.token.clone());
        }
        if let Some(credentials) = auth.credentials.clone() {
            let session = self.perform_login(&credentials).await?;
            let token = session.token.clone();
            auth.session = Some(session);
            return Ok(token);
        }
        match &auth.session {
            Some(session) if session.expires_at > now => Ok(session.token.clone()),
            Some(_) => Err(Error::Authentication {
                message: "the token has expired and no key is configured to log in again".into(),
                reason: None,
            }),
            None => Err(Error::Usage("not logged in: call login() or set_session() first".into())),
        }
    }

    /// After the gateway refused a token that looked valid (its secret changed, clocks
    /// disagree, the token was revoked): drops it so that the next request logs in again, and
    /// says so. Without credentials nothing changes and `false` is returned: there is no way
    /// to get another token, and the caller reports the refusal.
    pub(crate) async fn invalidate_session(&self, rejected_token: &str) -> bool {
        let mut auth = self.inner.auth.lock().await;
        if auth.credentials.is_none() {
            return false;
        }
        if auth.session.as_ref().is_some_and(|s| s.token == rejected_token) {
            auth.session = None;
        }
        true
    }

    async fn perform_login(&self, credentials: &Credentials) -> Result<Session> {
        let did = credentials.identity.did().clone();
        let challenge = self.challenge(&did).await?;
        let signature = credentials.identity.sign_nonce(&challenge.nonce);
        let request = match &credentials.coop_id {
            Some(coop) => VerifyRequest::Scoped {
                did: did.to_string(),
                signature,
                coop_id: coop.to_string(),
                scopes: credentials.scopes.iter().map(|s| s.as_str().to_owned()).collect(),
                challenge_id: Some(challenge.challenge_id),
            },
            None => {
                VerifyRequest::IdentityOnly { did: did.to_string(), challenge_id: challenge.challenge_id, signature }
            }
        };
        let token = self.verify(&request).await?;
        Ok(Session {
            token: token.token,
            expires_at: token.expires_at,
            scopes: token.scopes,
            coop_id: credentials.coop_id.as_ref().map(ToString::to_string),
            did: did.to_string(),
        })
    }

    pub(crate) fn url(&self, segments: &[String]) -> Url {
        let mut url = self.inner.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty();
            path.extend(segments);
        }
        url
    }

    /// Sends a call through the whole pipeline and returns a successful answer.
    pub(crate) async fn send(&self, call: Call) -> Result<Answer> {
        if !call.authenticated {
            return self.send_public(call).await;
        }
        let mut attempts = Attempts::default();
        let mut relogged = false;
        loop {
            let token = self.token().await?;
            let error = match self.send_once(&call, Some(&token)).await {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            if matches!(error, Error::Authentication { .. }) && !relogged && self.invalidate_session(&token).await {
                relogged = true;
                continue;
            }
            self.wait_before_retry(&call, error, &mut attempts).await?;
        }
    }

    /// [`Client::send`] for routes without a token. Separate because logging in itself goes
    /// through it: the token path must not be reachable from the login path.
    pub(crate) async fn send_public(&self, call: Call) -> Result<Answer> {
        let mut attempts = Attempts::default();
        loop {
            match self.send_once(&call, None).await {
                Ok(answer) => return Ok(answer),
                Err(error) => self.wait_before_retry(&call, error, &mut attempts).await?,
            }
        }
    }

    /// Sleeps before a retry the policy grants, or gives the error back.
    async fn wait_before_retry(&self, call: &Call, error: Error, attempts: &mut Attempts) -> Result<()> {
        let sample: f64 = rand::random();
        match self.inner.retry.next_delay(&error, call.repeatable(), attempts, sample) {
            Some(delay) => {
                tracing::debug!(?delay, %error, "retrying gateway request");
                tokio::time::sleep(delay).await;
                Ok(())
            }
            None => Err(error),
        }
    }

    async fn send_once(&self, call: &Call, token: Option<&str>) -> Result<Answer> {
        let mut url = self.url(&call.segments);
        if !call.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&call.query);
        }
        let signed = match token {
            Some(_) if self.inner.sign_requests && crate::signing::is_critical(&call.method, &call.segments) => {
                self.sign(call, &url).await?
            }
            _ => None,
        };
        let mut request = self.inner.http.request(call.method.clone(), url);
        if let Some(token) = token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(key) = &call.idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        if let Some(signed) = signed {
            // A fresh signature (and nonce) for every attempt: a retry is a new request.
            if let Some(digest) = signed.content_digest {
                request = request.header("Content-Digest", digest);
            }
            request = request.header("Signature-Input", signed.signature_input).header("Signature", signed.signature);
        }
        if let Some(body) = &call.body {
            request = request.header(CONTENT_TYPE, "application/json").body(body.clone());
        }
        let response = request.send().await.map_err(|e| Error::transport(&e))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        if status.is_success()
            && let Some(seq) = event_seq(response.headers())
        {
            self.inner.last_event_seq.store(seq, Ordering::Relaxed);
        }
        let body = response.bytes().await.map_err(|e| Error::transport(&e))?.to_vec();
        if status.is_success() {
            Ok(Answer { status, body })
        } else {
            Err(Error::from_response(status.as_u16(), retry_after, &body))
        }
    }

    /// The signature of `call` to `url` with the logged-in key, or `None` without one.
    async fn sign(&self, call: &Call, url: &Url) -> Result<Option<gateway_httpsig::Signed>> {
        let identity = match &self.inner.auth.lock().await.credentials {
            Some(credentials) => credentials.identity.clone(),
            None => return Ok(None),
        };
        crate::signing::sign(&identity, &call.method, url, call.body.as_deref().unwrap_or_default(), &*self.inner.clock)
            .map(Some)
    }

    pub(crate) async fn call_json<T: DeserializeOwned>(&self, call: Call) -> Result<T> {
        self.send(call).await?.json()
    }

    pub(crate) async fn call_empty(&self, call: Call) -> Result<()> {
        self.send(call).await.map(drop)
    }
}

/// The `ICN-Event-Seq` header: the last event the operation appended.
fn event_seq(headers: &HeaderMap) -> Option<u64> {
    headers.get("icn-event-seq")?.to_str().ok()?.trim().parse().ok().filter(|seq| *seq > 0)
}

fn retry_after(headers: &HeaderMap) -> Option<u64> {
    headers.get(RETRY_AFTER)?.to_str().ok()?.trim().parse().ok()
}
