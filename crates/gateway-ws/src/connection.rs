//! One socket's life: authentication, live delivery from a per-connection cursor, backfill,
//! pings, idle and expiry checks, the slow-consumer limit, and closing.
//!
//! The loop is generic over a `Sink<Frame>` and a `Stream<Item = Result<Frame, E>>`, so tests
//! drive it with channels and a paused Tokio clock; the route module adapts axum's socket to it.
//!
//! Ordering rests on one rule: the connection sends events strictly in `seq` order from its
//! cursor, and nothing else ever puts an event on the socket. Live delivery moves the cursor up
//! to the hub's head; a `Backfill` moves it back to `after_seq` once and fixes a target (the
//! store's current sequence at the request), and live delivery resumes only after
//! `BackfillComplete`, from the target. So a backfill can neither interleave with nor skip live
//! events. Events come from the hub's shared cache when it holds them, otherwise from the store.
//!
//! "The queue" of INTERFACE.md is the distance between the coop's head and the last live event
//! the socket accepted: a connection more than `queue_capacity` live events behind is closed
//! with 1013 `lagged` (events it requested by backfill do not count, as it paces those itself).
//! At most `queue_capacity` event frames are held in memory per connection; the rest stay in the
//! cache or the store until the socket has room.
//!
//! A socket lives no longer than its right to read. When its token expires it gets
//! `Shutdown{"token_expired", 0}` and close 1008. When its DID is removed from the coop (a
//! `MemberRemoved` event for it, whoever removed it and on whichever replica) it gets
//! `Shutdown{"membership_revoked", null}` and close 1008, and never the removal event or any
//! later one. The removal is found two ways: in order, as the cursor reaches the event (from the
//! cache or the store), and ahead of the cursor, from the hub's note of the removals among the
//! events it cached, so that a connection behind its head learns of it as soon as it is
//! committed. Events before the removal that are already queued, or that the cursor reaches
//! within [`REVOKE_FLUSH`], are still sent first; then whatever is left is dropped, so the
//! `Shutdown` frame goes out within a second of the commit. Only removals after the
//! authentication's membership check count (a backfill may well carry an old removal of a DID
//! that was added again since); in development mode (`open_enrollment`) the membership is never
//! checked, and a removal ends nothing. Roles are not cached: the stream asks none, so a role
//! change applies, trivially, from the next event.
//!
//! Time: deadlines use Tokio's clock (paused in tests). Token expiry compares the token's `exp`
//! with the injected wall [`gateway_core::Clock`] when the Tokio timer computed from it fires,
//! so a test moves both clocks, or uses a wall clock that follows Tokio's.
//!
//! This module does not decide who may connect (see `auth`) and does not read signals.

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::ws::Utf8Bytes;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use gateway_core::{CoopId, Membership};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

use crate::auth::{AuthFailure, Session, authenticate, check_membership, removed_member};
use crate::hub::{Subscription, Watch};
use crate::metrics::ConnectionMetrics;
use crate::protocol::{
    CLOSE_GOING_AWAY, CLOSE_INTERNAL, CLOSE_POLICY, CLOSE_TRY_AGAIN_LATER, ClientFrame, Frame, ServerFrame,
    render_event,
};
use crate::shutdown::{ConnectionGuard, ShutdownNotice};
use crate::state::Shared;

/// Control frames (pongs, errors, pings) a connection may queue beyond its event frames before a
/// client that sends without reading is treated as lagged.
const CONTROL_SLACK: usize = 64;

/// Once a connection has seen its DID's removal, how long it may go on writing the events
/// before the removal; then the rest is dropped and `Shutdown` goes out (INTERFACE.md: within
/// 1 s of the removal).
pub(crate) const REVOKE_FLUSH: Duration = Duration::from_millis(500);

/// `Shutdown.reason` when the socket's DID was removed from the coop.
pub(crate) const REASON_MEMBERSHIP_REVOKED: &str = "membership_revoked";
/// `Shutdown.reason` when the socket's token expired.
pub(crate) const REASON_TOKEN_EXPIRED: &str = "token_expired";

