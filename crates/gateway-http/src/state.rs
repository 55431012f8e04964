//! The shared application state handed to every handler, and its configuration.
//!
//! One cheap-to-clone [`AppState`] is built by the binary; handlers ask for the parts they need
//! through `FromRef`. Nothing here is global.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::FromRef;
use axum::http::HeaderValue;
use gateway_auth::Authenticator;
use gateway_core::{Clock, DidResolver};
use gateway_domain::StoreHealth;
use gateway_domain::coops::Coops;
use gateway_domain::ledger::Ledger;
use gateway_domain::notifications::Notifications;
use gateway_domain::trust::Trust;

use crate::limits::RateLimits;
use crate::membership::MembershipCache;

/// Cross-origin policy.
#[derive(Debug, Clone)]
pub enum CorsMode {
    /// Any origin, method and header (local development).
    Development,
    /// Only the configured origin (none: no cross-origin access), methods GET, POST, PUT,
    /// DELETE, headers Authorization and Content-Type, max age 3600 s.
    Production {
        /// The one allowed origin.
        origin: Option<HeaderValue>,
    },
}

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Cross-origin policy.
    pub cors: CorsMode,
    /// Whether the API is served over TLS (adds `Strict-Transport-Security`).
    pub tls: bool,
    /// Version reported by the health route.
    pub version: &'static str,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self { cors: CorsMode::Production { origin: None }, tls: false, version: env!("CARGO_PKG_VERSION") }
    }
}

/// Everything the handlers share, behind one `Arc`: axum clones the state for every extractor
/// and middleware of every request, and one reference count is cheaper than the services' many.
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    /// Shares `services` with every handler.
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;

    fn deref(&self) -> &Services {
        &self.0
    }
}

impl FromRef<AppState> for Authenticator {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

impl FromRef<AppState> for Arc<dyn DidResolver> {
    fn from_ref(state: &AppState) -> Self {
        state.resolver.clone()
    }
}

impl FromRef<AppState> for Arc<RateLimits> {
    fn from_ref(state: &AppState) -> Self {
        state.limits.clone()
    }
}

/// The services and settings of an [`AppState`].
pub struct Services {
    /// Login flow and token verification.
    pub auth: Authenticator,
    /// DID → key resolution, for the identity routes.
    pub resolver: Arc<dyn DidResolver>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// Store reachability for health and readiness.
    pub store_health: Arc<dyn StoreHealth>,
    /// Cooperatives and members.
    pub coops: Coops,
    /// The mutual-credit ledger.
    pub ledger: Ledger,
    /// Trust edges and scores.
    pub trust: Trust,
    /// Notifications.
    pub notifications: Notifications,
    /// Governance.
    pub governance: gateway_domain::governance::Governance,
    /// Compute tasks.
    pub compute: gateway_domain::tasks::Compute,
    /// The rate-limiting layers.
    pub limits: Arc<RateLimits>,
    /// Per-request membership checks.
    pub membership: Arc<MembershipCache>,
    /// HTTP settings.
    pub config: Arc<HttpConfig>,
    /// Start time, for `uptime_secs`.
    pub started_at: Instant,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState").field("config", &self.config).finish_non_exhaustive()
    }
}

impl fmt::Debug for Services {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Services").field("config", &self.config).finish_non_exhaustive()
    }
}

/// What [`assemble`] needs besides the store.
#[derive(Debug, Clone)]
pub struct AssembleOptions {
    /// Token settings.
    pub token: gateway_auth::TokenConfig,
    /// Challenge lifetime, seconds.
    pub challenge_ttl_secs: u64,
    /// Grant any scopes (development only).
    pub open_enrollment: bool,
    /// Trust anchors.
    pub trust_anchors: Vec<gateway_core::Did>,
    /// Score of DIDs without a path from an anchor.
    pub trust_default: f64,
    /// Proxies whose `X-Forwarded-For` is believed.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// HTTP settings.
    pub http: HttpConfig,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// Monotonic clock of the rate limiters.
    pub limiter_clock: Arc<dyn gateway_limits::Clock>,
    /// Lifetime of cached membership answers.
    pub membership_ttl: std::time::Duration,
    /// The governance signing key, if unlocked.
    pub receipt_keys: Arc<dyn gateway_domain::governance::ReceiptKeys>,
}

