//! The profile against RFC 9421's own Ed25519 vector, and every failure reason of INTERFACE.md §11.

use base64::Engine;

use super::*;
use crate::base::signature_base;

/// RFC 9421 Appendix B.1.4, `test-key-ed25519`: the private seed and the public key.
const RFC_SEED: &str = "9f8362f87a484a954e6e740c5b4c0e84229139a20aa8ab56ff66586f6a7d29c5";
const RFC_PUBLIC: &str = "26b40b8f93fff3d897112f7ebc582b232dbd72517d082fe83cfb30ddce43d1bb";

fn rfc_key() -> SigningKey {
    SigningKey::from_bytes(&hex::decode(RFC_SEED).unwrap().try_into().unwrap())
}

/// RFC 9421 Appendix B.2.6: the base and the signature of the test request, byte for byte.
#[test]
fn rfc_9421_b_2_6_signature_base_and_signature() {
    assert_eq!(hex::encode(rfc_key().verifying_key().to_bytes()), RFC_PUBLIC);
    let headers = [
        ("date", "Tue, 20 Apr 2021 02:07:55 GMT"),
        ("content-type", "application/json"),
        (
            "content-digest",
            "sha-512=:WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew==:",
        ),
        ("content-length", "18"),
    ];
    let message = Message {
        method: "POST",
        authority: "example.com",
        path: "/foo",
        query: Some("param=Value&Pet=dog"),
        headers: &headers,
    };
    let input_field = r#"sig-b26=("date" "@method" "@path" "@authority" "content-type" "content-length");created=1618884473;keyid="test-key-ed25519""#;
    let inputs: Dictionary = Parser::new(input_field).parse().unwrap();
    let Some(ListEntry::InnerList(input)) = inputs.get("sig-b26") else { panic!("an inner list") };
    let base = signature_base(&message, input).unwrap();
    let expected = "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@method\": POST\n\"@path\": /foo\n\"@authority\": example.com\n\"content-type\": application/json\n\"content-length\": 18\n\"@signature-params\": (\"date\" \"@method\" \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\"";
    assert_eq!(base, expected);
    let signature = rfc_key().sign(base.as_bytes()).to_bytes();
    let rfc_signature = "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==";
    assert_eq!(base64::engine::general_purpose::STANDARD.encode(signature), rfc_signature);
    let field: Dictionary = Parser::new(&format!("sig-b26=:{rfc_signature}:")).parse().unwrap();
    let Some(ListEntry::Item(item)) = field.get("sig-b26") else { panic!() };
    let bytes: [u8; 64] = item.bare_item.as_byte_sequence().unwrap().try_into().unwrap();
    rfc_key().verifying_key().verify(base.as_bytes(), &Signature::from_bytes(&bytes)).unwrap();
}

const NOW: u64 = 1_800_000_000;

fn member_key(seed: u8) -> (SigningKey, Did) {
    let key = SigningKey::from_bytes(&[seed; 32]);
    let did = Did::key_from_public_key(&gateway_core::Ed25519PublicKey(key.verifying_key().to_bytes()));
    (key, did)
}

const BODY: &[u8] = br#"{"from":"did:key:a","to":"did:key:b","amount":5}"#;

fn payment<'a>(headers: &'a [(&'a str, &'a str)]) -> Message<'a> {
    Message {
        method: "POST",
        authority: "gateway.example:8443",
        path: "/v1/ledger/bakery/payment",
        query: None,
        headers,
    }
}

fn options(did: &str) -> SignOptions<'_> {
    SignOptions { label: "sig1", created: NOW, expires: NOW + 60, nonce: "n0nce-0123456789abcdef", keyid: did }
}

fn signed(key: &SigningKey, did: &Did) -> Signed {
    sign(&payment(&[]), BODY, key, &options(did.as_str())).unwrap()
}

