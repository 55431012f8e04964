//! Decentralised identifiers: syntax validation, and key resolution for the methods whose key is
//! embedded in the identifier itself.
//!
//! Parsing follows the W3C DID syntax restricted as INTERFACE.md states (method `[a-z0-9]+`,
//! method-specific id `[A-Za-z0-9._:%-]+`, at most 256 characters). Resolution of methods that
//! would need a network call is deliberately absent: [`DidResolver`] is the seam where such
//! methods would be added.

use std::fmt;

use crate::error::Error;

/// The longest DID the gateway accepts, in bytes.
pub const MAX_DID_LEN: usize = 256;

/// Multicodec prefix of an Ed25519 public key (`0xed` as an unsigned varint, then `0x01`).
const ED25519_MULTICODEC: [u8; 2] = [0xed, 0x01];

/// A syntactically valid DID. Construction validates, so holding one is proof of syntax.
///
/// Equality, order and hash are the text's (`method_len` follows from the text), so a map keyed
/// by DIDs can be looked up with a `&str` ([`Borrow<str>`](std::borrow::Borrow)).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Did {
    text: String,
    method_len: usize,
}

/// The reasons a string is not a DID, for error messages that say what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DidSyntaxError {
    /// The string is longer than [`MAX_DID_LEN`].
    #[error("a DID is at most {MAX_DID_LEN} characters")]
    TooLong,
    /// The string does not start with `did:`.
    #[error("a DID starts with 'did:'")]
    MissingScheme,
    /// The method name is empty or has characters outside `[a-z0-9]`.
    #[error("the DID method must be one or more of [a-z0-9]")]
    BadMethod,
    /// The method-specific identifier is empty, ends with ':', or has a forbidden character.
    #[error("the DID method-specific id must be [A-Za-z0-9._:%-]+, not ending in ':'")]
    BadIdentifier,
    /// A `%` is not followed by two hexadecimal digits.
    #[error("a '%' in a DID must be followed by two hex digits")]
    BadPercentEncoding,
}

impl Did {
    /// Parses and validates a DID string.
    pub fn parse(text: &str) -> Result<Self, DidSyntaxError> {
        if text.len() > MAX_DID_LEN {
            return Err(DidSyntaxError::TooLong);
        }
        let rest = text.strip_prefix("did:").ok_or(DidSyntaxError::MissingScheme)?;
        let (method, id) = rest.split_once(':').ok_or(DidSyntaxError::BadMethod)?;
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            return Err(DidSyntaxError::BadMethod);
        }
        if id.is_empty() || id.ends_with(':') {
            return Err(DidSyntaxError::BadIdentifier);
        }
        check_identifier(id)?;
        Ok(Self { text: text.to_owned(), method_len: method.len() })
    }

    /// The whole DID as text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The whole DID as text, without a copy.
    pub fn into_string(self) -> String {
        self.text
    }

    /// The method name, e.g. `key` in `did:key:z6Mk…`.
    pub fn method(&self) -> &str {
        &self.text[4..4 + self.method_len]
    }

    /// The method-specific identifier, everything after the second colon.
    pub fn method_specific_id(&self) -> &str {
        &self.text[5 + self.method_len..]
    }

    /// The `did:key` identifier of an Ed25519 public key.
    pub fn key_from_public_key(key: &Ed25519PublicKey) -> Self {
        let mut buf = Vec::with_capacity(34);
        buf.extend_from_slice(&ED25519_MULTICODEC);
        buf.extend_from_slice(&key.0);
        let text = format!("did:key:z{}", bs58::encode(buf).into_string());
        Self { text, method_len: 3 }
    }

    /// The `did:icn` identifier of an Ed25519 public key (the original network's form: the raw
    /// key in base58btc behind a multibase `z`).
    pub fn icn_from_public_key(key: &Ed25519PublicKey) -> Self {
        let text = format!("did:icn:z{}", bs58::encode(key.0).into_string());
        Self { text, method_len: 3 }
    }
}

/// Checks a method-specific identifier: `[A-Za-z0-9._:-]` and `%` with two hex digits. Most
/// identifiers have no `%`: one pass without branches accepts them (DIDs are checked on every
/// request that names one); anything else gets the byte-by-byte check, which says what is wrong
/// with the first offending byte.
fn check_identifier(id: &str) -> Result<(), DidSyntaxError> {
    let plain = id.bytes().fold(true, |ok, b| {
        let letter = (b | 0x20).wrapping_sub(b'a') < 26;
        ok & (letter | b.is_ascii_digit() | (b == b'.') | (b == b'_') | (b == b':') | (b == b'-'))
    });
    if plain { Ok(()) } else { check_identifier_bytewise(id) }
}