/// Serves one socket until it closes. `session` is set when the upgrade already authenticated
/// (`?access_token=`); `path_coop` is the coop of the route (`None` for the short `/ws`).
pub(crate) async fn serve<S, R, E>(
    shared: Arc<Shared>,
    path_coop: Option<CoopId>,
    session: Option<Session>,
    guard: ConnectionGuard,
    sink: S,
    stream: R,
) where
    S: Sink<Frame> + Unpin,
    R: Stream<Item = Result<Frame, E>> + Unpin,
{
    let now = Instant::now();
    let config = &shared.config;
    let mut notices = shared.shutdown.notices();
    let shutdown_signal: ShutdownSignal = Box::pin(async move {
        // Resolves once a notice is out (or the handle is gone); created once per connection so
        // the loop does not re-register with the shutdown channel on every turn.
        let _ = notices.wait_for(Option::is_some).await;
    });
    let connection = Connection {
        auth_deadline: now + config.auth_timeout,
        next_ping: now + config.ping_interval,
        last_seen: now,
        timer: Box::pin(tokio::time::sleep_until(now + config.auth_timeout)),
        timer_at: now + config.auth_timeout,
        shutdown: shared.shutdown.notices(),
        shutdown_signal: Some(shutdown_signal),
        closing: None,
        phase: Phase::AwaitingAuth,
        out: Outbox::default(),
        metrics: ConnectionMetrics::new(),
        path_coop,
        sink,
        stream,
        shared,
    };
    connection.run(session).await;
    drop(guard);
}

type ShutdownSignal = Pin<Box<dyn Future<Output = ()> + Send>>;

struct Connection<S, R> {
    shared: Arc<Shared>,
    sink: S,
    stream: R,
    path_coop: Option<CoopId>,
    phase: Phase,
    out: Outbox,
    /// One timer for every deadline; re-armed lazily (see `arm_timer`).
    timer: Pin<Box<Sleep>>,
    timer_at: Instant,
    /// When the last frame of any kind arrived.
    last_seen: Instant,
    next_ping: Instant,
    auth_deadline: Instant,
    shutdown: watch::Receiver<Option<Arc<ShutdownNotice>>>,
    /// Resolves when shutdown begins; `None` once handled.
    shutdown_signal: Option<ShutdownSignal>,
    /// Set once the connection is closing: the deadline for writing its last frames.
    closing: Option<Instant>,
    metrics: ConnectionMetrics,
}

enum Phase {
    AwaitingAuth,
    Streaming(Streaming),
}

struct Streaming {
    session: Session,
    sub: Subscription,
    /// The last event put in the outbox: the next one sent is `cursor + 1`.
    cursor: u64,
    /// Events after this are live; the lag limit counts only those.
    live_start: u64,
    backfill: Option<Backfill>,
    /// The store had no event at `cursor + 1` although one should exist; wait for the head to
    /// move (or the next ping) before reading again, rather than spinning.
    stalled: bool,
    /// When the token's `exp` is due by the wall clock, as a Tokio instant.
    expires_at: Instant,
    /// The watch for the DID's removal; `None` when the membership was never checked. Boxed:
    /// the phase stays small.
    revocation: Option<Box<Revocation>>,
}

/// A connection's watch for the removal of its DID from the coop.
struct Revocation {
    /// A removal with a greater sequence number ends the socket: the authentication's
    /// membership check saw every earlier one.
    after: u64,
    /// The hub's notes of removals have been looked at up to this sequence number.
    checked: u64,
    /// The removal, once seen.
    removed: Option<Removed>,
}

#[derive(Debug, Clone, Copy)]
struct Removed {
    /// The removal's sequence number: nothing from it on is sent.
    seq: u64,
    /// Until when events before the removal may still be written; `None` once passed.
    flush_by: Option<Instant>,
}

impl Revocation {
    /// Records a removal at `seq` (the earliest one wins).
    fn removed_at(&mut self, seq: u64) {
        match &mut self.removed {
            Some(removed) => removed.seq = removed.seq.min(seq),
            None => self.removed = Some(Removed { seq, flush_by: Some(Instant::now() + REVOKE_FLUSH) }),
        }
    }