fn verify_as(signed: &Signed, body: &[u8], signer: &Did, now: u64) -> Result<Verified, Failure> {
    let digest = signed.content_digest.clone().unwrap_or_default();
    let headers = [("content-digest", digest.as_str())];
    verify(&payment(&headers), body, &signed.signature_input, &signed.signature, signer, now, Limits::default())
}

#[test]
fn a_signed_request_verifies_and_leaves_verifiable_evidence() {
    let (key, did) = member_key(1);
    let signed = signed(&key, &did);
    assert_eq!(signed.content_digest.as_deref(), Some(content_digest(BODY).as_str()));
    assert_eq!(
        signed.signature_input,
        format!(
            r#"sig1=("@method" "@authority" "@path" "content-digest");created={NOW};expires={};nonce="n0nce-0123456789abcdef";keyid="{did}";alg="ed25519";tag="icn-gateway""#,
            NOW + 60
        )
    );
    let verified = verify_as(&signed, BODY, &did, NOW + 5).unwrap();
    assert_eq!(
        (verified.keyid.clone(), verified.nonce.as_str(), verified.expires),
        (did.clone(), "n0nce-0123456789abcdef", NOW + 60)
    );
    assert_eq!(verified.evidence.signature_input, signed.signature_input);
    assert_eq!(verified.evidence.signature, signed.signature);
    assert_eq!(verify_evidence(&verified.evidence), Ok(did.clone()), "offline, years later");
    let mut tampered = verified.evidence.clone();
    tampered.path = "/v1/ledger/other/payment".into();
    assert_eq!(verify_evidence(&tampered), Err(Failure::SignatureInvalid));
    let mut tampered = verified.evidence.clone();
    tampered.content_digest = Some(content_digest(b"{}"));
    // The kept body is not the bytes of that digest: refused before the signature is looked at.
    assert_eq!(verify_evidence(&tampered), Err(Failure::DigestMismatch));
    // With the body swapped to match, the signature (over the original digest) fails.
    tampered.body = Some(base64::engine::general_purpose::STANDARD.encode(b"{}").into());
    assert_eq!(verify_evidence(&tampered), Err(Failure::SignatureInvalid));
}

/// The evidence keeps the exact signed bytes; a body changed after the fact no longer matches
/// the signed digest, and one that is not base64 is refused too.
#[test]
fn evidence_keeps_the_signed_body_and_refuses_another() {
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let (key, did) = member_key(1);
    let verified = verify_as(&signed(&key, &did), BODY, &did, NOW + 5).unwrap();
    assert_eq!(verified.evidence.body.as_deref(), Some(b64(BODY).as_str()));
    assert_eq!(evidence_body(&verified.evidence), Ok(Some(BODY.to_vec())));
    let mut tampered = verified.evidence.clone();
    let mut other = BODY.to_vec();
    other.push(b' ');
    tampered.body = Some(b64(&other).into());
    assert_eq!(verify_evidence(&tampered), Err(Failure::DigestMismatch));
    tampered.body = Some("not base64!".into());
    assert_eq!(verify_evidence(&tampered), Err(Failure::SignatureInvalid));
    let mut undigested = verified.evidence.clone();
    undigested.content_digest = None;
    assert_eq!(evidence_body(&undigested), Err(Failure::ComponentsMissing));
    let mut old = verified.evidence;
    old.body = None;
    assert_eq!(evidence_body(&old), Ok(None));
    assert_eq!(verify_evidence(&old), Ok(did), "evidence kept before bodies were stored");
}

