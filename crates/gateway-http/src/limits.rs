//! The three rate-limiting layers wired into HTTP: per client IP on the public routes, per token
//! DID on every authenticated route (with the `X-RateLimit-*` headers), and the velocity layer
//! on payment-creating routes.
//!
//! The limiters themselves are `gateway-limits`'; this module picks keys and quotas, finds the
//! client IP (believing `X-Forwarded-For` only from configured proxies), and turns denials into
//! the 429 of INTERFACE.md §14. In a cluster every layer counts in the shared backend (Redis), and this
//! module applies INTERFACE.md §10's fallbacks when it cannot answer: the IP and DID layers count on
//! this replica's own limiters, and payments are refused 503 unless the velocity fallback is
//! `local`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use gateway_core::{Did, Error, RateLimitLayer};
use gateway_limits::{
    Admission, Clock, DidLimiter, DidTier, IpLimiter, Quota, SharedBackend, SharedLimits, SharedPermit, TrustClass,
    TrustScores, VelocityDenied, VelocityLimiter, VelocityPermit, did_limiter, ip_limiter, ip_quota, public_read_quota,
};
use ipnet::IpNet;

use crate::error::ApiError;

/// The names of the limiter crate's metrics in this gateway (INTERFACE.md §10's families).
pub const METRIC_NAMES: gateway_limits::MetricNames = gateway_limits::MetricNames {
    rate_limit_exceeded_total: "icn_gateway_rate_limit_exceeded_total",
    rate_limit_backend_errors_total: "icn_gateway_rate_limit_backend_errors_total",
    violations_total: "icn_misbehavior_violations_total",
    auto_bans_total: "icn_misbehavior_auto_bans_total",
    quarantined_peers: "icn_misbehavior_quarantined_peers",
};

/// What payments do while the shared backend cannot count them (`--redis-velocity-fallback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VelocityFallback {
    /// Refuse payment-creating requests with 503 rather than skip the velocity limit.
    #[default]
    Deny,
    /// Count them on this replica's own velocity limiter (each replica then allows the full
    /// hourly limit during the outage).
    Local,
}

/// The limiters and what they need to pick quotas.
pub struct RateLimits {
    ip: IpLimiter<Arc<dyn Clock>>,
    public: IpLimiter<Arc<dyn Clock>>,
    did: DidLimiter<Arc<dyn Clock>>,
    velocity: VelocityLimiter<Arc<dyn Clock>>,
    /// The cluster's shared counts, when replicas share them.
    shared: Option<SharedLimits<Arc<dyn Clock>>>,
    velocity_fallback: VelocityFallback,
    clock: Arc<dyn Clock>,
    scores: Arc<dyn TrustScores>,
    trusted_proxies: Vec<IpNet>,
    wall_clock: Arc<dyn gateway_core::Clock>,
}

/// Which per-address bucket a public route draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressBucket {
    /// Challenge and verify: the interface's bucket (burst 20, 2 per second).
    Login,
    /// Coop stats, DID resolution, the WebSocket upgrades: [`public_read_quota`].
    PublicRead,
}

/// Payments admitted by the velocity layer, counted until [`cancel`](Self::cancel) gives them
/// back (when the payment did not go through).
#[derive(Debug)]
#[must_use = "dropping permits keeps the payments counted; cancel them if the payment fails"]
pub enum VelocityPermits<'a> {
    /// Counted on this replica.
    Local(Vec<VelocityPermit<'a>>),
    /// Counted in the shared backend.
    Shared(SharedPermit),
}