    fn removed_seq(&self) -> Option<u64> {
        self.removed.map(|removed| removed.seq)
    }
}

#[derive(Debug, Clone, Copy)]
struct Backfill {
    /// The store's current sequence at the request; `BackfillComplete` follows this event.
    target: u64,
    count: u64,
}

enum Wake<E> {
    Shutdown,
    Sink(Result<Drive, ()>),
    Incoming(Option<Result<Frame, E>>),
    Head,
    Timer,
}

enum Drive {
    /// Everything queued was written and flushed.
    Flushed,
    /// Some frames were written; the socket cannot take more right now.
    Progress,
}

impl<S, R, E> Connection<S, R>
where
    S: Sink<Frame> + Unpin,
    R: Stream<Item = Result<Frame, E>> + Unpin,
{
    async fn run(mut self, session: Option<Session>) {
        if let Some(session) = session {
            self.start_streaming(session).await;
        }
        self.check_shutdown();
        loop {
            if self.closing.is_none() {
                self.fill().await;
                if self.out.overflowed {
                    self.lagged();
                }
            }
            if !self.out.frames.is_empty() {
                // Write at once what was just queued: usually the socket takes it, which saves a
                // turn of the select below per event.
                let Self { out, sink, .. } = &mut self;
                match poll_fn(|cx| Poll::Ready(out.drive(cx, sink))).await {
                    Poll::Ready(Err(())) => return,
                    Poll::Ready(Ok(_)) => {
                        self.report_delivered();
                        if self.closing.is_none() {
                            // The outbox has room again: refill before waiting.
                            continue;
                        }
                    }
                    Poll::Pending => {}
                }
            }
            if self.closing.is_some() && self.out.is_drained() {
                return;
            }
            self.arm_timer();
            let wake = self.wait().await;
            if self.handle(wake).await.is_break() {
                return;
            }
        }
    }

    async fn wait(&mut self) -> Wake<E> {
        let Self { sink, stream, phase, out, timer, shutdown_signal, closing, .. } = self;
        let drive = !out.frames.is_empty() || out.unflushed;
        let watch_head = closing.is_none() && matches!(phase, Phase::Streaming(_));
        tokio::select! {
            () = shutdown_started(shutdown_signal) => Wake::Shutdown,
            result = poll_fn(|cx| out.drive(cx, sink)), if drive => Wake::Sink(result),
            frame = stream.next() => Wake::Incoming(frame),
            () = head_changed(phase), if watch_head => Wake::Head,
            () = timer.as_mut() => Wake::Timer,
        }
    }

    async fn handle(&mut self, wake: Wake<E>) -> ControlFlow<()> {
        match wake {
            Wake::Shutdown => {
                self.shutdown_signal = None;
                self.check_shutdown();
            }
            Wake::Sink(Ok(_)) => self.report_delivered(),
            Wake::Sink(Err(())) => return ControlFlow::Break(()),
            Wake::Incoming(Some(Ok(frame))) => return self.on_frame(frame).await,
            Wake::Incoming(None | Some(Err(_))) => return ControlFlow::Break(()),
            Wake::Head => {
                if let Phase::Streaming(s) = &mut self.phase {
                    s.stalled = false;
                }
            }
            Wake::Timer => return self.on_timer(),
        }
        ControlFlow::Continue(())
    }

    fn report_delivered(&mut self) {
        if self.out.delivered > 0 {
            self.metrics.delivered.increment(self.out.delivered);
            self.out.delivered = 0;
        }
    }

    fn check_shutdown(&mut self) {
        let notice = self.shutdown.borrow_and_update().clone();
        if let Some(notice) = notice {
            self.shutdown_signal = None;
            if self.closing.is_none() {
                let frame = ServerFrame::Shutdown {
                    reason: notice.reason.clone(),
                    reconnect_after_ms: notice.reconnect_after_ms,
                };
                self.begin_close(Some(frame), CLOSE_GOING_AWAY, "shutdown", Some(notice.deadline));
            }
        }
    }

    async fn on_frame(&mut self, frame: Frame) -> ControlFlow<()> {
        self.last_seen = Instant::now();
        if self.closing.is_some() {
            return if matches!(frame, Frame::Close { .. }) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            };
        }
        match frame {
            Frame::Text(text) => match serde_json::from_str::<ClientFrame>(text.as_str()) {
                Ok(ClientFrame::Auth { token }) => self.on_auth(&token).await,
                Ok(ClientFrame::Backfill { after_seq }) => self.on_backfill(after_seq).await,
                Ok(ClientFrame::Ping) => self.out.push_server(&ServerFrame::Pong),
                Err(err) => self.error(format!("malformed frame: {err}")),
            },
            Frame::Binary(_) => {
                self.begin_close(
                    None,
                    crate::protocol::CLOSE_UNSUPPORTED_DATA,
                    "binary frames are not supported",
                    None,
                );
            }
            Frame::Violation { code, reason } => self.begin_close(None, code, reason, None),
            // The WebSocket layer answers pings itself; both count as signs of life.
            Frame::Ping(_) | Frame::Pong(_) => {}
            Frame::Close { .. } => {
                // Let the socket write the close reply it queued, then stop.
                self.out.clear();
                self.out.unflushed = true;
                self.closing = Some(Instant::now() + self.shared.config.close_timeout);
            }
        }
        ControlFlow::Continue(())
    }

    async fn on_auth(&mut self, token: &str) {
        if matches!(self.phase, Phase::Streaming(_)) {
            return self.error("already authenticated".into());
        }
        match authenticate(&self.shared, token, self.path_coop.as_ref()).await {
            Ok(session) => self.start_streaming(session).await,
            Err(failure) => self.refuse(failure),
        }
    }

    fn refuse(&mut self, failure: AuthFailure) {
        match failure {
            AuthFailure::Unavailable(message) => {
                self.begin_close(Some(ServerFrame::Error { message }), CLOSE_INTERNAL, "internal error", None)
            }
            failure => {
                let frame = ServerFrame::AuthError { message: failure.message().to_owned() };
                self.begin_close(Some(frame), CLOSE_POLICY, "authentication failed", None)
            }
        }
    }

    async fn start_streaming(&mut self, session: Session) {
        // Subscribe before reading the current sequence, so that no commit after it is missed.
        let sub = self.shared.hub.subscribe(&session.coop);
        let current = match self.shared.reads.current_seq(&session.coop).await {
            Ok(seq) => seq,
            Err(err) => return self.store_failed(&err),
        };
        if session.membership_checked_at.is_some_and(|checked| current > checked) {
            // Events were committed since the membership check (the upgrade took a while, or
            // the coop is busy): one may be this DID's removal, which the live stream, starting
            // after `current`, would not show. Check again.
            if let Err(failure) = check_membership(&self.shared, &session.coop, &session.did).await {
                return self.refuse(failure);
            }
        }
        self.out.push_server(&ServerFrame::AuthOk {
            did: session.did.to_string(),
            coop_id: session.coop.to_string(),
            current_seq: current,
        });
        self.out.accepted_seq = current;
        let expires_at = self.expiry_instant(session.expires_at);
        let revocation = session
            .membership_checked_at
            .map(|_| Box::new(Revocation { after: current, checked: current, removed: None }));
        self.phase = Phase::Streaming(Streaming {
            session,
            sub,
            cursor: current,
            live_start: current,
            backfill: None,
            stalled: false,
            expires_at,
            revocation,
        });
    }

    async fn on_backfill(&mut self, after_seq: u64) {
        let Self { phase, out, shared, .. } = self;
        let Phase::Streaming(s) = phase else {
            return self.error("authenticate before asking for a backfill".into());
        };
        if s.backfill.is_some() {
            return self.error("a backfill is already in progress: wait for BackfillComplete".into());
        }
        if s.revocation.as_ref().is_some_and(|r| r.removed.is_some()) {
            // The socket is closing for the removal of its DID: nothing more to send.
            return;
        }
        let positions = async {
            let current = shared.reads.current_seq(&s.session.coop).await?;
            let oldest = shared.reads.oldest_seq(&s.session.coop).await?;
            Ok::<_, gateway_core::Error>((current, oldest))
        };
        let (current, oldest) = match positions.await {
            Ok(positions) => positions,
            Err(err) => return self.store_failed(&err),
        };
        let target = current.max(s.cursor);
        let after = after_seq.min(target);
        let pruned = if oldest == 0 { target > after } else { after + 1 < oldest };
        s.stalled = false;
        if pruned {
            // The cursor jumps to the target over events it never looked at.
            if let Err(err) = recheck_membership(shared, s).await {
                return self.store_failed(&err);
            }
            if s.revocation.as_ref().is_some_and(|r| r.removed.is_some()) {
                return;
            }
            // INTERFACE.md §9: no events, and live delivery goes on from the current position.
            s.live_start = target;
            s.cursor = target;
            out.push_server(&ServerFrame::BackfillTruncated {
                oldest_seq: if oldest == 0 { target + 1 } else { oldest },
            });
        } else {
            s.live_start = target;
            s.cursor = after;
            s.backfill = Some(Backfill { target, count: 0 });
        }
    }

    /// Moves events from the cache or the store into the outbox, in order from the cursor, as
    /// far as the outbox has room; checks the lag limit first. Stops before the removal of the
    /// socket's DID and, once every event before it is queued, closes the socket.
    async fn fill(&mut self) {
        let capacity = self.shared.config.queue_capacity;
        let read_batch = self.shared.config.read_batch.max(1) as usize;
        let Self { phase, out, shared, .. } = self;
        let Phase::Streaming(s) = phase else { return };
        let head = s.sub.head();
        if let Some(revocation) = &mut s.revocation
            && revocation.removed.is_none()
            && head > revocation.checked
        {
            // Ahead of the cursor: the hub noted every removal among the events up to `head`
            // that it cached before publishing `head`.
            let watch = Watch { did: s.session.did.as_str(), after: revocation.checked.max(revocation.after) };
            if let Some(seq) = s.sub.removal(watch, head) {
                revocation.removed_at(seq);
            }
            revocation.checked = head;
        }
        let removed = s.revocation.as_deref().and_then(Revocation::removed_seq);
        if removed.is_none() && head.saturating_sub(out.accepted_seq.max(s.live_start)) > capacity as u64 {
            return self.lagged();
        }
        loop {
            let removed = s.revocation.as_deref().and_then(Revocation::removed_seq);
            let mut limit = s.backfill.map_or(head, |b| b.target);
            if let Some(removed) = removed {
                limit = limit.min(removed - 1);
            }
            if s.cursor >= limit {
                if removed.is_some() {
                    return self.revoke(true);
                }
                if let Some(done) = s.backfill.take() {
                    out.push_server(&ServerFrame::BackfillComplete { count: done.count, current_seq: done.target });
                    continue;
                }
                return;
            }
            let room = capacity.saturating_sub(out.events);
            if s.stalled || room == 0 {
                return;
            }
            let want = room.min(read_batch).min((limit - s.cursor) as usize);
            let watch = s.revocation.as_ref().map(|r| Watch { did: s.session.did.as_str(), after: r.after });
            let (cached, removal) = s.sub.read_cached(s.cursor + 1, want, watch, out);
            let pushed = if cached > 0 || removal.is_some() {
                s.cursor += cached as u64;
                if let (Some(revocation), Some(seq)) = (&mut s.revocation, removal) {
                    revocation.removed_at(seq);
                }
                cached as u64
            } else {
                let events = match shared.reads.events_after(&s.session.coop, s.cursor, want as u32).await {
                    Ok(events) => events,
                    Err(err) => return self.store_failed(&err),
                };
                let mut pushed = 0;
                for event in events.iter().take_while(|e| e.seq <= limit) {
                    if event.seq != s.cursor + 1 {
                        break;
                    }
                    if let Some(revocation) = &mut s.revocation
                        && event.seq > revocation.after
                        && removed_member(event).as_deref() == Some(s.session.did.as_str())
                    {
                        revocation.removed_at(event.seq);
                        break;
                    }
                    out.push_event(event.seq, render_event(event));
                    s.cursor = event.seq;
                    pushed += 1;
                }
                if pushed == 0 && s.revocation.as_deref().and_then(Revocation::removed_seq) == Some(s.cursor + 1) {
                    // Stopped at the removal itself.
                    continue;
                }
                if pushed == 0 {
                    // The next event is missing: pruned (tell the client) or not yet visible.
                    let oldest = match events.first() {
                        Some(event) => event.seq,
                        None => match shared.reads.oldest_seq(&s.session.coop).await {
                            Ok(oldest) => oldest,
                            Err(err) => return self.store_failed(&err),
                        },
                    };
                    if oldest != 0 && oldest <= s.cursor + 1 {
                        s.stalled = true;
                        return;
                    }
                    // The cursor jumps over pruned events it never looked at.
                    if let Err(err) = recheck_membership(shared, s).await {
                        return self.store_failed(&err);
                    }
                    if s.revocation.as_ref().is_some_and(|r| r.removed.is_some()) {
                        continue;
                    }
                    let current = head.max(limit);
                    let oldest_seq = if oldest == 0 { current + 1 } else { oldest };
                    s.backfill = None;
                    s.cursor = current;
                    s.live_start = current;
                    out.push_server(&ServerFrame::BackfillTruncated { oldest_seq });
                    continue;
                }
                pushed
            };
            if let Some(backfill) = &mut s.backfill {
                backfill.count += pushed;
            }
        }
    }

    fn on_timer(&mut self) -> ControlFlow<()> {
        let now = Instant::now();
        if let Phase::Streaming(s) = &mut self.phase
            && let Some(removed) = s.revocation.as_mut().and_then(|r| r.removed.as_mut())
            && removed.flush_by.is_some_and(|flush_by| now >= flush_by)
        {
            // The events before the removal had their time: drop what is left of them.
            removed.flush_by = None;
            if self.closing.is_some() {
                self.out.drop_events();
            } else {
                self.revoke(false);
            }
        }
        if let Some(deadline) = self.closing {
            return if now >= deadline { ControlFlow::Break(()) } else { ControlFlow::Continue(()) };
        }
        let config = &self.shared.config;
        if now >= self.last_seen + config.idle_timeout {
            self.begin_close(None, CLOSE_GOING_AWAY, "idle timeout", None);
            return ControlFlow::Continue(());
        }
        let expired = match &self.phase {
            Phase::AwaitingAuth => {
                if now >= self.auth_deadline {
                    let frame = ServerFrame::AuthError { message: "authentication timeout".into() };
                    self.begin_close(Some(frame), CLOSE_POLICY, "authentication timeout", None);
                    return ControlFlow::Continue(());
                }
                false
            }
            Phase::Streaming(s) => now >= s.expires_at && self.shared.clock.now_unix_secs() >= s.session.expires_at,
        };
        if expired {
            let frame = ServerFrame::Shutdown { reason: REASON_TOKEN_EXPIRED.into(), reconnect_after_ms: Some(0) };
            self.begin_close(Some(frame), CLOSE_POLICY, "token expired", None);
            return ControlFlow::Continue(());
        }
        if let Phase::Streaming(s) = &self.phase
            && now >= s.expires_at
        {
            // The wall clock is behind Tokio's: look again when it says the token is due.
            let again = self.expiry_instant(s.session.expires_at).max(now + Duration::from_millis(1));
            if let Phase::Streaming(s) = &mut self.phase {
                s.expires_at = again;
            }
        }
        if now >= self.next_ping {
            self.out.push_control(Frame::Ping(Bytes::new()));
            self.next_ping = now + self.shared.config.ping_interval;
            if let Phase::Streaming(s) = &mut self.phase {
                s.stalled = false;
            }
        }
        ControlFlow::Continue(())
    }

    /// Points the one timer at the earliest deadline. A deadline that moved later (a frame
    /// arrived, so the idle deadline moved) leaves the timer early; it then fires, finds nothing
    /// due and is re-armed, which costs less than re-arming on every frame.
    fn arm_timer(&mut self) {
        let config = &self.shared.config;
        let mut deadline = match self.closing {
            Some(deadline) => deadline,
            None => {
                let base = self.next_ping.min(self.last_seen + config.idle_timeout);
                match &self.phase {
                    Phase::AwaitingAuth => base.min(self.auth_deadline),
                    Phase::Streaming(s) => base.min(s.expires_at),
                }
            }
        };
        if let Phase::Streaming(s) = &self.phase
            && let Some(flush_by) = s.revocation.as_ref().and_then(|r| r.removed).and_then(|r| r.flush_by)
        {
            deadline = deadline.min(flush_by);
        }
        if self.timer.is_elapsed() || deadline < self.timer_at {
            self.timer.as_mut().reset(deadline);
            self.timer_at = deadline;
        }
    }

    fn expiry_instant(&self, expires_at_secs: u64) -> Instant {
        /// Beyond any token lifetime; keeps `Instant` arithmetic from overflowing.
        const FAR: u64 = 10 * 365 * 24 * 3600 * 1000;
        let remaining = expires_at_secs.saturating_mul(1000).saturating_sub(self.shared.clock.now_unix_millis());
        Instant::now() + Duration::from_millis(remaining.min(FAR))
    }

    fn error(&mut self, message: String) {
        self.out.push_server(&ServerFrame::Error { message });
    }

    fn lagged(&mut self) {
        self.metrics.lagged.increment(1);
        if let Phase::Streaming(s) = &self.phase {
            tracing::debug!(coop = %s.session.coop, "event stream: closing a lagged connection");
        }
        self.begin_close(None, CLOSE_TRY_AGAIN_LATER, "lagged", None);
    }

    fn store_failed(&mut self, err: &gateway_core::Error) {
        tracing::warn!("event stream: store read failed, closing the connection: {err}");
        let frame = ServerFrame::Error { message: "the event store is unavailable; reconnect and backfill".into() };
        self.begin_close(Some(frame), CLOSE_INTERNAL, "internal error", None);
    }

    /// The socket's DID was removed from the coop: `Shutdown{membership_revoked}` and close
    /// 1008, after the events before the removal that are queued (`keep_events`; they were the
    /// member's to read) or instead of them (their time is up).
    fn revoke(&mut self, keep_events: bool) {
        if let Phase::Streaming(s) = &self.phase {
            tracing::debug!(coop = %s.session.coop, did = %s.session.did, "event stream: membership revoked");
        }
        if !keep_events {
            self.out.clear();
        }
        let frame = ServerFrame::Shutdown { reason: REASON_MEMBERSHIP_REVOKED.into(), reconnect_after_ms: None };
        self.out.push_server(&frame);
        self.out.push_control(Frame::close(CLOSE_POLICY, "membership revoked"));
        self.closing = Some(Instant::now() + self.shared.config.close_timeout);
    }

    /// Drops whatever is still queued, queues `frame` and a close frame, and gives the socket
    /// until `deadline` (default: the close timeout) to take them.
    fn begin_close(&mut self, frame: Option<ServerFrame>, code: u16, reason: &'static str, deadline: Option<Instant>) {
        self.out.clear();
        if let Some(frame) = frame {
            self.out.push_server(&frame);
        }
        self.out.push_control(Frame::close(code, reason));
        self.closing = Some(deadline.unwrap_or_else(|| Instant::now() + self.shared.config.close_timeout));
    }
}

