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
    /// DELETE, the API's request headers (`cors::ALLOW_HEADERS`), max age 3600 s.
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
    /// Whether HTTP metrics are recorded (off: the edge records nothing; for measuring their
    /// cost, or a gateway nobody scrapes).
    pub metrics: bool,
    /// When a misbehaving client address is quarantined.
    pub quarantine: gateway_limits::QuarantinePolicy,
    /// How long a request's body may take to arrive once its head has (INTERFACE.md §1: 30 s).
    pub body_timeout: std::time::Duration,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            cors: CorsMode::Production { origin: None },
            tls: false,
            version: env!("CARGO_PKG_VERSION"),
            metrics: true,
            quarantine: gateway_limits::QuarantinePolicy::default(),
            body_timeout: crate::extract::BODY_TIMEOUT,
        }
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
    /// The coops' logs: checkpoints, tiles, proofs.
    pub log: gateway_domain::log::Log,
    /// The rate-limiting layers.
    pub limits: Arc<RateLimits>,
    /// Request-signature nonces seen (in memory, or shared through Redis or the database).
    pub nonces: Arc<dyn gateway_auth::NonceStore>,
    /// Protocol violations per client address, and the quarantined ones.
    pub misbehavior: Arc<gateway_limits::Misbehavior<Arc<dyn gateway_limits::Clock>>>,
    /// HTTP metric handles by route.
    pub http_metrics: crate::edge::HttpMetrics,
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
    /// The coops' logs: origin prefix and sweep interval.
    pub log: gateway_domain::log::LogConfig,
    /// What replicas share when several serve one network; `None` keeps it all in this process.
    pub cluster: Option<Cluster>,
    /// Where request-signature nonces are remembered when every replica must see them (Redis,
    /// or without Redis the shared PostgreSQL database); `None` keeps them in this process's
    /// memory, which begins at assembly: signatures created before it are refused.
    pub nonces: Option<Arc<dyn gateway_auth::NonceStore>>,
}

/// The state several replicas share (INTERFACE.md §10 "Cluster"): in practice Redis.
#[derive(Clone)]
pub struct Cluster {
    /// Where the three limit layers count.
    pub limits: Arc<dyn gateway_limits::SharedBackend>,
    /// Where login challenges live, so any replica verifies any challenge, once.
    pub challenges: Arc<dyn gateway_auth::ChallengeStore>,
    /// What payments do while the shared limits cannot be reached.
    pub velocity_fallback: crate::limits::VelocityFallback,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("limits", &self.limits)
            .field("challenges", &self.challenges)
            .field("velocity_fallback", &self.velocity_fallback)
            .finish()
    }
}

/// The limiter's view of trust: scores from the trust graph.
#[derive(Debug)]
struct GraphScores(Arc<gateway_domain::trust::TrustGraph>);

impl gateway_limits::TrustScores for GraphScores {
    /// The limiters ask with the text of the caller's (already parsed) DID, on every request.
    fn score(&self, did: &str) -> f64 {
        self.0.score_of(did)
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
    + gateway_domain::ports::LogReads
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
        + gateway_domain::ports::LogReads
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
    // The limiter crate's metrics under this gateway's names (the first gateway of a process
    // sets them; every one sets the same).
    gateway_limits::set_metric_names(crate::limits::METRIC_NAMES);
    let resolver: Arc<dyn DidResolver> = Arc::new(gateway_core::KeyDidResolver);
    let tokens =
        Arc::new(gateway_auth::TokenService::new(options.token, clock.clone()).map_err(gateway_core::Error::from)?);
    let challenges: Arc<dyn gateway_auth::ChallengeStore> = match &options.cluster {
        Some(cluster) => cluster.challenges.clone(),
        None => Arc::new(gateway_auth::challenge::MemoryChallengeStore::default()),
    };
    let nonces: Arc<dyn gateway_auth::NonceStore> = match options.nonces.clone() {
        Some(shared) => shared,
        None => {
            // The memory begins at the next whole second (`created` is in whole seconds), and
            // this gateway serves from then on, so a token it issues is never older than its
            // nonce memory: only signatures made with an earlier process's token can predate it.
            let now_millis = clock.now_unix_millis();
            let memory = gateway_auth::MemoryNonceStore::starting_at(now_millis);
            let wait = (memory.epoch_secs() * 1000).saturating_sub(now_millis);
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            Arc::new(memory)
        }
    };
    let auth = Authenticator::new(
        resolver.clone(),
        challenges,
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
    let log = gateway_domain::log::Log::new(
        store.clone(),
        store.clone(),
        store.clone(),
        options.receipt_keys.clone(),
        clock.clone(),
        options.log.clone(),
    );
    let misbehavior =
        Arc::new(gateway_limits::Misbehavior::new(options.limiter_clock.clone(), options.http.quarantine));
    let mut limits =
        RateLimits::new(options.limiter_clock, clock.clone(), Arc::new(GraphScores(graph)), options.trusted_proxies);
    if let Some(cluster) = &options.cluster {
        limits = limits.with_shared(cluster.limits.clone(), cluster.velocity_fallback);
    }
    let limits = Arc::new(limits);
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
        log,
        limits,
        nonces,
        misbehavior,
        http_metrics: crate::edge::HttpMetrics::new(options.http.metrics),
        membership,
        config: Arc::new(options.http),
        started_at: Instant::now(),
    }))
}
