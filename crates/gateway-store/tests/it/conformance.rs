//! Behaviour every backend must share. Each test runs once per backend (see the macro at the end).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::join_all;
use gateway_core::{Amount, CoopId, Currency, Error, PageRequest, Role};
use gateway_domain::ledger::{Idempotency, PaymentRequest, Replay, Stored};
use gateway_domain::notifications::expand_fanouts;
use gateway_domain::ports::{
    EventReads, HistoryQuery, LedgerReads, NotificationFanout, NotificationReads, SigningKeyRecord, TrustEdge,
    TrustReads, appended, transaction,
};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use crate::support::{Backend, Fixture, did};

fn units(n: i64) -> Amount {
    Amount::from_units(n)
}

fn hours() -> Currency {
    Currency::parse("hours").unwrap()
}

fn payment(from: u32, to: u32, amount: Amount) -> PaymentRequest {
    PaymentRequest {
        from: did(from).to_string(),
        to: did(to).to_string(),
        amount,
        currency: None,
        memo: None,
        request_signature: None,
    }
}

async fn balance(f: &Fixture, coop: &CoopId, n: u32) -> Amount {
    f.ledger.balance(coop, did(n).as_str(), None).await.unwrap().balance
}

async fn assert_zero_sum(f: &Fixture) {
    for (coop, currency, sum) in f.ledger.balance_sums().await.unwrap() {
        assert_eq!(sum, Amount::ZERO, "{coop}/{currency} sums to {sum}");
    }
}

async fn coop_lifecycle(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 3).await;
    let record = f.coops.get(&coop).await.unwrap();
    assert_eq!(record.member_count, 3);
    assert_eq!(record.created_by, did(0));
    let duplicate = f
        .coops
        .create(
            &did(0),
            &coop,
            gateway_domain::coops::NewCoop {
                id: None,
                name: "x".into(),
                coop_type: "w".into(),
                description: String::new(),
            },
        )
        .await;
    assert!(matches!(duplicate, Err(Error::Conflict { .. })));
    assert!(matches!(f.coops.add_member(&coop, &did(1), Role::Member).await, Err(Error::Conflict { .. })));
    assert!(matches!(f.coops.remove_member(&coop, &did(0)).await, Err(Error::Conflict { .. })), "last admin");
    f.coops.set_role(&coop, &did(1), Role::Admin).await.unwrap();
    f.coops.remove_member(&coop, &did(0)).await.unwrap();
    let (members, total) = f.coops.members(&coop, PageRequest::default()).await.unwrap();
    assert_eq!(total, 2);
    assert!(members.iter().all(|m| m.did != did(0)));
    let (mine, _) = f.coops.list_for(&did(1), PageRequest::default()).await.unwrap();
    assert_eq!(mine[0].id, coop);
}

async fn payments_events_and_notifications(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 3).await;
    let before = f.store.current_seq(&coop).await.unwrap();
    assert_eq!(before, 3, "one MemberAdded per member");
    f.ledger.pay(&coop, payment(1, 2, units(10)), None).await.unwrap();
    f.ledger.pay(&coop, payment(2, 1, Amount::from_micros(2_500_001)), None).await.unwrap();
    assert_eq!(balance(&f, &coop, 1).await, Amount::from_micros(-7_499_999));
    assert_eq!(balance(&f, &coop, 2).await, Amount::from_micros(7_499_999));
    assert_zero_sum(&f).await;
    let events = f.store.events_after(&coop, 0, 100).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=5).collect::<Vec<_>>(), "gapless from 1");
    assert_eq!(events[3].event_type, "PaymentCreated");
    assert_eq!(events[3].data.to_value()["amount"], serde_json::json!(10));
    assert_eq!(f.store.events_after(&coop, 4, 100).await.unwrap().len(), 1);
    let inbox = f.notifications.list(&did(2), &coop, false, PageRequest::default()).await.unwrap();
    assert_eq!(inbox.items[0].kind, "payment_received");
    assert_eq!(inbox.unread, 2);
    // A refused payment writes nothing: no event, no balance change.
    let refused = f.ledger.pay(&coop, payment(1, 2, units(993)), None).await;
    assert!(matches!(refused, Err(Error::InsufficientCredit { .. })), "{refused:?}");
    assert_eq!(f.store.current_seq(&coop).await.unwrap(), 5);
    let (history, total) = f
        .ledger
        .history(HistoryQuery {
            coop: coop.clone(),
            account: Some(did(1).to_string()),
            currency: None,
            page: PageRequest::default(),
        })
        .await
        .unwrap();
    assert_eq!(total, 2);
    assert_eq!(history[0].amount, Amount::from_micros(2_500_001), "newest first");
}

async fn idempotent_payments(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 2).await;
    let key = |hash: &str| Some(Idempotency { key: "c1/k".into(), request_hash: hash.into() });
    let (first, first_seq) = appended::track(f.ledger.pay(&coop, payment(0, 1, units(3)), key("h1"))).await;
    let (again, again_seq) = appended::track(f.ledger.pay(&coop, payment(0, 1, units(3)), key("h1"))).await;
    let Replay::Fresh(record) = first.unwrap() else { panic!("the first use of a key runs") };
    // The replay is the stored domain result itself, read back exactly, with the number of the
    // event the first request appended (its `ICN-Event-Seq`), in the unit of work and outside.
    assert_eq!(again.unwrap(), Replay::Replayed(Stored::Decided(Ok(record.clone()))));
    assert_eq!(first_seq, Some(f.store.current_seq(&coop).await.unwrap()), "the payment's event");
    assert_eq!(again_seq, first_seq, "a replay carries the first answer's event number");
    let (stored, stored_seq) = appended::track(f.ledger.stored_answer(&key("h1").unwrap())).await;
    assert_eq!(stored.unwrap(), Some(Stored::Decided(Ok(record))));
    assert_eq!(stored_seq, first_seq, "the read before the unit of work finds it too");
    assert_eq!(balance(&f, &coop, 0).await, units(-3), "one payment only");
    let other = f.ledger.pay(&coop, payment(0, 1, units(4)), key("h2")).await;
    assert!(matches!(other, Err(Error::Conflict { .. })));
    // A refusal the ledger decided is stored and replayed as itself, and moves nothing.
    let refusal_key = Some(Idempotency { key: "c1/refused".into(), request_hash: "r".into() });
    let refused = f.ledger.pay(&coop, payment(0, 1, units(5000)), refusal_key.clone()).await;
    let Err(refusal @ Error::InsufficientCredit { .. }) = refused else { panic!("{refused:?}") };
    let (replayed, refusal_seq) = appended::track(f.ledger.pay(&coop, payment(0, 1, units(5000)), refusal_key)).await;
    assert_eq!(replayed.unwrap(), Replay::Replayed(Stored::Decided(Err(refusal))));
    assert_eq!(refusal_seq, None, "a refusal appended no event");
    assert_eq!(balance(&f, &coop, 0).await, units(-3));
    // After 24 h the key may be used again.
    f.clock.advance_secs(24 * 3600 + 1);
    let later = f.ledger.pay(&coop, payment(0, 1, units(4)), key("h2")).await.unwrap();
    assert!(matches!(later, Replay::Fresh(ref t) if t.amount == units(4)), "{later:?}");
    // The background prune deletes the expired answer, and only it.
    use gateway_domain::ports::LedgerReads;
    assert!(f.store.idempotency("c1/refused", 0).await.unwrap().is_some());
    assert_eq!(f.ledger.prune_expired().await.unwrap(), 1);
    assert!(f.store.idempotency("c1/refused", 0).await.unwrap().is_none(), "expired answers are deleted");
    assert!(f.store.idempotency("c1/k", 0).await.unwrap().is_some(), "live answers stay");
}

async fn trust_edges_survive_reload(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    f.trust.set_edge(&did(1), &did(2), 0.7).await.unwrap();
    f.trust.set_edge(&did(2), &did(3), 0.5).await.unwrap();
    f.trust.remove_edge(&did(1), &did(2)).await.unwrap();
    let edges = f.store.all_edges().await.unwrap();
    assert_eq!(edges.len(), 1);
    assert_eq!(edges[0].target, did(3));
    assert!(matches!(f.trust.remove_edge(&did(1), &did(2)).await, Err(Error::NotFound { .. })));
}