impl VelocityPermits<'_> {
    /// Un-counts the payments. A shared backend that cannot be reached keeps them counted (the
    /// limit errs on the strict side) and the failure is counted in the backend error metric.
    pub async fn cancel(self, limits: &RateLimits) {
        match self {
            VelocityPermits::Local(permits) => permits.into_iter().for_each(VelocityPermit::cancel),
            VelocityPermits::Shared(permit) => {
                if let Some(shared) = &limits.shared {
                    let _ = shared.cancel_payments(&permit).await;
                }
            }
        }
    }
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
            velocity: VelocityLimiter::new(clock.clone()),
            shared: None,
            velocity_fallback: VelocityFallback::Deny,
            clock,
            scores,
            trusted_proxies,
            wall_clock,
        }
    }

    /// Counts every layer in `backend`, shared with the other replicas, with this replica's
    /// limiters as the fallback of the request layers and `velocity_fallback` for payments.
    pub fn with_shared(mut self, backend: Arc<dyn SharedBackend>, velocity_fallback: VelocityFallback) -> Self {
        self.shared = Some(SharedLimits::new(backend, self.clock.clone()));
        self.velocity_fallback = velocity_fallback;
        self
    }

    /// `Some(answering)` when a shared backend is configured, for health reports.
    pub fn shared_backend_up(&self) -> Option<bool> {
        self.shared.as_ref().map(SharedLimits::is_available)
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
        self.ip.evict_idle()
            + self.public.evict_idle()
            + self.did.evict_idle()
            + self.velocity.evict_idle()
            + self.shared.as_ref().map_or(0, SharedLimits::evict_idle)
    }

    /// The client's address (INTERFACE.md §10): the peer, unless the peer is a trusted proxy; then
    /// `X-Forwarded-For` is walked from the right (its last field line first), and the client
    /// is the first entry that is not itself a trusted proxy. Entries are `ip`, `ip:port`,
    /// `[v6]:port`, `[v6]` or a bare IPv6 address ([`forwarded_entry`]). An entry that cannot be
    /// parsed ends the walk, and the request is keyed by the nearest trusted proxy's address:
    /// the entries to its left are whatever the client wrote, and believing any of them would
    /// let a client choose the address it is limited and quarantined by. When every entry is a
    /// trusted proxy, the farthest of them is the client. IPv4-mapped IPv6 addresses are read
    /// as the IPv4 address they map.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.is_trusted(peer) {
            return peer;
        }
        let mut nearest_proxy = peer;
        for line in headers.get_all("x-forwarded-for").iter().rev() {
            let Ok(line) = line.to_str() else { return nearest_proxy };
            for entry in line.rsplit(',') {
                let Some(ip) = forwarded_entry(entry) else { return nearest_proxy };
                if !self.is_trusted(ip) {
                    return ip;
                }
                nearest_proxy = ip;
            }
        }
        nearest_proxy
    }

    /// Whether `ip` is one of the configured trusted proxies.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    /// The IP layer: one request from `ip` against `bucket`'s `quota`, counted in the shared
    /// backend when there is one and it answers, else on this replica.
    async fn decide_address(
        &self,
        bucket: AddressBucket,
        ip: IpAddr,
        quota: Quota,
    ) -> Result<Admission, gateway_limits::Denial> {
        let (limiter, namespace) = match bucket {
            AddressBucket::Login => (&self.ip, "login"),
            AddressBucket::PublicRead => (&self.public, "public"),
        };
        let key = gateway_limits::ip_key(ip);
        match self.shared_check(gateway_limits::policy::LAYER_IP, || format!("{namespace}:{key}"), quota).await {
            Some(decision) => decision,
            None => limiter.check(&key, quota),
        }
    }

    /// The DID layer: the admission gives the `X-RateLimit-*` headers.
    pub async fn check_did(&self, did: &Did) -> Result<Admission, (ApiError, u32)> {
        let tier = DidTier::from_score(self.scores.score(did.as_str()));
        let quota = tier.quota();
        let decision =
            match self.shared_check(gateway_limits::policy::LAYER_DID, || did.as_str().to_owned(), quota).await {
                Some(decision) => decision,
                None => self.did.check(did.as_str(), quota),
            };
        decision.map_err(|denial| {
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

    /// The shared backend's decision, or `None` when there is no backend or it did not answer
    /// (the caller then decides locally; the failure is already counted).
    async fn shared_check(
        &self,
        layer: &'static str,
        key: impl FnOnce() -> String,
        quota: Quota,
    ) -> Option<Result<Admission, gateway_limits::Denial>> {
        self.shared.as_ref()?.check(layer, &key(), quota).await.ok()
    }

    /// The velocity layer for `n` payments of a payer, all or none; the permits must be
    /// cancelled if the payments fail. With a shared backend that cannot answer, payments are
    /// refused 503 (or counted locally, by configuration).
    pub async fn check_velocity<'a>(&'a self, payer: &'a Did, n: usize) -> Result<VelocityPermits<'a>, ApiError> {
        let class = TrustClass::from_score(self.scores.score(payer.as_str()));
        let Some(count) = u32::try_from(n).ok().and_then(std::num::NonZeroU32::new) else {
            return Ok(VelocityPermits::Local(Vec::new()));
        };
        if let Some(shared) = &self.shared {
            match shared.admit_payments(payer.as_str(), count, class.hourly_limit()).await {
                Ok(Ok(permit)) => return Ok(VelocityPermits::Shared(permit)),
                Ok(Err(denied)) => return Err(velocity_denied(denied)),
                Err(unavailable) if self.velocity_fallback == VelocityFallback::Deny => {
                    return Err(Error::ServiceUnavailable(format!(
                        "payments are paused: the shared velocity limit cannot be checked ({unavailable})"
                    ))
                    .into());
                }
                Err(_) => {}
            }
        }
        let mut permits = Vec::with_capacity(n);
        for _ in 0..n {
            match self.velocity.check(payer.as_str(), class) {
                Ok(permit) => permits.push(permit),
                Err(denied) => {
                    permits.into_iter().for_each(VelocityPermit::cancel);
                    return Err(velocity_denied(denied));
                }
            }
        }
        Ok(VelocityPermits::Local(permits))
    }

    /// Writes the DID layer's headers.
    pub fn write_headers(&self, headers: &mut HeaderMap, limit: u32, remaining: u32, reset_after: Duration) {
        let reset = self.reset_secs(limit, remaining, reset_after);
        headers.insert(RATELIMIT_LIMIT, LAST_LIMIT.with_borrow_mut(|last| last.value(limit.into())));
        headers.insert(RATELIMIT_REMAINING, number(remaining.into()));
        headers.insert(RATELIMIT_RESET, LAST_RESET.with_borrow_mut(|last| last.value(reset)));
    }

    /// The `X-RateLimit-Reset` value: when the bucket is full again, Unix seconds by the wall
    /// clock.
    pub fn reset_secs(&self, limit: u32, remaining: u32, reset_after: Duration) -> u64 {
        let now = UNIX_EPOCH + Duration::from_millis(self.wall_clock.now_unix_millis());
        Admission { limit, remaining, reset_after }.reset_unix_secs(now)
    }

    /// Unix seconds now, by the wall clock.
    pub fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.wall_clock.now_unix_millis())
    }
}

