//! The coop's log through the SDK: a payment's answer names its event, its proof and entry verify
//! offline against a policy written from the published key, consistency proofs join
//! checkpoints, and an audit passes, keeps its state, extends it the next time (across a
//! rotation of the coop's key, which the log announces), and refuses a state whose keys the log
//! no longer publishes.

use gateway_client::tlog::{Checkpoint, Note, Signer, verify_consistency};
use gateway_client::{AuditState, Mismatch, NewProposal, PaymentRequest, VoteChoice, verify_proof};
use gateway_core::{Amount, CoopId};

use crate::support::{Gateway, Member};

async fn sign(gateway: &Gateway, coop: &CoopId) -> u64 {
    match gateway.state.log.checkpoint(coop).await.unwrap() {
        gateway_domain::log::Round::Signed { size } => size,
        other => panic!("{other:?}"),
    }
}

async fn pay(from: &Member, to: &Member, amount: &str) -> u64 {
    let payment = PaymentRequest {
        from: from.identity.did().clone(),
        to: to.identity.did().clone(),
        amount: Amount::parse_payment(amount).unwrap(),
        currency: None,
        memo: Some("log".into()),
    };
    from.client.pay(&from.coop, &payment, None).await.unwrap();
    from.client.last_event_seq().expect("the answer names its event")
}

#[tokio::test]
async fn a_members_proof_verifies_offline_and_checkpoints_are_consistent() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("c1", 1).await;
    let coop = admin.coop.clone();
    let seq = pay(&admin, &members[0], "2.5").await;
    let first = sign(&gateway, &coop).await;

    let client = gateway.client();
    let checkpoint = client.log_checkpoint(&coop).await.unwrap();
    assert_eq!((checkpoint.origin(), checkpoint.size()), ("localhost/coops/c1", first));
    let keys = client.log_keys(&coop).await.unwrap();
    checkpoint.signed_by(&keys).unwrap();

    let entry = members[0].client.log_entry(&coop, seq, true).await.unwrap();
    assert_eq!((entry.seq, entry.index), (seq, seq), "a new coop's log opens after event 0");
    let policy = format!("log {}\nquorum none\n", keys.last().unwrap());
    let verified = verify_proof(entry.proof.as_bytes(), &entry.bytes, policy.as_bytes()).unwrap();
    assert_eq!((verified.seq, verified.event_type.as_deref()), (Some(seq), Some("PaymentCreated")));
    let proof = members[0].client.log_proof(&coop, seq, false).await.unwrap();
    assert!(verify_proof(proof.as_bytes(), &entry.bytes, policy.as_bytes()).is_ok());
    let bundle = members[0].client.log_entry_bundle(&coop, 0, u16::try_from(first).unwrap()).await.unwrap();
    assert_eq!(bundle[usize::try_from(seq).unwrap()], entry.bytes);
    let tile = client.log_tile(&coop, 0, 0, u16::try_from(first).unwrap()).await.unwrap();
    assert_eq!(&tile[32 * usize::try_from(seq).unwrap()..][..32], gateway_client::tlog::leaf_hash(&entry.bytes));

    pay(&members[0], &admin, "1").await;
    let second = sign(&gateway, &coop).await;
    let newer = client.log_checkpoint(&coop).await.unwrap();
    let hashes = admin.client.log_consistency(&coop, first, second).await.unwrap();
    verify_consistency(first, second, checkpoint.root(), newer.root(), &hashes).unwrap();
    // Strangers read the public parts only.
    assert!(client.log_proof(&coop, seq, false).await.is_err());
}

#[tokio::test]
async fn an_audit_passes_keeps_its_state_and_holds_the_log_to_it() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("c1", 2).await;
    let coop = admin.coop.clone();
    pay(&admin, &members[0], "3").await;
    pay(&members[0], &members[1], "0.000001").await;
    let size = sign(&gateway, &coop).await;

    let report = members[1].client.audit(&coop, None).await.unwrap();
    assert!(report.passed(), "{report:#?}");
    assert_eq!((report.size, report.after_seq, report.previous.clone()), (size, Some(0), None));
    assert_eq!(report.events["PaymentCreated"], 2);
    assert!(report.accounts_checked >= 5, "{report:#?}");
    let state = report.new_state.clone().expect("a passed audit gives its state");
    assert_eq!(state.size(), size);

    pay(&members[1], &admin, "1").await;
    let grown = sign(&gateway, &coop).await;
    let report = members[1].client.audit(&coop, Some(&state)).await.unwrap();
    assert!(report.passed(), "{report:#?}");
    assert_eq!(report.previous.as_ref().map(|p| p.size), Some(size));
    assert_eq!(report.new_state.as_ref().map(AuditState::size), Some(grown));
    let state = report.new_state.clone().unwrap();

    // The coop rotates its key by decision: the decision's receipt is signed with the old key,
    // the checkpoints from then on with the new one, which the log announces.
    let rotation = NewProposal {
        payload: Some(serde_json::json!({ "type": "signing_key_rotation" })),
        ..NewProposal::text("coop", "New key", "")
    };
    let proposal = admin.client.create_and_open_proposal(&rotation).await.unwrap();
    for voter in [&admin, &members[0], &members[1]] {
        voter.client.vote(&proposal.id, VoteChoice::For).await.unwrap();
    }
    assert_eq!(admin.client.close_proposal(&proposal.id).await.unwrap().outcome.as_deref(), Some("Approved"));
    sign(&gateway, &coop).await;
    let report = members[1].client.audit(&coop, Some(&state)).await.unwrap();
    assert!(report.passed(), "{report:#?}");
    assert_eq!(report.receipts_verified, 1, "{report:#?}");
    assert_ne!(report.signed_by.as_deref(), Some(state.keys()[0].as_str()), "a new key signs");
    assert!(report.notes.iter().any(|n| n.contains("which the log itself announces")), "{report:#?}");
    let state = report.new_state.clone().unwrap();
    assert_eq!(state.keys().len(), 2, "the retired key stays published");

    // A state that pins a key the log does not publish (and whose checkpoint that key signed):
    // the keys are not the ones the auditor saw.
    let stranger = Signer::from_seed("localhost/coops/c1", &[42; 32]).unwrap();
    let mut note =
        Note::new(Checkpoint::new("localhost/coops/c1", state.size(), *state.root()).unwrap().to_text()).unwrap();
    note.sign(&stranger).unwrap();
    let pinned = AuditState::new(&note.to_string(), &format!("{}\n", stranger.vkey())).unwrap();
    let report = members[1].client.audit(&coop, Some(&pinned)).await.unwrap();
    assert!(!report.passed());
    assert!(report.new_state.is_none());
    assert!(
        report
            .mismatches
            .iter()
            .any(|m| matches!(m, Mismatch::Key { detail } if detail.contains("no longer published"))),
        "{report:#?}"
    );
    assert_eq!(report.mismatches.len(), 1, "{report:#?}");
    // The key that signs now is one the state did not pin, but the log announces it (the
    // coop's SigningKeyRotated entry): that alone is no failure.
    assert!(report.notes.iter().any(|n| n.contains("which the log itself announces")), "{report:#?}");
}
