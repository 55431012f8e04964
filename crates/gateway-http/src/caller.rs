//! Who is calling, and what they may do: the authentication extractors.
//!
//! The `authenticate` middleware (see [`crate::middleware`]) verifies the bearer token of every
//! protected route and leaves a [`Caller`] in the request. Handlers then take [`Authorized<R>`],
//! which refuses the request unless the token carries the scopes of `R`, and call
//! [`Caller::require_coop`] for the cooperative in the path. The enforcement order is the
//! contract's: token (401) → scope (403) → cooperative (403) → payer (403) → trust (403).

use std::marker::PhantomData;
use std::ops::Deref;

use axum::extract::FromRequestParts;
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