/// Many tasks paying concurrently end with the balances of a serial replay of what succeeded.
async fn concurrent_payments_equal_a_serial_replay(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 6).await;
    let ledger = Arc::new(f.ledger.clone());
    let mut tasks = Vec::new();
    for task in 0..12u64 {
        let (ledger, coop) = (ledger.clone(), coop.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(task);
            for _ in 0..25 {
                let from = rng.gen_range(0..6);
                let to = (from + rng.gen_range(1..6)) % 6;
                let amount = Amount::from_micros(rng.gen_range(1..400_000_000));
                match ledger.pay(&coop, payment(from, to, amount), None).await {
                    Ok(_) | Err(Error::InsufficientCredit { .. }) => {}
                    Err(other) => panic!("unexpected {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_zero_sum(&f).await;
    let (mut history, total) = f
        .ledger
        .history(HistoryQuery {
            coop: coop.clone(),
            account: None,
            currency: None,
            page: PageRequest { limit: 100, offset: 0 },
        })
        .await
        .unwrap();
    let mut offset = 100;
    while (history.len() as u64) < total {
        let page = PageRequest { limit: 100, offset };
        history.extend(
            f.ledger.history(HistoryQuery { coop: coop.clone(), account: None, currency: None, page }).await.unwrap().0,
        );
        offset += 100;
    }
    let mut replay: BTreeMap<String, i64> = BTreeMap::new();
    for t in history.iter().rev() {
        *replay.entry(t.from.clone()).or_default() -= t.amount.micros();
        *replay.entry(t.to.clone()).or_default() += t.amount.micros();
    }
    for n in 0..6 {
        let expected = replay.get(did(n).as_str()).copied().unwrap_or(0);
        assert_eq!(balance(&f, &coop, n).await.micros(), expected, "member {n}");
        assert!(expected >= -1_000_000_000, "member {n} below the credit limit");
    }
    // Every successful payment has exactly one event, numbered without gaps.
    let events = f.store.events_after(&coop, 0, 10_000).await.unwrap();
    assert_eq!(events.len() as u64, 6 + total);
    assert!(events.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1));
}

/// The members among `asked`, as sorted DID texts, read through a unit of work.
async fn members_among(f: &Fixture, coop: &CoopId, asked: Vec<gateway_core::Did>) -> Vec<String> {
    let coop = coop.clone();
    let found = transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            let refs: Vec<&gateway_core::Did> = asked.iter().collect();
            tx.members_among(&coop, &refs).await
        })
    })
    .await
    .unwrap();
    let mut dids: Vec<String> = found.iter().map(|m| m.did.to_string()).collect();
    dids.sort();
    dids
}

/// Looking up more DIDs than one statement may take (SQLite: 32,766 parameters) still answers:
/// a governance domain may list that many. A few DIDs answer each member once too.
async fn members_among_takes_any_number_of_dids(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("big", 3).await;
    let mut expected: Vec<String> = (0..3).map(|n| did(n).to_string()).collect();
    expected.sort();
    assert_eq!(members_among(&f, &coop, (0..40_000).map(did).collect()).await, expected);

    // A few DIDs (looked up one by one), one named twice, one not a member: each member once.
    let mut expected = vec![did(0).to_string(), did(2).to_string()];
    expected.sort();
    assert_eq!(members_among(&f, &coop, vec![did(2), did(9), did(2), did(0)]).await, expected);
    assert_eq!(members_among(&f, &coop, vec![]).await, Vec::<String>::new(), "none asked, none found");
}

/// A close writes its outcome, its receipt and one notification per domain member.
async fn closing_notifies_every_domain_member(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 5).await;
    let members: Vec<_> = (0..5).map(did).collect();
    let domain = gateway_domain::governance::NewDomain {
        domain_id: "d".into(),
        name: "D".into(),
        members,
        quorum_percent: None,
        rule: None,
    };
    f.governance.create_domain(&coop, &did(0), domain).await.unwrap();
    let request = proposal("d", serde_json::json!({ "type": "text", "content": "x" }));
    let proposal = f.governance.create_proposal(&coop, &did(0), request, true).await.unwrap();
    for n in 0..3 {
        f.governance.vote(&coop, &did(n), &proposal.id, "for").await.unwrap();
    }
    let closed = f.governance.close(&coop, Some(&did(0)), &proposal.id).await.unwrap();
    assert_eq!(closed.outcome, Some(gateway_domain::governance::Outcome::Approved));
    assert_eq!(f.governance.proof(&coop, &proposal.id).await.unwrap()["tally"]["for"], 3);
    for n in 0..5 {
        let inbox = f.notifications.list(&did(n), &coop, false, PageRequest::default()).await.unwrap();
        let kinds: Vec<&str> = inbox.items.iter().map(|i| i.kind.as_str()).collect();
        assert!(kinds.contains(&"proposal_closed") && kinds.contains(&"proposal_opened"), "member {n}: {kinds:?}");
        let closed_note = inbox.items.iter().find(|i| i.kind == "proposal_closed").unwrap();
        assert_eq!(closed_note.data.to_value()["outcome"], "Approved");
        assert_eq!(closed_note.recipient, did(n));
    }
}

/// The coop-wide domain `coop`, created with every coop, where proposals with effects on the
/// coop live.
async fn coop_domain(f: &Fixture, coop: &CoopId, members: u32) -> String {
    let domain = f.governance.domain(coop, "coop").await.unwrap();
    assert_eq!(domain.members.len(), members as usize, "the coop domain holds every member");
    "coop".into()
}

/// A proposal in `domain` with `payload`, voting for 60 s under the domain's rule.
fn proposal(domain: &str, payload: serde_json::Value) -> gateway_domain::governance::NewProposal {
    gateway_domain::governance::NewProposal {
        domain_id: domain.into(),
        title: "T".into(),
        description: String::new(),
        payload,
        rule: None,
        voting_duration_secs: Some(60),
    }
}

/// Creates, opens, approves (every member for) and closes a proposal; returns its id.
async fn decide(f: &Fixture, coop: &CoopId, domain: &str, members: u32, payload: serde_json::Value) -> String {
    let request = proposal(domain, payload);
    let proposal = f.governance.create_proposal(coop, &did(0), request, true).await.unwrap();
    for n in 0..members {
        f.governance.vote(coop, &did(n), &proposal.id, "for").await.unwrap();
    }
    f.clock.advance_secs(10);
    let closed = f.governance.close(coop, Some(&did(0)), &proposal.id).await.unwrap();
    assert_eq!(closed.outcome, Some(gateway_domain::governance::Outcome::Approved));
    f.clock.advance_secs(10);
    proposal.id
}

async fn receipt_of(f: &Fixture, coop: &CoopId, id: &str) -> gateway_domain::governance::Receipt {
    serde_json::from_value(f.governance.proof(coop, id).await.unwrap()).unwrap()
}

/// Checks a receipt as an auditor would: the receipt verifies by itself, and its key is listed
/// for the coop as valid at the receipt's time, whose signature of the digest verifies.
fn verify_against_listed(receipt: &gateway_domain::governance::Receipt, listed: &[SigningKeyRecord]) {
    gateway_domain::governance::verify_receipt(receipt).unwrap();
    let key = listed
        .iter()
        .find(|k| k.public_key == receipt.public_key)
        .unwrap_or_else(|| panic!("{} is not listed: {listed:?}", receipt.public_key));
    let t = receipt.timestamp;
    assert!(key.valid_from <= t && key.valid_until.is_none_or(|until| t < until), "{key:?} at {t}");
    let public: [u8; 32] = hex::decode(&key.public_key).unwrap().try_into().unwrap();
    let digest: [u8; 32] = hex::decode(&receipt.decision_hash[2..]).unwrap().try_into().unwrap();
    let signature: [u8; 64] = hex::decode(&receipt.signature).unwrap().try_into().unwrap();
    ed25519_dalek::VerifyingKey::from_bytes(&public)
        .unwrap()
        .verify_strict(&digest, &ed25519_dalek::Signature::from_bytes(&signature))
        .unwrap();
}

fn current(listed: &[SigningKeyRecord]) -> &SigningKeyRecord {
    let current: Vec<&SigningKeyRecord> = listed.iter().filter(|k| k.valid_until.is_none()).collect();
    assert_eq!(current.len(), 1, "{listed:?}");
    current[0]
}

