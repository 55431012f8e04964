//! The shared vocabulary of the gateway: identifiers, scopes, token claims, money and the
//! interface's error kinds.
//!
//! Everything here is plain data with validation. This crate performs no I/O, knows nothing of
//! HTTP, storage or cryptographic verification, and depends on no other crate of the workspace
//! (an invariant checked by `tests/architecture.rs`).

pub mod amount;
pub mod claims;
pub mod coop;
pub mod currency;
pub mod did;
pub mod error;
pub mod evidence;
pub mod json_text;
pub mod membership;
pub mod page;
pub mod scope;
pub mod time;

pub use amount::Amount;
pub use claims::Claims;
pub use coop::CoopId;
pub use currency::Currency;
pub use did::{Did, DidMethod, DidResolver, Ed25519PublicKey, KeyDidResolver};
pub use error::{AuthorizationDetail, Error, ErrorCode, FieldErrors, RateLimitLayer};
pub use evidence::{EvidenceWithoutBody, RequestSignature};
pub use json_text::JsonText;
pub use membership::{Membership, MembershipLookup, Role};
pub use page::{PageInfo, PageRequest};
pub use scope::{Scope, ScopeSet};
pub use time::{Clock, ManualClock, SystemClock};

/// Identifiers serialise as their text and deserialise through their own `parse`, so a stored
/// record that holds them reads back only if it is still valid.
macro_rules! serde_as_text {
    ($($t:ty),+) => {
        $(impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                <$t>::from_text(&text).map_err(serde::de::Error::custom)
            }
        })+
    };
}

serde_as_text!(CoopId, Currency, Did, Role);

/// Parsing from text with a message, the same way for every identifier type.
trait FromText: Sized {
    fn from_text(text: &str) -> Result<Self, String>;
}

impl FromText for CoopId {
    fn from_text(text: &str) -> Result<Self, String> {
        CoopId::parse(text).map_err(str::to_owned)
    }
}

impl FromText for Currency {
    fn from_text(text: &str) -> Result<Self, String> {
        Currency::parse(text).map_err(str::to_owned)
    }
}

impl FromText for Did {
    fn from_text(text: &str) -> Result<Self, String> {
        Did::parse(text).map_err(|e| e.to_string())
    }
}

impl FromText for Role {
    fn from_text(text: &str) -> Result<Self, String> {
        Role::parse(text).ok_or_else(|| format!("unknown role '{text}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_serialise_as_their_text_and_read_back_only_when_valid() {
        let did = Did::parse("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").unwrap();
        assert_eq!(serde_json::to_value(&did).unwrap(), serde_json::json!(did.as_str()));
        assert_eq!(serde_json::to_value(CoopId::parse("co-op_1").unwrap()).unwrap(), serde_json::json!("co-op_1"));
        assert_eq!(serde_json::to_value(Currency::parse("hours").unwrap()).unwrap(), serde_json::json!("hours"));
        assert_eq!(serde_json::to_value(Role::Admin).unwrap(), serde_json::json!("admin"));
        assert_eq!(serde_json::from_str::<Did>(&format!("\"{did}\"")).unwrap(), did);
        assert_eq!(serde_json::from_str::<Role>("\"member\"").unwrap(), Role::Member);
        assert!(serde_json::from_str::<Did>("\"not a did\"").is_err());
        assert!(serde_json::from_str::<CoopId>("\"a b\"").is_err());
        assert!(serde_json::from_str::<Currency>("\"\"").is_err());
        assert!(serde_json::from_str::<Role>("\"owner\"").is_err());
    }
}
