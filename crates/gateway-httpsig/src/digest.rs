//! RFC 9530 `Content-Digest` with SHA-256: `sha-256=:<base64 of the digest>:`.

use base64::Engine;
use sfv::{Dictionary, ListEntry, Parser};
use sha2::{Digest, Sha256};

use crate::profile::Failure;

/// The `Content-Digest` field of `body`: `sha-256=:<base64>:`.
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", base64::engine::general_purpose::STANDARD.encode(Sha256::digest(body)))
}

/// Checks a received `Content-Digest` field against the bytes actually received: its `sha-256`
/// member must hold their SHA-256 (other algorithms are ignored, and a field without `sha-256`
/// fails, since nothing in it can be checked).
pub fn check_content_digest(field: &str, body: &[u8]) -> Result<(), Failure> {
    let digests: Dictionary = Parser::new(field).parse().map_err(|_| Failure::DigestMismatch)?;
    match digests.get("sha-256") {
        Some(ListEntry::Item(item)) => match item.bare_item.as_byte_sequence() {
            Some(digest) if digest[..] == Sha256::digest(body)[..] => Ok(()),
            _ => Err(Failure::DigestMismatch),
        },
        _ => Err(Failure::DigestMismatch),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_body_digests_as_expected() {
        let body = br#"{"hello": "world"}"#;
        assert_eq!(content_digest(body), "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:");
        check_content_digest("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:", body).unwrap();
        check_content_digest("sha-512=:AAAA:, sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:", body).unwrap();
        for bad in [
            "sha-256=:Y48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:",
            "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
            "sha-256=X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE",
            "",
        ] {
            assert_eq!(check_content_digest(bad, body), Err(Failure::DigestMismatch), "{bad}");
        }
        assert_eq!(
            check_content_digest("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:", b"{\"hello\": \"world\"} "),
            Err(Failure::DigestMismatch),
            "one more byte than was digested"
        );
    }
}