/// Receipt keys are per coop: an approved rotation in coop A moves A, and only A, to its next
/// key; the operator's master rotation moves every coop; old receipts stay verifiable with the
/// retired keys each coop lists.
async fn receipt_key_rotation_is_per_coop(backend: Backend) {
    use gateway_domain::governance::derive_receipt_key;
    let Some(f) = Fixture::open(backend).await else { return };
    let (a, b) = (f.coop("ka", 3).await, f.coop("kb", 3).await);
    let (da, db) = (coop_domain(&f, &a, 3).await, coop_domain(&f, &b, 3).await);
    let text = || serde_json::json!({ "type": "text", "content": "x" });
    let a0 = receipt_of(&f, &a, &decide(&f, &a, &da, 3, text()).await).await;
    let b0 = receipt_of(&f, &b, &decide(&f, &b, &db, 3, text()).await).await;
    let key = |coop: &CoopId, master: &[u8; 32], generation: u32| {
        hex::encode(derive_receipt_key(master, coop, generation).verifying_key().to_bytes())
    };
    assert_eq!(a0.public_key, key(&a, &[3; 32], 0));
    assert_eq!(b0.public_key, key(&b, &[3; 32], 0));
    assert_ne!(a0.public_key, b0.public_key, "each coop has its own key");
    let b_before = f.governance.signing_keys(&b).await.unwrap();
    assert_eq!(b_before.len(), 1);
    let a_listed = f.governance.signing_keys(&a).await.unwrap();
    assert_eq!(a_listed.len(), 1, "a coop lists its own keys only: {a_listed:?}");
    assert_eq!((current(&a_listed).master, current(&a_listed).generation), (Some(0), Some(0)));
    assert_eq!(current(&a_listed).coop_id.as_ref(), Some(&a));

    // Coop A approves a key rotation: its own receipt is still signed with A's old key.
    let rotation = decide(&f, &a, &da, 3, serde_json::json!({ "type": "signing_key_rotation" })).await;
    let rotation = receipt_of(&f, &a, &rotation).await;
    assert_eq!(rotation.public_key, a0.public_key);
    let a1 = receipt_of(&f, &a, &decide(&f, &a, &da, 3, text()).await).await;
    assert_eq!(a1.public_key, key(&a, &[3; 32], 1), "A moved to generation 1");
    let b1 = receipt_of(&f, &b, &decide(&f, &b, &db, 3, text()).await).await;
    assert_eq!(b1.public_key, b0.public_key, "B's key did not change");
    assert_eq!(f.governance.signing_keys(&b).await.unwrap(), b_before, "B's list did not change");
    let a_listed = f.governance.signing_keys(&a).await.unwrap();
    assert_eq!(a_listed.len(), 2, "{a_listed:?}");
    assert_eq!(a_listed[0].public_key, a0.public_key);
    assert!(a_listed[0].valid_until.is_some(), "A's old key is retired");
    assert_eq!(
        (current(&a_listed).public_key.as_str(), current(&a_listed).generation),
        (a1.public_key.as_str(), Some(1))
    );
    for receipt in [&a0, &rotation, &a1] {
        verify_against_listed(receipt, &a_listed);
    }
    verify_against_listed(&b1, &b_before);

    // The operator rotates the master: every coop moves to a key of master 1 at its own
    // generation, and the keys of master 0 stay listed.
    assert_eq!(f.keys.rotate_master([4; 32]), 1);
    let b_listed = f.governance.signing_keys(&b).await.unwrap();
    assert_eq!(b_listed.len(), 2, "listing records B's new current key: {b_listed:?}");
    assert_eq!(current(&b_listed).public_key, key(&b, &[4; 32], 0));
    assert_eq!(current(&b_listed).master, Some(1));
    let a2 = receipt_of(&f, &a, &decide(&f, &a, &da, 3, text()).await).await;
    assert_eq!(a2.public_key, key(&a, &[4; 32], 1));
    let a_listed = f.governance.signing_keys(&a).await.unwrap();
    assert_eq!(a_listed.len(), 3);
    assert_eq!((current(&a_listed).master, current(&a_listed).generation), (Some(1), Some(1)));
    for receipt in [&a0, &rotation, &a1, &a2] {
        verify_against_listed(receipt, &a_listed);
    }
    verify_against_listed(&b0, &b_listed);
    verify_against_listed(&b1, &b_listed);

    // A gateway still holding master 0 (a replica not yet restarted) never takes a coop back.
    let stale = gateway_domain::governance::Governance::new(
        f.store.clone(),
        f.store.clone(),
        Arc::new(gateway_domain::trust::TrustGraph::new(vec![], 0.9, vec![])),
        Arc::new(gateway_domain::governance::MemoryReceiptKeys::new([3; 32])),
        Arc::new(f.clock.clone()),
    );
    let request = gateway_domain::governance::NewProposal {
        domain_id: da.clone(),
        title: "T".into(),
        description: String::new(),
        payload: text(),
        rule: None,
        voting_duration_secs: Some(60),
    };
    let proposal = stale.create_proposal(&a, &did(0), request, true).await.unwrap();
    let closed = stale.close(&a, Some(&did(0)), &proposal.id).await.unwrap();
    assert_eq!(closed.receipt_unavailable.as_deref(), Some("keystore_outdated"));
    assert_eq!(stale.signing_keys(&a).await.unwrap(), a_listed, "the list is left as it was");
}

fn fanout(coop: &CoopId, recipients: &[u32], title: &str) -> NotificationFanout {
    NotificationFanout {
        recipients: recipients.iter().map(|&n| did(n)).collect(),
        coop_id: coop.clone(),
        kind: "proposal_opened".into(),
        title: title.into(),
        body: "b".into(),
        data: serde_json::json!({ "title": title }).into(),
        created_at: 1_800_000_000,
    }
}

async fn insert_fanout(f: &Fixture, fanout: NotificationFanout) {
    transaction(f.store.as_ref(), move |tx| Box::pin(async move { tx.insert_notification_fanout(&fanout).await }))
        .await
        .unwrap();
}

/// A fan-out is stored once, becomes one notification per recipient (fresh ids, in order) when
/// expanded, and is read by its recipients even before anything expanded it.
async fn fanouts_expand_once_per_recipient(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 1).await;
    insert_fanout(&f, fanout(&coop, &[1, 2, 3], "first")).await;
    insert_fanout(&f, fanout(&coop, &[2], "second")).await;
    assert!(f.store.pending_notification_fanouts().await.unwrap());
    // Reading expands what is pending, so a recipient sees every committed fan-out.
    let inbox = f.notifications.list(&did(2), &coop, false, PageRequest::default()).await.unwrap();
    let titles: Vec<&str> = inbox.items.iter().map(|n| n.title.as_str()).collect();
    assert_eq!(titles, ["second", "first"], "newest first");
    assert_eq!((inbox.total, inbox.unread), (2, 2));
    assert!(!f.store.pending_notification_fanouts().await.unwrap());
    assert_eq!(expand_fanouts(f.store.as_ref()).await.unwrap(), 0, "nothing is expanded twice");
    let mut ids = Vec::new();
    for n in 1..=3 {
        let inbox = f.notifications.list(&did(n), &coop, false, PageRequest::default()).await.unwrap();
        for note in &inbox.items {
            assert_eq!(note.recipient, did(n));
            assert_eq!(note.data.to_value()["title"], note.title.as_str());
            assert!(note.read_at.is_none());
            assert!(note.id.len() == 32 && note.id.bytes().all(|b| b.is_ascii_hexdigit()), "{}", note.id);
            // Led by the creation time in milliseconds, like every other id.
            let millis = u64::from_str_radix(&note.id[..12], 16).unwrap();
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
            assert!(millis <= now && now - millis < 60_000, "{} is not led by the time", note.id);
            ids.push(note.id.clone());
        }
    }
    assert_eq!(ids.len(), 4);
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "every notification has its own id");
    // Marking read also sees pending fan-outs.
    insert_fanout(&f, fanout(&coop, &[1, 3], "third")).await;
    assert_eq!(f.notifications.mark_all_read(&did(3), &coop).await.unwrap(), 2);
}

/// Expansions running at the same time as each other and as new fan-outs lose nothing and
/// duplicate nothing.
async fn concurrent_fanout_expansions(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 1).await;
    let recipients: Vec<u32> = (1..=50).collect();
    let inserts = (0..20).map(|i| insert_fanout(&f, fanout(&coop, &recipients, &format!("n{i}"))));
    let expansions = (0..8).map(|_| expand_fanouts(f.store.as_ref()));
    let (_, expanded) = tokio::join!(join_all(inserts), join_all(expansions));
    let mut created: u64 = expanded.into_iter().map(Result::unwrap).sum();
    created += expand_fanouts(f.store.as_ref()).await.unwrap();
    assert_eq!(created, 20 * 50);
    for n in [1, 25, 50] {
        let inbox = f.notifications.list(&did(n), &coop, false, PageRequest { limit: 100, offset: 0 }).await.unwrap();
        let mut titles: Vec<String> = inbox.items.iter().map(|n| n.title.clone()).collect();
        titles.sort();
        titles.dedup();
        assert_eq!((inbox.total, titles.len()), (20, 20), "recipient {n}");
    }
}

/// The balance read returns the coop's default currency with every currency the account holds,
/// in order; an account with none still gets its coop's currency, and an unknown coop is `None`.
async fn coop_balances_read_the_coop_and_every_currency(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 3).await;
    let eur = Currency::parse("eur").unwrap();
    f.ledger.pay(&coop, payment(0, 1, units(5)), None).await.unwrap();
    f.ledger.pay(&coop, PaymentRequest { currency: Some(eur.clone()), ..payment(0, 1, units(2)) }, None).await.unwrap();
    let read = f.store.coop_balances(&coop, did(1).as_str()).await.unwrap().unwrap();
    assert_eq!(read.default_currency, hours());
    assert_eq!(read.balances, vec![(eur, units(2)), (hours(), units(5))]);
    let read = f.store.coop_balances(&coop, did(2).as_str()).await.unwrap().unwrap();
    assert_eq!((read.default_currency, read.balances), (hours(), vec![]));
    let unknown = CoopId::parse("nowhere").unwrap();
    assert!(f.store.coop_balances(&unknown, did(1).as_str()).await.unwrap().is_none());
    assert!(matches!(f.ledger.balance(&unknown, did(1).as_str(), None).await, Err(Error::NotFound { .. })));
}

