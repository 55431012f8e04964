//! Counting a proposal's votes with delegation.
//!
//! The tally resolves every member's vote to the member who actually cast it, then counts each
//! direct voter once with a weight. It does not read votes or delegations from anywhere, does
//! not check that DIDs are well formed (they were validated when stored), and does not decide
//! the outcome: that is [`super::decide`].
//!
//! # Resolution rules
//!
//! Only members count; `members` is a set (duplicates are ignored). For each member M:
//!
//! 1. If M voted directly, M's vote is M's own: a direct vote overrides M's delegation.
//! 2. Otherwise M's *effective delegation* is the applicable delegation with the highest
//!    precedence ([`Delegation::applies_to`], [`Delegation::precedence_cmp`]): the most specific
//!    scope (proposal > domain > blanket), then the latest `created_at`, then the greatest `id`.
//!    Expired delegations and self-delegations do not exist for this purpose. Only delegations
//!    whose delegator is a member are looked at: a non-member delegator contributes nothing.
//! 3. The chain is followed transitively, member → delegate → the delegate's own effective
//!    delegation → …, until one of:
//!    - a member who voted directly: that member receives M's weight;
//!    - a DID that is not a member: nothing is cast for M (a non-member can neither vote nor
//!      pass a vote on);
//!    - a member who neither voted nor has an applicable delegation: nothing is cast;
//!    - a member already on the chain (a cycle): nothing is cast, since by rule 1 no one on a
//!      cycle voted directly.
//!
//! The weight of a direct voter is 1 plus the number of members whose chain ends at them, so
//! `participants` (the members whose vote counted) equals the sum of the weights.
//!
//! # Cost
//!
//! Linear in members + votes + delegations (plus sorting the direct voters): chains are
//! resolved iteratively with memoisation, so each member is walked once however long or
//! shared the chains are, and no recursion depth depends on the input.

use std::cmp::Ordering;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{Choice, Delegation};

/// A vote cast by a voter in person. The caller keeps one per voter (a later vote replaces an
/// earlier one); if duplicates reach [`tally()`] anyway, the last one in the slice wins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectVote {
    /// The voter's DID.
    pub voter: String,
    /// What they chose.
    pub choice: Choice,
}

/// A direct voter's vote as counted: their choice and the number of members it stands for.
/// This is exactly one entry of the list hashed into a receipt's `votes_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveVote {
    /// The DID of the member who voted directly.
    pub voter: String,
    /// Their choice.
    pub choice: Choice,
    /// 1 plus the number of members whose vote reached them through delegation.
    pub weight: u64,
}

/// The counted result of a proposal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    /// Sum of the weights of `For` votes.
    #[serde(rename = "for")]
    pub for_: u64,
    /// Sum of the weights of `Against` votes.
    pub against: u64,
    /// Sum of the weights of `Abstain` votes.
    pub abstain: u64,
    /// Members whose vote counted, directly or through delegation (the sum of the weights);
    /// this is what the quorum compares with the member count.
    pub participants: u64,
    /// One entry per member who voted directly, sorted by `voter` (byte order).
    pub effective_votes: Vec<EffectiveVote>,
}

/// Where a member's vote ends up while chains are being resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolution {
    /// Not visited yet.
    Unknown,
    /// On the chain currently being walked; meeting it again means a cycle.
    OnPath,
    /// Resolved: the index of the direct voter who receives the vote, or `None` if nothing is
    /// cast.
    Done(Option<usize>),
}

