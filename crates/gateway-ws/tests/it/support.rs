//! A served event stream over a real store, domain services to produce events, and a
//! tokio-tungstenite client.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use gateway_auth::{IssuedToken, TokenConfig, TokenService};
use gateway_core::{Amount, Clock, CoopId, Did, Role, ScopeSet, SystemClock};
use gateway_domain::coops::{Coops, NewCoop};
use gateway_domain::governance::{Governance, MemoryReceiptKeys, NewProposal};
use gateway_domain::ledger::{Ledger, PaymentRequest};
use gateway_domain::trust::TrustGraph;
use gateway_store::{Store, StoreSpec};
use gateway_ws::protocol::{ClientFrame, ServerFrame};
use gateway_ws::{WsConfig, WsDeps, WsState};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// How long a test waits for any one frame before failing.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy)]
pub enum Backend {
    Memory,
    SqliteFile,
}

/// The domain services that produce events, over one store.
pub struct Domain {
    pub store: Arc<Store>,
    pub coops: Coops,
    pub ledger: Ledger,
    pub governance: Governance,
    /// Alternates the payment direction so balances stay within the credit limit.
    flip: std::sync::atomic::AtomicBool,
}

impl Domain {
    pub async fn over(store: Arc<Store>) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let edges = gateway_domain::ports::TrustReads::all_edges(store.as_ref()).await.unwrap();
        let graph = Arc::new(TrustGraph::new(vec![], 0.9, edges));
        let keys = Arc::new(MemoryReceiptKeys::unavailable("no_keystore"));
        Self {
            coops: Coops::new(store.clone(), store.clone(), store.clone(), clock.clone()),
            ledger: Ledger::new(store.clone(), store.clone(), graph.clone(), clock.clone()),
            governance: Governance::new(store.clone(), store.clone(), graph, keys, clock),
            store,
            flip: Default::default(),
        }
    }

    /// Creates a coop with `did(0)` (admin) and `did(1)`: events 1 and 2.
    pub async fn coop(&self, id: &str) -> CoopId {
        let coop = CoopId::parse(id).unwrap();
        let request = NewCoop { id: None, name: id.into(), coop_type: "worker".into(), description: String::new() };
        self.coops.create(&did(0), &coop, request).await.unwrap();
        self.coops.add_member(&coop, &did(1), Role::Member).await.unwrap();
        coop
    }

    /// Removes `who` from `coop` by an approved proposal in the coop domain: opened at once,
    /// every member's vote for it (a proposal with an effect closes before its end only once
    /// every vote is in), and the admin's close that executes it. Events: proposal created,
    /// opened, the votes, then `MemberRemoved` and the close. Returns the `MemberRemoved` event's
    /// seq.
    pub async fn remove_by_proposal(&self, coop: &CoopId, who: &Did) -> u64 {
        let admin = did(0);
        let request = NewProposal {
            domain_id: gateway_domain::governance::COOP_DOMAIN.to_owned(),
            title: format!("Remove {who}"),
            description: String::new(),
            payload: serde_json::json!({ "type": "membership", "action": "remove", "did": who.as_str() }),
            rule: None,
            voting_duration_secs: None,
        };
        let proposal = self.governance.create_proposal(coop, &admin, request, true).await.unwrap();
        for member in self.coops.members(coop, gateway_core::PageRequest::default()).await.unwrap().0 {
            self.governance.vote(coop, &member.did, &proposal.id, "for").await.unwrap();
        }
        let closed = self.governance.close(coop, Some(&admin), &proposal.id).await.unwrap();
        assert_eq!(closed.outcome, Some(gateway_domain::governance::Outcome::Approved));
        assert!(closed.effect.is_some_and(|e| e.applied), "the removal was applied");
        gateway_domain::ports::EventReads::current_seq(self.store.as_ref(), coop).await.unwrap() - 1
    }

    /// One payment between the two members: one `PaymentCreated` event.
    pub async fn pay(&self, coop: &CoopId) {
        let forward = !self.flip.fetch_xor(true, std::sync::atomic::Ordering::SeqCst);
        let (from, to) = if forward { (did(0), did(1)) } else { (did(1), did(0)) };
        let request = PaymentRequest {
            from: from.to_string(),
            to: to.to_string(),
            amount: Amount::from_units(1),
            currency: None,
            memo: Some("ws test".into()),
            request_signature: None,
        };
        self.ledger.pay(coop, request, None).await.unwrap();
    }
}

