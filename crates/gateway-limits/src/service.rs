//! A tower layer that applies a rate limiter to HTTP requests.
//!
//! The layer is told how to find a request's key, which quota applies to that key, what decides
//! the key against its quota, and how to answer a denied request; it knows no more about the
//! embedding service than that. It speaks only the `http` crate's types, so it fits any
//! tower-based server (axum, hyper, tonic), and it does not buffer, queue or delay requests: each
//! one is decided as it comes (at once by a [`KeyedLimiter`]; after one round trip by a decider
//! that counts in a shared store).

use std::fmt;
use std::future::{Future, ready};
use std::hash::Hash;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::{Layer, Service};

use crate::clock::Clock;
use crate::keyed::{Admission, Denial, KeyedLimiter};
use crate::quota::Quota;

/// What decides a key against a quota for [`RateLimitLayer`].
///
/// A [`KeyedLimiter`] decides in memory, at once. A service whose replicas share their counts
/// implements it over its shared store (with [`SharedLimits`](crate::SharedLimits), falling back
/// to a local limiter when the store does not answer, for instance).
pub trait Decide<K>: Send + Sync + 'static {
    /// Admits one request of `key` under `quota`, or denies it.
    fn decide(&self, key: K, quota: Quota) -> impl Future<Output = Result<Admission, Denial>> + Send;
}

impl<K, C> Decide<K> for KeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    C: Clock + Send + Sync + 'static,
{
    fn decide(&self, key: K, quota: Quota) -> impl Future<Output = Result<Admission, Denial>> + Send {
        ready(self.check(&key, quota))
    }
}

/// Wraps services in [`RateLimit`].
///
/// - `key: Fn(&Request<B>) -> Option<K>` finds the request's key; `None` lets the request
///   through unlimited (for routes or callers another layer is responsible for).
/// - `quota: Fn(&K) -> Quota` picks the quota, so a key's allowance can follow its trust.
/// - `decider: D` ([`Decide`]) decides: a [`KeyedLimiter`], or the service's own.
/// - `reject: Fn(&Denial) -> Response<ResBody>` builds the answer to a denied request, so the
///   embedding service keeps control of its error format and headers.
///
/// An admitted request carries its [`Admission`] in its extensions, from which handlers can set
/// the `X-RateLimit-*` headers.
pub struct RateLimitLayer<D, KF, QF, RF> {
    config: Arc<Config<D, KF, QF, RF>>,
}

struct Config<D, KF, QF, RF> {
    decider: Arc<D>,
    key: KF,
    quota: QF,
    reject: RF,
}

impl<D, KF, QF, RF> RateLimitLayer<D, KF, QF, RF> {
    /// A layer deciding requests with `decider`, which the caller keeps a handle to (to run
    /// [`KeyedLimiter::evict_idle`] periodically, for instance).
    pub fn new(decider: Arc<D>, key: KF, quota: QF, reject: RF) -> Self {
        Self { config: Arc::new(Config { decider, key, quota, reject }) }
    }
}

impl<D, KF, QF, RF> Clone for RateLimitLayer<D, KF, QF, RF> {
    fn clone(&self) -> Self {
        Self { config: Arc::clone(&self.config) }
    }
}

impl<D, KF, QF, RF> fmt::Debug for RateLimitLayer<D, KF, QF, RF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer").finish_non_exhaustive()
    }
}

impl<S, D, KF, QF, RF> Layer<S> for RateLimitLayer<D, KF, QF, RF> {
    type Service = RateLimit<S, D, KF, QF, RF>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit { inner, config: Arc::clone(&self.config) }
    }
}

/// The service made by [`RateLimitLayer`]: denied requests never reach `S`.
///
/// Readiness is the inner service's. The request is decided first and then handed to a clone
/// of the inner service that was ready (the usual tower pattern for a service that awaits before
/// it calls); a denied request leaves that readiness unused, as with tower's own `Filter`.
pub struct RateLimit<S, D, KF, QF, RF> {
    inner: S,
    config: Arc<Config<D, KF, QF, RF>>,
}

impl<S: Clone, D, KF, QF, RF> Clone for RateLimit<S, D, KF, QF, RF> {
    fn clone(&self) -> Self {
        Self { inner: self.inner.clone(), config: Arc::clone(&self.config) }
    }
}

impl<S: fmt::Debug, D, KF, QF, RF> fmt::Debug for RateLimit<S, D, KF, QF, RF> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).finish_non_exhaustive()
    }
}

/// The future of a [`RateLimit`]: the decision, then the inner service's answer.
pub type RateLimitFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B, ResBody, K, D, KF, QF, RF> Service<Request<B>> for RateLimit<S, D, KF, QF, RF>
where
    S: Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
    ResBody: 'static,
    K: Send + 'static,
    D: Decide<K>,
    KF: Fn(&Request<B>) -> Option<K> + Send + Sync + 'static,
    QF: Fn(&K) -> Quota + Send + Sync + 'static,
    RF: Fn(&Denial) -> Response<ResBody> + Send + Sync + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = RateLimitFuture<Response<ResBody>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let Some(key) = (self.config.key)(&request) else {
            return Box::pin(self.inner.call(request));
        };
        // The ready service goes with the request; this one's clone waits for the next.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let config = Arc::clone(&self.config);
        Box::pin(async move {
            let quota = (config.quota)(&key);
            match config.decider.decide(key, quota).await {
                Ok(admission) => {
                    request.extensions_mut().insert(admission);
                    inner.call(request).await
                }
                Err(denial) => Ok((config.reject)(&denial)),
            }
        })
    }
}