/// [`check_identifier`] byte by byte.
fn check_identifier_bytewise(id: &str) -> Result<(), DidSyntaxError> {
    let bytes = id.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let ok = bytes.len() > i + 2 && bytes[i + 1].is_ascii_hexdigit() && bytes[i + 2].is_ascii_hexdigit();
                if !ok {
                    return Err(DidSyntaxError::BadPercentEncoding);
                }
                i += 3;
                continue;
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-') => {}
            _ => return Err(DidSyntaxError::BadIdentifier),
        }
        i += 1;
    }
    Ok(())
}

impl fmt::Display for Did {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Did {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Did({})", self.text)
    }
}

impl std::str::FromStr for Did {
    type Err = DidSyntaxError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl std::hash::Hash for Did {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl std::borrow::Borrow<str> for Did {
    fn borrow(&self) -> &str {
        &self.text
    }
}

impl AsRef<str> for Did {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

/// The DID methods whose key the gateway resolves without a network call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DidMethod {
    /// `did:key` with an Ed25519 multicodec key.
    Key,
    /// `did:icn`, the original cooperative network's method.
    Icn,
}

/// A 32-byte Ed25519 public key as carried in a DID. Whether it is a valid curve point is checked
/// by the verifier in `gateway-auth`, not here.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ed25519PublicKey(pub [u8; 32]);

impl Ed25519PublicKey {
    /// The key as lowercase hex.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// The key as a multibase string (`z` + base58btc of the multicodec-prefixed key), the form
    /// used by `publicKeyMultibase` in DID documents.
    pub fn to_multibase(&self) -> String {
        let mut buf = Vec::with_capacity(34);
        buf.extend_from_slice(&ED25519_MULTICODEC);
        buf.extend_from_slice(&self.0);
        format!("z{}", bs58::encode(buf).into_string())
    }
}

impl fmt::Debug for Ed25519PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ed25519PublicKey({})", self.to_hex())
    }
}

/// Turns a DID into the Ed25519 key that controls it.
///
/// A trait so that methods needing a registry or network lookup can be added without touching
/// the authentication code. Implementations must be cheap and non-blocking: the gateway calls
/// this on the challenge and verify paths.
pub trait DidResolver: Send + Sync + fmt::Debug {
    /// Resolves the DID's verification key, or says why it cannot.
    fn resolve(&self, did: &Did) -> Result<Ed25519PublicKey, Error>;
}

/// Resolves `did:key` (Ed25519 multicodec) and `did:icn` identifiers, whose key is the identifier.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyDidResolver;

impl KeyDidResolver {
    /// Which supported method a DID uses, or the interface's `UNSUPPORTED_DID_METHOD` error.
    pub fn method_of(did: &Did) -> Result<DidMethod, Error> {
        match did.method() {
            "key" => Ok(DidMethod::Key),
            "icn" => Ok(DidMethod::Icn),
            other => Err(Error::UnsupportedDidMethod { method: other.to_owned() }),
        }
    }
}

