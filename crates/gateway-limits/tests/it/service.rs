//! The tower layer: admitted requests reach the inner service with their snapshot, denied
//! ones get the embedding service's rejection and never reach it.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use std::future::Future;

use gateway_limits::{Admission, Decide, Denial, ManualClock, Quota, RateLimitLayer, ip_limiter, ip_quota};
use http::{HeaderValue, Request, Response, StatusCode, header};
use tower::{Layer, Service, ServiceExt, service_fn};

const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

/// The client address as a test header; a real gateway would read the connection info.
fn client_ip(request: &Request<()>) -> Option<IpAddr> {
    request.headers().get("x-client-ip")?.to_str().ok()?.parse().ok()
}

fn reject(denial: &Denial) -> Response<String> {
    Response::builder()
        .status(StatusCode::TOO_MANY_REQUESTS)
        .header(header::RETRY_AFTER, denial.retry_after_secs())
        .body(format!("{{\"error\":\"rate limited\",\"limit\":{}}}", denial.limit))
        .unwrap()
}

fn request(ip: Option<IpAddr>) -> Request<()> {
    let mut builder = Request::builder().uri("/");
    if let Some(ip) = ip {
        builder = builder.header("x-client-ip", ip.to_string());
    }
    builder.body(()).unwrap()
}

/// A service that answers with the remaining allowance it was handed, counting its calls.
fn echo_remaining(
    calls: Arc<AtomicUsize>,
) -> impl Service<Request<()>, Response = Response<String>, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ 'static {
    service_fn(move |request: Request<()>| {
        calls.fetch_add(1, Ordering::SeqCst);
        let remaining = request.extensions().get::<Admission>().map_or("none".to_owned(), |a| a.remaining.to_string());
        async move { Ok::<_, Infallible>(Response::new(remaining)) }
    })
}

#[tokio::test]
async fn admitted_requests_carry_their_snapshot() {
    let clock = ManualClock::new();
    let limiter = Arc::new(ip_limiter(clock.clone()));
    let layer = RateLimitLayer::new(limiter, client_ip, |_: &IpAddr| ip_quota(), reject);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(echo_remaining(calls.clone()));

    let response = service.clone().oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.body(), "19");
    let response = service.oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!(response.body(), "18");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn denied_requests_get_the_rejection_and_skip_the_service() {
    let clock = ManualClock::new();
    let limiter = Arc::new(ip_limiter(clock.clone()));
    let layer = RateLimitLayer::new(limiter.clone(), client_ip, |_: &IpAddr| ip_quota(), reject);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(echo_remaining(calls.clone()));

    for _ in 0..20 {
        let response = service.clone().oneshot(request(Some(CLIENT))).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    let response = service.clone().oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers().get(header::RETRY_AFTER), Some(&HeaderValue::from_static("1")));
    assert_eq!(response.body(), "{\"error\":\"rate limited\",\"limit\":20}");
    assert_eq!(calls.load(Ordering::SeqCst), 20);

    clock.advance(Duration::from_millis(500));
    let response = service.oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.body(), "0");
    assert_eq!(limiter.len(), 1);
}

#[tokio::test]
async fn requests_without_a_key_are_not_limited() {
    let clock = ManualClock::new();
    let limiter = Arc::new(ip_limiter(clock));
    let layer = RateLimitLayer::new(limiter.clone(), client_ip, |_: &IpAddr| ip_quota(), reject);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(echo_remaining(calls.clone()));

    for _ in 0..30 {
        let response = service.clone().oneshot(request(None)).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), "none");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 30);
    assert!(limiter.is_empty());
}

/// A decider that answers after a round trip, as one counting in a shared store does: it admits
/// its first `allow` requests and denies the rest, and counts how many it was asked.
struct Remote {
    asked: AtomicUsize,
    allow: usize,
}

impl Decide<IpAddr> for Remote {
    fn decide(&self, _ip: IpAddr, quota: Quota) -> impl Future<Output = Result<Admission, Denial>> + Send {
        let n = self.asked.fetch_add(1, Ordering::SeqCst);
        let allow = self.allow;
        async move {
            // Pending once, as a round trip is.
            tokio::task::yield_now().await;
            if n < allow {
                let remaining = u32::try_from(allow - n - 1).unwrap();
                Ok(Admission { limit: quota.burst().get(), remaining, reset_after: Duration::ZERO })
            } else {
                Err(Denial { limit: quota.burst().get(), retry_after: Duration::from_secs(3) })
            }
        }
    }
}

#[tokio::test]
async fn a_decider_that_answers_later_is_waited_for() {
    let remote = Arc::new(Remote { asked: AtomicUsize::new(0), allow: 2 });
    let layer = RateLimitLayer::new(remote.clone(), client_ip, |_: &IpAddr| ip_quota(), reject);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = layer.layer(echo_remaining(calls.clone()));

    let first = service.clone().oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!((first.status(), first.body().as_str()), (StatusCode::OK, "1"));
    let second = service.clone().oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!((second.status(), second.body().as_str()), (StatusCode::OK, "0"));
    let third = service.clone().oneshot(request(Some(CLIENT))).await.unwrap();
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.headers().get(header::RETRY_AFTER), Some(&HeaderValue::from_static("3")));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the denied request never reached the service");
    // A request without a key is not asked about.
    let keyless = service.oneshot(request(None)).await.unwrap();
    assert_eq!(keyless.body(), "none");
    assert_eq!(remote.asked.load(Ordering::SeqCst), 3);
}
