//! A scripted walk through the three limiting layers and the tower layer, on a manual clock.
//!
//! Run it with `cargo run -p gateway-limits --example embed`. It shows what an embedding
//! service sees (decisions, header values, denial messages) and deliberately leaves out
//! everything else a server does: no sockets, no real time, no metrics exporter.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use gateway_limits::{
    Admission, Denial, DidTier, ManualClock, RateLimitLayer, StaticTrustScores, TrustClass, TrustScores,
    VelocityLimiter, did_limiter, ip_limiter, ip_quota,
};
use http::{Request, Response, StatusCode, header};
use tower::{Layer, ServiceExt, service_fn};

fn headers(admission: &Admission) -> String {
    format!(
        "X-RateLimit-Limit: {}, X-RateLimit-Remaining: {}, X-RateLimit-Reset: {}",
        admission.limit,
        admission.remaining,
        admission.reset_unix_secs(SystemTime::now())
    )
}

fn ip_layer(clock: &ManualClock) {
    println!("== IP layer: burst 20, 2 per second");
    let limiter = ip_limiter(clock.clone());
    let ip = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 4));
    let admitted = (0..20).filter(|_| limiter.check(&ip, ip_quota()).is_ok()).count();
    println!("{admitted} immediate requests admitted");
    let denial = limiter.check(&ip, ip_quota()).unwrap_err();
    println!("request 21 denied: retry after {:?} -> Retry-After: {}", denial.retry_after, denial.retry_after_secs());
    clock.advance(Duration::from_millis(500));
    let admission = limiter.check(&ip, ip_quota()).unwrap();
    println!("500 ms later, admitted: {}", headers(&admission));
}

fn did_layer(clock: &ManualClock) {
    println!("\n== DID layer: requests per minute by trust score");
    let scores = StaticTrustScores::new(0.1)
        .with_override("did:key:z6MkFederation", 0.85)
        .with_override("did:key:z6MkMember", 0.6)
        .with_override("did:key:z6MkNewcomer", 0.35);
    let limiter = did_limiter(clock.clone());
    for did in ["did:key:z6MkFederation", "did:key:z6MkMember", "did:key:z6MkNewcomer", "did:key:z6MkStranger"] {
        let score = scores.score(did);
        let tier = DidTier::from_score(score);
        let admission = limiter.check(did, tier.quota()).unwrap();
        println!("{did} (score {score}): {tier:?}, {}", headers(&admission));
    }

    let stranger = "did:key:z6MkStranger";
    let quota = DidTier::from_score(scores.score(stranger)).quota();
    while limiter.check(stranger, quota).is_ok() {}
    let denial = limiter.check(stranger, quota).unwrap_err();
    println!("{stranger} used its 10 per minute: Retry-After: {}", denial.retry_after_secs());
    clock.advance(Duration::from_secs(6));
    let promoted = scores.with_override(stranger, 0.9);
    let tier = DidTier::from_score(promoted.score(stranger));
    let admission = limiter.check(stranger, tier.quota()).unwrap();
    println!("6 s later its score rose to 0.9 and the new tier applies at once: {tier:?}, {}", headers(&admission));
}

fn velocity_layer(clock: &ManualClock) {
    println!("\n== Velocity layer: payments per payer per sliding hour");
    let limiter = VelocityLimiter::new(clock.clone());
    let payer = "did:key:z6MkPayer";
    let class = TrustClass::from_score(0.05);
    println!("{payer} is {} ({} per hour)", class.as_str(), class.transactions_per_hour());
    for _ in 0..class.transactions_per_hour() {
        let permit = limiter.check(payer, class).unwrap();
        clock.advance(Duration::from_secs(60));
        if permit.count() == class.transactions_per_hour() {
            println!("payment {} failed for lack of credit: cancelled", permit.count());
            permit.cancel();
        }
    }
    let permit = limiter.check(payer, class).unwrap();
    println!("so payment {} of the hour still fits", permit.count());
    let denied = limiter.check(payer, class).unwrap_err();
    println!("the next is refused: \"{denied}\", Retry-After: {}", denied.retry_after_secs());
    clock.advance(Duration::from_secs(3_600));
    println!("an hour later {} idle payer(s) evicted, {} tracked", limiter.evict_idle(), limiter.len());
}

fn reject(denial: &Denial) -> Response<String> {
    let mut response = Response::new(format!(r#"{{"error":"rate limit exceeded","limit":{}}}"#, denial.limit));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    response.headers_mut().insert(header::RETRY_AFTER, denial.retry_after_secs().into());
    response
}

async fn tower_layer(clock: &ManualClock) {
    println!("\n== Tower layer in front of a handler");
    let limiter = Arc::new(ip_limiter(clock.clone()));
    let client_ip =
        |request: &Request<()>| -> Option<IpAddr> { request.headers().get("x-client-ip")?.to_str().ok()?.parse().ok() };
    let layer = RateLimitLayer::new(limiter, client_ip, |_: &IpAddr| ip_quota(), reject);
    let service = layer.layer(service_fn(|request: Request<()>| async move {
        let remaining = request.extensions().get::<Admission>().map(|a| a.remaining);
        Ok::<_, Infallible>(Response::new(format!("hello, {remaining:?} left")))
    }));
    for i in 1..=21 {
        let request = Request::builder().header("x-client-ip", "203.0.113.9").body(()).unwrap();
        let response = service.clone().oneshot(request).await.unwrap();
        if i == 1 || i >= 20 {
            println!("request {i}: {} {}", response.status(), response.body());
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let clock = ManualClock::new();
    ip_layer(&clock);
    did_layer(&clock);
    velocity_layer(&clock);
    tower_layer(&clock).await;
}