/// The bucket's size, on every answer to a limited route.
const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// Requests left in the bucket.
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// When the bucket is full again, Unix seconds.
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

thread_local! {
    /// The last limit this thread wrote: one of a few tiers, so most answers share its value.
    static LAST_LIMIT: std::cell::RefCell<LastNumber> = const { std::cell::RefCell::new(LastNumber(None)) };
    /// The last reset time this thread wrote: it changes about once a second.
    static LAST_RESET: std::cell::RefCell<LastNumber> = const { std::cell::RefCell::new(LastNumber(None)) };
}

/// A number and its header value, kept to be shared while the number stays the same.
struct LastNumber(Option<(u64, HeaderValue)>);

impl LastNumber {
    fn value(&mut self, n: u64) -> HeaderValue {
        match &self.0 {
            Some((last, value)) if *last == n => value.clone(),
            _ => {
                let value = number(n);
                self.0 = Some((n, value.clone()));
                value
            }
        }
    }
}

/// A number as a header value, in one allocation (`HeaderValue::from` makes two).
fn number(n: u64) -> HeaderValue {
    HeaderValue::from_str(itoa::Buffer::new().format(n)).expect("digits are a valid header value")
}

fn velocity_denied(denied: VelocityDenied) -> ApiError {
    rate_limited(
        RateLimitLayer::Velocity,
        &denied.to_string(),
        denied.limit,
        denied.retry_after_secs(),
        Some(u64::from(denied.count)),
    )
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

/// The IP layer of one bucket, as the limiter crate's tower layer asks it: [`RateLimits`]
/// decides (shared backend or this replica).
#[derive(Debug)]
pub struct AddressDecider {
    limits: Arc<RateLimits>,
    bucket: AddressBucket,
}

impl gateway_limits::Decide<IpAddr> for AddressDecider {
    fn decide(
        &self,
        ip: IpAddr,
        quota: Quota,
    ) -> impl std::future::Future<Output = Result<Admission, gateway_limits::Denial>> + Send {
        self.limits.decide_address(self.bucket, ip, quota)
    }
}

/// [`address_layer`]'s tower layer.
pub type AddressLayer = gateway_limits::RateLimitLayer<
    AddressDecider,
    Box<dyn Fn(&Request) -> Option<IpAddr> + Send + Sync>,
    Box<dyn Fn(&IpAddr) -> Quota + Send + Sync>,
    Box<dyn Fn(&gateway_limits::Denial) -> Response + Send + Sync>,
>;

/// The IP layer of `bucket` before any other work of a route: the login routes (the
/// interface's bucket) or the public reads and the WebSocket upgrade (the public-read bucket;
/// health and readiness probes are not limited). It is `gateway-limits`' tower layer, keyed by
/// the client's address ([`request_client_ip`]); a denial is INTERFACE.md §14's 429.
pub fn address_layer(limits: &Arc<RateLimits>, bucket: AddressBucket) -> AddressLayer {
    let (quota, message) = match bucket {
        AddressBucket::Login => (ip_quota(), "too many requests from this IP"),
        AddressBucket::PublicRead => (public_read_quota(), "too many public requests from this IP"),
    };
    let keyed = limits.clone();
    gateway_limits::RateLimitLayer::new(
        Arc::new(AddressDecider { limits: limits.clone(), bucket }),
        Box::new(move |request: &Request| Some(request_client_ip(&keyed, request))),
        Box::new(move |_: &IpAddr| quota),
        Box::new(move |denial: &gateway_limits::Denial| {
            rate_limited(RateLimitLayer::Ip, message, denial.limit, denial.retry_after_secs(), None).into_response()
        }),
    )
}

/// One `X-Forwarded-For` entry's address: `ip`, `ip:port` (IPv4), `[v6]:port`, `[v6]` or a
/// bare IPv6 address, surrounded by optional whitespace; `None` for anything else (a name,
/// `unknown`, an empty entry, a port out of range), which ends the walk in
/// [`RateLimits::client_ip`]. IPv4-mapped IPv6 addresses become the IPv4 address.
pub fn forwarded_entry(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    let ip = if let Ok(ip) = entry.parse::<IpAddr>() {
        ip
    } else if let Ok(addr) = entry.parse::<SocketAddr>() {
        addr.ip()
    } else {
        entry.strip_prefix('[')?.strip_suffix(']')?.parse::<std::net::Ipv6Addr>().ok()?.into()
    };
    Some(ip.to_canonical())
}

/// The client's address as the gateway sees it: the peer, or what a trusted proxy forwarded.
pub fn request_client_ip(limits: &RateLimits, request: &Request) -> IpAddr {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]));
    limits.client_ip(peer, request.headers())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_limits::{ManualClock, StaticTrustScores};

    #[test]
    fn a_kept_number_is_reused_only_while_it_is_the_same() {
        let mut last = LastNumber(None);
        for n in [1000, 1000, 60, 1_795_573_816, 1_795_573_816, 1_795_573_817, 0, 1000] {
            assert_eq!(last.value(n).to_str().unwrap(), n.to_string());
        }
        assert_eq!(number(u64::MAX).to_str().unwrap(), u64::MAX.to_string());
    }

    fn limits(proxies: &[&str]) -> RateLimits {
        RateLimits::new(
            Arc::new(ManualClock::new()),
            Arc::new(gateway_core::ManualClock::at_secs(1_000)),
            Arc::new(StaticTrustScores::new(0.0)),
            proxies.iter().map(|p| parse_proxy(p).unwrap()).collect(),
        )
    }

    /// The client seen by a gateway behind 10.0.0.0/8, from the peer 10.0.0.1, for these
    /// `X-Forwarded-For` field lines.
    fn client_behind_proxies(lines: &[&str]) -> String {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append("x-forwarded-for", HeaderValue::from_str(line).unwrap());
        }
        limits(&["10.0.0.0/8"]).client_ip("10.0.0.1".parse().unwrap(), &headers).to_string()
    }

    #[test]
    fn every_entry_shape_is_read() {
        for (entry, ip) in [
            ("203.0.113.9", "203.0.113.9"),
            (" 203.0.113.9 ", "203.0.113.9"),
            ("203.0.113.9:5555", "203.0.113.9"),
            ("[2001:db8::7]:443", "2001:db8::7"),
            ("[2001:db8::7]", "2001:db8::7"),
            ("2001:db8::7", "2001:db8::7"),
            ("::ffff:203.0.113.9", "203.0.113.9"),
            ("[::ffff:203.0.113.9]:80", "203.0.113.9"),
        ] {
            assert_eq!(forwarded_entry(entry).map(|ip| ip.to_string()).as_deref(), Some(ip), "{entry:?}");
            assert_eq!(client_behind_proxies(&[entry]), ip, "{entry:?}");
        }
        for junk in [
            "",
            " ",
            "garbage",
            "unknown",
            "_hidden",
            "203.0.113.9:",
            "203.0.113.9:99999",
            "203.0.113.9:port",
            "[203.0.113.9]:80",
            "[2001:db8::7",
            "2001:db8::7]:443",
            "[2001:db8::7]:",
            "203.0.113.9 203.0.113.10",
            "fe80::1%eth0",
        ] {
            assert_eq!(forwarded_entry(junk), None, "{junk:?}");
        }
    }

    /// The entries to the left of the proxies' own are the client's to write: none of them may
    /// decide the address a request is keyed by.
    #[test]
    fn a_client_cannot_choose_its_own_address() {
        for (lines, client) in [
            // The old walk skipped what it could not parse, so a proxy appending a port let
            // the client's own entry through.
            (&["6.6.6.6, 203.0.113.9:5555"][..], "203.0.113.9"),
            (&["6.6.6.6, [2001:db8::7]:443"], "2001:db8::7"),
            (&["6.6.6.6, 203.0.113.9, 10.0.0.2"], "203.0.113.9"),
            (&["6.6.6.6, 203.0.113.9:1, 10.0.0.2:5555"], "203.0.113.9"),
            // An entry that cannot be parsed ends the walk at the nearest trusted proxy.
            (&["1.2.3.4, garbage"], "10.0.0.1"),
            (&["evil, 10.0.0.2:5555"], "10.0.0.2"),
            (&["1.2.3.4, evil, 10.0.0.2"], "10.0.0.2"),
            (&["1.2.3.4, , 10.0.0.2"], "10.0.0.2"),
            (&["1.2.3.4,"], "10.0.0.1"),
            (&["1.2.3.4, 10.0.0.3, unknown, 10.0.0.2"], "10.0.0.2"),
            (&["1.2.3.4, 203.0.113.9:99999"], "10.0.0.1"),
            (&["1.2.3.4, [10.0.0.2]:80"], "10.0.0.1"),
            (&[""], "10.0.0.1"),
            // Every entry a proxy: the farthest one.
            (&["10.0.0.3, 10.0.0.2"], "10.0.0.3"),
            (&["::ffff:10.0.0.3, 10.0.0.2"], "10.0.0.3"),
            // Several field lines are one list, the last line rightmost.
            (&["6.6.6.6", "203.0.113.9:1"], "203.0.113.9"),
            (&["203.0.113.9", "garbage"], "10.0.0.1"),
            (&["6.6.6.6", "evil, 10.0.0.2"], "10.0.0.2"),
            (&["6.6.6.6, 203.0.113.9", "10.0.0.2"], "203.0.113.9"),
        ] {
            assert_eq!(client_behind_proxies(lines), client, "{lines:?}");
        }
        // Bytes that are not text end the walk too.
        let mut headers = HeaderMap::new();
        headers.append("x-forwarded-for", HeaderValue::from_static("6.6.6.6"));
        headers.append("x-forwarded-for", HeaderValue::from_bytes(b"\xff1.2.3.4").unwrap());
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(limits(&["10.0.0.0/8"]).client_ip(peer, &headers), peer);
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9, 10.0.0.7"));
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(limits(&[]).client_ip(peer, &headers), peer);
        assert_eq!(limits(&["10.0.0.0/8"]).client_ip(peer, &headers), "203.0.113.9".parse::<IpAddr>().unwrap());
        assert_eq!(limits(&["10.0.0.1"]).client_ip(peer, &headers), "10.0.0.7".parse::<IpAddr>().unwrap());
        let mapped_peer: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(limits(&["10.0.0.0/8"]).client_ip(mapped_peer, &headers), "203.0.113.9".parse::<IpAddr>().unwrap());
        let stranger: IpAddr = "198.51.100.1".parse().unwrap();
        assert_eq!(limits(&["10.0.0.0/8"]).client_ip(stranger, &headers), stranger, "no proxy: the header is noise");
        assert!(parse_proxy("nope").is_err());
    }
}
