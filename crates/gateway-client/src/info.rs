//! Health and identity lookups: `GET /v1/health`, the caller's own DID and key
//! (`/identity/did`, `/identity/public-key`, any token) and public DID resolution
//! (`GET /v1/identity/resolve/{did}`). It resolves nothing locally: the gateway's resolver is
//! the authority on which DID methods it accepts.

use gateway_core::Did;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::error::Result;

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `ok`, or `degraded` when the store does not answer.
    pub status: String,
    /// Gateway version.
    pub version: String,
    /// `memory`, `sqlite` or `postgres`.
    pub store: String,
    /// Seconds since the gateway started.
    pub uptime_secs: u64,
}

/// The caller's public key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicKeyInfo {
    /// The caller's DID.
    pub did: String,
    /// 32 bytes, hex.
    pub public_key: String,
    /// Multibase (`z` + base58btc of the multicodec-prefixed key).
    pub public_key_multibase: String,
}

/// A verification method of a DID document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationMethod {
    /// `<did>#<fragment>`.
    pub id: String,
    /// `Ed25519VerificationKey2020`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The DID.
    pub controller: String,
    /// The key, multibase.
    pub public_key_multibase: String,
}

/// A W3C DID document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DidDocument {
    /// JSON-LD contexts.
    #[serde(rename = "@context")]
    pub context: Vec<String>,
    /// The DID.
    pub id: String,
    /// Its keys.
    pub verification_method: Vec<VerificationMethod>,
    /// Method ids usable for authentication.
    pub authentication: Vec<String>,
    /// Method ids usable for assertions.
    pub assertion_method: Vec<String>,
}

#[derive(Deserialize)]
struct OwnDid {
    did: String,
}

impl Client {
    /// `GET /v1/health` (public).
    pub async fn health(&self) -> Result<Health> {
        self.call_json(Call::new(Method::GET, &["v1", "health"]).public()).await
    }

    /// `GET /identity/did`: the DID the current token was issued to.
    pub async fn own_did(&self) -> Result<String> {
        Ok(self.call_json::<OwnDid>(Call::new(Method::GET, &["identity", "did"])).await?.did)
    }

    /// `GET /identity/public-key`: the caller's key.
    pub async fn own_public_key(&self) -> Result<PublicKeyInfo> {
        self.call_json(Call::new(Method::GET, &["identity", "public-key"])).await
    }

    /// `GET /v1/identity/resolve/{did}` (public): the DID document.
    pub async fn resolve_did(&self, did: &Did) -> Result<DidDocument> {
        self.call_json(Call::new(Method::GET, &["v1", "identity", "resolve", did.as_str()]).public()).await
    }
}
