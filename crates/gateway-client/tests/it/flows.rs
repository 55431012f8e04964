//! Every area of the SDK against the real router: ledger, oracle, trust, coops, governance,
//! compute (the executor protocol with a signed completion), notifications.

use std::collections::BTreeMap;

use gateway_client::{
    ConversionRequest, Error, HistoryQuery, NewDelegation, NewDomain, NewProposal, PageRequest, PaymentRequest,
    ProposalQuery, QuoteRequest, SettingsPatch, TaskQuery, TaskSubmission, VoteChoice,
};
use gateway_core::{Amount, Currency, Role};
use serde_json::json;

use crate::support::Gateway;

fn amount(text: &str) -> Amount {
    Amount::parse_payment(text).unwrap()
}

#[tokio::test]
async fn ledger_payments_balances_history_batches_and_conversions() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("ledger", 2).await;
    let (alice, bob) = (&members[0], &members[1]);
    let coop = &admin.coop;
    let payment = PaymentRequest {
        from: alice.identity.did().clone(),
        to: bob.identity.did().clone(),
        amount: amount("12.345678"),
        currency: None,
        memo: Some("bread".into()),
    };
    let first = alice.client.pay(coop, &payment, Some("order-1")).await.unwrap();
    assert_eq!(
        (first.amount, first.currency.as_str(), first.memo.as_deref()),
        (amount("12.345678"), "hours", Some("bread"))
    );
    // The same key and body: the first answer again, nothing paid twice.
    let replay = alice.client.pay(coop, &payment, Some("order-1")).await.unwrap();
    assert_eq!(replay.id, first.id);
    // The same key with another body: 409.
    let other = PaymentRequest { amount: amount("1"), ..payment.clone() };
    assert!(matches!(alice.client.pay(coop, &other, Some("order-1")).await, Err(Error::Conflict { .. })));

    let balance = bob.client.balance(coop, bob.identity.did().as_str(), None).await.unwrap();
    assert_eq!(balance.balance, amount("12.345678"));
    let own = alice.client.own_balance(None).await.unwrap();
    assert_eq!(own.balance, Amount::from_micros(-12_345_678));

    let batch = alice.client.pay_batch(coop, &[other.clone(), other.clone()], false, None).await.unwrap();
    assert_eq!((batch.succeeded, batch.failed), (2, 0));

    let history =
        admin.client.history(coop, &HistoryQuery { page: PageRequest::first(2), ..Default::default() }).await.unwrap();
    assert_eq!(history.transactions.len(), 2);
    assert_eq!((history.pagination.total, history.pagination.has_more), (3, true));
    let bobs = bob
        .client
        .history(coop, &HistoryQuery { account: Some(bob.identity.did().to_string()), ..Default::default() })
        .await
        .unwrap();
    assert_eq!(bobs.transactions.len(), 3);

    // Oracle and conversion.
    let hours = Currency::parse("hours").unwrap();
    let eur = Currency::parse("eur").unwrap();
    let rate = admin.client.set_rate(&hours, &eur, amount("1.5")).await.unwrap();
    assert_eq!(rate.inverse_rate, Amount::from_micros(666_666));
    assert_eq!(alice.client.rate(&hours, &eur).await.unwrap().rate, amount("1.5"));
    let quote = alice
        .client
        .quote(coop, &QuoteRequest { amount: amount("10"), from_currency: hours.clone(), to_currency: eur.clone() })
        .await
        .unwrap();
    assert_eq!(quote.net_target_amount, amount("15"));
    let conversion = ConversionRequest {
        from: alice.identity.did().clone(),
        to: bob.identity.did().clone(),
        amount: amount("10"),
        from_currency: hours,
        to_currency: eur.clone(),
        max_target_amount: None,
        min_target_amount: Some(amount("14")),
        quote_id: Some(quote.quote_id),
    };
    let converted = alice.client.convert(coop, &conversion, Some("conv-1")).await.unwrap();
    assert_eq!((converted.kind.as_str(), converted.net_target_amount), ("conversion", Some(amount("15"))));
    let bob_eur = bob.client.balance(coop, bob.identity.did().as_str(), Some(&eur)).await.unwrap();
    assert_eq!(bob_eur.balance, amount("15"));
    assert_eq!(bob_eur.balances["eur"], amount("15"));

    let stats = alice.client.coop_stats(coop).await.unwrap();
    assert_eq!((stats.member_count, stats.transaction_count), (3, 4));
}

