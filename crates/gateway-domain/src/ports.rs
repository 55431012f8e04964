//! Storage ports: the small traits through which the domain reaches its store.

use std::fmt;

use async_trait::async_trait;
use gateway_core::Error;

/// Whether the store answers, for health and readiness probes.
#[async_trait]
pub trait StoreHealth: Send + Sync + fmt::Debug {
    /// The backend's name as reported by `/v1/health`: `memory`, `sqlite` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Succeeds when a trivial query round-trips.
    async fn ping(&self) -> Result<(), Error>;
}