/// A served stream.
pub struct Server {
    pub addr: SocketAddr,
    pub state: WsState,
    pub tokens: Arc<TokenService>,
    pub domain: Domain,
    _dir: Option<tempfile::TempDir>,
}

pub fn did(n: u32) -> Did {
    Did::parse(&format!("did:key:z6Mkws{n}")).unwrap()
}

pub fn token_service() -> Arc<TokenService> {
    Arc::new(TokenService::new(TokenConfig::with_secret("w".repeat(32)), Arc::new(SystemClock)).unwrap())
}

impl Server {
    pub async fn start(backend: Backend) -> Self {
        Self::start_with(backend, WsConfig::default(), None).await
    }

    /// Starts a server; `send_buffer` shrinks the kernel send buffer of accepted sockets.
    pub async fn start_with(backend: Backend, config: WsConfig, send_buffer: Option<u32>) -> Self {
        let (spec, dir) = match backend {
            Backend::Memory => (StoreSpec::Memory, None),
            Backend::SqliteFile => {
                let dir = tempfile::tempdir().unwrap();
                (StoreSpec::SqliteFile(dir.path().join("gw.db").display().to_string()), Some(dir))
            }
        };
        let store = Arc::new(Store::open(&spec).await.unwrap());
        let mut server = Self::serve(store, config, send_buffer).await;
        server._dir = dir;
        server
    }

    /// Serves the stream of `store` on 127.0.0.1:0.
    pub async fn serve(store: Arc<Store>, config: WsConfig, send_buffer: Option<u32>) -> Self {
        let tokens = token_service();
        let deps = WsDeps {
            events: store.clone(),
            feed: store.clone(),
            tokens: tokens.clone(),
            membership: store.clone(),
            open_enrollment: false,
            clock: Arc::new(SystemClock),
            misbehavior: None,
        };
        let state = WsState::new(deps, config);
        let socket = TcpSocket::new_v4().unwrap();
        if let Some(size) = send_buffer {
            socket.set_send_buffer_size(size).unwrap();
        }
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener: TcpListener = socket.listen(1024).unwrap();
        let addr = listener.local_addr().unwrap();
        let app = gateway_ws::router(state.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { addr, state, tokens, domain: Domain::over(store).await, _dir: None }
    }

    pub fn token(&self, did: &Did, coop: Option<&CoopId>) -> String {
        self.tokens.issue(did, coop, ScopeSet::EMPTY).token
    }

    pub fn member_token(&self, coop: &CoopId) -> String {
        self.token(&did(1), Some(coop))
    }

    /// A token the server accepts (the same secret) that expires `ttl_secs` from now.
    pub fn short_lived_token(&self, did: &Did, coop: &CoopId, ttl_secs: u64) -> IssuedToken {
        let config = TokenConfig { ttl_secs, ..TokenConfig::with_secret("w".repeat(32)) };
        let tokens = TokenService::new(config, Arc::new(SystemClock)).unwrap();
        tokens.issue(did, Some(coop), ScopeSet::EMPTY)
    }

    pub async fn connect(&self, path: &str) -> Client {
        Client::connect(self.addr, path, None).await
    }
}

/// What a client received.
#[derive(Debug, Clone, PartialEq)]
pub enum Received {
    Frame(ServerFrame),
    Close(u16, String),
    Gone,
}

/// A WebSocket client of the stream.
pub struct Client {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

impl Client {
    /// Connects to `path` (e.g. `/v1/ws/c1`); `recv_buffer` shrinks the kernel receive buffer.
    pub async fn connect(addr: SocketAddr, path: &str, recv_buffer: Option<u32>) -> Self {
        Self::try_connect(addr, path, recv_buffer).await.unwrap_or_else(|(status, body)| panic!("{status}: {body}"))
    }