#[tokio::test]
async fn coops_members_roles_settings() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("members", 1).await;
    let coop = &admin.coop;
    let member = &members[0];
    let page = admin.client.members(coop, PageRequest::default()).await.unwrap();
    assert_eq!(page.members.len(), 2);
    let promoted = admin.client.set_role(coop, member.identity.did(), Role::Admin).await.unwrap();
    assert_eq!(promoted.role, "admin");
    let limited =
        admin.client.set_credit_limit(coop, member.identity.did(), Some(Amount::from_units(-50))).await.unwrap();
    assert_eq!(limited.credit_limit, Some(Amount::from_units(-50)));
    let patch = SettingsPatch { quorum_percent: Some(60), ..Default::default() };
    assert_eq!(admin.client.update_settings(coop, &patch).await.unwrap().settings.quorum_percent, 60);
    admin.client.remove_member(coop, member.identity.did()).await.unwrap();
    let listed = admin.client.coops(PageRequest::default()).await.unwrap();
    assert_eq!(listed.coops.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["members"]);
    assert_eq!(admin.client.coop(coop).await.unwrap().member_count, 1);
}

#[tokio::test]
async fn trust_edges_are_set_replaced_listed_and_revoked() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("trust", 1).await;
    let target = members[0].identity.did();
    let created = admin.client.set_trust(target, 0.8).await.unwrap();
    assert!(!created.replaced);
    let replaced = admin.client.set_trust(target, 0.6).await.unwrap();
    assert!(replaced.replaced);
    assert_eq!(replaced.edge.score, 0.6);
    let edges = admin.client.trust_edges(target, PageRequest::default()).await.unwrap();
    assert_eq!(edges.incoming().count(), 1);
    assert_eq!(edges.edges[0].direction, gateway_client::EdgeDirection::Incoming);
    assert_eq!(edges.pagination.total, 1);
    let score = admin.client.trust_score(target).await.unwrap();
    assert_eq!(score.class, "Federated", "the test gateway's default score is 0.9");
    admin.client.revoke_trust(target).await.unwrap();
    assert_eq!(admin.client.trust_edges(target, PageRequest::default()).await.unwrap().incoming().count(), 0);
}

#[tokio::test]
async fn governance_from_domain_to_receipt() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("gov", 2).await;
    let voters: Vec<String> = std::iter::once(&admin).chain(&members).map(|m| m.identity.did().to_string()).collect();
    let domain = admin
        .client
        .create_domain(&NewDomain {
            domain_id: "budget".into(),
            name: "Budget".into(),
            members: voters,
            quorum_percent: None,
            rule: None,
        })
        .await
        .unwrap();
    assert_eq!(domain.members.len(), 3);
    // Every coop also has its built-in `coop` domain of all members.
    let listed = admin.client.domains().await.unwrap().domains;
    let ids: Vec<&str> = listed.iter().map(|d| d.domain_id.as_str()).collect();
    assert_eq!(ids, ["budget", "coop"]);
    assert_eq!(listed[1].members.len(), 3);
    assert_eq!(admin.client.domain("budget").await.unwrap().name, "Budget");

    let draft = admin.client.create_proposal(&NewProposal::text("budget", "New oven", "Buy an oven")).await.unwrap();
    assert_eq!(draft.status, "draft");
    let open = members[0].client.open_proposal(&draft.id).await.unwrap();
    assert_eq!(open.status, "open");

    // Bob delegates to Alice; Alice votes for, the admin against.
    let delegation = members[1]
        .client
        .delegate(&NewDelegation {
            delegate: members[0].identity.did().to_string(),
            scope: "domain:budget".into(),
            expires_at: None,
        })
        .await
        .unwrap();
    assert_eq!(members[1].client.delegations().await.unwrap().given[0].id, delegation.id);
    let vote = members[0].client.vote(&draft.id, VoteChoice::For).await.unwrap();
    assert!(!vote.replaced);
    admin.client.vote(&draft.id, VoteChoice::Against).await.unwrap();
    let votes = admin.client.votes(&draft.id).await.unwrap();
    assert_eq!((votes.votes_for, votes.votes_against), (2, 1));

    let listed =
        admin.client.proposals(&ProposalQuery { status: Some("active".into()), ..Default::default() }).await.unwrap();
    assert_eq!(listed.proposals.len(), 1);

    let closed = admin.client.close_proposal(&draft.id).await.unwrap();
    assert_eq!((closed.outcome.as_deref(), closed.accepted), (Some("Approved"), Some(true)));
    let receipt = admin.client.proof(&draft.id).await.unwrap();
    assert_eq!((receipt.tally.for_, receipt.tally.against), (2, 1));
    let keys = admin.client.signing_keys().await.unwrap();
    assert!(keys.keys.iter().any(|k| k.public_key == receipt.public_key && k.valid_at(receipt.timestamp)));

    // The receipt the SDK returns verifies with the domain's verifier.
    let value = serde_json::to_value(&receipt).unwrap();
    let domain_receipt: gateway_domain::governance::Receipt = serde_json::from_value(value).unwrap();
    gateway_domain::governance::verify_receipt(&domain_receipt).unwrap();

    members[1].client.revoke_delegation(&delegation.id).await.unwrap();
    assert!(members[1].client.delegations().await.unwrap().given.is_empty());

    // The short family creates and opens at once.
    let opened = admin.client.create_and_open_proposal(&NewProposal::text("budget", "Hours", "More")).await.unwrap();
    assert_eq!(opened.status, "open");
}

