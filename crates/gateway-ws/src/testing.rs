//! Test doubles for the unit tests: an in-memory outbox with a commit feed and membership
//! table, plus a socket made of channels and a wall clock that follows Tokio's (paused) clock.
//!
//! Only compiled for tests. The integration tests use the real store instead.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_channel::mpsc;
use futures_util::StreamExt;
use gateway_auth::{TokenConfig, TokenService};
use gateway_core::{Clock, CoopId, Did, Error, Membership, MembershipLookup, Role, ScopeSet};
use gateway_domain::ports::{CoopSignal, EventFeed, EventReads, EventRecord};
use serde_json::json;
use tokio::sync::broadcast;

use crate::auth::Session;
use crate::protocol::{ClientFrame, Frame, ServerFrame};
use crate::state::{WsDeps, WsState};
use crate::{WsConfig, connection};

/// An in-memory outbox, commit feed and membership table.
#[derive(Debug)]
pub(crate) struct FakeStore {
    inner: Mutex<Inner>,
    feed: broadcast::Sender<CoopSignal>,
    reads_after: AtomicU64,
    /// Virtual time each `events_after` takes, so tests can interleave commits with reads.
    read_delay: Mutex<Duration>,
}

#[derive(Debug, Default)]
struct Inner {
    events: HashMap<CoopId, Vec<EventRecord>>,
    counters: HashMap<CoopId, u64>,
    members: HashMap<(CoopId, Did), Role>,
    coops: Vec<CoopId>,
    now: u64,
}

impl FakeStore {
    pub(crate) fn new() -> Arc<Self> {
        Self::with_feed_capacity(1024)
    }

    pub(crate) fn with_feed_capacity(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner { now: 1_700_000_000, ..Inner::default() }),
            feed: broadcast::channel(capacity).0,
            reads_after: AtomicU64::new(0),
            read_delay: Mutex::new(Duration::ZERO),
        })
    }

    /// Appends `n` events in one "transaction" and signals once; returns the last seq.
    pub(crate) fn append(&self, coop: &CoopId, n: u64) -> u64 {
        let seq = self.append_silently(coop, n);
        let _ = self.feed.send(CoopSignal { coop_id: coop.clone(), seq });
        seq
    }

    /// Appends without a signal, as when a NOTIFY is lost.
    pub(crate) fn append_silently(&self, coop: &CoopId, n: u64) -> u64 {
        let mut inner = self.inner.lock().unwrap();
        let now = inner.now;
        let mut seq = *inner.counters.get(coop).unwrap_or(&0);
        for _ in 0..n {
            seq += 1;
            let record = EventRecord {
                coop_id: coop.clone(),
                seq,
                event_type: "PaymentCreated".into(),
                timestamp: now,
                data: json!({ "n": seq }).into(),
            };
            inner.events.entry(coop.clone()).or_default().push(record);
        }
        inner.counters.insert(coop.clone(), seq);
        seq
    }

    /// Removes `did` from `coop` and writes its `MemberRemoved` event in the same step, as the
    /// domain does; signals it unless `silently`; returns the event's seq.
    pub(crate) fn remove_member(&self, coop: &CoopId, did: &Did, silently: bool) -> u64 {
        let seq = {
            let mut inner = self.inner.lock().unwrap();
            inner.members.remove(&(coop.clone(), did.clone()));
            let seq = inner.counters.get(coop).unwrap_or(&0) + 1;
            let record = EventRecord {
                coop_id: coop.clone(),
                seq,
                event_type: "MemberRemoved".into(),
                timestamp: inner.now,
                data: json!({ "did": did.as_str() }).into(),
            };
            inner.events.entry(coop.clone()).or_default().push(record);
            inner.counters.insert(coop.clone(), seq);
            seq
        };
        if !silently {
            let _ = self.feed.send(CoopSignal { coop_id: coop.clone(), seq });
        }
        seq
    }

    pub(crate) fn set_time(&self, unix_secs: u64) {
        self.inner.lock().unwrap().now = unix_secs;
    }

    pub(crate) fn set_read_delay(&self, delay: Duration) {
        *self.read_delay.lock().unwrap() = delay;
    }

    pub(crate) fn reads_after(&self) -> u64 {
        self.reads_after.load(Ordering::SeqCst)
    }

    /// Deletes the events of `coop` below `seq`.
    pub(crate) fn prune_below(&self, coop: &CoopId, seq: u64) {
        if let Some(events) = self.inner.lock().unwrap().events.get_mut(coop) {
            events.retain(|e| e.seq >= seq);
        }
    }

    pub(crate) fn add_member(&self, coop: &CoopId, did: &Did) {
        let mut inner = self.inner.lock().unwrap();
        inner.coops.push(coop.clone());
        inner.members.insert((coop.clone(), did.clone()), Role::Member);
    }

    pub(crate) fn add_coop(&self, coop: &CoopId) {
        self.inner.lock().unwrap().coops.push(coop.clone());
    }
}

