//! Serving the router over TCP, with or without TLS, with the edge's limits (INTERFACE.md §1): a
//! request's head must arrive within 10 s, an idle keep-alive connection closes after 75 s, an
//! address holds at most a bounded number of connections at once, and the answers hyper gives
//! by itself (a malformed request, headers too large, a URI too long) carry the interface's error
//! body and the security headers.
//!
//! One accept loop serves plain TCP and TLS alike: a TLS connection is a TCP connection whose
//! handshake, bounded by the head deadline, comes first; from then on both are the same bytes to
//! the same code. axum's own `serve` sets no timer, so hyper enforces none of these; this loop
//! serves each connection with hyper's HTTP/1 connection directly, through [`Guarded`], a
//! wrapper of the stream that keeps the deadlines (hyper's one header timeout would also close
//! idle connections at 10 s) and rewrites hyper's bodiless refusals. Request bodies have their
//! own deadline in the application (`extract`). Upgraded connections (WebSockets) leave the
//! wrapper's deadlines behind: the event stream keeps its own (INTERFACE.md §9). Every request,
//! whatever its route or transport, then takes the one router.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;

use inbound::Inbound;

use crate::error::ApiError;

mod inbound;

/// The edge's limits.
#[derive(Clone)]
pub struct EdgeLimits {
    /// How long a request's head may take to arrive (from the connection, TLS handshake
    /// included, or from its first byte for the requests after the first).
    pub header_timeout: Duration,
    /// How long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
    /// Most connections one client address (IPv6 by /64) may hold at once; trusted proxies are
    /// not limited.
    pub max_connections_per_address: usize,
    /// Addresses the per-address cap does not apply to (the load balancers).
    pub exempt: Arc<dyn Fn(IpAddr) -> bool + Send + Sync>,
    /// How long in-flight requests may take to finish after the shutdown signal.
    pub drain: Duration,
}

impl std::fmt::Debug for EdgeLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeLimits")
            .field("header_timeout", &self.header_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_connections_per_address", &self.max_connections_per_address)
            .field("drain", &self.drain)
            .finish_non_exhaustive()
    }
}

impl Default for EdgeLimits {
    /// INTERFACE.md §1: heads within 10 s, idle connections closed after 75 s; 256 connections per
    /// address (a browser opens six), a 10 s drain.
    fn default() -> Self {
        Self {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(75),
            max_connections_per_address: 256,
            exempt: Arc::new(|_| false),
            drain: Duration::from_secs(10),
        }
    }
}

/// What can be served: the router (or any service of the same shape).
pub trait App:
    tower::Service<
        axum::http::Request<hyper::body::Incoming>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<T> App for T where
    T: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Serves `app` over plain TCP on `listener` until `shutdown` resolves, then lets in-flight
/// requests finish (at most `limits.drain`).
pub async fn serve<S: App>(
    listener: TcpListener,
    app: S,
    limits: EdgeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    accept_loop(listener, app, limits, None, shutdown).await
}

/// [`serve`] over TLS with `tls` (the same loop, edge and router: only the handshake is added).
/// Connections speak HTTP/1.1, whatever ALPN offers.
pub async fn serve_tls<S: App>(
    listener: TcpListener,
    app: S,
    tls: Arc<ServerConfig>,
    limits: EdgeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    accept_loop(listener, app, limits, Some(TlsAcceptor::from(tls)), shutdown).await
}

async fn accept_loop<S: App>(
    listener: TcpListener,
    app: S,
    limits: EdgeLimits,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut http = http1::Builder::new();
    // hyper's one header timer would cover a head and the idle wait before it alike (and arm a
    // new timer for every request): `Guarded` keeps both deadlines instead.
    // At most 100 headers a request is hyper's default, and left as the default on purpose:
    // naming any number moves the parser's header slots from the stack to a heap vector that
    // is allocated and filled for every request.
    http.header_read_timeout(None).keep_alive(true).max_buf_size(64 * 1024);
    let counts = Arc::new(Mutex::new(HashMap::<IpAddr, usize>::new()));
    let (stop, stopped) = watch::channel(());
    // Every connection holds a receiver of `alive`: the drain waits until none is left.
    let (alive, none_yet) = watch::channel(());
    drop(none_yet);
    tokio::pin!(shutdown);
    loop {
        let (socket, remote) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!("accepting a connection failed: {err}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let connected = Instant::now();
        let _ = socket.set_nodelay(true);
        let Some(slot) = Slot::take(&counts, remote.ip(), &limits) else {
            tokio::spawn(refuse_connection(socket, tls.clone(), limits.max_connections_per_address));
            continue;
        };
        let connection =
            Connection { remote, connected, limits: limits.clone(), http: http.clone(), stopped: stopped.clone() };
        let (alive, app, tls) = (alive.subscribe(), app.clone(), tls.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _alive = alive;
            match tls {
                None => connection.serve(socket, app).await,
                Some(acceptor) => {
                    // The handshake is part of the first head's time.
                    let deadline = connected + limits.header_timeout;
                    match tokio::time::timeout_at(deadline, acceptor.accept(socket)).await {
                        Ok(Ok(stream)) => connection.serve(stream, app).await,
                        Ok(Err(err)) => tracing::debug!("TLS handshake failed: {err}"),
                        Err(_) => tracing::debug!("TLS handshake did not finish within the head deadline"),
                    }
                }
            }
        });
    }
    drop(listener);
    drop(stop);
    let _ = tokio::time::timeout(limits.drain, alive.closed()).await;
    Ok(())
}

