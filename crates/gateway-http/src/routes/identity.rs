//! Identity routes: the caller's own DID and key, and public DID resolution.

use axum::extract::State;
use gateway_core::{Did, DidResolver, Error};
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

use crate::caller::{Authorized, scopes::AnyToken};
use crate::error::ApiResult;
use crate::extract::{Json, Path};

/// `GET /identity/did` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct DidResponse {
    /// The caller's DID.
    pub did: String,
}

/// `GET /identity/public-key` answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicKeyResponse {
    /// The caller's DID.
    pub did: String,
    /// Ed25519 public key, 32 bytes hex.
    pub public_key: String,
    /// The key as multibase (`z` + base58btc of the multicodec-prefixed key).
    pub public_key_multibase: String,
}

/// A verification method of a DID document.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationMethod {
    /// Method id, `<did>#<fragment>`.
    pub id: String,
    /// Always `Ed25519VerificationKey2020`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The DID.
    pub controller: String,
    /// The key, multibase.
    pub public_key_multibase: String,
}

/// A W3C DID document.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DidDocument {
    /// JSON-LD contexts.
    #[serde(rename = "@context")]
    pub context: Vec<&'static str>,
    /// The DID.
    pub id: String,
    /// Its one Ed25519 key.
    pub verification_method: Vec<VerificationMethod>,
    /// Methods usable for authentication.
    pub authentication: Vec<String>,
    /// Methods usable for assertions.
    pub assertion_method: Vec<String>,
}

/// The caller's DID.
#[utoipa::path(get, path = "/identity/did", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = DidResponse), (status = 401, body = crate::openapi::ErrorBody)))]
pub async fn own_did(caller: Authorized<AnyToken>) -> Json<DidResponse> {
    Json(DidResponse { did: caller.did.to_string() })
}

/// The caller's public key.
#[utoipa::path(get, path = "/identity/public-key", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = PublicKeyResponse), (status = 401, body = crate::openapi::ErrorBody)))]
pub async fn own_public_key(
    State(resolver): State<Arc<dyn DidResolver>>,
    caller: Authorized<AnyToken>,
) -> ApiResult<Json<PublicKeyResponse>> {
    let key = resolver.resolve(&caller.did)?;
    Ok(Json(PublicKeyResponse {
        did: caller.did.to_string(),
        public_key: key.to_hex(),
        public_key_multibase: key.to_multibase(),
    }))
}

/// Resolves a DID to its DID document (public).
#[utoipa::path(get, path = "/v1/identity/resolve/{did}", tag = "identity",
    params(("did" = String, Path, description = "The DID to resolve")),
    responses((status = 200, body = DidDocument),
              (status = 400, description = "Invalid DID or unsupported method", body = crate::openapi::ErrorBody)))]
pub async fn resolve(
    State(resolver): State<Arc<dyn DidResolver>>,
    Path(did): Path<String>,
) -> ApiResult<Json<DidDocument>> {
    let did = Did::parse(&did).map_err(|e| Error::bad_request_field("did", format!("invalid DID: {e}")))?;
    let key = resolver.resolve(&did)?;
    let multibase = key.to_multibase();
    let fragment = if did.method() == "key" { did.method_specific_id().to_owned() } else { "key-1".to_owned() };
    let method_id = format!("{did}#{fragment}");
    Ok(Json(DidDocument {
        context: vec!["https://www.w3.org/ns/did/v1", "https://w3id.org/security/suites/ed25519-2020/v1"],
        id: did.to_string(),
        verification_method: vec![VerificationMethod {
            id: method_id.clone(),
            kind: "Ed25519VerificationKey2020",
            controller: did.to_string(),
            public_key_multibase: multibase,
        }],
        authentication: vec![method_id.clone()],
        assertion_method: vec![method_id],
    }))
}