/// Balance reads follow every commit (on SQLite they are served from the writer-kept read
/// model): a read after an acknowledged payment sees it, a read after a change of the default
/// currency answers in the new one, and reads racing payments never leave an older balance behind.
async fn balance_reads_follow_every_commit(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 4).await;
    let balance = |n: u32| {
        let (ledger, coop) = (f.ledger.clone(), coop.clone());
        async move { ledger.balance(&coop, did(n).as_str(), None).await.unwrap() }
    };
    for n in 0..4 {
        assert_eq!(balance(n).await.balance, Amount::ZERO);
    }
    for round in 1..=3 {
        f.ledger.pay(&coop, payment(0, 1, units(1)), None).await.unwrap();
        assert_eq!(balance(1).await.balance, units(round), "round {round}: the payment just acknowledged");
        assert_eq!(balance(0).await.balance, units(-round));
    }

    // Readers read all the time while payments commit in groups.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..4u32)
        .map(|r| {
            let (ledger, coop, stop) = (f.ledger.clone(), coop.clone(), stop.clone());
            tokio::spawn(async move {
                let mut reads = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    ledger.balance(&coop, did((r + reads as u32) % 4).as_str(), None).await.unwrap();
                    reads += 1;
                    tokio::task::yield_now().await;
                }
                reads
            })
        })
        .collect();
    // Eight payers, ten payments each, at once (SQLite commits them in groups).
    let mut expected = [-3i64, 3, 0, 0];
    let mut payers = Vec::new();
    for p in 0..8u32 {
        let plan: Vec<(u32, u32, i64)> = (0..10u32)
            .map(|k| {
                let j = p * 10 + k;
                (j % 4, (j + 1 + j / 4 % 3) % 4, i64::from(j + 1))
            })
            .collect();
        for &(from, to, amount) in &plan {
            expected[from as usize] -= amount;
            expected[to as usize] += amount;
        }
        let (ledger, coop) = (f.ledger.clone(), coop.clone());
        payers.push(tokio::spawn(async move {
            for (from, to, amount) in plan {
                ledger.pay(&coop, payment(from, to, units(amount)), None).await.unwrap();
            }
        }));
    }
    for payer in payers {
        payer.await.unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        assert!(reader.await.unwrap() > 0);
    }
    for n in 0..4u32 {
        assert_eq!(balance(n).await.balance, units(expected[n as usize]), "member {n} after the race");
        // Twice: the second read is the read model's, when there is one.
        assert_eq!(balance(n).await.balance, units(expected[n as usize]), "member {n} read again");
    }

    let eur = Currency::parse("eur").unwrap();
    let patch = gateway_domain::coops::SettingsPatch { default_currency: Some(eur.clone()), ..Default::default() };
    f.coops.update_settings(&coop, patch).await.unwrap();
    let after = balance(1).await;
    assert_eq!((after.currency, after.balance), (eur.clone(), Amount::ZERO), "the new default currency");
    f.ledger.pay(&coop, payment(0, 1, units(2)), None).await.unwrap();
    let after = balance(1).await;
    assert_eq!((after.currency, after.balance), (eur, units(2)));
    assert_zero_sum(&f).await;
}

/// Units of work committed together (SQLite groups concurrent ones into one transaction): each
/// that fails leaves none of its writes behind, whatever its place in the group, and every other
/// one keeps all of its writes.
async fn a_failed_unit_of_work_undoes_only_its_own_writes(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 1).await;
    let jobs = (0..60u32).map(|i| {
        let coop = coop.clone();
        transaction(f.store.as_ref(), move |tx| {
            Box::pin(async move {
                let account = format!("coop:{coop}:test{i}");
                tx.add_to_balance(&coop, &account, &hours(), units(1)).await?;
                tx.add_to_balance(&coop, &account, &hours(), units(1)).await?;
                if i % 3 == 0 { Err(Error::conflict(format!("job {i} fails after writing"))) } else { Ok(i) }
            })
        })
    });
    let results = join_all(jobs).await;
    for (i, result) in results.into_iter().enumerate() {
        let balances = f.store.coop_balances(&coop, &format!("coop:{coop}:test{i}")).await.unwrap().unwrap().balances;
        if i % 3 == 0 {
            assert!(matches!(result, Err(Error::Conflict { .. })), "job {i}: {result:?}");
            assert_eq!(balances, vec![], "job {i} failed, so none of its writes remain");
        } else {
            assert_eq!(result.unwrap(), i as u32);
            assert_eq!(balances, vec![(hours(), units(2))], "job {i} succeeded, so both of its writes remain");
        }
    }
}

/// Concurrent units of work appending to two coops, in either order: each coop's events are
/// numbered 1, 2, … without gaps in commit order, a unit of work's own events of one coop are
/// consecutive and in the order it appended them, a failed unit of work leaves no event and uses
/// up no number, and none waits for another in a cycle (PostgreSQL takes the coops' counters in
/// the order of their ids, whatever the order of the appends).
/// Payments committed at once are numbered without a gap, and each answer names its own event
/// (its `ICN-Event-Seq`: the event at that number is that payment's), as does its replay; the
/// history totals count every one.
async fn each_answer_names_its_own_event(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 9).await;
    let before = f.store.current_seq(&coop).await.unwrap();
    let key = |i: u32| Some(Idempotency { key: format!("c1/own/{i}"), request_hash: "h".into() });
    let pay = |i: u32| payment(1 + i % 8, 0, Amount::from_micros(1_000_000 + i64::from(i)));
    let results = join_all((0..48u32).map(|i| appended::track(f.ledger.pay(&coop, pay(i), key(i))))).await;
    let events = f.store.events_after(&coop, before, 1000).await.unwrap();
    assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), (before + 1..=before + 48).collect::<Vec<_>>());
    for (i, (result, seq)) in (0..48u32).zip(results) {
        let Replay::Fresh(record) = result.unwrap() else { panic!("payment {i} is new") };
        let seq = seq.unwrap_or_else(|| panic!("payment {i} names its event"));
        let event = &events[usize::try_from(seq - before - 1).unwrap()];
        assert_eq!(event.event_type, "PaymentCreated");
        assert_eq!(event.data.to_value()["id"], record.id.as_str(), "payment {i}'s answer names its own event");
        let (again, again_seq) = appended::track(f.ledger.pay(&coop, pay(i), key(i))).await;
        assert!(matches!(again.unwrap(), Replay::Replayed(_)));
        assert_eq!(again_seq, Some(seq), "payment {i}'s replay names the same event");
    }
    let page = PageRequest { limit: 1, offset: 0 };
    let (_, total) =
        f.store.history(&HistoryQuery { coop: coop.clone(), account: None, currency: None, page }).await.unwrap();
    assert_eq!(total, 48);
    let payer = Some(did(1).to_string());
    let (_, total) = f.store.history(&HistoryQuery { coop, account: payer, currency: None, page }).await.unwrap();
    assert_eq!(total, 6, "member 1 paid six of them");
}

async fn concurrent_appends_are_numbered_without_gaps(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let (c1, c2) = (f.coop("c1", 1).await, f.coop("c2", 1).await);
    let before = [f.store.current_seq(&c1).await.unwrap(), f.store.current_seq(&c2).await.unwrap()];
    let jobs = (0..80u64).map(|i| {
        let (c1, c2) = (c1.clone(), c2.clone());
        transaction(f.store.as_ref(), move |tx| {
            Box::pin(async move {
                let (first, second) = if i % 2 == 0 { (&c1, &c2) } else { (&c2, &c1) };
                for (coop, part) in [(first, 0), (second, 0), (first, 1)] {
                    let data = serde_json::json!({ "job": i, "part": part });
                    tx.append_event(coop, "Checked", 1_800_000_000 + i, &data.into()).await?;
                }
                // Writes after the appends still commit with them.
                tx.add_to_balance(first, &format!("coop:{first}:job{i}"), &hours(), units(1)).await?;
                if i % 5 == 0 { Err(Error::conflict(format!("job {i} fails after appending"))) } else { Ok(i) }
            })
        })
    });
    let results = join_all(jobs).await;
    let succeeded: Vec<u64> = results.into_iter().filter_map(Result::ok).collect();
    assert_eq!(succeeded.len(), 64, "every job but the failing ones commits");
    for (coop, from) in [(&c1, before[0]), (&c2, before[1])] {
        let events = f.store.events_after(coop, 0, 1000).await.unwrap();
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>(), "{coop}: numbered without gaps");
        let appended: Vec<(u64, u64, u64)> = events
            .iter()
            .filter(|e| e.seq > from)
            .map(|e| {
                let data = e.data.to_value();
                (data["job"].as_u64().unwrap(), data["part"].as_u64().unwrap(), e.seq)
            })
            .collect();
        let twice = succeeded.iter().filter(|job| (*job % 2 == 0) == (coop == &c1)).count();
        assert_eq!(appended.len(), twice * 2 + (succeeded.len() - twice), "{coop}: every appended event");
        // Each job's events of the coop together (consecutive, checked below), so one run each.
        let mut jobs: Vec<u64> = appended.iter().map(|(job, _, _)| *job).collect();
        jobs.dedup();
        jobs.sort_unstable();
        assert_eq!(jobs, succeeded, "{coop}: the events of every committed job, and only those");
        for job in &succeeded {
            let own: Vec<(u64, u64)> =
                appended.iter().filter(|(j, _, _)| j == job).map(|(_, part, seq)| (*part, *seq)).collect();
            // A job appends twice to its first coop (c1 for even jobs, c2 for odd ones) and once
            // to its second.
            let first = if job % 2 == 0 { &c1 } else { &c2 };
            let expected: Vec<u64> = if coop == first { vec![0, 1] } else { vec![0] };
            assert_eq!(own.iter().map(|(part, _)| *part).collect::<Vec<_>>(), expected, "{coop}: job {job}'s order");
            assert!(own.windows(2).all(|w| w[1].1 == w[0].1 + 1), "{coop}: job {job}'s events are consecutive");
        }
    }
}

/// Restarting on the same file keeps everything acknowledged.
async fn reopening_keeps_committed_state(backend: Backend) {
    if !matches!(backend, Backend::SqliteFile | Backend::Postgres) {
        return;
    }
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 2).await;
    f.ledger.pay(&coop, payment(0, 1, units(5)), None).await.unwrap();
    let spec = f.spec.clone();
    let reopened = Fixture::at(spec, None).await;
    assert_eq!(balance(&reopened, &coop, 1).await, units(5));
    assert_eq!(reopened.store.current_seq(&coop).await.unwrap(), 3);
}

