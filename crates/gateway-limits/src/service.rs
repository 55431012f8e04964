//! A tower layer that applies a [`KeyedLimiter`] to HTTP requests.
//!
//! The layer is told how to find a request's key, which quota applies to that key, and how to
//! answer a denied request; it knows no more about the gateway than that. It speaks only the
//! `http` crate's types, so it fits any tower-based server (axum, hyper, tonic), and it does
//! not buffer, queue or delay requests: each one is decided at once.

use std::fmt;
use std::future::{Ready, ready};
use std::hash::Hash;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::future::Either;
use http::{Request, Response};
use tower::{Layer, Service};

use crate::clock::Clock;
use crate::keyed::{Denial, KeyedLimiter};
use crate::quota::Quota;

/// Wraps services in [`RateLimit`].
///
/// - `key: Fn(&Request<B>) -> Option<K>` finds the request's key; `None` lets the request
///   through unlimited (for routes or callers another layer is responsible for).
/// - `quota: Fn(&K) -> Quota` picks the quota, so a key's allowance can follow its trust.
/// - `reject: Fn(&Denial) -> Response<ResBody>` builds the answer to a denied request, so the
///   embedding service keeps control of its error format and headers.
///
/// An admitted request carries its [`Admission`](crate::Admission) in its extensions, from
/// which handlers can set the `X-RateLimit-*` headers.
pub struct RateLimitLayer<K, C, KF, QF, RF> {
    config: Arc<Config<K, C, KF, QF, RF>>,
}

struct Config<K, C, KF, QF, RF> {
    limiter: Arc<KeyedLimiter<K, C>>,
    key: KF,
    quota: QF,
    reject: RF,
}

impl<K, C, KF, QF, RF> RateLimitLayer<K, C, KF, QF, RF> {
    /// A layer deciding requests with `limiter`, which the caller keeps a handle to (to run
    /// [`KeyedLimiter::evict_idle`] periodically, for instance).
    pub fn new(limiter: Arc<KeyedLimiter<K, C>>, key: KF, quota: QF, reject: RF) -> Self {
        Self { config: Arc::new(Config { limiter, key, quota, reject }) }
    }
}

impl<K, C, KF, QF, RF> Clone for RateLimitLayer<K, C, KF, QF, RF> {
    fn clone(&self) -> Self {
        Self { config: Arc::clone(&self.config) }
    }
}

impl<K, C, KF, QF, RF> fmt::Debug for RateLimitLayer<K, C, KF, QF, RF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<S, K, C, KF, QF, RF> Layer<S> for RateLimitLayer<K, C, KF, QF, RF> {
    type Service = RateLimit<S, K, C, KF, QF, RF>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit { inner, config: Arc::clone(&self.config) }
    }
}

/// The service made by [`RateLimitLayer`]: denied requests never reach `S`.
///
/// Readiness is the inner service's. As with tower's own `Filter`, a request that is denied
/// after `poll_ready` leaves that readiness unused rather than consuming it.
pub struct RateLimit<S, K, C, KF, QF, RF> {
    inner: S,
    config: Arc<Config<K, C, KF, QF, RF>>,
}

impl<S: Clone, K, C, KF, QF, RF> Clone for RateLimit<S, K, C, KF, QF, RF> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), config: Arc::clone(&self.config) }
    }
}

impl<S: fmt::Debug, K, C, KF, QF, RF> fmt::Debug for RateLimit<S, K, C, KF, QF, RF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl<S, B, ResBody, K, C, KF, QF, RF> Service<Request<B>> for RateLimit<S, K, C, KF, QF, RF>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    K: Hash + Eq + Clone,
    C: Clock,
    KF: Fn(&Request<B>) -> Option<K>,
    QF: Fn(&K) -> Quota,
    RF: Fn(&Denial) -> Response<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Response<ResBody>, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let config = &*self.config;
        if let Some(key) = (config.key)(&request) {
            match config.limiter.check(&key, (config.quota)(&key)) {
                Ok(admission) => {
                    request.extensions_mut().insert(admission);
                }
                Err(denial) => return Either::Right(ready(Ok((config.reject)(&denial)))),
            }
        }
        Either::Left(self.inner.call(request))
    }
}
