//! The per-request membership check: a token stays usable for its cooperative only while its
//! subject is a member, with at most the scopes its current role allows.
//!
//! Answers are cached for a short time (one second by default) so the check costs a hash-map
//! read on the hot path; changes made through this gateway invalidate the cache at once, changes
//! made through another replica take effect within the cache lifetime.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_core::{CoopId, Did, Error, Membership, MembershipLookup, ScopeSet};
use gateway_domain::ports::MembershipObserver;

/// Most cached answers before the cache is cleared.
const MAX_ENTRIES: usize = 100_000;

/// A short-lived cache in front of a [`MembershipLookup`].
#[derive(Debug)]
pub struct MembershipCache {
    lookup: Arc<dyn MembershipLookup>,
    ttl: Duration,
    enforce: bool,
    entries: Mutex<HashMap<(CoopId, Did), (Membership, Instant)>>,
}

impl MembershipCache {
    /// A cache over `lookup`; with `enforce` false (open enrollment) every token is accepted as
    /// issued.
    pub fn new(lookup: Arc<dyn MembershipLookup>, ttl: Duration, enforce: bool) -> Self {
        Self { lookup, ttl, enforce, entries: Mutex::new(HashMap::new()) }
    }

    /// The scopes a token for `coop` may still use: its own, narrowed to what the subject's
    /// current role allows; a subject who is no longer a member is refused. A coop that does not
    /// exist yet keeps the token's (bootstrap) scopes, so its creator can create it.
    pub async fn effective_scopes(&self, coop: &CoopId, did: &Did, token_scopes: ScopeSet) -> Result<ScopeSet, Error> {
        if !self.enforce {
            return Ok(token_scopes);
        }
        let key = (coop.clone(), did.clone());
        let cached = {
            let entries = self.entries.lock().expect("membership cache lock");
            entries.get(&key).filter(|(_, at)| at.elapsed() < self.ttl).map(|(m, _)| *m)
        };
        let membership = match cached {
            Some(m) => m,
            None => {
                let m = self.lookup.membership(coop, did).await?;
                let mut entries = self.entries.lock().expect("membership cache lock");
                if entries.len() >= MAX_ENTRIES {
                    entries.clear();
                }
                entries.insert(key, (m, Instant::now()));
                m
            }
        };
        match membership {
            Membership::NoSuchCoop => Ok(token_scopes),
            Membership::NotMember => Err(Error::denied(
                "not_a_member",
                format!("{did} is not a member of cooperative '{coop}': the token no longer opens it"),
            )),
            Membership::Member(role) => Ok(role.allowed_scopes().intersection(token_scopes)),
        }
    }

    /// Forgets what is known about a coop (after a membership change through this gateway).
    pub fn invalidate(&self, coop: &CoopId) {
        self.entries.lock().expect("membership cache lock").retain(|(c, _), _| c != coop);
    }
}

/// The domain services tell the cache after every committed change of members or roles (by
/// an admin, by an approved proposal, at a coop's creation), so the change holds from the next
/// request on this gateway.
impl MembershipObserver for MembershipCache {
    fn membership_changed(&self, coop: &CoopId) {
        self.invalidate(coop);
    }
}
