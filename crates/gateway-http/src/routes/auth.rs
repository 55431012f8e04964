//! `POST /v1/auth/challenge` and `POST /v1/auth/verify`: DID challenge-response login.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use gateway_auth::{Authenticator, LoginRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::extract::Json;

/// Challenge request.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ChallengeRequest {
    /// The DID that will sign, `did:key:z6Mk…` or `did:icn:z…`.
    pub did: String,
}

/// A challenge to sign.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChallengeResponse {
    /// 32 random bytes, hex; sign its UTF-8 bytes (or its 32 decoded bytes) with the DID's key.
    pub nonce: String,
    /// Seconds until the challenge expires (300).
    pub expires_in: u64,
    /// Opaque id of this challenge, optionally echoed on verify.
    pub challenge_id: String,
}

/// Verify request. Without `coop_id` and `scopes` the token is identity-only.
#[derive(Debug, Deserialize, ToSchema)]
pub struct VerifyRequest {
    /// The DID that signed.
    pub did: String,
    /// Hex Ed25519 signature (128 hex characters).
    pub signature: String,
    /// Cooperative context of the token.
    #[serde(default)]
    pub coop_id: Option<String>,
    /// Requested scopes, e.g. `["ledger:read"]`.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// The challenge signed (consumed, success or not); without it the DID's outstanding
    /// challenges are tried and only the one the signature verifies is consumed.
    #[serde(default)]
    pub challenge_id: Option<String>,
}

/// An issued token.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenResponse {
    /// The JWT, for `Authorization: Bearer …`.
    pub token: String,
    /// Always `Bearer`.
    pub token_type: &'static str,
    /// Seconds until expiry.
    pub expires_in: u64,
    /// Expiry, Unix seconds.
    pub expires_at: u64,
    /// Granted scopes.
    pub scopes: Vec<String>,
}

/// Issues a single-use challenge for a DID.
#[utoipa::path(post, path = "/v1/auth/challenge", tag = "auth", request_body = ChallengeRequest,
    responses((status = 200, body = ChallengeResponse),
              (status = 400, description = "Invalid DID or unsupported DID method", body = crate::openapi::ErrorBody),
              (status = 429, description = "IP rate limit", body = crate::openapi::ErrorBody)))]
pub async fn challenge(
    State(auth): State<Authenticator>,
    Json(request): Json<ChallengeRequest>,
) -> ApiResult<Json<ChallengeResponse>> {
    let issued = auth.challenge(&request.did).await?;
    Ok(Json(ChallengeResponse {
        nonce: issued.nonce,
        expires_in: issued.expires_in,
        challenge_id: issued.challenge_id,
    }))
}

/// Verifies a signed challenge and issues a token.
///
/// **What to sign:** the `nonce` string from `POST /v1/auth/challenge`. Sign its UTF-8 bytes (the
/// 64 hex characters as text) with the Ed25519 key of `did`; signing the 32 bytes the nonce
/// hex-decodes to is accepted too. Send the 64-byte signature as 128 hex characters in
/// `signature`.
///
/// Send it with the `did`, the `challenge_id` of the challenge, and, for a token in a cooperative,
/// `coop_id` and `scopes`; without `coop_id` and `scopes` the token is identity-only. Use the
/// returned `token` as `Authorization: Bearer …` (in the Swagger UI: **Authorize**).
#[utoipa::path(post, path = "/v1/auth/verify", tag = "auth", request_body = VerifyRequest,
    responses((status = 200, body = TokenResponse),
              (status = 400, description = "Invalid DID, scope, coop_id or signature encoding", body = crate::openapi::ErrorBody),
              (status = 401, description = "Unknown, expired or used challenge, or bad signature", body = crate::openapi::ErrorBody),
              (status = 403, description = "Requested scopes refused", body = crate::openapi::ErrorBody),
              (status = 429, description = "IP rate limit", body = crate::openapi::ErrorBody)))]
pub async fn verify(
    State(auth): State<Authenticator>,
    Json(request): Json<VerifyRequest>,
) -> Result<Json<TokenResponse>, Response> {
    let result = auth
        .login(LoginRequest {
            did: request.did,
            signature: request.signature,
            coop_id: request.coop_id,
            scopes: request.scopes,
            challenge_id: request.challenge_id,
        })
        .await
        .map_err(refusal_response)?;
    let token = result.token;
    Ok(Json(TokenResponse {
        token: token.token,
        token_type: "Bearer",
        expires_in: token.expires_in,
        expires_at: token.expires_at,
        scopes: token.scopes.to_strings(),
    }))
}

/// The interface's answer to a refused login; a bad signature or an unknown (replayed, expired)
/// challenge is also marked as the client's misbehaviour, which the edge middleware counts
/// against its address.
fn refusal_response(err: gateway_auth::LoginError) -> Response {
    let mut response = ApiError::from(err.error).into_response();
    let violation = match err.refusal {
        Some(gateway_auth::AuthError::BadSignature) => Some(gateway_limits::Violation::BadSignature),
        Some(gateway_auth::AuthError::UnknownChallenge) => Some(gateway_limits::Violation::ReplayedChallenge),
        _ => None,
    };
    if let Some(violation) = violation {
        response.extensions_mut().insert(violation);
    }
    response
}