#[derive(Debug, Clone)]
enum Op {
    Pay { from: u32, to: u32, micros: i64 },
    Batch { atomic: bool, items: Vec<(u32, u32, i64)> },
    Convert { from: u32, to: u32, micros: i64 },
}

fn op() -> impl Strategy<Value = Op> {
    let member = 0u32..4;
    prop_oneof![
        (member.clone(), member.clone(), 1i64..800_000_000).prop_map(|(from, to, micros)| Op::Pay { from, to, micros }),
        (any::<bool>(), proptest::collection::vec((member.clone(), member.clone(), 1i64..600_000_000), 1..5))
            .prop_map(|(atomic, items)| Op::Batch { atomic, items }),
        (member.clone(), member, 1i64..500_000_000).prop_map(|(from, to, micros)| Op::Convert { from, to, micros }),
    ]
}

async fn run_ops(f: &Fixture, ops: Vec<Op>) {
    let coop = CoopId::parse("c1").unwrap();
    for op in ops {
        // Refusals are expected; what matters is what the ledger looks like afterwards.
        let _ = match op {
            Op::Pay { from, to, micros } => {
                f.ledger.pay(&coop, payment(from, to, Amount::from_micros(micros)), None).await.map(|_| ())
            }
            Op::Batch { atomic, items } => {
                let items = items.into_iter().map(|(from, to, m)| payment(from, to, Amount::from_micros(m))).collect();
                f.ledger.batch(&coop, items, atomic, None).await.map(|_| ())
            }
            Op::Convert { from, to, micros } => f
                .ledger
                .convert(
                    &coop,
                    gateway_domain::ledger::ConversionRequest {
                        from: did(from).to_string(),
                        to: did(to).to_string(),
                        amount: Amount::from_micros(micros),
                        from_currency: hours(),
                        to_currency: Currency::parse("eur").unwrap(),
                        max_target_amount: None,
                        min_target_amount: None,
                        quote_id: None,
                        request_signature: None,
                    },
                    None,
                )
                .await
                .map(|_| ()),
        };
    }
    assert_zero_sum(f).await;
    assert_eq!(f.store.unreconciled_accounts().await.unwrap(), 0, "every balance reconciles with its legs");
    for n in 0..4 {
        let balances = f.store.coop_balances(&coop, did(n).as_str()).await.unwrap().unwrap().balances;
        for (currency, b) in balances {
            assert!(b >= units(-1000), "member {n} at {b} {currency} is below its floor");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Any sequence of payments, batches and conversions keeps every coop/currency at exactly
    /// zero and no member below its floor.
    #[test]
    fn zero_sum_and_floors_hold_for_any_sequence(ops in proptest::collection::vec(op(), 1..25)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let f = Fixture::open(Backend::Memory).await.unwrap();
            let coop = f.coop("c1", 4).await;
            f.ledger.set_rate(&coop, &did(0), hours(), Currency::parse("eur").unwrap(), Amount::from_micros(1_333_333)).await.unwrap();
            run_ops(&f, ops).await;
        });
    }
}

async fn upserts_tell_whether_the_row_existed(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    gateway_domain::StoreHealth::ping(f.store.as_ref()).await.expect("the store answers a ping");
    let edge = |score| TrustEdge { source: did(1), target: did(2), score, updated_at: 1 };
    let answers = transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            Ok((
                tx.upsert_edge(&edge(0.5)).await?,
                tx.upsert_edge(&edge(0.7)).await?,
                tx.upsert_vote("p1", &did(1), "for", 1, None).await?,
                tx.upsert_vote("p1", &did(1), "against", 2, None).await?,
            ))
        })
    })
    .await
    .unwrap();
    assert_eq!(answers, (false, true, false, true));
    // A signed vote keeps its signature; replacing it unsigned clears it.
    let signatures = transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            let signature = sample_signature();
            tx.upsert_vote("p1", &did(2), "for", 3, Some(&signature)).await?;
            let kept = tx.vote_signatures("p1").await?;
            tx.upsert_vote("p1", &did(2), "abstain", 4, None).await?;
            Ok((kept, tx.vote_signatures("p1").await?))
        })
    })
    .await
    .unwrap();
    assert_eq!(signatures, (vec![(did(2), sample_signature())], vec![]));
}

/// A request signature as a signed payment or vote keeps it (INTERFACE.md §11).
fn sample_signature() -> gateway_core::RequestSignature {
    gateway_core::RequestSignature {
        signature_input: r#"sig1=("@method" "@authority" "@path" "content-digest");created=1;expires=61;nonce="0123456789abcdef";keyid="did:key:z6Mk";alg="ed25519";tag="icn-gateway""#.into(),
        signature: "sig1=:AAAA:".into(),
        content_digest: Some("sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:".into()),
        method: "POST".into(),
        authority: "gateway.example".into(),
        path: "/v1/ledger/c1/payment".into(),
        query: Some("x=1".into()),
        // The stored body round-trips with the rest (base64 of `{"hello": "world"}`).
        body: Some("eyJoZWxsbyI6ICJ3b3JsZCJ9".into()),
    }
}

/// A signed batch keeps its body once (INTERFACE.md §11): one `signed_bodies` row for its 50
/// payments, each history item served the whole body, the events carrying the evidence without
/// it; a signed vote's body is served with the votes, and evidence kept before bodies were
/// stored reads back without one.
async fn a_signed_batch_keeps_its_body_once(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 3).await;
    let signed = sample_signature();
    let items: Vec<PaymentRequest> = (0..50)
        .map(|i| PaymentRequest { request_signature: Some(signed.clone()), ..payment(0, 1 + i % 2, units(1)) })
        .collect();
    let Replay::Fresh(results) = f.ledger.batch(&coop, items, true, None).await.unwrap() else { panic!("a replay") };
    assert_eq!(results.iter().filter(|r| r.record.is_some()).count(), 50);
    assert_eq!(gateway_store::testing::signed_body_count(&f.store).await.unwrap(), 1, "one row for the batch");
    let page = PageRequest { limit: 100, offset: 0 };
    let query = HistoryQuery { coop: coop.clone(), account: None, currency: None, page };
    let (items, total) = f.store.history(&query).await.unwrap();
    assert_eq!((items.len(), total), (50, 50));
    for item in &items {
        assert_eq!(item.request_signature.as_ref(), Some(&signed), "every item serves the whole body");
    }
    // The events carry the evidence without the body.
    let events = f.store.events_after(&coop, 0, 1000).await.unwrap();
    let payments: Vec<_> = events.iter().filter(|e| e.event_type == "PaymentCreated").collect();
    assert_eq!(payments.len(), 50);
    for event in payments {
        let data = event.data.to_value();
        let evidence = &data["request_signature"];
        assert_eq!(evidence["content_digest"], signed.content_digest.as_deref().unwrap(), "{data}");
        assert!(evidence.get("body").is_none(), "an event carries no body: {data}");
    }
    // Another request with the same body shares the row; a vote's body is served with it.
    let (other, old) = (sample_signature(), gateway_core::RequestSignature { body: None, ..sample_signature() });
    let pay = PaymentRequest { request_signature: Some(other.clone()), ..payment(1, 0, units(1)) };
    f.ledger.pay(&coop, pay, None).await.unwrap();
    assert_eq!(gateway_store::testing::signed_body_count(&f.store).await.unwrap(), 1);
    let votes = transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            tx.upsert_vote("p1", &did(1), "for", 1, Some(&other)).await?;
            tx.upsert_vote("p1", &did(2), "for", 1, Some(&old)).await?;
            tx.vote_signatures("p1").await
        })
    })
    .await
    .unwrap();
    let old = gateway_core::RequestSignature { body: None, ..sample_signature() };
    assert_eq!(votes, vec![(did(1), sample_signature()), (did(2), old)]);
}

async fn pruning_keeps_each_coops_last_events(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 2).await;
    for _ in 0..3 {
        let pay = PaymentRequest {
            from: did(0).to_string(),
            to: did(1).to_string(),
            amount: units(1),
            currency: None,
            memo: None,
            request_signature: None,
        };
        f.ledger.pay(&coop, pay, None).await.unwrap();
    }
    let last = f.store.current_seq(&coop).await.unwrap();
    assert!(last >= 4, "{last}");
    // Events the coop's log has not copied yet are kept, whatever their age (INTERFACE.md §12).
    assert_eq!(f.store.prune_events(2, u64::MAX / 2).await.unwrap(), 0);
    let log = gateway_domain::log::Log::new(
        f.store.clone(),
        f.store.clone(),
        f.store.clone(),
        f.keys.clone(),
        std::sync::Arc::new(f.clock.clone()),
        gateway_domain::log::LogConfig::default(),
    );
    log.checkpoint(&coop).await.unwrap();
    let deleted = f.store.prune_events(2, u64::MAX / 2).await.unwrap();
    assert_eq!(deleted, last - 2);
    assert_eq!(f.store.oldest_seq(&coop).await.unwrap(), last - 1);
    assert_eq!(f.store.current_seq(&coop).await.unwrap(), last);
}