#[async_trait]
impl EventReads for FakeStore {
    async fn events_after(&self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error> {
        self.reads_after.fetch_add(1, Ordering::SeqCst);
        let delay = *self.read_delay.lock().unwrap();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let inner = self.inner.lock().unwrap();
        Ok(inner
            .events
            .get(coop)
            .map(|events| events.iter().filter(|e| e.seq > after).take(limit as usize).cloned().collect())
            .unwrap_or_default())
    }

    async fn current_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        Ok(*self.inner.lock().unwrap().counters.get(coop).unwrap_or(&0))
    }

    async fn oldest_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        let inner = self.inner.lock().unwrap();
        Ok(inner.events.get(coop).and_then(|events| events.first()).map_or(0, |e| e.seq))
    }

    async fn prune_events(&self, keep_last: u64, older_than: u64) -> Result<u64, Error> {
        let mut inner = self.inner.lock().unwrap();
        let counters = inner.counters.clone();
        let mut deleted = 0;
        for (coop, events) in &mut inner.events {
            let newest = counters.get(coop).copied().unwrap_or(0);
            let before = events.len();
            events.retain(|e| !(e.timestamp < older_than && e.seq + keep_last <= newest));
            deleted += (before - events.len()) as u64;
        }
        Ok(deleted)
    }
}

impl EventFeed for FakeStore {
    fn subscribe(&self) -> broadcast::Receiver<CoopSignal> {
        self.feed.subscribe()
    }
}

#[async_trait]
impl MembershipLookup for FakeStore {
    async fn membership(&self, coop: &CoopId, did: &Did) -> Result<Membership, Error> {
        let inner = self.inner.lock().unwrap();
        Ok(match inner.members.get(&(coop.clone(), did.clone())) {
            Some(role) => Membership::Member(*role),
            None if inner.coops.contains(coop) => Membership::NotMember,
            None => Membership::NoSuchCoop,
        })
    }
}

/// Unix time that advances with Tokio's clock, so a paused test moves token expiry and socket
/// deadlines together.
#[derive(Debug)]
pub(crate) struct TokioClock {
    start_millis: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub(crate) fn at_secs(unix_secs: u64) -> Self {
        Self { start_millis: unix_secs * 1000, start: tokio::time::Instant::now() }
    }
}

impl Clock for TokioClock {
    fn now_unix_millis(&self) -> u64 {
        self.start_millis + self.start.elapsed().as_millis() as u64
    }
}

/// A stream state over a fake store, with a token service on a Tokio-following clock.
pub(crate) struct Rig {
    pub(crate) store: Arc<FakeStore>,
    pub(crate) state: WsState,
    pub(crate) tokens: Arc<TokenService>,
    pub(crate) coop: CoopId,
    pub(crate) member: Did,
}

pub(crate) fn did(n: u32) -> Did {
    Did::parse(&format!("did:key:z6Mkunit{n}")).unwrap()
}

impl Rig {
    pub(crate) fn new(config: WsConfig) -> Self {
        Self::build(config, false, 3600)
    }

