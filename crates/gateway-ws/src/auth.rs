//! Who may follow which stream: token verification, the coop match and the membership check.
//!
//! The same check serves the `Auth` frame and the `?access_token=` query of the upgrade. It
//! decides nothing about scopes (the contract asks none for the stream) and keeps no state:
//! expiry of an open socket is the connection's business.

use gateway_auth::AuthError;
use gateway_core::{CoopId, Did, Membership};

use crate::state::Shared;

/// An authenticated socket: whose it is and which coop it follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Session {
    /// The token's subject.
    pub(crate) did: Did,
    /// The coop of the stream.
    pub(crate) coop: CoopId,
    /// The token's expiry, Unix seconds; the socket is closed then.
    pub(crate) expires_at: u64,
}

/// Why authentication failed, split by who is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// The token is invalid, expired, or names no coop where one is needed (HTTP 401).
    Unauthenticated(String),
    /// A valid token that may not follow this coop's stream (HTTP 403).
    Forbidden {
        /// Why.
        message: String,
        /// The coop the client asked for.
        coop_id: CoopId,
    },
    /// The membership could not be checked because the store failed (HTTP 503).
    Unavailable(String),
}

impl AuthFailure {
    /// The message for the client.
    pub(crate) fn message(&self) -> &str {
        match self {
            AuthFailure::Unauthenticated(m)
            | AuthFailure::Forbidden { message: m, .. }
            | AuthFailure::Unavailable(m) => m,
        }
    }
}

/// Verifies `token` for the stream of `path_coop` (or, for the short route, of the token's own
/// coop).
pub(crate) async fn authenticate(
    shared: &Shared,
    token: &str,
    path_coop: Option<&CoopId>,
) -> Result<Session, AuthFailure> {
    let verified = shared.tokens.verify(token).map_err(|err| {
        AuthFailure::Unauthenticated(match err {
            AuthError::TokenExpired => "token expired".into(),
            _ => "invalid token".into(),
        })
    })?;
    let coop = match (path_coop, verified.coop_id) {
        (_, None) => {
            return Err(AuthFailure::Unauthenticated(
                "the token carries no cooperative: log in with a coop_id to follow its stream".into(),
            ));
        }
        (Some(path), Some(token_coop)) if *path != token_coop => {
            return Err(AuthFailure::Forbidden {
                message: format!("the token is for cooperative '{token_coop}', not '{path}'"),
                coop_id: path.clone(),
            });
        }
        (_, Some(token_coop)) => token_coop,
    };
    if !shared.open_enrollment {
        match shared.membership.membership(&coop, &verified.did).await {
            Ok(Membership::Member(_)) => {}
            Ok(Membership::NotMember) => {
                return Err(AuthFailure::Forbidden {
                    message: format!("not a member of cooperative '{coop}'"),
                    coop_id: coop,
                });
            }
            Ok(Membership::NoSuchCoop) => {
                return Err(AuthFailure::Forbidden { message: format!("no such cooperative '{coop}'"), coop_id: coop });
            }
            Err(err) => {
                tracing::warn!(%coop, "event stream: membership check failed: {err}");
                return Err(AuthFailure::Unavailable("membership could not be checked; try again later".into()));
            }
        }
    }
    Ok(Session { did: verified.did, coop, expires_at: verified.expires_at })
}
