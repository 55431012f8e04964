//! Who gets which scopes at login (docs/INTERFACE.md §3.6).
//!
//! A token's scopes are not whatever the client asks for: a member gets what its role allows, a
//! non-member of an existing cooperative gets nothing, and a DID may bootstrap a cooperative that
//! does not exist yet with `coop:read`/`coop:write` only. Open enrollment (development only)
//! grants anything. Membership itself is looked up through [`MembershipLookup`], which the
//! store implements; this module stores nothing.

use std::sync::Arc;

use gateway_core::{AuthorizationDetail, CoopId, Did, Error, Membership, MembershipLookup, Scope, ScopeSet};

/// The scope-granting rule.
#[derive(Debug, Clone)]
pub struct ScopePolicy {
    open_enrollment: bool,
    membership: Arc<dyn MembershipLookup>,
}

impl ScopePolicy {
    /// The policy; `open_enrollment` grants every request (development only).
    pub fn new(membership: Arc<dyn MembershipLookup>, open_enrollment: bool) -> Self {
        Self { open_enrollment, membership }
    }

    /// Whether open enrollment is on.
    pub fn open_enrollment(&self) -> bool {
        self.open_enrollment
    }

    /// The membership lookup behind the policy, also used for per-request membership checks.
    pub fn membership(&self) -> &Arc<dyn MembershipLookup> {
        &self.membership
    }

    /// Grants exactly the requested scopes, or refuses with the ones that cannot be granted.
    pub async fn grant(&self, did: &Did, coop: &CoopId, requested: ScopeSet) -> Result<ScopeSet, Error> {
        if self.open_enrollment {
            return Ok(requested);
        }
        let allowed = match self.membership.membership(coop, did).await? {
            Membership::Member(role) => role.allowed_scopes(),
            Membership::NoSuchCoop => ScopeSet::of(&[Scope::CoopRead, Scope::CoopWrite]),
            Membership::NotMember => {
                return Err(refusal(format!("{did} is not a member of cooperative '{coop}'"), requested));
            }
        };
        let refused = requested.difference(allowed);
        if refused.is_empty() {
            Ok(requested)
        } else {
            Err(refusal(format!("scopes not allowed for {did} in cooperative '{coop}'"), refused))
        }
    }
}

fn refusal(message: String, refused: ScopeSet) -> Error {
    Error::AuthorizationFailed { message, detail: AuthorizationDetail::RefusedScopes(refused.to_strings()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;
    use gateway_core::Role;

    #[derive(Debug)]
    struct Fixed(Membership);

    #[async_trait]
    impl MembershipLookup for Fixed {
        async fn membership(&self, _: &CoopId, _: &Did) -> Result<Membership, Error> {
            Ok(self.0)
        }
    }

    fn grant(m: Membership, open: bool, scopes: &[Scope]) -> Result<ScopeSet, Error> {
        let policy = ScopePolicy::new(Arc::new(Fixed(m)), open);
        let did = Did::parse("did:key:z6Mkabc").unwrap();
        let coop = CoopId::parse("c1").unwrap();
        block_on(policy.grant(&did, &coop, ScopeSet::of(scopes)))
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    fn refused(err: Error) -> Vec<String> {
        match err {
            Error::AuthorizationFailed { detail: AuthorizationDetail::RefusedScopes(r), .. } => r,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn member_gets_role_scopes_only() {
        let m = Membership::Member(Role::Member);
        assert!(grant(m, false, &[Scope::LedgerWrite, Scope::GovWrite]).is_ok());
        assert_eq!(refused(grant(m, false, &[Scope::LedgerRead, Scope::CoopWrite]).unwrap_err()), vec!["coop:write"]);
        assert!(grant(Membership::Member(Role::Admin), false, &Scope::ALL).is_ok());
    }

    #[test]
    fn bootstrap_and_non_member() {
        assert!(grant(Membership::NoSuchCoop, false, &[Scope::CoopRead, Scope::CoopWrite]).is_ok());
        assert_eq!(
            refused(grant(Membership::NoSuchCoop, false, &[Scope::CoopWrite, Scope::LedgerRead]).unwrap_err()),
            vec!["ledger:read"]
        );
        assert_eq!(refused(grant(Membership::NotMember, false, &[Scope::CoopRead]).unwrap_err()), vec!["coop:read"]);
    }

    #[test]
    fn open_enrollment_grants_anything() {
        assert_eq!(grant(Membership::NotMember, true, &Scope::ALL).unwrap(), ScopeSet::all());
    }
}