#[test]
fn every_failure_has_its_reason() {
    let (key, did) = member_key(1);
    let (_, other) = member_key(2);
    let good = signed(&key, &did);
    // keyid is not the token's DID.
    assert_eq!(verify_as(&good, BODY, &other, NOW).unwrap_err(), Failure::KeyidMismatch);
    // The body is not what was digested.
    assert_eq!(verify_as(&good, b"{\"amount\":500}", &did, NOW).unwrap_err(), Failure::DigestMismatch);
    // Expired, or created too long ago.
    assert_eq!(verify_as(&good, BODY, &did, NOW + 60).unwrap_err(), Failure::SignatureExpired);
    let long = sign(&payment(&[]), BODY, &key, &SignOptions { expires: NOW + 300, ..options(did.as_str()) }).unwrap();
    assert!(verify_as(&long, BODY, &did, NOW + 60).is_ok());
    assert_eq!(verify_as(&long, BODY, &did, NOW + 61).unwrap_err(), Failure::SignatureExpired);
    // Created in the future, a lifetime over 300 s, a short nonce: invalid.
    assert_eq!(verify_as(&good, BODY, &did, NOW - 61).unwrap_err(), Failure::SignatureInvalid);
    let too_long =
        sign(&payment(&[]), BODY, &key, &SignOptions { expires: NOW + 301, ..options(did.as_str()) }).unwrap();
    assert_eq!(verify_as(&too_long, BODY, &did, NOW).unwrap_err(), Failure::SignatureInvalid);
    let short =
        sign(&payment(&[]), BODY, &key, &SignOptions { nonce: "fifteen-chars00", ..options(did.as_str()) }).unwrap();
    assert_eq!(verify_as(&short, BODY, &did, NOW).unwrap_err(), Failure::SignatureInvalid);
    // Signed by another key than the keyid's.
    let (wrong_key, _) = member_key(3);
    let forged = signed(&wrong_key, &did);
    assert_eq!(verify_as(&forged, BODY, &did, NOW).unwrap_err(), Failure::SignatureInvalid);
    // Signed for another path.
    let elsewhere = Message { path: "/v1/ledger/other/payment", ..payment(&[]) };
    let moved = sign(&elsewhere, BODY, &key, &options(did.as_str())).unwrap();
    assert_eq!(verify_as(&moved, BODY, &did, NOW).unwrap_err(), Failure::SignatureInvalid);
    // Not covering the body.
    let bare = sign(&payment(&[]), b"", &key, &options(did.as_str())).unwrap();
    let headers = [("content-digest", good.content_digest.as_deref().unwrap())];
    let missing =
        verify(&payment(&headers), BODY, &bare.signature_input, &bare.signature, &did, NOW, Limits::default());
    assert_eq!(missing.unwrap_err(), Failure::ComponentsMissing);
    // A query the signature does not cover.
    let query = Message { query: Some("x=1"), ..payment(&headers) };
    let result = verify(&query, BODY, &good.signature_input, &good.signature, &did, NOW, Limits::default());
    assert_eq!(result.unwrap_err(), Failure::ComponentsMissing);
    // No signature of this profile (another tag), or garbage.
    let untagged = good.signature_input.replace("icn-gateway", "other");
    let result = verify(&payment(&headers), BODY, &untagged, &good.signature, &did, NOW, Limits::default());
    assert_eq!(result.unwrap_err(), Failure::SignatureInvalid);
    let result = verify(&payment(&headers), BODY, "sig1=(((", &good.signature, &did, NOW, Limits::default());
    assert_eq!(result.unwrap_err(), Failure::SignatureInvalid);
    for (failure, reason) in [
        (Failure::SignatureInvalid, "signature_invalid"),
        (Failure::SignatureExpired, "signature_expired"),
        (Failure::PredatesNonceMemory, "signature_expired"),
        (Failure::NonceReplayed, "nonce_replayed"),
        (Failure::DigestMismatch, "digest_mismatch"),
        (Failure::KeyidMismatch, "keyid_mismatch"),
        (Failure::ComponentsMissing, "components_missing"),
        (Failure::SignatureRequired, "signature_required"),
    ] {
        assert_eq!(failure.reason(), reason);
    }
}

