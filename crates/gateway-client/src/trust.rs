//! Trust routes: a DID's score and class, its edges, and setting, replacing or revoking the
//! caller's own edges. Scores are plain `f64` in `0..=1`: they are not money.

use gateway_core::Did;
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::error::Result;

/// A DID's trust score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustScore {
    /// The DID.
    pub did: String,
    /// `0..=1`.
    pub score: f64,
    /// `Isolated`, `Known`, `Partner` or `Federated`.
    pub class: String,
}

/// One trust edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustEdge {
    /// Who trusts.
    pub source_did: String,
    /// Whom.
    pub target_did: String,
    /// `0..=1`.
    pub score: f64,
    /// Unix seconds.
    pub updated_at: u64,
}

/// A DID's edges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustEdges {
    /// The DID.
    pub did: String,
    /// Edges from it.
    pub outgoing: Vec<TrustEdge>,
    /// Edges to it.
    pub incoming: Vec<TrustEdge>,
}

/// The answer of setting an edge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EdgeUpdate {
    /// The edge as stored.
    pub edge: TrustEdge,
    /// `true` when an earlier edge was replaced (200), `false` when it is new (201).
    pub replaced: bool,
}

impl Client {
    /// `GET /v1/trust/{did}/score`.
    pub async fn trust_score(&self, did: &Did) -> Result<TrustScore> {
        self.call_json(Call::new(Method::GET, &["v1", "trust", did.as_str(), "score"])).await
    }

    /// `GET /v1/trust/{did}/edges`.
    pub async fn trust_edges(&self, did: &Did) -> Result<TrustEdges> {
        self.call_json(Call::new(Method::GET, &["v1", "trust", did.as_str(), "edges"])).await
    }

    /// `POST /v1/trust/edges`: sets or replaces the caller's edge to `target`.
    pub async fn set_trust(&self, target: &Did, score: f64) -> Result<EdgeUpdate> {
        let body = serde_json::json!({ "target_did": target.as_str(), "score": score });
        let answer = self.send(Call::new(Method::POST, &["v1", "trust", "edges"]).json(&body)?).await?;
        Ok(EdgeUpdate { edge: answer.json()?, replaced: answer.status == StatusCode::OK })
    }

    /// `DELETE /v1/trust/edges/{did}`: revokes the caller's edge to `target`.
    pub async fn revoke_trust(&self, target: &Did) -> Result<()> {
        self.call_empty(Call::new(Method::DELETE, &["v1", "trust", "edges", target.as_str()])).await
    }
}