/// Every kind of record the store keeps comes back as it was written, through the unit of
/// work's handle and through the pool's reads: each row decodes its columns by name on every
/// backend, optional columns both set and empty.
async fn every_record_reads_back_as_written(backend: Backend) {
    use gateway_domain::governance::{Effect, Outcome, ProposalPayload, ProposalStatus};
    use gateway_domain::ports::{
        ComputeReads, ConversionLeg, CoopReads, DelegationRecord, DomainRecord, GovReads, IdempotencyRecord,
        MemberRecord, NotificationRecord, ProposalQuery, ProposalRecord, QuoteRecord, RateRecord, TaskOutcome,
        TaskRecord, TaskResult, TaskStatus, TransactionKind, TransactionRecord,
    };

    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 1).await;
    let at = 1_800_000_123;
    let credits = Currency::parse("credits").unwrap();
    let member = MemberRecord { did: did(7), role: Role::Member, joined_at: at, credit_limit: Some(units(-5)) };
    let transaction_record = TransactionRecord {
        id: "t1".into(),
        coop_id: coop.clone(),
        kind: TransactionKind::Conversion,
        from: did(0).to_string(),
        to: did(7).to_string(),
        amount: units(10),
        currency: hours(),
        memo: Some("memo".into()),
        timestamp: at,
        conversion: Some(ConversionLeg {
            to_currency: credits.clone(),
            rate: Amount::from_micros(2_000_000),
            gross_target_amount: units(20),
            fee_amount: units(1),
            net_target_amount: units(19),
        }),
        request_signature: Some(sample_signature()),
        batch_id: Some("batch-1".into()),
    };
    let rate = RateRecord {
        from_currency: hours(),
        to_currency: credits.clone(),
        rate: Amount::from_micros(2_000_000),
        set_by: did(0),
        set_at: at,
    };
    let quote = QuoteRecord {
        id: "q1".into(),
        coop_id: coop.clone(),
        amount: units(10),
        from_currency: hours(),
        to_currency: credits.clone(),
        rate: Amount::from_micros(2_000_000),
        fee_ppm: 50_000,
        gross_target_amount: units(20),
        fee_amount: units(1),
        net_target_amount: units(19),
        valid_until: at + 60,
        requester: Some(did(1).to_string()),
    };
    let answer = IdempotencyRecord {
        key: "c1/k".into(),
        request_hash: "h".into(),
        status: 201,
        body: "{}".into(),
        created_at: at,
        event_seq: None,
    };
    let notification = NotificationRecord {
        id: "n1".into(),
        recipient: did(7),
        coop_id: coop.clone(),
        kind: "k".into(),
        title: "title".into(),
        body: "body".into(),
        data: serde_json::json!({ "a": [1, "two"] }).into(),
        created_at: at,
        read_at: None,
    };
    let domain = DomainRecord {
        coop_id: coop.clone(),
        domain_id: "d1".into(),
        name: "Domain".into(),
        members: vec![did(0), did(7)],
        quorum_percent: Some(60),
        rule: Some("majority".into()),
        created_at: at,
    };
    let delegation = DelegationRecord {
        id: "g1".into(),
        coop_id: coop.clone(),
        delegator: did(7),
        delegate: did(0),
        scope: "d1".into(),
        expires_at: Some(at + 3600),
        created_at: at,
    };
    let proposal = ProposalRecord {
        id: "p1".into(),
        coop_id: coop.clone(),
        domain_id: "d1".into(),
        title: "title".into(),
        description: "description".into(),
        payload: ProposalPayload::Text { content: "text".into(), kind: Some("note".into()) },
        rule: "majority".into(),
        author: did(0),
        status: ProposalStatus::Closed,
        voting_duration_secs: 3600,
        created_at: at,
        opened_at: Some(at + 1),
        closes_at: Some(at + 3601),
        closed_at: Some(at + 3602),
        outcome: Some(Outcome::Approved),
        tally: Some((2, 1, 0)),
        receipt_unavailable: Some("no key".into()),
        effect: Some(Effect { applied: false, error: Some("refused".into()) }),
    };
    let key = SigningKeyRecord {
        public_key: "ab".repeat(32),
        did: did(9).to_string(),
        valid_from: at,
        valid_until: None,
        coop_id: Some(coop.clone()),
        master: Some(4),
        generation: Some(2),
    };
    let task = TaskRecord {
        task_id: "k1".into(),
        coop_id: coop.clone(),
        task_hash: "hash".into(),
        status: TaskStatus::Completed,
        submitter: did(0),
        executor: Some("executor".into()),
        code_type: "wasm".into(),
        code: "code".into(),
        inputs: serde_json::json!({ "x": 1 }),
        fuel_limit: 1000,
        priority: "high".into(),
        submitted_at: at,
        claimed_at: Some(at + 1),
        deadline: Some(at + 60),
        attempts: 2,
        finished_at: Some(at + 2),
        result: Some(TaskResult {
            outcome: TaskOutcome::Success,
            output: serde_json::json!([1, 2]),
            error: None,
            fuel_used: 10,
        }),
    };
    let edge = TrustEdge { source: did(0), target: did(7), score: 0.625, updated_at: at };

    // Written and read back in one unit of work.
    let written = (
        member.clone(),
        transaction_record.clone(),
        rate.clone(),
        quote.clone(),
        answer.clone(),
        notification.clone(),
        (domain.clone(), delegation.clone(), proposal.clone(), key.clone()),
        task.clone(),
        edge.clone(),
    );
    let (c, dids) = (coop.clone(), [did(7), did(0)]);
    let (hours_, credits_) = (hours(), credits.clone());
    transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            let (member, t, rate, quote, answer, n, (domain, delegation, proposal, key), task, edge) = written;
            tx.insert_member(&c, &member).await?;
            tx.add_to_balance(&c, did(0).as_str(), &hours_, units(-10)).await?;
            tx.add_to_balance(&c, did(0).as_str(), &credits_, units(3)).await?;
            tx.insert_transaction(&t).await?;
            tx.put_rate(&c, &rate).await?;
            tx.put_quote(&quote).await?;
            tx.idempotency_put(&answer).await?;
            tx.insert_notification(&n).await?;
            tx.insert_domain(&domain).await?;
            tx.insert_delegation(&delegation).await?;
            tx.insert_proposal(&proposal).await?;
            tx.activate_signing_key(&key).await?;
            tx.insert_task(&task).await?;
            tx.upsert_edge(&edge).await?;
            tx.append_event(&c, "Checked", at, &serde_json::json!({ "k": "v" }).into()).await?;

            let coop = tx.coop(&c).await?.expect("coop");
            assert_eq!(coop, tx.lock_coop(&c).await?.expect("coop"));
            assert_eq!(coop.member_count, 2);
            assert_eq!(tx.member(&c, &member.did).await?, Some(member.clone()));
            let among = tx.members_among(&c, &[&dids[0], &dids[1]]).await?;
            assert_eq!(among.len(), 2);
            assert!(among.contains(&member));
            assert_eq!(tx.rate(&c, &rate.from_currency, &rate.to_currency).await?, Some(rate));
            assert_eq!(tx.quote(&c, &quote.id).await?, Some(quote));
            assert_eq!(tx.idempotency_get(&answer.key, 0).await?, Some(answer));
            let read = NotificationRecord { read_at: Some(at + 5), ..n.clone() };
            assert_eq!(tx.mark_notification_read(&n.recipient, &c, &n.id, at + 5).await?, Some(read));
            assert_eq!(tx.domain(&c, &domain.domain_id).await?, Some(domain.clone()));
            assert!(tx.domains(&c).await?.contains(&domain));
            assert_eq!(tx.delegations(&c).await?, vec![delegation]);
            assert_eq!(tx.proposal(&c, &proposal.id).await?, Some(proposal.clone()));
            assert_eq!(tx.lock_proposal(&c, &proposal.id).await?, Some(proposal));
            assert_eq!(tx.current_signing_key(&c).await?, Some(key));
            assert_eq!(tx.task(&c, &task.task_id).await?, Some(task.clone()));
            assert_eq!(tx.lock_task(&c, &task.task_id).await?, Some(task));
            Ok(())
        })
    })
    .await
    .unwrap();

    // Read back from the pool.
    let store = f.store.as_ref();
    let coop_record = CoopReads::coop(store, &coop).await.unwrap().expect("coop");
    assert_eq!(coop_record.created_by, did(0));
    assert_eq!(coop_record.member_count, 2);
    let (mine, _) = store.coops_of(&did(7), PageRequest::default()).await.unwrap();
    assert_eq!(mine, vec![coop_record.clone()]);
    let read = store.coop_balances(&coop, did(0).as_str()).await.unwrap().expect("coop");
    assert_eq!(read.default_currency, coop_record.settings.default_currency);
    assert_eq!(read.balances, vec![(credits.clone(), units(3)), (hours(), units(-10))]);
    let none = store.coop_balances(&coop, "nobody").await.unwrap().expect("coop");
    assert!(none.balances.is_empty());
    assert_eq!(CoopReads::member(store, &coop, &did(7)).await.unwrap(), Some(member.clone()));
    let (members, _) = store.members(&coop, PageRequest::default()).await.unwrap();
    assert!(members.contains(&member));
    let query = HistoryQuery { coop: coop.clone(), account: None, currency: None, page: PageRequest::default() };
    assert_eq!(store.history(&query).await.unwrap(), (vec![transaction_record], 1));
    assert_eq!(LedgerReads::rate(store, &coop, &hours(), &credits).await.unwrap(), Some(rate));
    // With the number of the last event the unit of work appended.
    let last = store.current_seq(&coop).await.unwrap();
    assert_eq!(
        store.idempotency("c1/k", 0).await.unwrap(),
        Some(IdempotencyRecord { event_seq: Some(last), ..answer })
    );
    let (listed, total, unread) = store.notifications(&did(7), &coop, false, PageRequest::default()).await.unwrap();
    assert_eq!((listed, total, unread), (vec![NotificationRecord { read_at: Some(at + 5), ..notification }], 1, 0));
    assert!(GovReads::domains(store, &coop).await.unwrap().contains(&domain));
    let query = ProposalQuery { coop: coop.clone(), domain: None, status: None, page: PageRequest::default() };
    assert_eq!(store.proposals(&query).await.unwrap(), (vec![proposal], 1));
    assert!(store.signing_keys(&coop).await.unwrap().contains(&key));
    assert_eq!(store.tasks(&coop, &[], PageRequest::default()).await.unwrap(), (vec![task.clone()], 1));
    assert_eq!(store.tasks(&coop, &[TaskStatus::Pending], PageRequest::default()).await.unwrap(), (vec![], 0));
    assert!(store.all_edges().await.unwrap().contains(&edge));
    // The coop's events are numbered 1, 2, … without gaps; the appended one is the last.
    let events = store.events_after(&coop, 0, 100).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    let last = events.last().expect("the appended event");
    assert_eq!(last.coop_id, coop);
    assert_eq!((last.event_type.as_str(), last.timestamp), ("Checked", at));
    assert_eq!(last.data.to_value(), serde_json::json!({ "k": "v" }));
}