/// One accepted connection, until hyper is done with it.
struct Connection {
    remote: SocketAddr,
    connected: Instant,
    limits: EdgeLimits,
    http: http1::Builder,
    stopped: watch::Receiver<()>,
}

impl Connection {
    /// Serves `stream` (the socket, or the TLS session over it) with `app`; at the shutdown
    /// signal, idle keep-alive connections close and a request in flight finishes first.
    async fn serve<T, S>(mut self, stream: T, app: S)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: App,
    {
        let guarded = Guarded::new(stream, &self.limits, self.connected);
        let service =
            TowerToHyperService::new(tower_http::add_extension::AddExtension::new(app, ConnectInfo(self.remote)));
        let connection = self.http.serve_connection(TokioIo::new(guarded), service).with_upgrades();
        tokio::pin!(connection);
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(err) = result {
                    tracing::debug!("connection ended: {err}");
                }
                return;
            }
            _ = self.stopped.changed() => {}
        }
        connection.as_mut().graceful_shutdown();
        let _ = connection.await;
    }
}

/// The answer to a connection over the per-address cap: 429 with the error body (the cap in
/// `details.limit`), counted as an `ip` denial in `icn_gateway_rate_limit_exceeded_total`, then
/// close; over TLS, after a handshake of at most a second.
async fn refuse_connection(socket: TcpStream, tls: Option<TlsAcceptor>, cap: usize) {
    metrics::counter!(crate::limits::METRIC_NAMES.rate_limit_exceeded_total, "layer" => "ip").increment(1);
    match tls {
        None => refuse_on(socket, cap).await,
        Some(acceptor) => {
            if let Ok(Ok(stream)) = tokio::time::timeout(Duration::from_secs(1), acceptor.accept(socket)).await {
                refuse_on(stream, cap).await;
            }
        }
    }
}

async fn refuse_on<T: AsyncWrite + Unpin>(mut stream: T, cap: usize) {
    use tokio::io::AsyncWriteExt;
    let refusal = ApiError::from(gateway_core::Error::RateLimited {
        message: "too many connections from this address".into(),
        layer: gateway_core::RateLimitLayer::Ip,
        limit: cap as u64,
        retry_after_secs: 1,
        count: None,
    });
    let response = canned(429, "Too Many Requests", &refusal.status_and_text().1, "retry-after: 1\r\n");
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(response.as_bytes())).await;
    let _ = stream.shutdown().await;
}

/// One connection's place in its address's count, given back when the connection ends.
struct Slot {
    counts: Arc<Mutex<HashMap<IpAddr, usize>>>,
    key: Option<IpAddr>,
}

impl Slot {
    fn take(counts: &Arc<Mutex<HashMap<IpAddr, usize>>>, ip: IpAddr, limits: &EdgeLimits) -> Option<Self> {
        if (limits.exempt)(ip) {
            return Some(Self { counts: counts.clone(), key: None });
        }
        let key = gateway_limits::ip_key(ip);
        let mut map = counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = map.entry(key).or_insert(0);
        if *count >= limits.max_connections_per_address {
            return None;
        }
        *count += 1;
        Some(Self { counts: counts.clone(), key: Some(key) })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            let mut map = self.counts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(count) = map.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    map.remove(&key);
                }
            }
        }
    }
}

/// A response written on the socket by hand: the error body and the security headers.
fn canned(status: u16, reason: &str, body: &str, extra_headers: &str) -> String {
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\
         cache-control: no-store\r\nx-content-type-options: nosniff\r\nx-frame-options: DENY\r\n\
         content-security-policy: default-src 'self'\r\nreferrer-policy: no-referrer\r\n{extra_headers}\r\n{body}",
        body.len()
    )
}

