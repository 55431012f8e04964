//! The shared application state handed to every handler, and its configuration.
//!
//! One cheap-to-clone [`AppState`] is built by the binary; handlers ask for the parts they need
//! through `FromRef`. Nothing here is global.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::FromRef;
use axum::http::HeaderValue;
use gateway_auth::Authenticator;
use gateway_core::{Clock, DidResolver};
use gateway_domain::StoreHealth;

/// Cross-origin policy.
#[derive(Debug, Clone)]
pub enum CorsMode {
    /// Any origin, method and header (local development).
    Development,
    /// Only the configured origin (none: no cross-origin access), methods GET, POST, PUT,
    /// DELETE, headers Authorization and Content-Type, max age 3600 s.
    Production {
        /// The one allowed origin.
        origin: Option<HeaderValue>,
    },
}

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Cross-origin policy.
    pub cors: CorsMode,
    /// Whether the API is served over TLS (adds `Strict-Transport-Security`).
    pub tls: bool,
    /// Version reported by the health route.
    pub version: &'static str,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            cors: CorsMode::Production { origin: None },
            tls: false,
            version: env!("CARGO_PKG_VERSION"),
        }
    }
}

/// Everything the handlers share.
#[derive(Clone, FromRef)]
pub struct AppState {
    /// Login flow and token verification.
    pub auth: Authenticator,
    /// DID → key resolution, for the identity routes.
    pub resolver: Arc<dyn DidResolver>,
    /// Wall clock.
    pub clock: Arc<dyn Clock>,
    /// Store reachability for health and readiness.
    pub store_health: Arc<dyn StoreHealth>,
    /// HTTP settings.
    pub config: Arc<HttpConfig>,
    /// Start time, for `uptime_secs`.
    pub started_at: Instant,
}

impl fmt::Debug for AppState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppState")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}
