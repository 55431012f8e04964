//! Who may follow which stream: token verification, the coop match and the membership check.
//!
//! The same check serves the `Auth` frame and the `?access_token=` query of the upgrade. It
//! decides nothing about scopes or roles (INTERFACE.md asks none for the stream, so a role
//! change never changes what a socket may read) and keeps no state: expiry of an open socket,
//! and its end when its DID is removed from the coop, are the connection's business. This
//! module says which event is such a removal ([`removed_member`]) and from which sequence
//! number on one counts ([`Session::membership_checked_at`]).

use gateway_auth::AuthError;
use gateway_core::{CoopId, Did, Membership};
use gateway_domain::events::CoopEventType;
use gateway_domain::ports::EventRecord;

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
    /// The coop's sequence number read just before the membership check: a removal of the DID
    /// with a greater number was not seen by the check, and ends the socket. `None` when no
    /// membership was checked (open enrollment), where a removal does not end the socket.
    pub(crate) membership_checked_at: Option<u64>,
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
    let mut membership_checked_at = None;
    if !shared.open_enrollment {
        // Read before the membership, so that every removal up to this number is one the
        // check below saw (the event commits with the removal).
        let seq = shared.reads.current_seq(&coop).await.map_err(|err| {
            tracing::warn!(%coop, "event stream: cannot read the current sequence: {err}");
            AuthFailure::Unavailable("membership could not be checked; try again later".into())
        })?;
        membership_checked_at = Some(seq);
        check_membership(shared, &coop, &verified.did).await?;
    }
    Ok(Session { did: verified.did, coop, expires_at: verified.expires_at, membership_checked_at })
}

/// Whether `did` is (still) a member of `coop`: `Ok` or the refusal.
pub(crate) async fn check_membership(shared: &Shared, coop: &CoopId, did: &Did) -> Result<(), AuthFailure> {
    match shared.membership.membership(coop, did).await {
        Ok(Membership::Member(_)) => Ok(()),
        Ok(Membership::NotMember) => Err(AuthFailure::Forbidden {
            message: format!("not a member of cooperative '{coop}'"),
            coop_id: coop.clone(),
        }),
        Ok(Membership::NoSuchCoop) => {
            Err(AuthFailure::Forbidden { message: format!("no such cooperative '{coop}'"), coop_id: coop.clone() })
        }
        Err(err) => {
            tracing::warn!(%coop, "event stream: membership check failed: {err}");
            Err(AuthFailure::Unavailable("membership could not be checked; try again later".into()))
        }
    }
}

/// The DID a `MemberRemoved` event removes from its coop (its `data.did`, as both the admin
/// route and an approved membership proposal write it); `None` for any other event.
pub(crate) fn removed_member(record: &EventRecord) -> Option<String> {
    if record.event_type != CoopEventType::MemberRemoved.as_str() {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Removed {
        did: String,
    }
    record.data.read::<Removed>().ok().map(|removed| removed.did)
}