/// Checks again that the socket's DID is a member, before its cursor jumps over events it never
/// looked at (they may hold its removal); records a removal right after the cursor if not.
async fn recheck_membership(shared: &Shared, s: &mut Streaming) -> Result<(), gateway_core::Error> {
    let Some(revocation) = &mut s.revocation else { return Ok(()) };
    if revocation.removed.is_none()
        && !matches!(shared.membership.membership(&s.session.coop, &s.session.did).await?, Membership::Member(_))
    {
        revocation.removed_at(s.cursor + 1);
    }
    Ok(())
}

async fn shutdown_started(signal: &mut Option<ShutdownSignal>) {
    match signal {
        Some(signal) => signal.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn head_changed(phase: &mut Phase) {
    match phase {
        Phase::Streaming(s) => s.sub.changed().await,
        Phase::AwaitingAuth => std::future::pending().await,
    }
}

/// Frames waiting for the socket, with the accounting the lag limit needs.
#[derive(Default)]
struct Outbox {
    frames: VecDeque<Outgoing>,
    /// Event frames among `frames`.
    events: usize,
    /// Sequence number of the last event frame the socket accepted.
    accepted_seq: u64,
    /// Event frames accepted since the counter was last updated.
    delivered: u64,
    /// Frames were written since the last flush.
    unflushed: bool,
    /// More control frames were queued than allowed: the client sends without reading.
    overflowed: bool,
}

struct Outgoing {
    frame: Frame,
    /// The event's sequence number; 0 for control frames.
    seq: u64,
}

impl Outbox {
    fn push_event(&mut self, seq: u64, frame: Utf8Bytes) {
        self.events += 1;
        self.frames.push_back(Outgoing { frame: Frame::Text(frame), seq });
    }

    fn push_server(&mut self, frame: &ServerFrame) {
        self.push_control(Frame::server(frame));
    }

    fn push_control(&mut self, frame: Frame) {
        if self.frames.len() - self.events >= CONTROL_SLACK {
            self.overflowed = true;
        }
        self.frames.push_back(Outgoing { frame, seq: 0 });
    }

    fn clear(&mut self) {
        self.frames.clear();
        self.events = 0;
        self.overflowed = false;
    }

    /// Drops the queued event frames, keeping the others (a `Shutdown` and a close frame).
    fn drop_events(&mut self) {
        self.frames.retain(|item| item.seq == 0);
        self.events = 0;
    }

    fn is_drained(&self) -> bool {
        self.frames.is_empty() && !self.unflushed
    }

    /// Writes queued frames until the socket pushes back, then flushes.
    fn drive<S: Sink<Frame> + Unpin>(&mut self, cx: &mut Context<'_>, sink: &mut S) -> Poll<Result<Drive, ()>> {
        let mut progressed = false;
        loop {
            if self.frames.is_empty() {
                if !self.unflushed {
                    return Poll::Ready(Ok(Drive::Flushed));
                }
                return match sink.poll_flush_unpin(cx) {
                    Poll::Ready(Ok(())) => {
                        self.unflushed = false;
                        if self.frames.capacity() > 64 {
                            // A burst is over: give back its memory, idle sockets are many.
                            self.frames.shrink_to(16);
                        }
                        Poll::Ready(Ok(Drive::Flushed))
                    }
                    Poll::Ready(Err(_)) => Poll::Ready(Err(())),
                    Poll::Pending if progressed => Poll::Ready(Ok(Drive::Progress)),
                    Poll::Pending => Poll::Pending,
                };
            }
            match sink.poll_ready_unpin(cx) {
                Poll::Ready(Ok(())) => {
                    let Some(item) = self.frames.pop_front() else { continue };
                    if item.seq != 0 {
                        self.events -= 1;
                        self.accepted_seq = item.seq;
                        self.delivered += 1;
                    }
                    if sink.start_send_unpin(item.frame).is_err() {
                        return Poll::Ready(Err(()));
                    }
                    self.unflushed = true;
                    progressed = true;
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Err(())),
                Poll::Pending if progressed => return Poll::Ready(Ok(Drive::Progress)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl Extend<(u64, Utf8Bytes)> for Outbox {
    fn extend<T: IntoIterator<Item = (u64, Utf8Bytes)>>(&mut self, iter: T) {
        for (seq, frame) in iter {
            self.push_event(seq, frame);
        }
    }
}

#[cfg(test)]
mod tests;
