//! The evidence a signed request leaves on what it created (contract 11): enough for anyone to
//! verify offline that the member signed it, with nothing but the member's DID.

use serde::{Deserialize, Serialize};

/// A request signature as received: the selected `Signature-Input` and `Signature` members and
/// the request parts they cover. Payments and votes made by a signed request carry it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestSignature {
    /// The `Signature-Input` member that was verified, `label=(…);created=…;…`.
    pub signature_input: String,
    /// The matching `Signature` member, `label=:base64:`.
    pub signature: String,
    /// The request's `Content-Digest` field (`sha-256=:base64:`), when it had a body.
    pub content_digest: Option<String>,
    /// The request method.
    pub method: String,
    /// The `Host` the gateway received (`@authority`).
    pub authority: String,
    /// The request path (`@path`).
    pub path: String,
    /// The query, without `?`, when the request target had one (`@query`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
}