    /// Connects, or returns the HTTP status and body of the refusal.
    pub async fn try_connect(addr: SocketAddr, path: &str, recv_buffer: Option<u32>) -> Result<Self, (u16, String)> {
        let socket = TcpSocket::new_v4().unwrap();
        if let Some(size) = recv_buffer {
            socket.set_recv_buffer_size(size).unwrap();
        }
        let stream = socket.connect(addr).await.unwrap();
        match tokio_tungstenite::client_async(format!("ws://{addr}{path}"), MaybeTlsStream::Plain(stream)).await {
            Ok((ws, _)) => Ok(Self { ws }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body =
                    response.body().as_ref().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default();
                Err((status, body))
            }
            Err(other) => panic!("connect failed: {other}"),
        }
    }

    pub async fn send(&mut self, frame: &ClientFrame) {
        self.ws.send(Message::text(serde_json::to_string(frame).unwrap())).await.unwrap();
    }

    /// The next frame (pings are answered by tungstenite and skipped).
    pub async fn next(&mut self) -> Received {
        loop {
            let message =
                tokio::time::timeout(FRAME_TIMEOUT, self.ws.next()).await.expect("a frame within the timeout");
            match message {
                Some(Ok(Message::Text(text))) => return Received::Frame(serde_json::from_str(text.as_str()).unwrap()),
                Some(Ok(Message::Close(Some(frame)))) => {
                    return Received::Close(u16::from(frame.code), frame.reason.as_str().to_owned());
                }
                Some(Ok(Message::Close(None))) => return Received::Close(u16::from(CloseCode::Status), String::new()),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(other)) => panic!("unexpected message {other:?}"),
                Some(Err(_)) | None => return Received::Gone,
            }
        }
    }

    pub async fn frame(&mut self) -> ServerFrame {
        match self.next().await {
            Received::Frame(frame) => frame,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// Authenticates and returns `current_seq`.
    pub async fn auth(&mut self, token: String) -> u64 {
        self.send(&ClientFrame::Auth { token }).await;
        match self.frame().await {
            ServerFrame::AuthOk { current_seq, .. } => current_seq,
            other => panic!("expected AuthOk, got {other:?}"),
        }
    }

    /// Reads the end of a socket whose DID was removed from the coop: the events still sent
    /// (returned, by seq), then `Shutdown{membership_revoked, null}`, close 1008, and nothing.
    pub async fn revoked(&mut self) -> Vec<u64> {
        let mut events = Vec::new();
        let end = loop {
            match self.next().await {
                Received::Frame(ServerFrame::Event { seq, .. }) => events.push(seq),
                other => break other,
            }
        };
        let shutdown = ServerFrame::Shutdown { reason: "membership_revoked".into(), reconnect_after_ms: None };
        assert_eq!(end, Received::Frame(shutdown));
        assert_eq!(self.next().await, Received::Close(1008, "membership revoked".into()));
        assert_eq!(self.next().await, Received::Gone);
        events
    }

    /// The next event's sequence number and type.
    pub async fn event(&mut self) -> (u64, String) {
        match self.frame().await {
            ServerFrame::Event { seq, event } => (seq, event.event_type),
            other => panic!("expected an event, got {other:?}"),
        }
    }
}

/// A fresh PostgreSQL schema's URL, or `None` (said loudly) when the variable is unset.
pub async fn postgres_url() -> Option<String> {
    gateway_store::testing::fresh_postgres_schema("ws").await
}
