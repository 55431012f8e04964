//! The trust graph's ports.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{Did, Error};

/// A directed trust edge.
#[derive(Debug, Clone, PartialEq)]
pub struct TrustEdge {
    /// Who trusts.
    pub source: Did,
    /// Whom.
    pub target: Did,
    /// `0 ..= 1`.
    pub score: f64,
    /// Unix seconds.
    pub updated_at: u64,
}

/// Trust edge writes.
#[async_trait]
pub trait TrustTx: Send {
    /// Sets or replaces an edge; returns whether one existed.
    async fn upsert_edge(&mut self, edge: &TrustEdge) -> Result<bool, Error>;
    /// Removes an edge; returns whether it existed.
    async fn delete_edge(&mut self, source: &Did, target: &Did) -> Result<bool, Error>;
}

/// Trust reads.
#[async_trait]
pub trait TrustReads: Send + Sync + fmt::Debug {
    /// Every edge, for building the in-memory graph.
    async fn all_edges(&self) -> Result<Vec<TrustEdge>, Error>;
}
