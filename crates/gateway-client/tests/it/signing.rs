//! The SDK signs every critical operation by default (INTERFACE.md §11), end to end through the real
//! router: in a coop that requires signatures its payments, votes and settings changes go
//! through and keep verifiable evidence, and a client told not to sign is refused.

use std::sync::Arc;

use gateway_client::{Client, Error, NewDomain, NewProposal, PaymentRequest, RetryPolicy, SettingsPatch, VoteChoice};
use gateway_core::Amount;

use crate::support::Gateway;

#[tokio::test]
async fn the_sdk_signs_critical_operations_and_the_evidence_verifies() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("signed", 1).await;
    let coop = &admin.coop;
    let require = SettingsPatch { require_signed_requests: Some(true), ..Default::default() };
    let settings = admin.client.update_settings(coop, &require).await.unwrap();
    assert!(settings.settings.require_signed_requests, "the settings change itself was signed");

    let alice = &members[0];
    let payment = PaymentRequest {
        from: alice.identity.did().clone(),
        to: admin.identity.did().clone(),
        amount: Amount::from_units(2),
        currency: None,
        memo: None,
    };
    let paid = alice.client.pay(coop, &payment, None).await.unwrap();
    let evidence = paid.request_signature.expect("a signed payment keeps its evidence");
    assert_eq!(gateway_httpsig::verify_evidence(&evidence).unwrap(), *alice.identity.did());
    assert_eq!(evidence.path, format!("/v1/ledger/{coop}/payment"));

    // A vote is critical too: it goes through signed, and the tally carries its evidence.
    let voters = vec![admin.identity.did().to_string(), alice.identity.did().to_string()];
    let domain = NewDomain {
        domain_id: "board".into(),
        name: "Board".into(),
        members: voters,
        quorum_percent: None,
        rule: None,
    };
    admin.client.create_domain(&domain).await.unwrap();
    let proposal = admin.client.create_proposal(&NewProposal::text("board", "Signed", "a signed vote")).await.unwrap();
    admin.client.open_proposal(&proposal.id).await.unwrap();
    alice.client.vote(&proposal.id, VoteChoice::For).await.unwrap();
    let votes = admin.client.votes(&proposal.id).await.unwrap();
    let cast = votes.voters.iter().find(|v| v.voter == alice.identity.did().as_str()).expect("alice's vote");
    let evidence = cast.request_signature.as_ref().expect("a signed vote keeps its evidence");
    assert_eq!(gateway_httpsig::verify_evidence(evidence).unwrap(), *alice.identity.did());

    // The same identity, told not to sign: refused in this coop.
    let unsigned = Client::builder(&gateway.url)
        .clock(Arc::new(gateway.clock.clone()))
        .retry(RetryPolicy::none())
        .sign_requests(false)
        .build()
        .unwrap();
    unsigned
        .login(
            alice.identity.clone(),
            coop.clone(),
            &[gateway_core::Scope::LedgerRead, gateway_core::Scope::LedgerWrite],
        )
        .await
        .unwrap();
    match unsigned.pay(coop, &payment, None).await {
        Err(Error::Authentication { message, reason }) => {
            assert!(message.contains("requires a request signature"), "{message}");
            assert_eq!(reason.as_deref(), Some("signature_required"));
        }
        other => panic!("an unsigned payment in a coop that requires signatures: {other:?}"),
    }
}
