//! Decision rules, the quorum, and the outcome of a closed proposal.
//!
//! These are integer comparisons on a [`Tally`]; no floating point is involved, so every
//! gateway (and every auditor) reaches the same outcome from the same counts. This module does
//! not count votes ([`super::tally()`]) and does not know when a proposal closes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::{ParseError, Tally};

/// The quorum used when a proposal does not set one: half of the members must take part.
pub const DEFAULT_QUORUM_PERCENT: u32 = 50;

/// How many of the decisive votes a proposal needs. Abstentions count towards the quorum but
/// never towards a rule: they are neither for nor against.
///
/// Serialises as its text form (`majority`, `supermajority:<pct>`, `unanimous`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Rule {
    /// More for than against.
    #[default]
    Majority,
    /// At least this percentage (1 to 100) of the for and against votes are for, and at least
    /// one vote is for.
    Supermajority(u32),
    /// At least one vote for and none against.
    Unanimous,
}

impl Rule {
    /// Parses `majority`, `supermajority:<pct>` (an integer from 1 to 100, written without sign
    /// or leading zeros so that each rule has one spelling) or `unanimous`.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        match text {
            "majority" => return Ok(Rule::Majority),
            "unanimous" => return Ok(Rule::Unanimous),
            _ => {}
        }
        let pct = text.strip_prefix("supermajority:").ok_or_else(|| ParseError::Rule(text.to_owned()))?;
        let bad = || ParseError::SupermajorityPercent(text.to_owned());
        if pct.is_empty() || !pct.bytes().all(|b| b.is_ascii_digit()) || pct.starts_with('0') {
            return Err(bad());
        }
        match pct.parse::<u32>() {
            Ok(value @ 1..=100) => Ok(Rule::Supermajority(value)),
            _ => Err(bad()),
        }
    }

    /// Whether the counts satisfy the rule (the quorum is [`decide`]'s business).
    ///
    /// No rule approves without a single vote for: a supermajority of `0 * 100 >= pct * 0`
    /// would hold arithmetically, but a proposal nobody supported must not pass.
    /// The arithmetic is done in `u128`, so it cannot overflow whatever the counts.
    pub fn passes(&self, tally: &Tally) -> bool {
        let for_ = u128::from(tally.for_);
        let against = u128::from(tally.against);
        match *self {
            Rule::Majority => for_ > against,
            Rule::Supermajority(pct) => for_ > 0 && for_ * 100 >= u128::from(pct) * (for_ + against),
            Rule::Unanimous => for_ > 0 && against == 0,
        }
    }
}

impl Rule {
    /// Whether `self` is at least as strict as `other`: every tally that `self` approves,
    /// `other` approves too. This is the order in which a proposal's own rule may only tighten
    /// its domain's (INTERFACE.md §7), decided on what the rules do rather than on their names:
    /// `supermajority:50` approves a tie, which `majority` does not, so it is the looser of the
    /// two, and `supermajority:100` is exactly as strict as `unanimous`.
    pub fn at_least_as_strict_as(&self, other: &Rule) -> bool {
        match (*self, *other) {
            (_, Rule::Majority) => !matches!(*self, Rule::Supermajority(pct) if pct <= 50),
            (Rule::Majority, Rule::Supermajority(q)) => q <= 50,
            (Rule::Supermajority(p), Rule::Supermajority(q)) => p >= q,
            (Rule::Unanimous, _) => true,
            (Rule::Supermajority(p), Rule::Unanimous) => p == 100,
            (Rule::Majority, Rule::Unanimous) => false,
        }
    }

    /// The stricter of two rules (`self` when they are equally strict).
    pub fn stricter(self, other: Rule) -> Rule {
        if self.at_least_as_strict_as(&other) { self } else { other }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Majority => f.write_str("majority"),
            Rule::Supermajority(pct) => write!(f, "supermajority:{pct}"),
            Rule::Unanimous => f.write_str("unanimous"),
        }
    }
}

impl FromStr for Rule {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Rule::parse(text)
    }
}

impl From<Rule> for String {
    fn from(rule: Rule) -> Self {
        rule.to_string()
    }
}

impl TryFrom<String> for Rule {
    type Error = ParseError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Rule::parse(&text)
    }
}

/// The result of a closed proposal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// Quorum reached and the rule satisfied.
    Approved,
    /// Quorum reached but the rule not satisfied.
    Rejected,
    /// Too few members took part for the counts to mean anything.
    NoQuorum,
}

