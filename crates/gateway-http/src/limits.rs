//! The three rate-limiting layers wired into HTTP: per client IP on the login routes, per token
//! DID on every authenticated route (with the `X-RateLimit-*` headers), and the velocity layer
//! on payment-creating routes.
//!
//! The limiters themselves are `gateway-limits`'; this module picks keys and quotas, finds the
//! client IP (believing `X-Forwarded-For` only from configured proxies), and turns denials into
//! the contract's 429.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_core::{Did, Error, RateLimitLayer};
use gateway_limits::{
    Admission, Clock, DidLimiter, DidTier, IpLimiter, TrustClass, TrustScores, VelocityLimiter, VelocityPermit,
    did_limiter, ip_limiter, ip_quota, public_read_quota,
};
use ipnet::IpNet;

use crate::error::ApiError;

/// The limiters and what they need to pick quotas.
pub struct RateLimits {
    ip: IpLimiter<Arc<dyn Clock>>,
    public: IpLimiter<Arc<dyn Clock>>,
    did: DidLimiter<Arc<dyn Clock>>,
    velocity: VelocityLimiter<Arc<dyn Clock>>,
    scores: Arc<dyn TrustScores>,
    trusted_proxies: Vec<IpNet>,
    wall_clock: Arc<dyn gateway_core::Clock>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits")
            .field("ip_keys", &self.ip.len())
            .field("did_keys", &self.did.len())
            .field("velocity_keys", &self.velocity.len())
            .field("trusted_proxies", &self.trusted_proxies)
            .finish()
    }
}

/// Parses a trusted proxy: an IP address or a CIDR block.
pub fn parse_proxy(text: &str) -> Result<IpNet, String> {
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("'{text}' is neither an IP address nor a CIDR block"))
}

impl RateLimits {
    /// Limiters on `clock` (monotonic), with scores from `scores` and the wall clock for the
    /// reset header.
    pub fn new(
        clock: Arc<dyn Clock>,
        wall_clock: Arc<dyn gateway_core::Clock>,
        scores: Arc<dyn TrustScores>,
        trusted_proxies: Vec<IpNet>,
    ) -> Self {
        Self {
            ip: ip_limiter(clock.clone()),
            public: ip_limiter(clock.clone()),
            did: did_limiter(clock.clone()),
            velocity: VelocityLimiter::new(clock),
            scores,
            trusted_proxies,
            wall_clock,
        }
    }

    /// Rebuilds the velocity windows from the durable ledger: `payments` are (payer, Unix
    /// seconds) of the payments recorded in the last hour, `now` the wall clock's Unix seconds.
    /// Returns how many payments were counted.
    pub fn restore_velocity(&self, payments: &[(String, u64)], now: u64) -> usize {
        let mut by_payer: std::collections::HashMap<&str, Vec<std::time::Duration>> = std::collections::HashMap::new();
        for (payer, at) in payments {
            by_payer.entry(payer.as_str()).or_default().push(std::time::Duration::from_secs(now.saturating_sub(*at)));
        }
        by_payer.into_iter().map(|(payer, ages)| self.velocity.restore(payer, ages)).sum()
    }

    /// Drops idle keys of every layer (called from a timer task).
    pub fn evict_idle(&self) -> usize {
        self.ip.evict_idle() + self.public.evict_idle() + self.did.evict_idle() + self.velocity.evict_idle()
    }