/// Counts the votes of proposal `proposal_id` of domain `domain_id` at time `now` (Unix
/// seconds, used for delegation expiry), following the rules in the module documentation.
pub fn tally(
    members: &[String],
    direct_votes: &[DirectVote],
    delegations: &[Delegation],
    domain_id: &str,
    proposal_id: &str,
    now: u64,
) -> Tally {
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(members.len());
    let mut names: Vec<&str> = Vec::with_capacity(members.len());
    for member in members {
        index.entry(member.as_str()).or_insert_with(|| {
            names.push(member.as_str());
            names.len() - 1
        });
    }
    let n = names.len();

    let mut votes: Vec<Option<Choice>> = vec![None; n];
    for vote in direct_votes {
        if let Some(&i) = index.get(vote.voter.as_str()) {
            votes[i] = Some(vote.choice);
        }
    }

    let mut effective: Vec<Option<&Delegation>> = vec![None; n];
    for delegation in delegations {
        if !delegation.applies_to(domain_id, proposal_id, now) {
            continue;
        }
        let Some(&i) = index.get(delegation.delegator.as_str()) else {
            continue;
        };
        let wins = effective[i].is_none_or(|current| delegation.precedence_cmp(current) == Ordering::Greater);
        if wins {
            effective[i] = Some(delegation);
        }
    }

    let mut resolution = vec![Resolution::Unknown; n];
    let mut path: Vec<usize> = Vec::new();
    for start in 0..n {
        let mut current = start;
        let target = loop {
            match resolution[current] {
                Resolution::Done(target) => break target,
                Resolution::OnPath => break None,
                Resolution::Unknown => {}
            }
            if votes[current].is_some() {
                resolution[current] = Resolution::Done(Some(current));
                break Some(current);
            }
            resolution[current] = Resolution::OnPath;
            path.push(current);
            match effective[current].and_then(|d| index.get(d.delegate.as_str())) {
                Some(&next) => current = next,
                None => break None,
            }
        };
        for walked in path.drain(..) {
            resolution[walked] = Resolution::Done(target);
        }
    }

    let mut weights = vec![0u64; n];
    for state in &resolution {
        if let Resolution::Done(Some(target)) = *state {
            weights[target] += 1;
        }
    }

    let mut result = Tally::default();
    let mut effective_votes = Vec::new();
    for (i, choice) in votes.iter().enumerate() {
        let Some(choice) = *choice else { continue };
        let weight = weights[i];
        match choice {
            Choice::For => result.for_ += weight,
            Choice::Against => result.against += weight,
            Choice::Abstain => result.abstain += weight,
        }
        result.participants += weight;
        effective_votes.push(EffectiveVote { voter: names[i].to_owned(), choice, weight });
    }
    effective_votes.sort_unstable_by(|a, b| a.voter.cmp(&b.voter));
    result.effective_votes = effective_votes;
    result
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use proptest::prelude::*;

    use super::*;
    use crate::governance::DelegationScope;

    const DOMAIN: &str = "budget";
    const PROPOSAL: &str = "p1";
    const NOW: u64 = 1_000;

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn vote(voter: &str, choice: Choice) -> DirectVote {
        DirectVote { voter: voter.into(), choice }
    }

    fn delegate(id: &str, from: &str, to: &str, scope: &str) -> Delegation {
        Delegation {
            id: id.into(),
            delegator: from.into(),
            delegate: to.into(),
            scope: DelegationScope::parse(scope).unwrap(),
            expires_at: None,
            created_at: 0,
        }
    }

    fn run(members: &[String], votes: &[DirectVote], delegations: &[Delegation]) -> Tally {
        tally(members, votes, delegations, DOMAIN, PROPOSAL, NOW)
    }

    fn weights(t: &Tally) -> Vec<(&str, Choice, u64)> {
        t.effective_votes.iter().map(|v| (v.voter.as_str(), v.choice, v.weight)).collect()
    }

    #[test]
    fn direct_votes_count_once_each() {
        let m = members(&["c", "a", "b", "d"]);
        let t = run(&m, &[vote("c", Choice::For), vote("a", Choice::Against), vote("b", Choice::Abstain)], &[]);
        assert_eq!((t.for_, t.against, t.abstain, t.participants), (1, 1, 1, 3));
        assert_eq!(weights(&t), vec![("a", Choice::Against, 1), ("b", Choice::Abstain, 1), ("c", Choice::For, 1)]);
    }

    #[test]
    fn duplicate_votes_last_one_wins() {
        let m = members(&["a"]);
        let t = run(&m, &[vote("a", Choice::For), vote("a", Choice::Against)], &[]);
        assert_eq!((t.for_, t.against, t.participants), (0, 1, 1));
        assert_eq!(t.effective_votes.len(), 1);
    }

    #[test]
    fn duplicate_members_count_once() {
        let m = members(&["a", "a", "b"]);
        let t = run(&m, &[vote("a", Choice::For)], &[delegate("1", "b", "a", "blanket")]);
        assert_eq!((t.for_, t.participants), (2, 2));
    }

    #[test]
    fn delegated_vote_adds_to_the_delegate_weight() {
        let m = members(&["a", "b"]);
        let t = run(&m, &[vote("b", Choice::For)], &[delegate("1", "a", "b", "blanket")]);
        assert_eq!(weights(&t), vec![("b", Choice::For, 2)]);
        assert_eq!((t.for_, t.participants), (2, 2));
    }

    #[test]
    fn chains_are_followed_transitively() {
        let m = members(&["a", "b", "c"]);
        let t = run(
            &m,
            &[vote("c", Choice::Against)],
            &[delegate("1", "a", "b", "blanket"), delegate("2", "b", "c", "domain:budget")],
        );
        assert_eq!(weights(&t), vec![("c", Choice::Against, 3)]);
        assert_eq!((t.against, t.participants), (3, 3));
    }

    #[test]
    fn a_direct_vote_overrides_the_voters_delegation() {
        let m = members(&["a", "b", "c"]);
        let t = run(
            &m,
            &[vote("b", Choice::Against), vote("c", Choice::For)],
            &[delegate("1", "a", "b", "blanket"), delegate("2", "b", "c", "blanket")],
        );
        // b voted, so b keeps its own vote and a's delegated vote stops at b.
        assert_eq!(weights(&t), vec![("b", Choice::Against, 2), ("c", Choice::For, 1)]);
        assert_eq!((t.for_, t.against, t.participants), (1, 2, 3));
    }

    #[test]
    fn most_specific_scope_wins() {
        let m = members(&["a", "blanket", "domain", "proposal"]);
        let votes = [vote("blanket", Choice::Abstain), vote("domain", Choice::Against), vote("proposal", Choice::For)];
        let all = [
            delegate("1", "a", "blanket", "blanket"),
            delegate("2", "a", "domain", "domain:budget"),
            delegate("3", "a", "proposal", "proposal:p1"),
        ];
        let t = run(&m, &votes, &all);
        assert_eq!((t.for_, t.against, t.abstain), (2, 1, 1));
        // Input order does not matter.
        let reversed: Vec<_> = all.iter().rev().cloned().collect();
        assert_eq!(run(&m, &votes, &reversed), t);
        // Without the proposal delegation the domain one wins over the blanket one.
        let t = run(&m, &votes, &all[..2]);
        assert_eq!((t.for_, t.against, t.abstain), (1, 2, 1));
    }

    #[test]
    fn scopes_of_other_domains_and_proposals_do_not_apply() {
        let m = members(&["a", "b", "c"]);
        let votes = [vote("b", Choice::For), vote("c", Choice::Against)];
        let t = run(
            &m,
            &votes,
            &[
                delegate("1", "a", "b", "domain:other"),
                delegate("2", "a", "b", "proposal:p2"),
                delegate("3", "a", "c", "blanket"),
            ],
        );
        assert_eq!((t.for_, t.against), (1, 2));
    }

    #[test]
    fn equally_specific_delegations_pick_latest_then_greatest_id() {
        let m = members(&["a", "b", "c"]);
        let votes = [vote("b", Choice::For), vote("c", Choice::Against)];
        let mut old = delegate("z", "a", "b", "domain:budget");
        old.created_at = 1;
        let mut new = delegate("a", "a", "c", "domain:budget");
        new.created_at = 2;
        let t = run(&m, &votes, &[new.clone(), old.clone()]);
        assert_eq!((t.for_, t.against), (1, 2), "latest created_at wins");
        new.created_at = 1;
        let t = run(&m, &votes, &[old.clone(), new.clone()]);
        assert_eq!((t.for_, t.against), (2, 1), "same time: greatest id (z) wins");
    }

    #[test]
    fn expired_delegations_do_not_apply() {
        let m = members(&["a", "b", "c"]);
        let votes = [vote("b", Choice::For), vote("c", Choice::Against)];
        let mut expired = delegate("1", "a", "b", "proposal:p1");
        expired.expires_at = Some(NOW);
        let fallback = delegate("2", "a", "c", "blanket");
        let t = run(&m, &votes, &[expired.clone(), fallback.clone()]);
        assert_eq!((t.for_, t.against), (1, 2), "expired at now: falls back");
        expired.expires_at = Some(NOW + 1);
        let t = run(&m, &votes, &[expired, fallback]);
        assert_eq!((t.for_, t.against), (2, 1), "expires after now: applies");
    }

    #[test]
    fn self_delegation_is_ignored() {
        let m = members(&["a", "b"]);
        let votes = [vote("b", Choice::For)];
        let t = run(&m, &votes, &[delegate("1", "a", "a", "proposal:p1")]);
        assert_eq!(t.participants, 1, "self-delegation casts nothing");
        let t = run(&m, &votes, &[delegate("1", "a", "a", "proposal:p1"), delegate("2", "a", "b", "blanket")]);
        assert_eq!(t.participants, 2, "the blanket delegation still applies");
    }

    #[test]
    fn cycles_without_a_direct_voter_cast_nothing() {
        let m = members(&["a", "b", "c", "d", "e"]);
        let t = run(
            &m,
            &[vote("e", Choice::For)],
            &[
                delegate("1", "a", "b", "blanket"),
                delegate("2", "b", "c", "blanket"),
                delegate("3", "c", "a", "blanket"),
                // d leads into the cycle.
                delegate("4", "d", "a", "blanket"),
            ],
        );
        assert_eq!(weights(&t), vec![("e", Choice::For, 1)]);
        assert_eq!(t.participants, 1);
    }

    #[test]
    fn a_cycle_with_a_direct_voter_ends_at_that_voter() {
        let m = members(&["a", "b", "c"]);
        let t = run(
            &m,
            &[vote("b", Choice::Against)],
            &[
                delegate("1", "a", "b", "blanket"),
                delegate("2", "b", "c", "blanket"),
                delegate("3", "c", "a", "blanket"),
            ],
        );
        assert_eq!(weights(&t), vec![("b", Choice::Against, 3)]);
    }

    #[test]
    fn non_members_neither_vote_nor_pass_votes_on() {
        let m = members(&["a", "b", "c"]);
        let t = run(
            &m,
            &[vote("x", Choice::For), vote("c", Choice::Against)],
            &[
                // A member delegating to a non-member casts nothing, even though x voted.
                delegate("1", "a", "x", "blanket"),
                // A chain through a non-member stops there.
                delegate("2", "b", "y", "blanket"),
                delegate("3", "y", "c", "blanket"),
                // A non-member delegator contributes nothing.
                delegate("4", "z", "c", "blanket"),
            ],
        );
        assert_eq!(weights(&t), vec![("c", Choice::Against, 1)]);
        assert_eq!((t.for_, t.against, t.participants), (0, 1, 1));
    }

    #[test]
    fn a_chain_ending_at_a_silent_member_casts_nothing() {
        let m = members(&["a", "b", "c"]);
        let t = run(&m, &[vote("c", Choice::For)], &[delegate("1", "a", "b", "blanket")]);
        assert_eq!(weights(&t), vec![("c", Choice::For, 1)]);
    }

    #[test]
    fn a_long_chain_resolves_without_deep_recursion() {
        let n = 50_000;
        let m: Vec<String> = (0..n).map(|i| format!("m{i:06}")).collect();
        let delegations: Vec<Delegation> =
            (0..n - 1).map(|i| delegate(&i.to_string(), &m[i], &m[i + 1], "blanket")).collect();
        let t = run(&m, &[vote(&m[n - 1], Choice::For)], &delegations);
        assert_eq!(t.for_, n as u64);
        assert_eq!(t.effective_votes.len(), 1);
    }

    #[test]
    fn empty_inputs_give_an_empty_tally() {
        assert_eq!(run(&[], &[], &[]), Tally::default());
    }

    #[test]
    fn tally_serialises_for_as_for() {
        let t = Tally { for_: 2, ..Tally::default() };
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["for"], 2);
    }

    /// An independent recount: for each member, walk its chain one step at a time with a
    /// visited set, choosing the effective delegation by scanning every delegation.
    fn brute_force(members: &[String], votes: &[DirectVote], delegations: &[Delegation], now: u64) -> Tally {
        let member_set: HashSet<&str> = members.iter().map(String::as_str).collect();
        let mut direct: BTreeMap<&str, Choice> = BTreeMap::new();
        for v in votes {
            if member_set.contains(v.voter.as_str()) {
                direct.insert(&v.voter, v.choice);
            }
        }
        let rank = |s: &DelegationScope| match s {
            DelegationScope::Proposal(p) if p == PROPOSAL => Some(3),
            DelegationScope::Domain(d) if d == DOMAIN => Some(2),
            DelegationScope::Blanket => Some(1),
            _ => None,
        };
        let chosen = |who: &str| -> Option<&str> {
            let mut best: Option<(u8, u64, &str, &str)> = None;
            for d in delegations {
                if d.delegator != who || d.delegate == who {
                    continue;
                }
                if matches!(d.expires_at, Some(at) if at <= now) {
                    continue;
                }
                let Some(r) = rank(&d.scope) else { continue };
                let key = (r, d.created_at, d.id.as_str(), d.delegate.as_str());
                if best.is_none_or(|b| (key.0, key.1, key.2) > (b.0, b.1, b.2)) {
                    best = Some(key);
                }
            }
            best.map(|b| b.3)
        };
        let mut weight: BTreeMap<&str, u64> = BTreeMap::new();
        for member in &member_set {
            let mut at: &str = member;
            let mut seen: HashSet<&str> = HashSet::new();
            let end = loop {
                if !member_set.contains(at) || !seen.insert(at) {
                    break None;
                }
                if direct.contains_key(at) {
                    break Some(at);
                }
                match chosen(at) {
                    Some(next) => at = next,
                    None => break None,
                }
            };
            if let Some(end) = end {
                *weight.entry(end).or_default() += 1;
            }
        }
        let mut t = Tally::default();
        for (voter, choice) in &direct {
            let w = weight[voter];
            match choice {
                Choice::For => t.for_ += w,
                Choice::Against => t.against += w,
                Choice::Abstain => t.abstain += w,
            }
            t.participants += w;
            t.effective_votes.push(EffectiveVote { voter: voter.to_string(), choice: *choice, weight: w });
        }
        t
    }

    fn arb_scope() -> impl Strategy<Value = DelegationScope> {
        prop_oneof![
            Just(DelegationScope::Blanket),
            Just(DelegationScope::Domain(DOMAIN.into())),
            Just(DelegationScope::Domain("other".into())),
            Just(DelegationScope::Proposal(PROPOSAL.into())),
            Just(DelegationScope::Proposal("p2".into())),
        ]
    }

    fn arb_choice() -> impl Strategy<Value = Choice> {
        prop_oneof![Just(Choice::For), Just(Choice::Against), Just(Choice::Abstain)]
    }

    /// DIDs are drawn from 16 names of which the first `n_members` are members, so votes and
    /// delegations also involve non-members.
    fn did(i: usize) -> String {
        format!("did:key:m{i:02}")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn tally_agrees_with_a_brute_force_recount(
            n_members in 0usize..=12,
            votes in prop::collection::vec((0usize..16, arb_choice()), 0..16),
            raw in prop::collection::vec(
                (0usize..16, 0usize..16, arb_scope(), prop::option::of(NOW - 3..NOW + 3), 0u64..4, 0u8..4),
                0..24,
            ),
        ) {
            let members: Vec<String> = (0..n_members).map(did).collect();
            let votes: Vec<DirectVote> = votes
                .into_iter()
                .map(|(i, choice)| DirectVote { voter: did(i), choice })
                .collect();
            let delegations: Vec<Delegation> = raw
                .into_iter()
                .enumerate()
                .map(|(k, (from, to, scope, expires_at, created_at, id))| Delegation {
                    // Ids repeat across delegations so that every tie-breaker is exercised.
                    id: format!("{id}-{}", k % 2),
                    delegator: did(from),
                    delegate: did(to),
                    scope,
                    expires_at,
                    created_at,
                })
                .collect();
            let fast = tally(&members, &votes, &delegations, DOMAIN, PROPOSAL, NOW);
            let slow = brute_force(&members, &votes, &delegations, NOW);
            prop_assert_eq!(fast, slow);
        }
    }
}
