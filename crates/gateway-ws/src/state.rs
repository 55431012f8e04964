//! The stream's state: the ports it reads through, its configuration, the hub and the shutdown
//! handle, built once by the binary.
//!
//! It holds no store or HTTP type: the binary injects the store behind the domain's ports.

use std::fmt;
use std::sync::Arc;

use gateway_auth::TokenService;
use gateway_core::{Clock, MembershipLookup};
use gateway_domain::ports::{EventFeed, EventReads};

use crate::config::WsConfig;
use crate::hub::{Hub, HubSettings};
use crate::shutdown::ShutdownHandle;

/// What the stream needs from the rest of the gateway.
#[derive(Clone)]
pub struct WsDeps {
    /// The outbox, read by sequence number: the truth of what a client receives.
    pub events: Arc<dyn EventReads>,
    /// Commit signals (in-process, and from other replicas over LISTEN/NOTIFY).
    pub feed: Arc<dyn EventFeed>,
    /// Verifies the tokens clients present.
    pub tokens: Arc<TokenService>,
    /// Whether a token's subject belongs to the coop.
    pub membership: Arc<dyn MembershipLookup>,
    /// Development mode: any valid token for a coop may follow its stream, member or not.
    pub open_enrollment: bool,
    /// Wall-clock time, for token expiry on open sockets; the same clock the token service
    /// uses, so that a manual clock in tests moves both.
    pub clock: Arc<dyn Clock>,
    /// Where protocol violations are counted against the client's address (the gateway's
    /// quarantine); `None` counts only the metric.
    pub misbehavior: Option<Arc<gateway_limits::Misbehavior<Arc<dyn gateway_limits::Clock>>>>,
}

impl fmt::Debug for WsDeps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WsDeps").field("open_enrollment", &self.open_enrollment).finish_non_exhaustive()
    }
}

/// The event stream's state; cheap to clone. Build it once per process with [`WsState::new`]
/// and serve it with [`crate::router`].
#[derive(Clone, Debug)]
pub struct WsState {
    pub(crate) shared: Arc<Shared>,
}

/// Everything a connection reaches.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) reads: Arc<dyn EventReads>,
    pub(crate) tokens: Arc<TokenService>,
    pub(crate) membership: Arc<dyn MembershipLookup>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) open_enrollment: bool,
    pub(crate) config: WsConfig,
    pub(crate) misbehavior: Option<Arc<gateway_limits::Misbehavior<Arc<dyn gateway_limits::Clock>>>>,
    pub(crate) hub: Hub,
    pub(crate) shutdown: ShutdownHandle,
}

impl WsState {
    /// Builds the state and starts the hub's signal task (so it must be called within a Tokio
    /// runtime). The hub subscribes to the feed here, before any client connects, so no commit
    /// signal after this call is missed.
    pub fn new(deps: WsDeps, config: WsConfig) -> Self {
        let settings = HubSettings {
            read_batch: config.read_batch.max(1),
            cache_events: config.cache_events,
            cache_bytes: config.cache_bytes,
            poll_interval: config.poll_interval,
        };
        let hub = Hub::start(deps.events.clone(), deps.feed.as_ref(), settings);
        Self {
            shared: Arc::new(Shared {
                reads: deps.events,
                tokens: deps.tokens,
                membership: deps.membership,
                clock: deps.clock,
                open_enrollment: deps.open_enrollment,
                misbehavior: deps.misbehavior,
                config,
                hub,
                shutdown: ShutdownHandle::new(),
            }),
        }
    }

    /// The handle that drains this state's sockets at shutdown.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.shared.shutdown.clone()
    }

    /// The configuration in force.
    pub fn config(&self) -> &WsConfig {
        &self.shared.config
    }
}
