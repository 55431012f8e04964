//! Who is calling, and what they may do: the authentication extractors.
//!
//! The `authenticate` middleware (see [`crate::middleware`]) verifies the bearer token of every
//! protected route, checks that its subject is still a member of the token's cooperative
//! (narrowing its scopes to its role's), and leaves a [`Caller`] in the request. Handlers then
//! take [`Authorized<R>`], which refuses the request unless the token carries the scopes of `R`,
//! or [`CoopCaller<R>`], which also settles the cooperative the request acts on: the one in the
//! path, which must be the token's, or the token's own where the path names none. No handler
//! checks a cooperative by hand. The enforcement order is the interface's: token (401) → scope
//! (403) → cooperative (403) → payer (403) → trust (403).

use std::marker::PhantomData;
use std::ops::Deref;

use axum::extract::{FromRequestParts, MatchedPath, RawPathParams};
use axum::http::request::Parts;
use gateway_core::{AuthorizationDetail, CoopId, Did, Error, Scope, ScopeSet};

use crate::error::ApiError;

/// The authenticated subject of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The token's subject.
    pub did: Did,
    /// The token's cooperative, absent for identity-only tokens.
    pub coop_id: Option<CoopId>,
    /// The token's scopes.
    pub scopes: ScopeSet,
    /// Token expiry, Unix seconds.
    pub expires_at: u64,
}

impl Caller {
    /// Refuses unless the token was issued for `coop`.
    pub fn require_coop(&self, coop: &CoopId) -> Result<(), ApiError> {
        if self.coop_id.as_ref() == Some(coop) {
            Ok(())
        } else {
            Err(Error::AuthorizationFailed {
                message: format!("the token does not grant access to cooperative '{coop}'"),
                detail: AuthorizationDetail::CoopId(coop.to_string()),
            }
            .into())
        }
    }

    /// The token's cooperative. The `authenticate` middleware already refuses identity-only
    /// tokens outside the identity routes; this refuses them the same way should a handler be
    /// reached without it.
    pub fn coop(&self) -> Result<&CoopId, ApiError> {
        self.coop_id.as_ref().ok_or_else(|| {
            Error::denied(
                crate::middleware::IDENTITY_ONLY,
                "this route needs a token issued for a cooperative (login with coop_id)",
            )
            .into()
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| Error::AuthenticationFailed("missing bearer token".into()).into())
    }
}

/// The scopes a route requires, as a type, so the requirement is visible in the handler's
/// signature and checked before its body runs.
pub trait ScopeRequirement: Send + Sync + 'static {
    /// Every scope in this list is required.
    const SCOPES: &'static [Scope];
}

/// Marker types for [`Authorized`].
pub mod scopes {
    use super::{Scope, ScopeRequirement};

    macro_rules! requirement {
        ($($(#[$doc:meta])* $name:ident => [$($scope:ident),*];)*) => {$(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            pub struct $name;
            impl ScopeRequirement for $name {
                const SCOPES: &'static [Scope] = &[$(Scope::$scope),*];
            }
        )*};
    }

    requirement! {
        /// Any valid token.
        AnyToken => [];
        /// `ledger:read`.
        LedgerRead => [LedgerRead];
        /// `ledger:write`.
        LedgerWrite => [LedgerWrite];
        /// `coop:read`.
        CoopRead => [CoopRead];
        /// `coop:write`.
        CoopWrite => [CoopWrite];
        /// `gov:read`.
        GovRead => [GovRead];
        /// `gov:write`.
        GovWrite => [GovWrite];
        /// `trust:read`.
        TrustRead => [TrustRead];
        /// `trust:write`.
        TrustWrite => [TrustWrite];
        /// `compute:submit`.
        ComputeSubmit => [ComputeSubmit];
        /// `compute:execute`.
        ComputeExecute => [ComputeExecute];
        /// `oracle:read`.
        OracleRead => [OracleRead];
        /// `oracle:write`.
        OracleWrite => [OracleWrite];
    }
}

/// A caller whose token carries the scopes of `R`.
#[derive(Debug)]
pub struct Authorized<R: ScopeRequirement> {
    caller: Caller,
    requirement: PhantomData<R>,
}

impl<R: ScopeRequirement> Authorized<R> {
    /// The caller, when its token grants the scopes `R` requires.
    pub(crate) fn check(caller: Caller) -> Result<Self, ApiError> {
        let required = ScopeSet::of(R::SCOPES);
        if !caller.scopes.contains_all(required) {
            return Err(Error::missing_scopes(R::SCOPES.to_vec()).into());
        }
        Ok(Self { caller, requirement: PhantomData })
    }

    /// The caller.
    pub fn into_caller(self) -> Caller {
        self.caller
    }
}

impl<R: ScopeRequirement> Deref for Authorized<R> {
    type Target = Caller;
    fn deref(&self) -> &Caller {
        &self.caller
    }
}

impl<R: ScopeRequirement, S: Send + Sync> FromRequestParts<S> for Authorized<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Self::check(Caller::from_request_parts(parts, state).await?)
    }
}