/// The limiter's view of trust: scores from the trust graph.
#[derive(Debug)]
struct GraphScores(Arc<gateway_domain::trust::TrustGraph>);

impl gateway_limits::TrustScores for GraphScores {
    fn score(&self, did: &str) -> f64 {
        gateway_core::Did::parse(did).map(|d| self.0.score(&d)).unwrap_or(0.0)
    }
}

/// Everything a store must offer to back the gateway.
pub trait GatewayStore:
    gateway_domain::ports::Transactor
    + gateway_domain::ports::LedgerReads
    + gateway_domain::ports::CoopReads
    + gateway_domain::ports::NotificationReads
    + gateway_domain::ports::TrustReads
    + gateway_domain::ports::GovReads
    + gateway_domain::ports::ComputeReads
    + StoreHealth
    + gateway_core::MembershipLookup
    + 'static
{
}

impl<T> GatewayStore for T where
    T: gateway_domain::ports::Transactor
        + gateway_domain::ports::LedgerReads
        + gateway_domain::ports::CoopReads
        + gateway_domain::ports::NotificationReads
        + gateway_domain::ports::TrustReads
        + gateway_domain::ports::GovReads
        + gateway_domain::ports::ComputeReads
        + StoreHealth
        + gateway_core::MembershipLookup
        + 'static
{
}

/// Builds the application state over a store: domain services, login, limiters. Loads the
/// trust graph from the store.
pub async fn assemble<S: GatewayStore>(
    store: Arc<S>,
    options: AssembleOptions,
) -> Result<AppState, gateway_core::Error> {
    let clock = options.clock.clone();
    let resolver: Arc<dyn DidResolver> = Arc::new(gateway_core::KeyDidResolver);
    let tokens =
        Arc::new(gateway_auth::TokenService::new(options.token, clock.clone()).map_err(gateway_core::Error::from)?);
    let auth = Authenticator::new(
        resolver.clone(),
        Arc::new(gateway_auth::challenge::MemoryChallengeStore::default()),
        tokens,
        gateway_auth::ScopePolicy::new(store.clone(), options.open_enrollment),
        clock.clone(),
        options.challenge_ttl_secs,
    );
    let edges = gateway_domain::ports::TrustReads::all_edges(store.as_ref()).await?;
    let graph = Arc::new(gateway_domain::trust::TrustGraph::new(options.trust_anchors, options.trust_default, edges));
    let trust = Trust::new(store.clone(), store.clone(), graph.clone(), clock.clone());
    let ledger = Ledger::new(store.clone(), store.clone(), graph.clone(), clock.clone());
    let membership = Arc::new(MembershipCache::new(store.clone(), options.membership_ttl, !options.open_enrollment));
    let coops = Coops::new(store.clone(), store.clone(), store.clone(), clock.clone())
        .with_membership_observer(membership.clone());
    let notifications = Notifications::new(store.clone(), store.clone(), clock.clone());
    let governance = gateway_domain::governance::Governance::new(
        store.clone(),
        store.clone(),
        graph.clone(),
        options.receipt_keys.clone(),
        clock.clone(),
    )
    .with_membership_observer(membership.clone());
    let compute = gateway_domain::tasks::Compute::new(store.clone(), store.clone(), graph.clone(), clock.clone());
    let limits = Arc::new(RateLimits::new(
        options.limiter_clock,
        clock.clone(),
        Arc::new(GraphScores(graph)),
        options.trusted_proxies,
    ));
    // Velocity counts survive a restart: every payer's sliding hour is rebuilt from the ledger.
    let now = clock.now_unix_secs();
    let recent = ledger.payments_since(now.saturating_sub(gateway_limits::VELOCITY_WINDOW.as_secs())).await?;
    limits.restore_velocity(&recent, now);
    Ok(AppState::new(Services {
        auth,
        resolver,
        clock,
        store_health: store,
        coops,
        ledger,
        trust,
        notifications,
        governance,
        compute,
        limits,
        membership,
        config: Arc::new(options.http),
        started_at: Instant::now(),
    }))
}