    pub(crate) fn build(config: WsConfig, open_enrollment: bool, ttl_secs: u64) -> Self {
        let store = FakeStore::new();
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::at_secs(1_700_000_000));
        let token_config = TokenConfig { ttl_secs, leeway_secs: 30, ..TokenConfig::with_secret("k".repeat(32)) };
        let tokens = Arc::new(TokenService::new(token_config, clock.clone()).unwrap());
        let coop = CoopId::parse("c1").unwrap();
        let member = did(1);
        store.add_member(&coop, &member);
        let deps = WsDeps {
            events: store.clone(),
            feed: store.clone(),
            tokens: tokens.clone(),
            membership: store.clone(),
            open_enrollment,
            clock,
            misbehavior: None,
        };
        Self { state: WsState::new(deps, config), store, tokens, coop, member }
    }

    pub(crate) fn token(&self, did: &Did, coop: Option<&CoopId>) -> String {
        self.tokens.issue(did, coop, ScopeSet::EMPTY).token
    }

    pub(crate) fn member_token(&self) -> String {
        self.token(&self.member, Some(&self.coop))
    }

    /// Opens a connection on `/v1/ws/{path_coop}` (or `/ws` for `None`).
    pub(crate) fn connect(&self, path_coop: Option<CoopId>) -> Client {
        self.connect_with(path_coop, None, 64)
    }

    /// Opens a connection whose socket holds at most `buffer` unread frames.
    pub(crate) fn connect_with(&self, path_coop: Option<CoopId>, session: Option<Session>, buffer: usize) -> Client {
        let (to_server, from_client) = mpsc::channel::<Result<Frame, std::convert::Infallible>>(16);
        let (to_client, from_server) = mpsc::channel::<Frame>(buffer);
        let shared = self.state.shared.clone();
        let guard = shared.shutdown.track();
        let task = tokio::spawn(connection::serve(shared, path_coop, session, guard, to_client, from_client));
        Client { to_server, from_server, task }
    }
}

/// The client side of a channel socket.
pub(crate) struct Client {
    pub(crate) to_server: mpsc::Sender<Result<Frame, std::convert::Infallible>>,
    pub(crate) from_server: mpsc::Receiver<Frame>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

/// A frame as a test sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Server(ServerFrame),
    Ping,
    Close(u16, String),
    /// The server dropped the socket.
    Gone,
}

impl Client {
    pub(crate) async fn send(&mut self, frame: ClientFrame) {
        let text = serde_json::to_string(&frame).unwrap();
        self.send_raw(Frame::Text(text.into())).await;
    }

    pub(crate) async fn send_raw(&mut self, frame: Frame) {
        use futures_util::SinkExt;
        self.to_server.send(Ok(frame)).await.unwrap();
    }

    pub(crate) async fn next(&mut self) -> Seen {
        match self.from_server.next().await {
            None => Seen::Gone,
            Some(Frame::Text(text)) => Seen::Server(serde_json::from_str(text.as_str()).unwrap()),
            Some(Frame::Ping(_)) => Seen::Ping,
            Some(Frame::Close { code, reason }) => Seen::Close(code, reason.as_str().to_owned()),
            Some(other) => panic!("unexpected frame {other:?}"),
        }
    }

    pub(crate) async fn server_frame(&mut self) -> ServerFrame {
        match self.next().await {
            Seen::Server(frame) => frame,
            other => panic!("expected a server frame, got {other:?}"),
        }
    }

    /// Authenticates and returns `current_seq`.
    pub(crate) async fn auth(&mut self, token: String) -> u64 {
        self.send(ClientFrame::Auth { token }).await;
        match self.server_frame().await {
            ServerFrame::AuthOk { current_seq, .. } => current_seq,
            other => panic!("expected AuthOk, got {other:?}"),
        }
    }

    /// The next event's sequence number.
    pub(crate) async fn event(&mut self) -> u64 {
        match self.server_frame().await {
            ServerFrame::Event { seq, .. } => seq,
            other => panic!("expected an event, got {other:?}"),
        }
    }
}
