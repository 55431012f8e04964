//! `POST /v1/auth/challenge` and `POST /v1/auth/verify`: DID challenge-response login.

use axum::extract::State;
use gateway_auth::{Authenticator, LoginRequest};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiResult;
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
#[utoipa::path(post, path = "/v1/auth/verify", tag = "auth", request_body = VerifyRequest,
    responses((status = 200, body = TokenResponse),
              (status = 400, description = "Invalid DID, scope, coop_id or signature encoding", body = crate::openapi::ErrorBody),
              (status = 401, description = "Unknown, expired or used challenge, or bad signature", body = crate::openapi::ErrorBody),
              (status = 403, description = "Requested scopes refused", body = crate::openapi::ErrorBody),
              (status = 429, description = "IP rate limit", body = crate::openapi::ErrorBody)))]
pub async fn verify(
    State(auth): State<Authenticator>,
    Json(request): Json<VerifyRequest>,
) -> ApiResult<Json<TokenResponse>> {
    let result = auth
        .login(LoginRequest {
            did: request.did,
            signature: request.signature,
            coop_id: request.coop_id,
            scopes: request.scopes,
            challenge_id: request.challenge_id,
        })
        .await?;
    let token = result.token;
    Ok(Json(TokenResponse {
        token: token.token,
        token_type: "Bearer",
        expires_in: token.expires_in,
        expires_at: token.expires_at,
        scopes: token.scopes.to_strings(),
    }))
}
