//! Why a governance value sent by a client does not parse.
//!
//! Only parse failures live here; receipt verification has its own error
//! ([`ReceiptError`](super::ReceiptError)) because its audience is an auditor, not a client
//! filling in a form. Nothing here knows about HTTP; the conversion into
//! [`gateway_core::Error`] names the request field so the HTTP layer can report it as the
//! interface's `BAD_REQUEST` with `details.fields`.

/// A vote choice, delegation scope or decision rule that is not one of the accepted spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The choice is none of the accepted words.
    #[error("invalid choice '{0}': use for|approve|yes, against|reject|no, or abstain")]
    Choice(String),
    /// The scope is not `blanket`, `domain:<id>` or `proposal:<id>`.
    #[error("invalid delegation scope '{0}': use blanket, domain:<domain_id> or proposal:<proposal_id>")]
    Scope(String),
    /// A `domain:` or `proposal:` scope without an identifier after the colon.
    #[error("the delegation scope '{0}' needs a non-empty identifier after the colon")]
    EmptyScopeId(String),
    /// The rule is not `majority`, `supermajority:<pct>` or `unanimous`.
    #[error("invalid rule '{0}': use majority, supermajority:<pct> or unanimous")]
    Rule(String),
    /// The supermajority percentage is not an integer from 1 to 100.
    #[error("invalid supermajority '{0}': the percentage must be an integer from 1 to 100")]
    SupermajorityPercent(String),
}

impl ParseError {
    /// The request field the value came from, for `details.fields`.
    pub fn field(&self) -> &'static str {
        match self {
            ParseError::Choice(_) => "choice",
            ParseError::Scope(_) | ParseError::EmptyScopeId(_) => "scope",
            ParseError::Rule(_) | ParseError::SupermajorityPercent(_) => "rule",
        }
    }
}

impl From<ParseError> for gateway_core::Error {
    fn from(err: ParseError) -> Self {
        gateway_core::Error::bad_request_field(err.field(), err.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::ErrorCode;

    #[test]
    fn converts_into_a_bad_request_naming_the_field() {
        let err: gateway_core::Error = ParseError::Rule("most".into()).into();
        assert_eq!(err.code(), ErrorCode::BadRequest);
        match err {
            gateway_core::Error::BadRequest { fields, .. } => {
                assert!(fields.contains_key("rule"), "{fields:?}");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(ParseError::EmptyScopeId("domain:".into()).field(), "scope");
        assert_eq!(ParseError::Choice("maybe".into()).field(), "choice");
    }
}
