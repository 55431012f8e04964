//! Roles in a cooperative, and the one membership question several layers ask.
//!
//! Token issuance (`gateway-auth`) and the per-request membership check (`gateway-http`) both
//! need "what is this DID in this cooperative?", and the store answers it. The trait lives here,
//! in the crate all of them share, so none of them depends on another for it.

use std::fmt;

use async_trait::async_trait;

use crate::{CoopId, Did, Error, Scope, ScopeSet};

/// A member's role in a cooperative.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// May do everything, including settings and member management.
    Admin,
    /// Everything but `coop:write` and `oracle:write`.
    Member,
}

impl Role {
    /// The scopes a token of this role may carry.
    pub fn allowed_scopes(self) -> ScopeSet {
        match self {
            Role::Admin => ScopeSet::all(),
            Role::Member => ScopeSet::all().difference(ScopeSet::of(&[Scope::CoopWrite, Scope::OracleWrite])),
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Member => "member",
        }
    }

    /// Parses the wire spelling.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "admin" => Some(Role::Admin),
            "member" => Some(Role::Member),
            _ => None,
        }
    }
}

/// A DID's standing in a cooperative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// The cooperative does not exist (yet).
    NoSuchCoop,
    /// The cooperative exists and the DID is not a member.
    NotMember,
    /// A member with this role.
    Member(Role),
}

/// Answers membership questions; implemented by the store.
#[async_trait]
pub trait MembershipLookup: Send + Sync + fmt::Debug {
    /// The DID's standing in the cooperative.
    async fn membership(&self, coop: &CoopId, did: &Did) -> Result<Membership, Error>;
}