/// A socket keeping the edge's deadlines and giving hyper's own refusals the error body.
///
/// It follows the request heads through the bytes read ([`Inbound`]) and counts them against
/// the final answers written. While a request waits for its answer, the application times it
/// (the body deadline, the handlers); otherwise the connection waits for a request: for the
/// head under way, its deadline runs from its first byte (the first request's from the
/// connect), and with nothing of one yet, the idle deadline runs from the last answer.
struct Guarded<T> {
    inner: T,
    inbound: Inbound,
    /// Heads seen whose final answer is not written yet.
    unanswered: u64,
    /// Whether the connection is still on its first request (whose head is due from the
    /// connect, not from its first byte).
    first: bool,
    /// Upgraded (a WebSocket): no deadline here any more, and the bytes are not followed.
    upgraded: bool,
    deadline: Option<Pin<Box<Sleep>>>,
    /// When a write that waits gives up ([`Guarded::patiently`]); armed only while one waits.
    write_deadline: Option<Pin<Box<Sleep>>>,
    header_timeout: Duration,
    idle_timeout: Duration,
    /// A rewritten response still to write, and how much of it is written.
    pending: Option<(Vec<u8>, usize)>,
}

impl<T> Guarded<T> {
    /// `connected`: when the connection was accepted, from which its first head is due.
    fn new(inner: T, limits: &EdgeLimits, connected: Instant) -> Self {
        Self {
            inner,
            inbound: Inbound::default(),
            unanswered: 0,
            first: true,
            upgraded: false,
            deadline: Some(Box::pin(tokio::time::sleep_until(connected + limits.header_timeout))),
            header_timeout: limits.header_timeout,
            idle_timeout: limits.idle_timeout,
            pending: None,
            write_deadline: None,
        }
    }

    fn arm(&mut self, at: Instant) {
        match &mut self.deadline {
            Some(sleep) => sleep.as_mut().reset(at),
            None => self.deadline = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }

    /// Follows the bytes a read delivered.
    fn saw(&mut self, bytes: &[u8]) {
        if bytes.is_empty() || self.upgraded {
            return;
        }
        let followed = self.inbound.follow(bytes, Instant::now());
        self.unanswered += followed.heads;
        if let Some(since) = followed.began
            && self.unanswered == 0
            && !self.first
        {
            // A later request's head is due within the header timeout of its first byte.
            self.arm(since + self.header_timeout);
        }
    }

    /// A response head is being written: an upgrade drops the deadlines; a final answer ends
    /// its request, and when no other request waits for one, the connection waits for the next
    /// (the head already under way, or the idle time). An interim answer (hyper's automatic
    /// `100 Continue`) is neither: the request goes on, and its body is the application's to
    /// time; a final answer written in the same buffer behind it still counts.
    fn answering(&mut self, head: &[u8]) {
        let Some(head) = final_answer(head) else { return };
        if head.starts_with(b"HTTP/1.1 101 ") {
            self.upgraded = true;
            self.deadline = None;
            return;
        }
        self.first = false;
        if self.unanswered == 0 {
            // An answer to a head this did not see end: whatever hyper read, it is between
            // requests now.
            self.inbound = Inbound::default();
        }
        self.unanswered = self.unanswered.saturating_sub(1);
        if self.unanswered == 0 {
            if matches!(self.inbound.at, inbound::At::Lost) {
                // The body that was not followed is read: the answer is written.
                self.inbound = Inbound::default();
            }
            let at = match self.inbound.head_since() {
                Some(since) => since + self.header_timeout,
                None => Instant::now() + self.idle_timeout,
            };
            self.arm(at);
        }
    }

    /// Whether the edge times the connection now (no request waits for its answer).
    fn timed(&self) -> bool {
        !self.upgraded && self.unanswered == 0
    }
}

/// The final answer's head in bytes that start with a response head, past any interim (1xx
/// other than 101) answers; `None` when they hold only interim answers.
fn final_answer(mut head: &[u8]) -> Option<&[u8]> {
    while head.starts_with(b"HTTP/1.1 1") && !head.starts_with(b"HTTP/1.1 101 ") {
        let end = memchr::memmem::find(head, b"\r\n\r\n")?;
        head = &head[end + 4..];
    }
    head.starts_with(b"HTTP/1.1 ").then_some(head)
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Guarded<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => {
                if this.timed()
                    && let Some(deadline) = &mut this.deadline
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    if this.inbound.in_head() {
                        // Part of a head arrived: the client is owed an answer, if it still reads.
                        let answer = canned(408, "Request Timeout", &ApiError::HeadTimeout.status_and_text().1, "");
                        let _ = Pin::new(&mut this.inner).poll_write(cx, answer.as_bytes());
                        let _ = Pin::new(&mut this.inner).poll_flush(cx);
                    }
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request head or idle timeout")));
                }
                Poll::Pending
            }
        }
    }
}

