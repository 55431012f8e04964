//! Login routes (`POST /v1/auth/challenge`, `POST /v1/auth/verify`) and the [`Session`] a login
//! yields.
//!
//! [`crate::Client::login`] runs the whole exchange; the raw routes are here for callers that
//! sign elsewhere (a hardware key, another process). Token renewal lives in the client.

use gateway_core::Did;
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::error::Result;

/// A challenge to sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// 32 random bytes, hex; sign its UTF-8 bytes.
    pub nonce: String,
    /// Seconds until it expires (300).
    pub expires_in: u64,
    /// Opaque id of this challenge, echoed on verify so the gateway tries only this one.
    pub challenge_id: String,
}

/// The two verify bodies the gateway accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum VerifyRequest {
    /// A token for a cooperative with scopes.
    Scoped {
        /// The DID that signed.
        did: String,
        /// Hex Ed25519 signature of the nonce.
        signature: String,
        /// Cooperative context.
        coop_id: String,
        /// Requested scopes.
        scopes: Vec<String>,
        /// The challenge signed; without it every outstanding challenge of the DID is tried.
        #[serde(skip_serializing_if = "Option::is_none")]
        challenge_id: Option<String>,
    },
    /// The interface's alternative body: an identity-only token (no coop, no scopes).
    IdentityOnly {
        /// The DID that signed.
        did: String,
        /// The challenge signed.
        challenge_id: String,
        /// Hex Ed25519 signature of the nonce.
        signature: String,
    },
}

/// An issued token as the gateway returns it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct TokenResponse {
    /// The JWT.
    pub token: String,
    /// Always `Bearer`.
    pub token_type: String,
    /// Seconds until expiry.
    pub expires_in: u64,
    /// Expiry, Unix seconds.
    pub expires_at: u64,
    /// Granted scopes.
    pub scopes: Vec<String>,
}

impl std::fmt::Debug for TokenResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenResponse").field("expires_at", &self.expires_at).field("scopes", &self.scopes).finish()
    }
}

/// A token with what is known about it: enough to reuse it later (e.g. from a cache file) and
/// to know when to renew it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The JWT.
    pub token: String,
    /// Expiry, Unix seconds.
    pub expires_at: u64,
    /// Granted scopes.
    pub scopes: Vec<String>,
    /// The token's cooperative; `None` for identity-only tokens.
    pub coop_id: Option<String>,
    /// The DID the token was issued to.
    pub did: String,
}

impl std::fmt::Debug for Session {
    /// Everything but the token, which is a credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("did", &self.did)
            .field("coop_id", &self.coop_id)
            .field("scopes", &self.scopes)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Whether the token expires within `margin_secs` of `now` (or already has).
    pub fn expires_within(&self, now: u64, margin_secs: u64) -> bool {
        self.expires_at <= now.saturating_add(margin_secs)
    }
}

impl Client {
    /// `POST /v1/auth/challenge`: a single-use nonce for `did`.
    pub async fn challenge(&self, did: &Did) -> Result<Challenge> {
        let call = Call::new(reqwest::Method::POST, &["v1", "auth", "challenge"])
            .public()
            .json(&serde_json::json!({ "did": did.as_str() }))?;
        self.send_public(call).await?.json()
    }

    /// `POST /v1/auth/verify` with either body form. Does not change the client's session; use
    /// [`Client::set_session`] to adopt the token.
    pub async fn verify(&self, request: &VerifyRequest) -> Result<TokenResponse> {
        let call = Call::new(reqwest::Method::POST, &["v1", "auth", "verify"]).public().json(request)?;
        self.send_public(call).await?.json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn verify_bodies_have_the_contract_shapes() {
        let scoped = VerifyRequest::Scoped {
            did: "did:key:z6Mk".into(),
            signature: "ab".into(),
            coop_id: "c1".into(),
            scopes: vec!["ledger:read".into()],
            challenge_id: None,
        };
        assert_eq!(
            serde_json::to_value(&scoped).unwrap(),
            json!({"did": "did:key:z6Mk", "signature": "ab", "coop_id": "c1", "scopes": ["ledger:read"]})
        );
        let identity = VerifyRequest::IdentityOnly {
            did: "did:key:z6Mk".into(),
            challenge_id: "ch".into(),
            signature: "ab".into(),
        };
        assert_eq!(
            serde_json::to_value(&identity).unwrap(),
            json!({"did": "did:key:z6Mk", "challenge_id": "ch", "signature": "ab"})
        );
    }

    #[test]
    fn sessions_expire_within_a_margin() {
        let session =
            Session { token: "t".into(), expires_at: 1_000, scopes: vec![], coop_id: None, did: "did:key:z".into() };
        assert!(!session.expires_within(900, 60));
        assert!(session.expires_within(940, 60));
        assert!(session.expires_within(2_000, 0));
        assert!(!format!("{session:?}").contains("\"t\""));
    }
}