/// Which family of routes a request came by: the `/v1` paths or the specification's short,
/// unversioned ones. One handler serves both; where the specification gives the short route a
/// different default (a payment's `from`, a proposal opened at once), the handler reads it here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `/v1/...`.
    V1,
    /// The short family (`/ledger/transaction`, `/governance/proposals`, ...).
    Short,
}

impl Family {
    /// The family of a route template (or, without one, of the request path).
    pub fn of(path: &str) -> Self {
        if path.starts_with("/v1/") { Family::V1 } else { Family::Short }
    }
}

/// A caller whose token carries the scopes of `R`, acting on one cooperative: the one the path
/// names (`{coop}`, or `{id}` of the `/coops` routes as the specification spells them) when it
/// names one, which must then be the token's (400 for a malformed id, then 403), else the
/// token's own. Membership was checked by the `authenticate` middleware for the token's
/// cooperative, which this makes the request's.
#[derive(Debug)]
pub struct CoopCaller<R: ScopeRequirement> {
    caller: Authorized<R>,
    /// The cooperative the request acts on.
    pub coop: CoopId,
    /// The route family the request came by.
    pub family: Family,
}

impl<R: ScopeRequirement> CoopCaller<R> {
    /// The caller, its cooperative and its family, from a checked caller and the route.
    fn settle(caller: Authorized<R>, template: &str, path_coop: Option<&str>) -> Result<Self, ApiError> {
        let coop = match path_coop {
            Some(text) => {
                let coop = crate::routes::common::coop_id(text)?;
                caller.require_coop(&coop)?;
                coop
            }
            None => caller.coop()?.clone(),
        };
        Ok(Self { caller, coop, family: Family::of(template) })
    }
}

impl<R: ScopeRequirement> Deref for CoopCaller<R> {
    type Target = Caller;
    fn deref(&self) -> &Caller {
        &self.caller
    }
}

/// The name of the path parameter holding the cooperative on a route template, if any.
fn coop_param(template: &str) -> Option<&'static str> {
    if template.contains("{coop}") {
        Some("coop")
    } else if template.starts_with("/coops/{id}") || template.starts_with("/v1/coops/{id}") {
        Some("id")
    } else {
        None
    }
}

impl<R: ScopeRequirement, S: Send + Sync> FromRequestParts<S> for CoopCaller<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let caller = Authorized::<R>::from_request_parts(parts, state).await?;
        let template = parts.extensions.get::<MatchedPath>().map_or(parts.uri.path(), MatchedPath::as_str).to_owned();
        let path_coop = match coop_param(&template) {
            Some(name) => {
                let params = RawPathParams::from_request_parts(parts, state)
                    .await
                    .map_err(|_| Error::bad_request_field("coop_id", "the path's coop id is not valid UTF-8"))?;
                params.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_owned())
            }
            None => None,
        };
        Self::settle(caller, &template, path_coop.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::Scope;

    fn caller(coop: Option<&str>) -> Authorized<scopes::LedgerRead> {
        Authorized::check(Caller {
            did: Did::parse("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").unwrap(),
            coop_id: coop.map(|c| CoopId::parse(c).unwrap()),
            scopes: ScopeSet::of(&[Scope::LedgerRead]),
            expires_at: u64::MAX,
        })
        .unwrap()
    }

    #[test]
    fn the_coop_in_the_path_must_be_the_tokens() {
        let ok = CoopCaller::settle(caller(Some("c1")), "/v1/ledger/{coop}/history", Some("c1")).unwrap();
        assert_eq!((ok.coop.as_str(), ok.family), ("c1", Family::V1));
        let other = CoopCaller::settle(caller(Some("c1")), "/v1/ledger/{coop}/history", Some("c2")).unwrap_err();
        assert_eq!(other.status_and_body().0, 403);
        let malformed = CoopCaller::settle(caller(Some("c1")), "/v1/ledger/{coop}/history", Some("c 1")).unwrap_err();
        assert_eq!(malformed.status_and_body().0, 400);
    }

    #[test]
    fn without_a_coop_in_the_path_the_tokens_is_used_and_identity_tokens_are_refused() {
        let short = CoopCaller::settle(caller(Some("c1")), "/ledger/history", None).unwrap();
        assert_eq!((short.coop.as_str(), short.family), ("c1", Family::Short));
        let identity = CoopCaller::settle(caller(None), "/ledger/history", None).unwrap_err();
        assert_eq!(identity.status_and_body().0, 403);
    }

    #[test]
    fn the_coop_parameter_is_found_by_its_routes_name() {
        assert_eq!(coop_param("/v1/ledger/{coop}/balance/{did}"), Some("coop"));
        assert_eq!(coop_param("/v1/coops/{id}/members"), Some("id"));
        assert_eq!(coop_param("/coops/{id}"), Some("id"));
        assert_eq!(coop_param("/v1/gov/proposals/{id}"), None);
        assert_eq!(coop_param("/v1/coops"), None);
    }
}
