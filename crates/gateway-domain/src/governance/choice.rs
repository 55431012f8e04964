//! A member's answer to a proposal.
//!
//! Parsing is lenient in spelling (INTERFACE.md accepts several synonyms in any case) so that
//! clients of the original network keep working; the canonical spelling, the one hashed into
//! receipts, is fixed. This module does not decide whether a vote may be cast (membership,
//! proposal state): that is the caller's business.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::ParseError;

/// A vote choice. Serialises as `For`, `Against` or `Abstain`, the spelling used in
/// `votes_hash`, so that the hash never depends on which synonym a client sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Choice {
    /// In favour of the proposal.
    For,
    /// Against the proposal.
    Against,
    /// Counted for the quorum but neither for nor against.
    Abstain,
}

impl Choice {
    /// Parses a client's choice: case-insensitive `for|approve|yes`, `against|reject|no` or
    /// `abstain`. Anything else, including surrounding whitespace, is `None`, because a typo
    /// must not silently become a vote.
    pub fn parse(text: &str) -> Option<Choice> {
        const FOR: [&str; 3] = ["for", "approve", "yes"];
        const AGAINST: [&str; 3] = ["against", "reject", "no"];
        let is = |words: &[&str]| words.iter().any(|w| w.eq_ignore_ascii_case(text));
        if is(&FOR) {
            Some(Choice::For)
        } else if is(&AGAINST) {
            Some(Choice::Against)
        } else if text.eq_ignore_ascii_case("abstain") {
            Some(Choice::Abstain)
        } else {
            None
        }
    }

    /// The canonical spelling: `For`, `Against` or `Abstain`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Choice::For => "For",
            Choice::Against => "Against",
            Choice::Abstain => "Abstain",
        }
    }
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Choice {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Choice::parse(text).ok_or_else(|| ParseError::Choice(text.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_synonym_parses_in_any_case() {
        for (words, choice) in
            [(["for", "approve", "yes"], Choice::For), (["against", "reject", "no"], Choice::Against)]
        {
            for word in words {
                assert_eq!(Choice::parse(word), Some(choice), "{word}");
                assert_eq!(Choice::parse(&word.to_uppercase()), Some(choice), "{word}");
            }
        }
        assert_eq!(Choice::parse("Abstain"), Some(Choice::Abstain));
        assert_eq!(Choice::parse("aBsTaIn"), Some(Choice::Abstain));
        assert_eq!(Choice::parse("YeS"), Some(Choice::For));
    }

    #[test]
    fn other_words_do_not_parse() {
        for word in ["", "maybe", " for", "for ", "fo", "nay", "abstained"] {
            assert_eq!(Choice::parse(word), None, "{word:?}");
            assert_eq!(word.parse::<Choice>(), Err(ParseError::Choice(word.to_owned())));
        }
    }

    #[test]
    fn canonical_spelling_round_trips_and_serialises_the_same() {
        for choice in [Choice::For, Choice::Against, Choice::Abstain] {
            assert_eq!(Choice::parse(choice.as_str()), Some(choice));
            assert_eq!(choice.to_string(), choice.as_str());
            assert_eq!(serde_json::to_string(&choice).unwrap(), format!("\"{}\"", choice.as_str()));
        }
    }
}
