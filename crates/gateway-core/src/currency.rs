//! Currency codes: 1 to 32 characters of `[A-Za-z0-9_]`, case-sensitive, no registry.

use std::fmt;

/// A validated currency code, e.g. `hours`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency(String);

impl Currency {
    /// Validates a currency code.
    pub fn parse(text: &str) -> Result<Self, &'static str> {
        if text.is_empty() || text.len() > 32 {
            return Err("currency must be 1 to 32 characters");
        }
        if !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err("currency may only contain A-Z, a-z, 0-9 and '_'");
        }
        Ok(Self(text.to_owned()))
    }

    /// The code as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert!(Currency::parse("hours").is_ok());
        assert!(Currency::parse("EUR_2").is_ok());
        assert!(Currency::parse("").is_err());
        assert!(Currency::parse(&"x".repeat(33)).is_err());
        assert!(Currency::parse("us-d").is_err());
    }
}
