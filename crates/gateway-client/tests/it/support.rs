//! A real gateway (the `gateway-http` app as gatewayd serves it, over an in-memory store) served
//! on 127.0.0.1:0, and SDK clients logged in to it.

use std::sync::Arc;
use std::time::Duration;

use gateway_auth::TokenConfig;
use gateway_client::{Client, Identity, MEMBER_SCOPES, NewCoop, RetryPolicy};
use gateway_core::{CoopId, ManualClock, Scope};
use gateway_http::state::AssembleOptions;
use gateway_http::{CorsMode, HttpConfig};
use gateway_store::{Store, StoreSpec};

pub const SECRET: &str = "client-test-secret-client-test-secret";
pub const START: u64 = 1_800_000_000;

pub struct Gateway {
    pub url: String,
    pub clock: ManualClock,
    /// The app's state: `state.log.checkpoint(&coop)` signs a coop's checkpoint on demand (no
    /// background checkpointer runs here).
    pub state: gateway_http::AppState,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Gateway {
    /// A gateway without open enrollment (the production policy) where everyone has trust 0.9.
    pub async fn start() -> Self {
        let clock = ManualClock::at_secs(START);
        let store = Arc::new(Store::open(&StoreSpec::Memory).await.unwrap());
        let keys = gateway_domain::governance::MemoryReceiptKeys::new([77; 32]);
        let options = AssembleOptions {
            token: TokenConfig::with_secret(SECRET),
            challenge_ttl_secs: 300,
            open_enrollment: false,
            trust_anchors: vec![],
            trust_default: 0.9,
            trusted_proxies: vec![],
            http: HttpConfig { cors: CorsMode::Development, tls: false, version: "test", ..HttpConfig::default() },
            clock: Arc::new(clock.clone()),
            limiter_clock: Arc::new(gateway_limits::ManualClock::new()),
            membership_ttl: Duration::ZERO,
            receipt_keys: Arc::new(keys),
            log: gateway_domain::log::LogConfig::default(),
            cluster: None,
            nonces: None,
        };
        let state = gateway_http::state::assemble(store, options).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = gateway_http::router(state.clone());
        let task = tokio::spawn(async move {
            let _ = gateway_http::serve(listener, app, std::future::pending()).await;
        });
        Self { url, clock, state, task }
    }

    /// A client sharing the gateway's clock, without retries (tests see every answer).
    pub fn client(&self) -> Client {
        Client::builder(&self.url).clock(Arc::new(self.clock.clone())).retry(RetryPolicy::none()).build().unwrap()
    }

    /// Creates `coop` with an admin (all scopes) and members (member scopes); returns their
    /// logged-in clients and identities.
    pub async fn coop(&self, coop: &str, members: usize) -> (Member, Vec<Member>) {
        let coop_id = CoopId::parse(coop).unwrap();
        let admin = Member::new(self.client(), Identity::generate(), coop_id.clone());
        admin.client.login(admin.identity.clone(), coop_id.clone(), &gateway_client::BOOTSTRAP_SCOPES).await.unwrap();
        admin
            .client
            .create_coop(&NewCoop {
                id: None,
                name: coop.into(),
                coop_type: "worker".into(),
                description: "test".into(),
            })
            .await
            .unwrap();
        admin.client.login(admin.identity.clone(), coop_id.clone(), &Scope::ALL).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..members {
            let member = Member::new(self.client(), Identity::generate(), coop_id.clone());
            admin.client.add_member(&coop_id, member.identity.did(), None).await.unwrap();
            member.client.login(member.identity.clone(), coop_id.clone(), &MEMBER_SCOPES).await.unwrap();
            out.push(member);
        }
        (admin, out)
    }
}

pub struct Member {
    pub client: Client,
    pub identity: Identity,
    pub coop: CoopId,
}

impl Member {
    fn new(client: Client, identity: Identity, coop: CoopId) -> Self {
        Self { client, identity, coop }
    }
}
