//! Failures of authentication, and how they map to the interface's error kinds.

use gateway_core::Error;

/// Why a login or a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The token is malformed, forged, of another algorithm, issuer or audience.
    #[error("invalid token")]
    InvalidToken,
    /// The token's `exp` (plus leeway) is past.
    #[error("token expired")]
    TokenExpired,
    /// No outstanding challenge matches (never issued, consumed, or expired).
    #[error("unknown or expired challenge")]
    UnknownChallenge,
    /// The signature does not verify against any outstanding challenge.
    #[error("signature verification failed")]
    BadSignature,
    /// The JWT secret is empty.
    #[error("the JWT secret is empty: set ICN_GATEWAY_JWT_SECRET or jwt_secret in the config file")]
    EmptySecret,
}

impl AuthError {
    /// A short machine reason, used as a metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthError::InvalidToken => "invalid_token",
            AuthError::TokenExpired => "token_expired",
            AuthError::UnknownChallenge => "unknown_challenge",
            AuthError::BadSignature => "bad_signature",
            AuthError::EmptySecret => "empty_secret",
        }
    }
}

impl From<AuthError> for Error {
    fn from(err: AuthError) -> Self {
        match err {
            // One message for every login failure, so a caller cannot tell an expired challenge
            // from a wrong key.
            AuthError::UnknownChallenge | AuthError::BadSignature => {
                Error::AuthenticationFailed("authentication failed: invalid or expired challenge or signature".into())
            }
            AuthError::InvalidToken => Error::AuthenticationFailed("invalid token".into()),
            AuthError::TokenExpired => Error::AuthenticationFailed("token expired".into()),
            AuthError::EmptySecret => Error::Internal(err.to_string()),
        }
    }
}