/// The statuses hyper answers by itself, without a body, when it cannot parse a request (the
/// application's own answers always carry `x-content-type-options`): status, reason, message.
fn hypers_refusal(head: &[u8]) -> Option<(u16, &'static str, &'static str)> {
    const REFUSALS: [(&[u8], u16, &str, &str); 3] = [
        (b"HTTP/1.1 400 ", 400, "Bad Request", "the request line or a header is malformed"),
        (b"HTTP/1.1 414 ", 414, "URI Too Long", "the request target is too long"),
        (b"HTTP/1.1 431 ", 431, "Request Header Fields Too Large", "the request headers are too large"),
    ];
    let (_, status, reason, message) = REFUSALS.iter().find(|(prefix, ..)| head.starts_with(prefix))?;
    let ours = head.windows(22).any(|w| w.eq_ignore_ascii_case(b"x-content-type-options"));
    (!ours).then_some((*status, *reason, *message))
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Guarded<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = self.write_now(cx, buf);
        self.patiently(cx, polled)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = match self.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_flush(cx),
            other => other,
        };
        self.patiently(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = match self.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut self.inner).poll_shutdown(cx),
            other => other,
        };
        self.patiently(cx, polled)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> Guarded<T> {
    /// A write, flush or shutdown that waits is given the idle timeout to go through: a client
    /// that takes no answers is let go (it would otherwise hold its connection, and its place in
    /// its address's count, for as long as it likes: hyper waits on its writes for ever, and
    /// while an answer waits, the read deadlines do not run). Not after an upgrade: the stream
    /// keeps its own.
    fn patiently<R>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<R>>) -> Poll<io::Result<R>> {
        if polled.is_ready() || self.upgraded {
            if self.write_deadline.is_some() {
                self.write_deadline = None;
            }
            return polled;
        }
        let patience = self.idle_timeout;
        let deadline = self.write_deadline.get_or_insert_with(|| Box::pin(tokio::time::sleep(patience)));
        if deadline.as_mut().poll(cx).is_ready() {
            self.write_deadline = None;
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not take its answer")));
        }
        Poll::Pending
    }

    /// [`AsyncWrite::poll_write`] without the write deadline.
    fn write_now(&mut self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self;
        ready!(this.poll_pending(cx))?;
        // A response head starts every answer; the answer's body chunks never start like one.
        if !this.upgraded && buf.starts_with(b"HTTP/1.1 ") {
            if let Some((status, reason, message)) = hypers_refusal(buf) {
                // hyper's bodiless refusal: the interface's goes out instead, and the original is
                // reported written.
                let body = ApiError::from(gateway_core::Error::bad_request(message)).status_and_text().1;
                this.pending = Some((canned(status, reason, &body, "").into_bytes(), 0));
                // The original is taken now, written or not: offered again after a wait, it
                // would be rewritten, and written, twice. What is left of the rewrite goes out
                // before anything else (every write, flush and shutdown drains it first).
                if let Poll::Ready(Err(err)) = this.poll_pending(cx) {
                    return Poll::Ready(Err(err));
                }
                return Poll::Ready(Ok(buf.len()));
            }
            // Counted once the socket took the head's first bytes: a write that must wait is
            // offered again, and the rest of a head written in part does not start like one.
            let written = ready!(Pin::new(&mut this.inner).poll_write(cx, buf));
            if matches!(written, Ok(n) if n > 0) {
                this.answering(buf);
                // The deadline the answer armed must wake the connection even if hyper does
                // not read again until the client sends something: its timer is registered now.
                if this.timed()
                    && let Some(deadline) = &mut this.deadline
                    && deadline.as_mut().poll(cx).is_ready()
                {
                    cx.waker().wake_by_ref();
                }
            }
            return Poll::Ready(written);
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> Guarded<T> {
    /// Writes what remains of a rewritten response.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
            if *written == bytes.len() {
                self.pending = None;
            }
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket whose writes wait until it is told to take them.
    struct Stalled {
        taking: bool,
    }

    impl AsyncRead for Stalled {
        fn poll_read(self: Pin<&mut Self>, _cx: &mut Context<'_>, _buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Poll::Pending
        }
    }

    impl AsyncWrite for Stalled {
        fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            if self.taking { Poll::Ready(Ok(buf.len())) } else { Poll::Pending }
        }

        fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_write_the_client_does_not_take_gives_up_after_the_idle_timeout() {
        let limits = EdgeLimits { idle_timeout: Duration::from_millis(100), ..EdgeLimits::default() };
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".as_slice();
        let mut guarded = Guarded::new(Stalled { taking: false }, &limits, Instant::now());
        let started = std::time::Instant::now();
        let waited = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| Pin::new(&mut guarded).poll_write(cx, answer)),
        )
        .await
        .expect("the write gives up");
        assert_eq!(waited.unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(100));
        // The same for a flush of a rewritten refusal, and never after an upgrade.
        let mut flushing = Guarded::new(Stalled { taking: false }, &limits, Instant::now());
        flushing.pending = Some((b"HTTP/1.1 400 Bad Request\r\n\r\n".to_vec(), 0));
        let flushed = tokio::time::timeout(
            Duration::from_secs(5),
            std::future::poll_fn(|cx| Pin::new(&mut flushing).poll_flush(cx)),
        )
        .await
        .expect("the flush gives up");
        assert_eq!(flushed.unwrap_err().kind(), io::ErrorKind::TimedOut);
        let mut upgraded = Guarded::new(Stalled { taking: false }, &limits, Instant::now());
        upgraded.upgraded = true;
        let stream = tokio::time::timeout(
            Duration::from_millis(400),
            std::future::poll_fn(|cx| Pin::new(&mut upgraded).poll_write(cx, b"frame")),
        )
        .await;
        assert!(stream.is_err(), "an upgraded connection's writes wait as long as its stream decides");
    }

    #[tokio::test]
    async fn hypers_refusal_offered_again_after_a_wait_is_written_once() {
        let mut guarded = Guarded::new(Stalled { taking: false }, &EdgeLimits::default(), Instant::now());
        let refusal = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        let taken = Pin::new(&mut guarded).poll_write(&mut cx, refusal);
        assert!(matches!(taken, Poll::Ready(Ok(n)) if n == refusal.len()), "taken at once: {taken:?}");
        let rewritten =
            guarded.pending.as_ref().map(|(bytes, _)| bytes.clone()).expect("the error body's answer waits");
        assert!(String::from_utf8_lossy(&rewritten).contains("BAD_REQUEST"));
        guarded.inner.taking = true;
        assert!(matches!(Pin::new(&mut guarded).poll_flush(&mut cx), Poll::Ready(Ok(()))));
        assert!(guarded.pending.is_none(), "written once, by the flush");
    }

    #[tokio::test]
    async fn an_answer_offered_again_after_a_wait_is_counted_once() {
        let mut guarded = Guarded::new(Stalled { taking: false }, &EdgeLimits::default(), Instant::now());
        // Two pipelined heads seen: two answers owed.
        guarded.saw(b"GET /a HTTP/1.1\r\n\r\nGET /b HTTP/1.1\r\n\r\n");
        assert_eq!(guarded.unanswered, 2);
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        for _ in 0..3 {
            assert!(Pin::new(&mut guarded).poll_write(&mut cx, answer).is_pending());
        }
        assert_eq!(guarded.unanswered, 2, "nothing written, nothing answered");
        guarded.inner.taking = true;
        assert!(matches!(Pin::new(&mut guarded).poll_write(&mut cx, answer), Poll::Ready(Ok(n)) if n == answer.len()));
        assert_eq!(guarded.unanswered, 1, "the second head still waits for its answer");
    }

    #[test]
    fn interim_answers_are_looked_past() {
        let cont = b"HTTP/1.1 100 Continue\r\n\r\n".as_slice();
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".as_slice();
        assert_eq!(final_answer(cont), None, "only an interim answer");
        assert_eq!(final_answer(&[cont, ok].concat()), Some(ok), "the final answer behind it");
        assert_eq!(final_answer(&[cont, cont, ok].concat()), Some(ok));
        assert_eq!(final_answer(ok), Some(ok));
        let switching = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".as_slice();
        assert_eq!(final_answer(switching), Some(switching), "an upgrade is final");
        assert_eq!(final_answer(b"HTTP/1.1 100 Contin"), None, "a cut interim head");
    }
}