    /// The client's address: the peer, or, when the peer is a trusted proxy, the right-most
    /// `X-Forwarded-For` address that is not itself a trusted proxy.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.is_trusted(peer) {
            return peer;
        }
        let forwarded = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|part| part.trim().parse::<IpAddr>().ok())
            .collect::<Vec<_>>();
        forwarded.into_iter().rev().find(|ip| !self.is_trusted(*ip)).unwrap_or(peer)
    }

    fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    /// The IP layer of the login routes.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), ApiError> {
        check_address(&self.ip, ip_quota(), ip, "too many requests from this IP")
    }

    /// The IP layer of the public reads, a bucket of its own (`public_read_quota`).
    pub fn check_public_read(&self, ip: IpAddr) -> Result<(), ApiError> {
        check_address(&self.public, public_read_quota(), ip, "too many public requests from this IP")
    }

    /// The DID layer: the admission gives the `X-RateLimit-*` headers.
    pub fn check_did(&self, did: &Did) -> Result<Admission, (ApiError, u32)> {
        let tier = DidTier::from_score(self.scores.score(did.as_str()));
        self.did.check(did.as_str(), tier.quota()).map_err(|denial| {
            let limit = denial.limit;
            let error = rate_limited(
                RateLimitLayer::Did,
                &format!("rate limit exceeded: {} requests per minute for this DID", tier.requests_per_minute()),
                limit,
                denial.retry_after_secs(),
                None,
            );
            (error, limit)
        })
    }

    /// The velocity layer for a payer; the permit must be cancelled if the payment fails.
    pub fn check_velocity<'a>(&'a self, payer: &'a Did) -> Result<VelocityPermit<'a>, ApiError> {
        let class = TrustClass::from_score(self.scores.score(payer.as_str()));
        self.velocity.check(payer.as_str(), class).map_err(|denied| {
            rate_limited(
                RateLimitLayer::Velocity,
                &denied.to_string(),
                denied.limit,
                denied.retry_after_secs(),
                Some(u64::from(denied.count)),
            )
        })
    }

    /// Writes the DID layer's headers.
    pub fn write_headers(&self, headers: &mut HeaderMap, limit: u32, remaining: u32, reset_after: Duration) {
        let now = UNIX_EPOCH + Duration::from_millis(self.wall_clock.now_unix_millis());
        let reset = Admission { limit, remaining, reset_after }.reset_unix_secs(now);
        headers.insert("x-ratelimit-limit", HeaderValue::from(limit));
        headers.insert("x-ratelimit-remaining", HeaderValue::from(remaining));
        headers.insert("x-ratelimit-reset", HeaderValue::from(reset));
    }

    /// Unix seconds now, by the wall clock.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.wall_clock.now_unix_millis())
    }
}

fn rate_limited(
    layer: RateLimitLayer,
    message: &str,
    limit: u32,
    retry_after_secs: u64,
    count: Option<u64>,
) -> ApiError {
    Error::RateLimited { message: message.to_owned(), layer, limit: u64::from(limit), retry_after_secs, count }.into()
}

/// One IP bucket's check: the address counted under its key (IPv6 by /64), a denial as the
/// contract's 429 with layer `ip`.
fn check_address(
    limiter: &IpLimiter<Arc<dyn Clock>>,
    quota: gateway_limits::Quota,
    ip: IpAddr,
    message: &str,
) -> Result<(), ApiError> {
    limiter
        .check(&gateway_limits::ip_key(ip), quota)
        .map(|_| ())
        .map_err(|denial| rate_limited(RateLimitLayer::Ip, message, denial.limit, denial.retry_after_secs(), None))
}

/// Middleware of the unauthenticated login routes: the IP layer, before any other work.
pub async fn ip_layer(State(limits): State<Arc<RateLimits>>, request: Request, next: Next) -> Response {
    limit_by_address(&limits, RateLimits::check_ip, request, next).await
}

/// Middleware of the public reads and the WebSocket upgrade: the IP layer with the public-read
/// bucket, before any other work. (Health and readiness probes are not limited.)
pub async fn public_read_layer(State(limits): State<Arc<RateLimits>>, request: Request, next: Next) -> Response {
    limit_by_address(&limits, RateLimits::check_public_read, request, next).await
}

/// Runs `check` on the client's address (the peer, or what a trusted proxy forwarded), then the
/// request, or answers the denial.
async fn limit_by_address(
    limits: &RateLimits,
    check: fn(&RateLimits, IpAddr) -> Result<(), ApiError>,
    request: Request,
    next: Next,
) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    match check(limits, limits.client_ip(peer, request.headers())) {
        Ok(()) => next.run(request).await,
        Err(denial) => denial.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_limits::{ManualClock, StaticTrustScores};

    fn limits(proxies: &[&str]) -> RateLimits {
        RateLimits::new(
            Arc::new(ManualClock::new()),
            Arc::new(gateway_core::ManualClock::at_secs(1_000)),
            Arc::new(StaticTrustScores::new(0.0)),
            proxies.iter().map(|p| parse_proxy(p).unwrap()).collect(),
        )
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9, 10.0.0.7"));
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(limits(&[]).client_ip(peer, &headers), peer);
        assert_eq!(limits(&["10.0.0.0/8"]).client_ip(peer, &headers), "203.0.113.9".parse::<IpAddr>().unwrap());
        assert_eq!(limits(&["10.0.0.1"]).client_ip(peer, &headers), "10.0.0.7".parse::<IpAddr>().unwrap());
        assert!(parse_proxy("nope").is_err());
    }
}
