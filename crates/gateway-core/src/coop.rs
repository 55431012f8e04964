//! Cooperative identifiers.
//!
//! A `CoopId` is 1 to 64 characters of `[A-Za-z0-9_-]`, ASCII only. Whether the cooperative
//! exists is a question for the domain, not for this type.

use std::fmt;

/// The longest cooperative id, in characters.
pub const MAX_COOP_ID_LEN: usize = 64;

/// A validated cooperative identifier.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CoopId(String);

impl CoopId {
    /// Validates a cooperative id, saying what is wrong when it is not one.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        if text.is_empty() || text.len() > MAX_COOP_ID_LEN {
            return Err("coop_id must be 1 to 64 characters");
        }
        if !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err("coop_id may only contain A-Z, a-z, 0-9, '_' and '-'");
        }
        Ok(Self(text.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for CoopId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CoopId({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_length_and_alphabet() {
        assert!(CoopId::parse("coop-1_A").is_ok());
        assert!(CoopId::parse(&"a".repeat(64)).is_ok());
        assert!(CoopId::parse(&"a".repeat(65)).is_err());
        assert!(CoopId::parse("").is_err());
        assert!(CoopId::parse("co op").is_err());
        assert!(CoopId::parse("coöp").is_err());
        assert!(CoopId::parse("a/b").is_err());
    }
}
