//! Trust routes: a DID's score and class, its edges, and setting, replacing or revoking the
//! caller's own edges. Scores are plain `f64` in `0..=1`: they are not money.

use gateway_core::Did;
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::common::{PageRequest, Pagination};
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

/// Which way a listed edge points, seen from the DID whose edges are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeDirection {
    /// From the DID (whom it trusts).
    Outgoing,
    /// To the DID (who trusts it).
    Incoming,
}

/// One item of a DID's edge list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ListedEdge {
    /// The edge.
    #[serde(flatten)]
    pub edge: TrustEdge,
    /// Its direction.
    pub direction: EdgeDirection,
}

/// A page of a DID's edges: outgoing first, then incoming.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustEdges {
    /// The edges of this page.
    pub edges: Vec<ListedEdge>,
    /// Where the page sits.
    pub pagination: Pagination,
}

impl TrustEdges {
    /// The page's edges from the DID.
    pub fn outgoing(&self) -> impl Iterator<Item = &TrustEdge> {
        self.edges.iter().filter(|e| e.direction == EdgeDirection::Outgoing).map(|e| &e.edge)
    }

    /// The page's edges to the DID.
    pub fn incoming(&self) -> impl Iterator<Item = &TrustEdge> {
        self.edges.iter().filter(|e| e.direction == EdgeDirection::Incoming).map(|e| &e.edge)
    }
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

    /// `GET /v1/trust/{did}/edges`: a page of the DID's edges, outgoing first.
    pub async fn trust_edges(&self, did: &Did, page: PageRequest) -> Result<TrustEdges> {
        let call = Call::new(Method::GET, &["v1", "trust", did.as_str(), "edges"])
            .query("limit", page.limit)
            .query("offset", page.offset);
        self.call_json(call).await
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