/// INTERFACE.md §11: a nonce is 16 to 64 characters of the base64url alphabet; a longer one (which
/// the receiver would have to remember for minutes) or one with any other character is refused
/// before the signature is even checked, as `signature_invalid`, and a good one verifies.
#[test]
fn nonces_are_16_to_64_base64url_characters() {
    let (key, did) = member_key(6);
    let attempt = |nonce: &str| {
        let signed = sign(&payment(&[]), BODY, &key, &SignOptions { nonce, ..options(did.as_str()) }).unwrap();
        verify_as(&signed, BODY, &did, NOW).map(|verified| verified.nonce)
    };
    let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for len in [16, 17, 63, 64] {
        let nonce = &alphabet[..len];
        assert_eq!(attempt(nonce).as_deref(), Ok(nonce), "{len} characters");
    }
    assert_eq!(attempt(&alphabet[48..]).as_deref(), Ok("wxyz0123456789-_"), "digits, '-' and '_'");
    for len in [0, 1, 15, 65, 200, 60_000] {
        let nonce = "a".repeat(len);
        assert_eq!(attempt(&nonce), Err(Failure::SignatureInvalid), "{len} characters");
    }
    // Characters of base64 but not base64url, padding, and others a Structured Field string
    // allows, each in an otherwise good 16-character nonce.
    for bad in ['+', '/', '=', '.', '~', '!', ' ', '%', ':', '"', '\\'] {
        let nonce = format!("0123456789abcde{bad}");
        assert_eq!(nonce.len(), 16);
        assert_eq!(attempt(&nonce), Err(Failure::SignatureInvalid), "{nonce:?}");
    }
    // What the SDK sends (32 hex digits) is of the profile.
    assert!(attempt("0123456789abcdef0123456789abcdef").is_ok());
}

/// A signer may order its parameters differently (the Python library writes
/// `created;keyid;alg;expires;nonce;tag`), label its signature anything and add other
/// signatures: the `@signature-params` line is its own serialisation.
#[test]
fn another_parameter_order_another_label_and_other_signatures_verify() {
    let (key, did) = member_key(4);
    let digest = content_digest(BODY);
    let input = format!(
        r#"other=("@method");created={NOW};keyid="x";tag="not-ours", mine=("@method" "@authority" "@path" "content-digest");created={NOW};keyid="{did}";alg="ed25519";expires={};nonce="abcdefghijklmnop";tag="icn-gateway""#,
        NOW + 100
    );
    let dictionary: Dictionary = Parser::new(&input).parse().unwrap();
    let Some(ListEntry::InnerList(list)) = dictionary.get("mine") else { panic!() };
    let headers = [("content-digest", digest.as_str())];
    let base = signature_base(&payment(&headers), list).unwrap();
    assert!(base.ends_with(&format!(
        r#"created={NOW};keyid="{did}";alg="ed25519";expires={};nonce="abcdefghijklmnop";tag="icn-gateway""#,
        NOW + 100
    )));
    let signature = format!(
        "other=:AAAA:, mine=:{}:",
        base64::engine::general_purpose::STANDARD.encode(key.sign(base.as_bytes()).to_bytes())
    );
    let verified = verify(&payment(&headers), BODY, &input, &signature, &did, NOW, Limits::default()).unwrap();
    assert!(verified.evidence.signature_input.starts_with("mine=("));
    assert_eq!(verify_evidence(&verified.evidence), Ok(did));
}

#[test]
fn a_query_is_covered_when_the_target_has_one() {
    let (key, did) = member_key(5);
    let message =
        Message { method: "DELETE", path: "/v1/trust/edges/did:key:z", query: Some("reason=gone"), ..payment(&[]) };
    let signed = sign(&message, b"", &key, &options(did.as_str())).unwrap();
    assert!(signed.signature_input.contains(r#""@query""#) && !signed.signature_input.contains("content-digest"));
    assert_eq!(signed.content_digest, None);
    let verified =
        verify(&message, b"", &signed.signature_input, &signed.signature, &did, NOW, Limits::default()).unwrap();
    assert_eq!(verified.evidence.query.as_deref(), Some("reason=gone"));
    assert_eq!(verify_evidence(&verified.evidence), Ok(did));
}