/// The totals the list routes answer are kept as rows change (migration 0021), not counted on
/// each read: after payments, batches and conversions (some refused), at once from several
/// tasks, every history filter's total is the number of transactions it lists, and each
/// member's notification totals follow fan-outs, reads and pruning.
async fn kept_totals_equal_the_rows_they_count(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 4).await;
    let eur = Currency::parse("eur").unwrap();
    f.ledger.set_rate(&coop, &did(0), hours(), eur.clone(), Amount::from_micros(1_333_333)).await.unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(21);
    let ops: Vec<Op> = (0..60)
        .map(|i| {
            let (from, to) = (rng.gen_range(0..4), rng.gen_range(0..4));
            match i % 5 {
                0 => Op::Convert { from, to, micros: rng.gen_range(1..5_000_000) },
                1 => Op::Batch { atomic: i % 2 == 0, items: vec![(from, to, 1_000_000), (to, from, 2_000_000)] },
                _ => Op::Pay { from, to, micros: rng.gen_range(1..900_000_000) },
            }
        })
        .collect();
    // Four tasks at once, each a share of the operations.
    let shares: Vec<Vec<Op>> = (0..4).map(|k| ops.iter().skip(k).step_by(4).cloned().collect()).collect();
    join_all(shares.into_iter().map(|share| run_ops(&f, share))).await;

    let all = PageRequest { limit: 100, offset: 0 };
    let exchange = format!("coop:{coop}:exchange");
    let mut accounts: Vec<Option<String>> = (0..4).map(|n| Some(did(n).to_string())).collect();
    accounts.extend([None, Some(exchange), Some("did:key:nobody".to_owned())]);
    let (unfiltered, _) =
        f.ledger.history(HistoryQuery { coop: coop.clone(), account: None, currency: None, page: all }).await.unwrap();
    assert!(unfiltered.len() > 20 && unfiltered.len() < 100, "{} transactions", unfiltered.len());
    for account in &accounts {
        for currency in [None, Some(hours()), Some(eur.clone()), Some(Currency::parse("none").unwrap())] {
            let query =
                HistoryQuery { coop: coop.clone(), account: account.clone(), currency: currency.clone(), page: all };
            let (items, total) = f.ledger.history(query).await.unwrap();
            assert_eq!(total, items.len() as u64, "{backend:?}: account {account:?}, currency {currency:?}");
        }
    }
    let (count, _) = f.store.coop_ledger_stats(&coop).await.unwrap();
    assert_eq!(count, unfiltered.len() as u64, "the coop's transaction count");

    // Notifications: fan-outs, one read, all read, pruned.
    for round in 0..3 {
        insert_fanout(&f, fanout(&coop, &[5, 6, 7], &format!("n{round}"))).await;
    }
    insert_fanout(&f, fanout(&coop, &[6], "only six")).await;
    let inbox = |n: u32, unread_only: bool| {
        let (f, coop) = (&f, coop.clone());
        async move { f.notifications.list(&did(n), &coop, unread_only, all).await.unwrap() }
    };
    let six = inbox(6, false).await;
    assert_eq!((six.total, six.unread, six.items.len()), (4, 4, 4));
    f.notifications.mark_read(&did(6), &coop, &six.items[0].id).await.unwrap();
    f.notifications.mark_read(&did(6), &coop, &six.items[0].id).await.unwrap();
    let unread = inbox(6, true).await;
    assert_eq!((unread.total, unread.unread, unread.items.len()), (3, 3, 3), "read once, counted once");
    assert_eq!(f.notifications.mark_all_read(&did(7), &coop).await.unwrap(), 3);
    let seven = inbox(7, false).await;
    assert_eq!((seven.total, seven.unread), (3, 0));
    // Past the retention of read notifications, pruning drops them from the totals too.
    f.clock.advance_secs(40 * 24 * 3600);
    assert_eq!(f.notifications.prune_old().await.unwrap(), 4, "member 6's read one, member 7's three");
    assert_eq!(inbox(7, false).await.total, 0);
    for n in 5..=7 {
        let listed = inbox(n, false).await;
        assert_eq!(listed.total, listed.items.len() as u64, "member {n} after pruning");
        let unread = inbox(n, true).await;
        assert_eq!((unread.total, unread.unread), (unread.items.len() as u64, unread.items.len() as u64));
    }
}

/// A unit of work's writes are seen by its own later statements and count in its commit, and any
/// of them that fails fails the unit of work, which then leaves nothing: on PostgreSQL the writes
/// whose answer the work does not need travel with its next statement (`Conn::defer`), so a write
/// can fail after the call that made it returned. Two changes of one balance row in a row both
/// count (sent in one statement, the second would be refused or lost).
async fn a_unit_of_work_sees_its_writes_and_fails_with_any_of_them(backend: Backend) {
    use gateway_domain::ports::{NotificationRecord, TransactionKind, TransactionRecord};

    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 2).await;
    let (a, b) = (did(0).to_string(), did(1).to_string());
    let record = |id: &str| TransactionRecord {
        id: id.into(),
        coop_id: coop.clone(),
        kind: TransactionKind::Payment,
        from: a.clone(),
        to: b.clone(),
        amount: units(5),
        currency: hours(),
        memo: None,
        timestamp: 1_800_000_000,
        conversion: None,
        request_signature: None,
        batch_id: None,
    };
    let note = |id: &str| NotificationRecord {
        id: id.into(),
        recipient: did(1),
        coop_id: coop.clone(),
        kind: "PaymentReceived".into(),
        title: "Payment received".into(),
        body: "paid".into(),
        data: gateway_core::JsonText::of(&serde_json::json!({ "id": id })).unwrap(),
        created_at: 1_800_000_000,
        read_at: None,
    };
    let notes_before =
        f.store.notifications(&did(1), &coop, false, PageRequest { limit: 1, offset: 0 }).await.unwrap().1;

    let (c, first, n1, twice) = (coop.clone(), record("t-first"), note("n-first"), (a.clone(), b.clone()));
    let seen = transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            let (a, b) = (&twice.0, &twice.1);
            tx.apply_deltas(&c, &[(a, &hours(), units(-5)), (b, &hours(), units(5))]).await?;
            tx.apply_deltas(&c, &[(a, &hours(), units(-2)), (b, &hours(), units(2))]).await?;
            tx.insert_transaction(&first).await?;
            tx.insert_notification(&n1).await?;
            tx.lock_balances(&c, &[(a.clone(), hours()), (b.clone(), hours())]).await
        })
    })
    .await
    .unwrap();
    assert_eq!(seen, vec![units(-7), units(7)], "the unit of work reads both of its changes");
    assert_eq!((balance(&f, &coop, 0).await, balance(&f, &coop, 1).await), (units(-7), units(7)));
    let page = PageRequest { limit: 10, offset: 0 };
    let (rows, total) =
        f.store.history(&HistoryQuery { coop: coop.clone(), account: None, currency: None, page }).await.unwrap();
    assert_eq!((rows.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(), total), (vec!["t-first"], 1));
    let (notes, total, _) = f.store.notifications(&did(1), &coop, false, page).await.unwrap();
    assert_eq!(total, notes_before + 1);
    assert!(notes.iter().any(|n| n.id == "n-first"), "the notification was written");

    // A transaction id already taken: the unit of work fails, whatever it did after, and none
    // of its writes remain.
    let (c, again, n2, pair) = (coop.clone(), record("t-first"), note("n-second"), (a.clone(), b.clone()));
    let failed = transaction(f.store.as_ref(), move |tx| {
        Box::pin(async move {
            let (a, b) = (&pair.0, &pair.1);
            tx.apply_deltas(&c, &[(a, &hours(), units(-1)), (b, &hours(), units(1))]).await?;
            tx.insert_transaction(&again).await?;
            tx.insert_notification(&n2).await?;
            Ok(())
        })
    })
    .await;
    assert!(matches!(failed, Err(Error::Conflict { .. })), "{failed:?}");
    assert_eq!((balance(&f, &coop, 0).await, balance(&f, &coop, 1).await), (units(-7), units(7)), "no change stays");
    let (notes, total, _) = f.store.notifications(&did(1), &coop, false, page).await.unwrap();
    assert_eq!(total, notes_before + 1);
    assert!(!notes.iter().any(|n| n.id == "n-second"), "nor its notification");
}

