//! The evidence a signed request leaves on what it created (INTERFACE.md §11): enough for anyone to
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
    /// The exact body bytes that were signed (their digest is `content_digest`), standard
    /// base64; `""` for a request without a body. It is what ties the evidence to the record:
    /// a checker recomputes the digest from it and compares the record's fields with it.
    /// `None` only on evidence kept before the gateway stored bodies. Shared, not copied: the
    /// items of one signed batch all hold the same body.
    #[serde(default)]
    pub body: Option<std::sync::Arc<str>>,
}

impl RequestSignature {
    /// The evidence without its `body`, serialised with the same field names: what an event
    /// carries (a signed batch's body would otherwise travel once per payment), and what the
    /// store keeps beside a record, whose body it keeps once per signed request.
    pub fn without_body(&self) -> EvidenceWithoutBody<'_> {
        EvidenceWithoutBody {
            signature_input: &self.signature_input,
            signature: &self.signature,
            content_digest: self.content_digest.as_deref(),
            method: &self.method,
            authority: &self.authority,
            path: &self.path,
            query: self.query.as_deref(),
        }
    }
}

/// A [`RequestSignature`] without its `body` ([`RequestSignature::without_body`]): it
/// serialises as the evidence minus that field, and deserialises as a [`RequestSignature`]
/// whose `body` is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EvidenceWithoutBody<'a> {
    /// [`RequestSignature::signature_input`].
    pub signature_input: &'a str,
    /// [`RequestSignature::signature`].
    pub signature: &'a str,
    /// [`RequestSignature::content_digest`].
    pub content_digest: Option<&'a str>,
    /// [`RequestSignature::method`].
    pub method: &'a str,
    /// [`RequestSignature::authority`].
    pub authority: &'a str,
    /// [`RequestSignature::path`].
    pub path: &'a str,
    /// [`RequestSignature::query`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<&'a str>,
}