/// The CCL contract the test suites share (`tests/fixtures/kitchen.ccl.json`).
fn contract() -> serde_json::Value {
    serde_json::from_str(include_str!("../../../../tests/fixtures/kitchen.ccl.json")).expect("fixture is JSON")
}

#[tokio::test]
async fn compute_submit_claim_complete_signed_and_notify() {
    let gateway = Gateway::start().await;
    let (admin, members) = gateway.coop("compute", 1).await;
    let executor = &members[0];
    let inputs = BTreeMap::from([("hours".to_owned(), "5".to_owned())]);
    let submitted = admin.client.submit_task(&TaskSubmission::ccl(&contract(), inputs, 1000)).await.unwrap();
    assert_eq!(submitted.status, "pending");
    let claimed = executor.client.claim_task(&submitted.task_id).await.unwrap();
    assert!(claimed.code.is_some() && claimed.deadline.is_some());

    // A signature over another output is refused.
    let forged = executor.identity.sign_completion(&claimed.task_hash, &json!({"value": 1}), None, 5, None).unwrap();
    let completion = gateway_client::Completion {
        output: json!({"value": 10}),
        fuel_used: 5,
        signature: forged,
        outcome: None,
        error: None,
    };
    assert!(matches!(
        executor.client.complete_task(&claimed.task_id, &completion).await,
        Err(Error::Validation { .. })
    ));

    let output = json!({"value": 10, "state": {"total": 10}});
    let done = executor
        .client
        .complete_task_signed(&claimed, &executor.identity, output.clone(), 31, None, None)
        .await
        .unwrap();
    assert!(done.is_finished());
    assert_eq!(done.result.as_ref().unwrap().output, output);
    assert_eq!(admin.client.task(&submitted.task_id).await.unwrap().status, "completed");
    let listed =
        admin.client.tasks(&TaskQuery { status: Some("completed".into()), ..Default::default() }).await.unwrap();
    assert_eq!(listed.tasks.len(), 1);

    let second = admin.client.submit_task(&TaskSubmission::ccl(&contract(), BTreeMap::new(), 10)).await.unwrap();
    assert_eq!(admin.client.cancel_task(&second.task_id).await.unwrap().status, "cancelled");

    // The submitter was told the task finished.
    let notes = admin.client.notifications(true, PageRequest::default()).await.unwrap();
    let finished = notes.notifications.iter().find(|n| n.kind == "task_finished").expect("task_finished");
    assert!(!finished.read);
    let read = admin.client.mark_notification_read(&finished.id).await.unwrap();
    assert!(read.read);
    let before = admin.client.notifications(true, PageRequest::default()).await.unwrap().unread_count;
    assert_eq!(admin.client.mark_all_notifications_read().await.unwrap(), before);
    assert_eq!(admin.client.notifications(true, PageRequest::default()).await.unwrap().unread_count, 0);
    assert_eq!(admin.client.health().await.unwrap().status, "ok");
}
