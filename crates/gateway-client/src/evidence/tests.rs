//! The record checks against evidence made by the real profile: an intact record passes, and
//! each field changed after signing is named.

use gateway_httpsig::{Limits, Message, SignOptions};

use super::*;
use crate::identity::Identity;

const NOW: u64 = 1_800_000_000;

/// Evidence of `body` sent as `POST path` by `identity`, as the gateway keeps it.
fn evidence(identity: &Identity, path: &str, body: &str) -> RequestSignature {
    let message = Message { method: "POST", authority: "gw.example", path, query: None, headers: &[] };
    let options = SignOptions {
        label: "sig1",
        created: NOW,
        expires: NOW + 60,
        nonce: "n0nce-0123456789abcdef",
        keyid: identity.did().as_str(),
    };
    let signed = gateway_httpsig::sign(&message, body.as_bytes(), identity.signing_key(), &options).unwrap();
    let digest = signed.content_digest.clone().unwrap();
    let headers = [("content-digest", digest.as_str())];
    let received = Message { headers: &headers, ..message };
    gateway_httpsig::verify(
        &received,
        body.as_bytes(),
        &signed.signature_input,
        &signed.signature,
        identity.did(),
        NOW,
        Limits::default(),
    )
    .unwrap()
    .evidence
}

fn amount(text: &str) -> Amount {
    Amount::parse_decimal(text).unwrap()
}

#[test]
fn a_payment_record_must_be_its_signed_body() {
    let alice = Identity::from_seed([1; 32]);
    let bob = Identity::from_seed([2; 32]).did().to_string();
    let mallory = Identity::from_seed([3; 32]).did().to_string();
    let body = format!(r#"{{"from":"{}","to":"{bob}","amount":2.50,"currency":"EUR","memo":"bread"}}"#, alice.did());
    let evidence = evidence(&alice, "/v1/ledger/bakery/payment", &body);
    let intact = PaymentFields {
        from: alice.did().as_str(),
        to: &bob,
        // Exact decimals: 2.5 is the signed 2.50.
        amount: amount("2.5"),
        currency: "EUR",
        memo: Some("bread"),
        to_currency: None,
    };
    assert_eq!(verify_payment(&evidence, &intact), Ok(alice.did().clone()));
    let cases = [
        ("amount", PaymentFields { amount: amount("2.500001"), ..intact.clone() }),
        ("to", PaymentFields { to: &mallory, ..intact.clone() }),
        ("memo", PaymentFields { memo: Some("cake"), ..intact.clone() }),
        ("memo", PaymentFields { memo: None, ..intact.clone() }),
        ("currency", PaymentFields { currency: "USD", ..intact.clone() }),
        ("from", PaymentFields { from: &mallory, ..intact.clone() }),
        ("to_currency", PaymentFields { to_currency: Some("USD"), ..intact.clone() }),
    ];
    for (field, tampered) in cases {
        assert_eq!(verify_payment(&evidence, &tampered).unwrap_err().field(), Some(field), "{tampered:?}");
    }
    // The kept body itself replaced: its digest is not the signed one.
    let mut forged = evidence.clone();
    forged.body = Some(base64_of(&body.replace("2.50", "25.0")).into());
    assert_eq!(
        verify_payment(&forged, &intact),
        Err(EvidenceError::Signature(gateway_httpsig::Failure::DigestMismatch))
    );
    let mut old = evidence;
    old.body = None;
    assert_eq!(verify_payment(&old, &intact), Err(EvidenceError::NoBody));
}

fn base64_of(text: &str) -> String {
    // The SDK has no base64 of its own: the kept body of any evidence of `text` is its base64.
    let alice = Identity::from_seed([9; 32]);
    evidence(&alice, "/v1/ledger/x/payment", text).body.unwrap().to_string()
}

#[test]
fn a_batch_record_must_be_one_of_the_signed_payments() {
    let alice = Identity::from_seed([1; 32]);
    let bob = Identity::from_seed([2; 32]).did().to_string();
    let carol = Identity::from_seed([4; 32]).did().to_string();
    let body = format!(r#"[{{"to":"{bob}","amount":1}},{{"to":"{carol}","amount":3,"memo":"x"}}]"#);
    let evidence = evidence(&alice, "/v1/ledger/bakery/payments/batch", &body);
    let second = PaymentFields {
        from: alice.did().as_str(),
        to: &carol,
        amount: amount("3"),
        // Left to the coop's default: not checkable, not checked.
        currency: "CREDIT",
        memo: Some("x"),
        to_currency: None,
    };
    assert_eq!(verify_payment(&evidence, &second), Ok(alice.did().clone()));
    let inflated = PaymentFields { amount: amount("30"), ..second.clone() };
    assert_eq!(verify_payment(&evidence, &inflated).unwrap_err().field(), Some("amount"));
}

#[test]
fn a_vote_record_must_be_its_signed_choice_proposal_and_voter() {
    let alice = Identity::from_seed([1; 32]);
    let evidence = evidence(&alice, "/v1/gov/proposals/p-7/vote", r#"{"choice":"approve"}"#);
    let intact = VoteFields { proposal_id: Some("p-7"), voter: alice.did().as_str(), choice: "For" };
    assert_eq!(verify_vote(&evidence, &intact), Ok(alice.did().clone()));
    assert!(verify_vote(&evidence, &VoteFields { choice: "yes", ..intact.clone() }).is_ok(), "a synonym");
    assert!(verify_vote(&evidence, &VoteFields { proposal_id: None, ..intact.clone() }).is_ok());
    let bob = Identity::from_seed([2; 32]).did().to_string();
    for (field, tampered) in [
        ("choice", VoteFields { choice: "Against", ..intact.clone() }),
        ("choice", VoteFields { choice: "Abstain", ..intact.clone() }),
        ("proposal_id", VoteFields { proposal_id: Some("p-8"), ..intact.clone() }),
        ("voter", VoteFields { voter: &bob, ..intact.clone() }),
    ] {
        assert_eq!(verify_vote(&evidence, &tampered).unwrap_err().field(), Some(field), "{tampered:?}");
    }
    // A payment's evidence is not a vote's.
    let payment = super::tests::evidence(&alice, "/v1/ledger/c/payment", r#"{"to":"x","amount":1}"#);
    assert!(matches!(verify_vote(&payment, &intact), Err(EvidenceError::Operation { .. })));
}