impl Outcome {
    /// The spelling in receipts and responses: `Approved`, `Rejected` or `NoQuorum`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Approved => "Approved",
            Outcome::Rejected => "Rejected",
            Outcome::NoQuorum => "NoQuorum",
        }
    }

    /// The inverse of [`Outcome::as_str`], exact spelling only, because it reads signed data
    /// where any other spelling means the data is not what was signed.
    pub fn parse(text: &str) -> Option<Outcome> {
        [Outcome::Approved, Outcome::Rejected, Outcome::NoQuorum].into_iter().find(|o| o.as_str() == text)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decides a proposal: no quorum first (`participants * 100 >= quorum_percent * n_members`
/// fails), otherwise the rule. `n_members` is the number of distinct members of the domain at
/// the tally, the same set that was passed to [`super::tally()`].
///
/// With zero members the quorum is trivially met (0 ≥ 0) and, with no vote for, the proposal is
/// rejected; a `quorum_percent` above 100 can never be met.
pub fn decide(rule: &Rule, quorum_percent: u32, n_members: u64, tally: &Tally) -> Outcome {
    let took_part = u128::from(tally.participants) * 100;
    let needed = u128::from(quorum_percent) * u128::from(n_members);
    if took_part < needed {
        Outcome::NoQuorum
    } else if rule.passes(tally) {
        Outcome::Approved
    } else {
        Outcome::Rejected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(for_: u64, against: u64, abstain: u64) -> Tally {
        Tally {
            for_,
            against,
            abstain,
            participants: for_.saturating_add(against).saturating_add(abstain),
            effective_votes: Vec::new(),
        }
    }

    #[test]
    fn rules_parse_and_display_round_trip() {
        for text in ["majority", "unanimous", "supermajority:1", "supermajority:67", "supermajority:100"] {
            let rule = Rule::parse(text).unwrap();
            assert_eq!(rule.to_string(), text);
            assert_eq!(text.parse::<Rule>().unwrap(), rule);
            assert_eq!(serde_json::to_string(&rule).unwrap(), format!("\"{text}\""));
        }
        assert_eq!(Rule::default(), Rule::Majority);
        assert_eq!(Rule::parse("supermajority:67").unwrap(), Rule::Supermajority(67));
    }

    #[test]
    fn bad_rules_are_refused() {
        for text in ["", "Majority", "plurality", "supermajority", "unanimous:1"] {
            assert_eq!(Rule::parse(text), Err(ParseError::Rule(text.into())), "{text}");
        }
        for text in [
            "supermajority:",
            "supermajority:0",
            "supermajority:101",
            "supermajority:067",
            "supermajority:+67",
            "supermajority:6.5",
            "supermajority:99999999999",
        ] {
            assert_eq!(Rule::parse(text), Err(ParseError::SupermajorityPercent(text.into())), "{text}");
        }
    }

    #[test]
    fn majority_needs_more_for_than_against() {
        assert!(Rule::Majority.passes(&counts(2, 1, 0)));
        assert!(!Rule::Majority.passes(&counts(1, 1, 5)));
        assert!(!Rule::Majority.passes(&counts(0, 0, 3)));
        assert!(Rule::Majority.passes(&counts(1, 0, 9)), "abstentions do not count");
    }

    #[test]
    fn supermajority_is_inclusive_and_ignores_abstentions() {
        let two_thirds = Rule::Supermajority(67);
        assert!(two_thirds.passes(&counts(67, 33, 0)), "exactly 67%");
        assert!(!two_thirds.passes(&counts(66, 34, 0)));
        assert!(!two_thirds.passes(&counts(2, 1, 0)), "66.67% < 67%");
        assert!(two_thirds.passes(&counts(67, 33, 1_000)));
        assert!(Rule::Supermajority(100).passes(&counts(3, 0, 0)));
        assert!(!Rule::Supermajority(100).passes(&counts(3, 1, 0)));
    }

    #[test]
    fn supermajority_never_approves_without_a_vote_for() {
        assert!(!Rule::Supermajority(1).passes(&counts(0, 0, 0)));
        assert!(!Rule::Supermajority(1).passes(&counts(0, 0, 4)));
        assert!(Rule::Supermajority(1).passes(&counts(1, 99, 0)));
    }

    #[test]
    fn unanimous_needs_for_and_no_against() {
        assert!(Rule::Unanimous.passes(&counts(3, 0, 2)));
        assert!(!Rule::Unanimous.passes(&counts(3, 1, 0)));
        assert!(!Rule::Unanimous.passes(&counts(0, 0, 2)));
    }

    #[test]
    fn rules_do_not_overflow_at_the_limits() {
        let max = counts(u64::MAX, u64::MAX - 1, 0);
        assert!(Rule::Majority.passes(&max));
        assert!(Rule::Supermajority(50).passes(&max));
        assert!(!Rule::Supermajority(51).passes(&max));
    }

    #[test]
    fn quorum_is_checked_first_and_inclusive() {
        // 10 members, 50%: 5 participants reach the quorum, 4 do not.
        assert_eq!(decide(&Rule::Majority, 50, 10, &counts(5, 0, 0)), Outcome::Approved);
        assert_eq!(decide(&Rule::Majority, 50, 10, &counts(4, 0, 0)), Outcome::NoQuorum);
        assert_eq!(decide(&Rule::Majority, 50, 10, &counts(0, 5, 0)), Outcome::Rejected);
        // Abstentions count towards the quorum.
        assert_eq!(decide(&Rule::Majority, 50, 10, &counts(1, 0, 4)), Outcome::Approved);
        // 7 members at 50% need 3.5, so 4.
        assert_eq!(decide(&Rule::Majority, 50, 7, &counts(3, 0, 0)), Outcome::NoQuorum);
        assert_eq!(decide(&Rule::Majority, 50, 7, &counts(4, 0, 0)), Outcome::Approved);
        assert_eq!(decide(&Rule::Unanimous, DEFAULT_QUORUM_PERCENT, 2, &counts(1, 0, 0)), Outcome::Approved);
    }

    #[test]
    fn strictness_is_decided_by_what_the_rules_approve() {
        use Rule::{Majority, Supermajority, Unanimous};
        assert!(Supermajority(67).at_least_as_strict_as(&Majority));
        assert!(!Supermajority(50).at_least_as_strict_as(&Majority), "a tie passes 50%");
        assert!(!Supermajority(1).at_least_as_strict_as(&Majority));
        assert!(Majority.at_least_as_strict_as(&Supermajority(50)));
        assert!(!Majority.at_least_as_strict_as(&Supermajority(51)));
        assert!(Supermajority(100).at_least_as_strict_as(&Unanimous));
        assert!(!Supermajority(99).at_least_as_strict_as(&Unanimous));
        assert_eq!(Supermajority(1).stricter(Unanimous), Unanimous);
        assert_eq!(Majority.stricter(Supermajority(1)), Majority);
    }

    fn every_rule() -> Vec<Rule> {
        let mut rules = vec![Rule::Majority, Rule::Unanimous];
        rules.extend((1..=100).map(Rule::Supermajority));
        rules
    }

    /// Brute force over every tally up to 100 votes each way (enough to tell every percentage
    /// apart): `a.at_least_as_strict_as(b)` holds exactly when no tally passes `a` and fails `b`.
    #[test]
    fn strictness_agrees_with_a_brute_force_over_tallies() {
        let tallies: Vec<Tally> = (0..=100).flat_map(|f| (0..=100).map(move |a| counts(f, a, 0))).collect();
        let rules = every_rule();
        let passes: Vec<Vec<bool>> = rules.iter().map(|r| tallies.iter().map(|t| r.passes(t)).collect()).collect();
        for (a, passes_a) in rules.iter().zip(&passes) {
            for (b, passes_b) in rules.iter().zip(&passes) {
                let looser_somewhere = passes_a.iter().zip(passes_b).any(|(&pa, &pb)| pa && !pb);
                assert_eq!(a.at_least_as_strict_as(b), !looser_somewhere, "{a} vs {b}");
            }
        }
    }

    #[test]
    fn quorum_edge_cases() {
        assert_eq!(decide(&Rule::Majority, 0, 10, &counts(1, 0, 0)), Outcome::Approved);
        assert_eq!(decide(&Rule::Majority, 50, 0, &counts(0, 0, 0)), Outcome::Rejected);
        assert_eq!(decide(&Rule::Majority, 101, 1, &counts(1, 0, 0)), Outcome::NoQuorum);
        assert_eq!(decide(&Rule::Majority, u32::MAX, u64::MAX, &counts(u64::MAX, 0, 0)), Outcome::NoQuorum);
    }

    #[test]
    fn outcome_spellings_round_trip() {
        for outcome in [Outcome::Approved, Outcome::Rejected, Outcome::NoQuorum] {
            assert_eq!(Outcome::parse(outcome.as_str()), Some(outcome));
            assert_eq!(outcome.to_string(), outcome.as_str());
            assert_eq!(serde_json::to_string(&outcome).unwrap(), format!("\"{}\"", outcome.as_str()));
        }
        assert_eq!(Outcome::parse("approved"), None);
        assert_eq!(Outcome::NoQuorum.as_str(), "NoQuorum");
    }
}
