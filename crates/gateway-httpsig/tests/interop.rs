//! The profile against an independent implementation of RFC 9421, in both directions: the
//! Python package `http-message-signatures` (pinned in `tests/fixtures/httpsig/requirements.txt`)
//! signs and this crate verifies, and this crate signs and it verifies. Also the worked example of
//! docs/SIGNING.md, byte for byte.
//!
//! The Python half runs with the interpreter named by `GATEWAY_TEST_PYTHON` (`.ci/run` sets it to
//! a venv with the pinned packages); when the variable is unset it says so loudly and does not
//! run, and when it is set and the interpreter or package is missing it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use ed25519_dalek::SigningKey;
use gateway_core::{Did, Ed25519PublicKey};
use gateway_httpsig::{Limits, Message, SignOptions, sign, signature_base, verify};
use serde_json::Value;

const VAR: &str = "GATEWAY_TEST_PYTHON";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/httpsig")
}

fn python() -> Option<String> {
    match std::env::var(VAR) {
        Ok(python) => Some(python),
        Err(_) => {
            eprintln!("SKIPPED: {VAR} is not set, so the interoperability test against the Python library did not run");
            None
        }
    }
}

fn member(seed: u8) -> (SigningKey, Did) {
    let key = SigningKey::from_bytes(&[seed; 32]);
    let did = Did::key_from_public_key(&Ed25519PublicKey(key.verifying_key().to_bytes()));
    (key, did)
}

fn interop(python: &str, args: &[&str]) -> std::process::Output {
    Command::new(python)
        .arg(fixtures().join("interop.py"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{VAR}={python} is set but cannot run: {e}"))
}

/// `name: value` lines into a map.
fn fields(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect()
}

#[test]
fn the_python_library_signs_and_the_gateway_verifies() {
    let Some(python) = python() else { return };
    let (_, did) = member(9);
    let dir = tempfile::tempdir().unwrap();
    let body = br#"{"from":"me","to":"you","amount":5}"#;
    let body_file = dir.path().join("body.json");
    std::fs::write(&body_file, body).unwrap();
    let now: u64 = 1_800_000_000;
    let output = interop(
        &python,
        &[
            "sign",
            "--seed",
            &hex::encode([9u8; 32]),
            "--keyid",
            did.as_str(),
            "--method",
            "POST",
            "--authority",
            "gateway.example:8443",
            "--path",
            "/v1/ledger/bakery/payment",
            "--body-file",
            body_file.to_str().unwrap(),
            "--created",
            &now.to_string(),
            "--expires",
            &(now + 120).to_string(),
            "--nonce",
            "py-nonce-0123456789",
        ],
    );
    assert!(output.status.success(), "interop.py sign: {}", String::from_utf8_lossy(&output.stderr));
    let signed = fields(&String::from_utf8_lossy(&output.stdout));
    let digest = signed["content-digest"].clone();
    let headers = [("content-digest", digest.as_str())];
    let message = Message {
        method: "POST",
        authority: "gateway.example:8443",
        path: "/v1/ledger/bakery/payment",
        query: None,
        headers: &headers,
    };
    let verified =
        verify(&message, body, &signed["signature-input"], &signed["signature"], &did, now + 5, Limits::default())
            .unwrap_or_else(|failure| panic!("the gateway refuses the Python signature ({failure}): {signed:?}"));
    assert_eq!(verified.nonce, "py-nonce-0123456789");
    assert_eq!(gateway_httpsig::verify_evidence(&verified.evidence).unwrap(), did);
    // And a tampered body is refused.
    assert!(
        verify(&message, b"{}", &signed["signature-input"], &signed["signature"], &did, now, Limits::default())
            .is_err()
    );
}

#[test]
fn the_gateway_signs_and_the_python_library_verifies() {
    let Some(python) = python() else { return };
    let (key, did) = member(11);
    let dir = tempfile::tempdir().unwrap();
    let body = br#"{"choice":"for"}"#;
    let body_file = dir.path().join("body.json");
    std::fs::write(&body_file, body).unwrap();
    let message = Message {
        method: "POST",
        authority: "gateway.example",
        path: "/v1/gov/proposals/p1/vote",
        query: None,
        headers: &[],
    };
    let options = SignOptions {
        label: "sig1",
        created: 1_800_000_000,
        expires: 1_800_000_060,
        nonce: "rs-nonce-0123456789",
        keyid: did.as_str(),
    };
    let signed = sign(&message, body, &key, &options).unwrap();
    let mut args = vec![
        "verify".to_owned(),
        "--keyid".into(),
        did.to_string(),
        "--method".into(),
        "POST".into(),
        "--authority".into(),
        "gateway.example".into(),
        "--path".into(),
        "/v1/gov/proposals/p1/vote".into(),
        "--body-file".into(),
        body_file.to_str().unwrap().into(),
        "--signature-input".into(),
        signed.signature_input.clone(),
        "--signature".into(),
        signed.signature.clone(),
        "--content-digest".into(),
        signed.content_digest.clone().unwrap(),
    ];
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let output = interop(&python, &arg_refs);
    assert!(
        output.status.success(),
        "the Python library refuses the gateway's signature: {} {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The same check with a path the signature does not cover fails there too.
    args[8] = "/v1/gov/proposals/p2/vote".into();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    assert!(!interop(&python, &arg_refs).status.success(), "a path that was not signed must fail");
}

/// docs/SIGNING.md's worked example, reproduced by the gateway's signer byte for byte.
#[test]
fn the_worked_example_of_the_documentation() {
    let example: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("worked_example.json")).unwrap()).unwrap();
    let text = |name: &str| example[name].as_str().unwrap_or_else(|| panic!("{name} in worked_example.json"));
    let seed: [u8; 32] = hex::decode(text("seed_hex")).unwrap().try_into().unwrap();
    let key = SigningKey::from_bytes(&seed);
    let did = Did::key_from_public_key(&Ed25519PublicKey(key.verifying_key().to_bytes()));
    assert_eq!(did.as_str(), text("keyid"));
    let message =
        Message { method: text("method"), authority: text("authority"), path: text("path"), query: None, headers: &[] };
    let options = SignOptions {
        label: "sig1",
        created: example["created"].as_u64().unwrap(),
        expires: example["expires"].as_u64().unwrap(),
        nonce: text("nonce"),
        keyid: did.as_str(),
    };
    let body = text("body").as_bytes();
    let signed = sign(&message, body, &key, &options).unwrap();
    assert_eq!(signed.content_digest.as_deref(), Some(text("content_digest")));
    assert_eq!(signed.signature_input, text("signature_input"));
    assert_eq!(signed.signature, text("signature"));
    let input: sfv::Dictionary = sfv::Parser::new(&signed.signature_input).parse().unwrap();
    let Some(sfv::ListEntry::InnerList(list)) = input.get("sig1") else { panic!() };
    let headers = [("content-digest", text("content_digest"))];
    let base = signature_base(&Message { headers: &headers, ..message }, list).unwrap();
    assert_eq!(base, text("signature_base"));
}
