//! Opening a fresh store of each backend, and the domain services over it.

use std::sync::Arc;

use gateway_core::{CoopId, Did, ManualClock, Role};
use gateway_domain::coops::{Coops, NewCoop};
use gateway_domain::ledger::Ledger;
use gateway_domain::notifications::Notifications;
use gateway_domain::trust::{Trust, TrustGraph};
use gateway_store::{Store, StoreSpec};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    SqliteFile,
    Postgres,
}

pub struct Fixture {
    pub store: Arc<Store>,
    pub coops: Coops,
    pub ledger: Ledger,
    pub trust: Trust,
    pub notifications: Notifications,
    pub governance: gateway_domain::governance::Governance,
    /// The receipt keys the governance service signs with (master `[3; 32]`, number 0).
    pub keys: Arc<gateway_domain::governance::MemoryReceiptKeys>,
    pub clock: ManualClock,
    _dir: Option<tempfile::TempDir>,
    pub spec: StoreSpec,
}

/// A fresh PostgreSQL schema's URL, or `None` (said loudly) when the variable is unset.
pub async fn postgres_url() -> Option<String> {
    gateway_store::testing::fresh_postgres_schema("t").await
}

impl Fixture {
    /// A fresh store; `None` when the backend is not configured here.
    pub async fn open(backend: Backend) -> Option<Self> {
        let mut dir = None;
        let spec = match backend {
            Backend::Memory => StoreSpec::Memory,
            Backend::SqliteFile => {
                let d = tempfile::tempdir().unwrap();
                let spec = StoreSpec::SqliteFile(d.path().join("gw.db").display().to_string());
                dir = Some(d);
                spec
            }
            Backend::Postgres => StoreSpec::Postgres(postgres_url().await?),
        };
        Some(Self::at(spec, dir).await)
    }

    pub async fn at(spec: StoreSpec, dir: Option<tempfile::TempDir>) -> Self {
        let store = Arc::new(Store::open(&spec).await.expect("open store"));
        let clock = ManualClock::at_secs(1_800_000_000);
        let shared: Arc<dyn gateway_core::Clock> = Arc::new(clock.clone());
        let edges = gateway_domain::ports::TrustReads::all_edges(store.as_ref()).await.unwrap();
        let graph = Arc::new(TrustGraph::new(vec![], 0.9, edges));
        let keys = Arc::new(gateway_domain::governance::MemoryReceiptKeys::new([3; 32]));
        Self {
            coops: Coops::new(store.clone(), store.clone(), store.clone(), shared.clone()),
            ledger: Ledger::new(store.clone(), store.clone(), graph.clone(), shared.clone()),
            trust: Trust::new(store.clone(), store.clone(), graph.clone(), shared.clone()),
            notifications: Notifications::new(store.clone(), store.clone(), shared.clone()),
            governance: gateway_domain::governance::Governance::new(
                store.clone(),
                store.clone(),
                graph.clone(),
                keys.clone(),
                shared.clone(),
            ),
            keys,
            store,
            clock,
            _dir: dir,
            spec,
        }
    }

    /// A coop with member DIDs `did(0)` (admin) … `did(n-1)`.
    pub async fn coop(&self, id: &str, n: u32) -> CoopId {
        let coop = CoopId::parse(id).unwrap();
        let request = NewCoop { id: None, name: id.into(), coop_type: "worker".into(), description: String::new() };
        self.coops.create(&did(0), &coop, request).await.unwrap();
        for i in 1..n {
            self.coops.add_member(&coop, &did(i), Role::Member).await.unwrap();
        }
        coop
    }
}

pub fn did(n: u32) -> Did {
    Did::parse(&format!("did:key:z6Mktest{n}")).unwrap()
}

/// The settings change that turns `require_signed_requests` on or off.
pub fn requiring_signatures(on: bool) -> gateway_domain::coops::SettingsPatch {
    gateway_domain::coops::SettingsPatch { require_signed_requests: Some(on), ..Default::default() }
}

/// Appends one `UnsignedOperation` event to `coop` in a unit of work: the write of any operation
/// (run under `ports::unsigned::critical`, the write of one that arrived unsigned).
pub async fn append_operation(
    tx: &mut dyn gateway_domain::ports::Tx,
    coop: &CoopId,
) -> Result<(), gateway_core::Error> {
    let data = gateway_core::JsonText::of(&serde_json::json!({ "unsigned": true })).unwrap();
    tx.append_event(coop, "UnsignedOperation", 1_800_000_000, &data).await
}