impl DidResolver for KeyDidResolver {
    fn resolve(&self, did: &Did) -> Result<Ed25519PublicKey, Error> {
        let method = Self::method_of(did)?;
        let invalid = |why: &str| Error::bad_request_field("did", format!("invalid DID: {why}"));
        let encoded = did
            .method_specific_id()
            .strip_prefix('z')
            .ok_or_else(|| invalid("the key must be multibase base58btc (starting with 'z')"))?;
        let bytes = bs58::decode(encoded).into_vec().map_err(|_| invalid("the key is not valid base58btc"))?;
        let raw: &[u8] = match method {
            DidMethod::Key => bytes
                .strip_prefix(&ED25519_MULTICODEC[..])
                .ok_or_else(|| invalid("did:key must carry an Ed25519 (0xed01) key"))?,
            DidMethod::Icn => &bytes,
        };
        let key: [u8; 32] = raw.try_into().map_err(|_| invalid("an Ed25519 public key is 32 bytes"))?;
        Ok(Ed25519PublicKey(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The one-pass check and the byte-by-byte one agree on every identifier, errors
        /// included: near misses (`%` with and without hex digits, every ASCII byte, any
        /// character).
        #[test]
        fn the_fast_identifier_check_is_the_bytewise_one(
            id in prop_oneof!["[A-Za-z0-9._:%-]{0,60}", "[\\x00-\\x7f]{0,60}", "\\PC{0,60}", "[A-Fa-f0-9%g]{0,12}"],
        ) {
            prop_assert_eq!(check_identifier(&id), check_identifier_bytewise(&id));
        }

        #[test]
        fn parsing_arbitrary_text_never_panics(text in "\\PC{0,300}") {
            let _ = Did::parse(&text).map(|did| KeyDidResolver.resolve(&did));
        }

        #[test]
        fn parsing_did_like_text_never_panics(text in "did:[a-z0-9]{0,5}:[A-Za-z0-9._:%-]{0,80}") {
            if let Ok(did) = Did::parse(&text) {
                prop_assert_eq!(did.as_str(), text.as_str());
                let _ = KeyDidResolver.resolve(&did);
            }
        }

        #[test]
        fn every_key_round_trips_through_both_methods(key in any::<[u8; 32]>()) {
            let key = Ed25519PublicKey(key);
            for did in [Did::key_from_public_key(&key), Did::icn_from_public_key(&key)] {
                let reparsed = Did::parse(did.as_str()).unwrap();
                prop_assert_eq!(&reparsed, &did);
                prop_assert_eq!(KeyDidResolver.resolve(&reparsed).unwrap(), key);
            }
        }
    }

    #[test]
    fn maps_of_dids_are_looked_up_by_text() {
        let did = Did::parse("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").unwrap();
        let other = Did::parse("did:icn:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK").unwrap();
        let set: std::collections::HashSet<Did> = [did.clone()].into();
        assert!(set.contains(did.as_str()));
        assert!(!set.contains(other.as_str()));
        assert!(!set.contains("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2do"));
        let tree: std::collections::BTreeSet<Did> = [did.clone(), other.clone()].into();
        assert!(tree.contains(did.as_str()) && tree.contains(other.as_str()));
    }

    #[test]
    fn parses_the_parts() {
        let did = Did::parse("did:example:123:abc").unwrap();
        assert_eq!(did.method(), "example");
        assert_eq!(did.method_specific_id(), "123:abc");
    }

    #[test]
    fn rejects_bad_syntax() {
        assert_eq!(Did::parse("dod:key:z"), Err(DidSyntaxError::MissingScheme));
        assert_eq!(Did::parse("did:Key:z"), Err(DidSyntaxError::BadMethod));
        assert_eq!(Did::parse("did::z"), Err(DidSyntaxError::BadMethod));
        assert_eq!(Did::parse("did:key"), Err(DidSyntaxError::BadMethod));
        assert_eq!(Did::parse("did:key:"), Err(DidSyntaxError::BadIdentifier));
        assert_eq!(Did::parse("did:key:abc:"), Err(DidSyntaxError::BadIdentifier));
        assert_eq!(Did::parse("did:key:a b"), Err(DidSyntaxError::BadIdentifier));
        assert_eq!(Did::parse("did:key:a%4"), Err(DidSyntaxError::BadPercentEncoding));
        assert_eq!(Did::parse("did:key:a%zz"), Err(DidSyntaxError::BadPercentEncoding));
        assert!(Did::parse("did:key:a%4F").is_ok());
        let long = format!("did:key:{}", "a".repeat(MAX_DID_LEN));
        assert_eq!(Did::parse(&long), Err(DidSyntaxError::TooLong));
    }

    #[test]
    fn did_key_round_trips_and_starts_with_z6mk() {
        let key = Ed25519PublicKey([7; 32]);
        let did = Did::key_from_public_key(&key);
        assert!(did.as_str().starts_with("did:key:z6Mk"), "{did}");
        assert_eq!(KeyDidResolver.resolve(&did).unwrap(), key);
        let icn = Did::icn_from_public_key(&key);
        assert_eq!(KeyDidResolver.resolve(&icn).unwrap(), key);
    }

    #[test]
    fn other_methods_are_unsupported() {
        let did = Did::parse("did:web:example.com").unwrap();
        match KeyDidResolver.resolve(&did) {
            Err(Error::UnsupportedDidMethod { method }) => assert_eq!(method, "web"),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn wrong_key_lengths_are_bad_requests() {
        let short = format!("did:icn:z{}", bs58::encode([1u8; 31]).into_string());
        let err = KeyDidResolver.resolve(&Did::parse(&short).unwrap()).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::BadRequest);
        let not_ed = format!("did:key:z{}", bs58::encode([0x12u8; 34]).into_string());
        let err = KeyDidResolver.resolve(&Did::parse(&not_ed).unwrap()).unwrap_err();
        assert_eq!(err.code(), crate::ErrorCode::BadRequest);
    }
}