/// A critical operation that arrived unsigned (`ports::unsigned::critical`, as the HTTP edge runs
/// one) is refused by its own unit of work once its coop requires signed requests, whichever
/// operation it is and wherever the store runs the work (SQLite's writer polls it on a thread of
/// its own): the edge's earlier read of the setting cannot be outrun by a settings change. Nothing
/// is written, and the same operations pass when signed, or unsigned in a coop without the rule.
async fn unsigned_critical_operations_are_refused_by_their_unit_of_work(backend: Backend) {
    use gateway_domain::governance::{DomainChange, NewDomain};
    use gateway_domain::ledger::ConversionRequest;
    use gateway_domain::ports::unsigned::critical;

    let Some(f) = Fixture::open(backend).await else { return };
    let (coop, open) = (f.coop("c1", 3).await, f.coop("c2", 3).await);
    let credits = Currency::parse("credits").unwrap();
    f.ledger.set_rate(&coop, &did(0), hours(), credits.clone(), units(2)).await.unwrap();
    let domain = NewDomain {
        domain_id: "d".into(),
        name: "D".into(),
        members: vec![did(0), did(1)],
        quorum_percent: None,
        rule: None,
    };
    f.governance.create_domain(&coop, &did(0), domain).await.unwrap();
    let text = proposal("d", serde_json::json!({ "type": "text", "content": "x" }));
    let proposal = f.governance.create_proposal(&coop, &did(0), text, true).await.unwrap().id;
    let delegation = f.governance.delegate(&coop, &did(1), &did(2), "blanket", None).await.unwrap().id;
    let require = crate::support::requiring_signatures;
    f.coops.update_settings(&coop, require(true)).await.unwrap();
    let seq = f.store.current_seq(&coop).await.unwrap();

    let conversion = ConversionRequest {
        from: did(1).to_string(),
        to: did(2).to_string(),
        amount: units(1),
        from_currency: hours(),
        to_currency: credits.clone(),
        max_target_amount: None,
        min_target_amount: None,
        quote_id: None,
        request_signature: None,
    };
    let refusals: Vec<(&str, Result<(), Error>)> = critical(async {
        vec![
            ("payment", f.ledger.pay(&coop, payment(1, 2, units(1)), None).await.map(drop)),
            ("batch", f.ledger.batch(&coop, vec![payment(1, 2, units(1))], false, None).await.map(drop)),
            ("conversion", f.ledger.convert(&coop, conversion, None).await.map(drop)),
            ("vote", f.governance.vote(&coop, &did(1), &proposal, "for").await.map(drop)),
            ("close", f.governance.close(&coop, Some(&did(0)), &proposal).await.map(drop)),
            ("member add", f.coops.add_member(&coop, &did(9), Role::Member).await.map(drop)),
            ("member remove", f.coops.remove_member(&coop, &did(2)).await),
            ("role", f.coops.set_role(&coop, &did(1), Role::Admin).await.map(drop)),
            ("credit limit", f.coops.set_member_credit_limit(&coop, &did(1), Some(units(-5))).await.map(drop)),
            ("settings", f.coops.update_settings(&coop, require(false)).await.map(drop)),
            ("domain create", {
                let domain = NewDomain {
                    domain_id: "e".into(),
                    name: "E".into(),
                    members: vec![did(0)],
                    quorum_percent: None,
                    rule: None,
                };
                f.governance.create_domain(&coop, &did(0), domain).await.map(drop)
            }),
            ("domain change", {
                let change = DomainChange { name: Some("D2".into()), ..DomainChange::default() };
                f.governance.update_domain(&coop, &did(0), "d", change).await.map(drop)
            }),
            ("delegation", f.governance.delegate(&coop, &did(2), &did(1), "blanket", None).await.map(drop)),
            ("revocation", f.governance.revoke(&coop, &did(1), &delegation).await),
            ("rate", f.ledger.set_rate(&coop, &did(0), hours(), credits.clone(), units(3)).await.map(drop)),
        ]
    })
    .await;
    for (operation, refused) in refusals {
        assert!(matches!(refused, Err(Error::SignatureRequired)), "unsigned {operation}: {refused:?}");
    }
    assert_eq!(f.store.current_seq(&coop).await.unwrap(), seq, "a refused operation appends nothing");
    assert_eq!(balance(&f, &coop, 1).await, Amount::ZERO);
    assert!(f.coops.get(&coop).await.unwrap().settings.require_signed_requests);
    assert_eq!(f.governance.votes(&coop, &proposal).await.unwrap().tally.participants, 0);

    // Outside the coop that requires them, an unsigned operation passes; a signed one passes in it.
    critical(f.ledger.pay(&open, payment(1, 2, units(1)), None)).await.unwrap();
    f.ledger.pay(&coop, payment(1, 2, units(1)), None).await.unwrap();
    f.governance.vote(&coop, &did(1), &proposal, "for").await.unwrap();
    assert_eq!(balance(&f, &coop, 2).await, units(1));
    assert_eq!(balance(&f, &open, 2).await, units(1));
}

/// An unsigned critical operation that read its coop before a change turned
/// `require_signed_requests` on is never recorded after that change: on PostgreSQL, where the
/// change commits while the operation waits between its read and its write, the operation is
/// refused as it writes; with SQLite's one writer, the change waits for the operation, which is
/// recorded before it.
async fn an_unsigned_operation_is_never_recorded_after_signatures_became_required(backend: Backend) {
    use gateway_domain::ports::unsigned::critical;

    let Some(f) = Fixture::open(backend).await else { return };
    let coop = f.coop("c1", 3).await;
    let (read, has_read) = tokio::sync::oneshot::channel::<()>();
    let (go, may_write) = tokio::sync::oneshot::channel::<()>();
    let (store, c) = (f.store.clone(), coop.clone());
    let operation = tokio::spawn(critical(async move {
        transaction(store.as_ref(), move |tx| {
            Box::pin(async move {
                gateway_domain::coops::require_coop(tx, &c).await?;
                let _ = read.send(());
                let _ = may_write.await;
                crate::support::append_operation(tx, &c).await
            })
        })
        .await
    }));
    has_read.await.unwrap();
    let (coops, c) = (f.coops.clone(), coop.clone());
    let mut change =
        tokio::spawn(async move { coops.update_settings(&c, crate::support::requiring_signatures(true)).await });
    let changed_first = tokio::time::timeout(std::time::Duration::from_millis(500), &mut change).await.is_ok();
    go.send(()).unwrap();
    let outcome = operation.await.unwrap();
    if !changed_first {
        change.await.unwrap().unwrap();
    }
    assert!(f.coops.get(&coop).await.unwrap().settings.require_signed_requests);
    let events = f.store.events_after(&coop, 0, 1000).await.unwrap();
    let position = |kind: &str| events.iter().position(|e| e.event_type == kind);
    let turned_on = position("SettingsUpdated").expect("the change's event");
    if backend == Backend::Postgres {
        assert!(changed_first, "PostgreSQL commits the change while the operation waits");
    }
    if changed_first {
        assert!(matches!(outcome, Err(Error::SignatureRequired)), "{backend:?}: {outcome:?}");
        assert_eq!(position("UnsignedOperation"), None);
    } else {
        outcome.unwrap();
        assert!(position("UnsignedOperation").expect("recorded") < turned_on, "{backend:?}");
    }
}

macro_rules! conformance {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test] async fn $test() { super::$test(crate::support::Backend::Memory).await })*
        }
        mod sqlite_file {
            $(#[tokio::test] async fn $test() { super::$test(crate::support::Backend::SqliteFile).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $test() { super::$test(crate::support::Backend::Postgres).await })*
        }
    };
}

conformance!(
    upserts_tell_whether_the_row_existed,
    pruning_keeps_each_coops_last_events,
    coop_lifecycle,
    payments_events_and_notifications,
    idempotent_payments,
    trust_edges_survive_reload,
    concurrent_payments_equal_a_serial_replay,
    reopening_keeps_committed_state,
    closing_notifies_every_domain_member,
    members_among_takes_any_number_of_dids,
    receipt_key_rotation_is_per_coop,
    fanouts_expand_once_per_recipient,
    concurrent_fanout_expansions,
    coop_balances_read_the_coop_and_every_currency,
    balance_reads_follow_every_commit,
    a_failed_unit_of_work_undoes_only_its_own_writes,
    concurrent_appends_are_numbered_without_gaps,
    each_answer_names_its_own_event,
    every_record_reads_back_as_written,
    a_signed_batch_keeps_its_body_once,
    kept_totals_equal_the_rows_they_count,
    a_unit_of_work_sees_its_writes_and_fails_with_any_of_them,
    unsigned_critical_operations_are_refused_by_their_unit_of_work,
    an_unsigned_operation_is_never_recorded_after_signatures_became_required,
);
