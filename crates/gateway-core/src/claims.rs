//! The claims of the gateway's JSON Web Tokens.
//!
//! This is the token's payload only; issuing and verifying (signatures, algorithms, expiry) is
//! the business of `gateway-auth`.

use serde::{Deserialize, Serialize};

/// The payload of a gateway token. `coop_id` is absent and `scopes` empty for an identity-only
/// token (issued by the interface's alternative verify body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// DID of the subject.
    pub sub: String,
    /// Cooperative context, absent for identity-only tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coop_id: Option<String>,
    /// Granted scopes in wire spelling.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Issued at, Unix seconds.
    pub iat: u64,
    /// Expires at, Unix seconds.
    pub exp: u64,
    /// Issuer, checked on verification.
    pub iss: String,
    /// Audience, checked on verification.
    pub aud: String,
    /// Unique token id.
    pub jti: String,
}
