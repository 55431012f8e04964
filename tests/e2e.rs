//! A full cooperative day through the `gateway-client` SDK against the real gateway, served in
//! this process by `gatewayd::serve` over TCP: a SQLite file store, an encrypted governance
//! keystore, production enrollment and trust rules (one trust anchor, default score 0). Create a
//! coop, add members, trust them, pay, govern with a delegation, verify the decision receipt
//! offline, run a compute task on the built-in executor, read notifications, and follow the event
//! stream across a restart. (The binary's own start-up, signals and subcommands are tested in
//! `bins/gatewayd/tests`.)

use std::path::Path;
use std::time::Duration;

use gateway_client::{
    Client, Error, HistoryQuery, Identity, MEMBER_SCOPES, NewCoop, NewDelegation, NewDomain, NewProposal, PageRequest,
    PaymentRequest, StreamItem, SubscribeOptions, TaskSubmission, VoteChoice,
};
use gateway_core::{Amount, CoopId, Scope};
use serde_json::json;

const SECRET: &str = "an-end-to-end-secret-of-32-bytes!!";
const PASSPHRASE: &str = "correct horse battery staple";

/// A running gateway; stopped (drained) by [`Gateway::terminate`] or when dropped.
struct Gateway {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Gateway {
    /// Serves a gateway on `listen` over the SQLite store and keystore in `dir`.
    async fn start(dir: &Path, listen: &str, anchor: &str) -> Self {
        let store = format!("sqlite:{}", dir.join("gw.db").display());
        let keystore = dir.join("ks.json");
        let mut config = gatewayd::GatewayConfig::from_args([
            "--listen",
            listen,
            "--metrics-listen",
            "127.0.0.1:0",
            "--store",
            &store,
            "--keystore",
            keystore.to_str().unwrap(),
            "--trust-anchor",
            anchor,
            "--jwt-secret",
            SECRET,
        ])
        .expect("a valid configuration");
        config.keystore_passphrase = Some(PASSPHRASE.to_owned().into());
        let listeners = gatewayd::Listeners::bind(&config).await.expect("the listeners bind");
        let url = format!("http://{}", listeners.api.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let served = tokio::spawn(gatewayd::serve(config, listeners, async move {
            let _ = stopped.await;
        }));
        Gateway { url, stop: Some(stop), served: Some(served) }
    }

    /// Stops the gateway as a shutdown signal would (sockets told, requests drained) and waits
    /// for it to finish.
    async fn terminate(mut self) {
        let _ = self.stop.take().expect("running").send(());
        let served = self.served.take().expect("running");
        let stopped = tokio::time::timeout(Duration::from_secs(20), served).await;
        stopped.expect("the gateway stopped within 20 s").expect("serve did not panic").expect("serve succeeded");
    }
}

/// A new keystore in `dir` holding master secret 0, as `gatewayd keystore init` makes it.
fn init_keystore(dir: &Path) {
    let master = gateway_auth::keystore::init(&dir.join("ks.json"), PASSPHRASE).expect("keystore init");
    assert_eq!(master.id, 0);
}

/// A free loopback port (so a restarted gateway comes back at the same address).
fn free_port() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().to_string()
}

struct Member {
    client: Client,
    identity: Identity,
}

impl Member {
    fn did(&self) -> &gateway_core::Did {
        self.identity.did()
    }
}

/// The admin of a new coop (logged in with every scope) and logged-in members.
async fn cooperative(url: &str, admin: Identity, coop: &CoopId, n_members: usize) -> (Member, Vec<Member>) {
    let client = Client::new(url).unwrap();
    // The coop does not exist yet: only the bootstrap scopes may be asked for.
    let refused = client.login(admin.clone(), coop.clone(), &Scope::ALL).await.unwrap_err();
    assert!(matches!(refused, Error::Authorization { ref refused_scopes, .. } if !refused_scopes.is_empty()));
    client.login(admin.clone(), coop.clone(), &gateway_client::BOOTSTRAP_SCOPES).await.unwrap();
    let created = client
        .create_coop(&NewCoop {
            id: None,
            name: "Day Bakery".into(),
            coop_type: "worker".into(),
            description: "bread and hours".into(),
        })
        .await
        .unwrap();
    assert_eq!((created.id.as_str(), created.member_count), (coop.as_str(), 1));
    client.login(admin.clone(), coop.clone(), &Scope::ALL).await.unwrap();
    let admin = Member { client, identity: admin };
    let mut members = Vec::new();
    for _ in 0..n_members {
        let identity = Identity::generate();
        admin.client.add_member(coop, identity.did(), None).await.unwrap();
        let client = Client::new(url).unwrap();
        client.login(identity.clone(), coop.clone(), &MEMBER_SCOPES).await.unwrap();
        members.push(Member { client, identity });
    }
    (admin, members)
}

fn payment(from: &Member, to: &Member, amount: &str, memo: &str) -> PaymentRequest {
    PaymentRequest {
        from: from.did().clone(),
        to: to.did().clone(),
        amount: Amount::parse_payment(amount).unwrap(),
        currency: None,
        memo: Some(memo.into()),
    }
}

/// The CCL contract the test suites share (`fixtures/kitchen.ccl.json`).
fn kitchen_contract() -> serde_json::Value {
    serde_json::from_str(include_str!("fixtures/kitchen.ccl.json")).expect("fixture is JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooperative_day_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    init_keystore(dir.path());
    let admin_identity = Identity::generate();
    let gateway = Gateway::start(dir.path(), "127.0.0.1:0", admin_identity.did().as_str()).await;
    let url = gateway.url.clone();
    let health = Client::new(&url).unwrap().health().await.unwrap();
    assert_eq!((health.status.as_str(), health.store.as_str()), ("ok", "sqlite"));

    // Morning: the coop, its members, and trust flowing from the anchor.
    let coop = CoopId::parse("day-bakery").unwrap();
    let (admin, members) = cooperative(&url, admin_identity, &coop, 3).await;
    let (alice, bob, carol) = (&members[0], &members[1], &members[2]);
    assert_eq!(admin.client.members(&coop, PageRequest::default()).await.unwrap().pagination.total, 4);

    let untrusted = alice.client.create_proposal(&NewProposal::text("none", "t", "d")).await.unwrap_err();
    assert!(matches!(untrusted, Error::Authorization { trust: Some(_), .. }), "trust starts at 0: {untrusted:?}");
    admin.client.set_trust(alice.did(), 0.9).await.unwrap();
    admin.client.set_trust(bob.did(), 0.8).await.unwrap();
    let edge = alice.client.set_trust(carol.did(), 0.9).await.unwrap();
    assert!(!edge.replaced);
    let carol_score = carol.client.trust_score(carol.did()).await.unwrap();
    assert!((carol_score.score - 0.81).abs() < 1e-9, "a path anchor → alice → carol: {carol_score:?}");
    assert_eq!(carol_score.class, "Federated");

    // Midday: payments, one of them retried with its idempotency key.
    let bread = payment(alice, bob, "25.5", "bread");
    let first = alice.client.pay(&coop, &bread, Some("alice-bread-1")).await.unwrap();
    let again = alice.client.pay(&coop, &bread, Some("alice-bread-1")).await.unwrap();
    assert_eq!(first.id, again.id, "paid once");
    bob.client.pay(&coop, &payment(bob, carol, "10", "flour"), None).await.unwrap();
    let balances: Vec<Amount> = {
        let mut out = Vec::new();
        for member in std::iter::once(&admin).chain(&members) {
            out.push(admin.client.balance(&coop, member.did().as_str(), None).await.unwrap().balance);
        }
        out
    };
    assert_eq!(balances[1], Amount::parse_decimal("-25.5").unwrap());
    assert_eq!(balances[2], Amount::parse_decimal("15.5").unwrap());
    let sum = balances.iter().try_fold(Amount::ZERO, |sum, b| sum.checked_add(*b)).unwrap();
    assert_eq!(sum, Amount::ZERO, "mutual credit sums to zero");
    let history = carol.client.history(&coop, &HistoryQuery::default()).await.unwrap();
    assert_eq!(history.transactions.len(), 2);

    // Afternoon: a budget proposal, a delegation, votes, the close and its receipt.
    let voters = std::iter::once(&admin).chain(&members).map(|m| m.did().to_string()).collect();
    admin
        .client
        .create_domain(&NewDomain {
            domain_id: "kitchen".into(),
            name: "Kitchen".into(),
            members: voters,
            quorum_percent: None,
            rule: None,
        })
        .await
        .unwrap();
    // A budget acts on the coop, so it is decided by all members, in the built-in `coop` domain.
    let mut budget = NewProposal::text("coop", "New oven", "Pay bob for the oven he bought");
    budget.payload = Some(json!({ "type": "budget", "to": bob.did().as_str(), "amount": 100 }));
    let proposal = alice.client.create_proposal(&budget).await.unwrap();
    alice.client.open_proposal(&proposal.id).await.unwrap();
    carol
        .client
        .delegate(&NewDelegation { delegate: alice.did().to_string(), scope: "domain:coop".into(), expires_at: None })
        .await
        .unwrap();
    alice.client.vote(&proposal.id, VoteChoice::For).await.unwrap();
    bob.client.vote(&proposal.id, VoteChoice::parse("approve").unwrap()).await.unwrap();
    admin.client.vote(&proposal.id, VoteChoice::Against).await.unwrap();
    let votes = admin.client.votes(&proposal.id).await.unwrap();
    assert_eq!((votes.votes_for, votes.votes_against), (3, 1), "carol's vote goes through alice");
    let closed = alice.client.close_proposal(&proposal.id).await.unwrap();
    assert_eq!(closed.outcome.as_deref(), Some("Approved"));
    let bob_after = bob.client.balance(&coop, bob.did().as_str(), None).await.unwrap().balance;
    assert_eq!(bob_after, Amount::parse_decimal("115.5").unwrap(), "the approved budget was paid");

    // Evening: the receipt, verified offline with the published key list.
    let receipt = bob.client.proof(&proposal.id).await.unwrap();
    let keys = bob.client.signing_keys().await.unwrap();
    let current: Vec<_> = keys.keys.iter().filter(|k| k.current).collect();
    assert_eq!(current.len(), 1, "{keys:?}");
    assert_eq!(receipt.public_key, current[0].public_key, "signed with the coop's current key");
    assert_eq!((current[0].master, current[0].generation), (Some(0), Some(0)), "derived from master 0");
    let offline: gateway_domain::governance::Receipt =
        serde_json::from_value(serde_json::to_value(&receipt).unwrap()).unwrap();
    gateway_domain::governance::verify_receipt(&offline).expect("the receipt verifies");
    assert!(keys.keys.iter().any(|k| k.public_key == receipt.public_key && k.valid_at(receipt.timestamp)));
    let mut forged = offline.clone();
    forged.tally_against = 0;
    assert!(gateway_domain::governance::verify_receipt(&forged).is_err(), "a changed count is detected");

    // A compute task run by the built-in executor.
    let inputs = [("hours".to_owned(), "5".to_owned())].into();
    let submitted = carol.client.submit_task(&TaskSubmission::ccl(&kitchen_contract(), inputs, 1000)).await.unwrap();
    let task = {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let task = carol.client.task(&submitted.task_id).await.unwrap();
            if task.is_finished() {
                break task;
            }
            assert!(std::time::Instant::now() < deadline, "the built-in executor did not finish: {task:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    assert_eq!(task.status, "completed");
    assert_eq!(task.result.unwrap().output, json!({ "value": 10, "state": { "total": 10 } }));

    // Notifications of the day.
    let notes = bob.client.notifications(false, PageRequest::default()).await.unwrap();
    let kinds: Vec<&str> = notes.notifications.iter().map(|n| n.kind.as_str()).collect();
    assert!(kinds.contains(&"payment_received") && kinds.contains(&"member_added"), "{kinds:?}");
    assert!(
        carol
            .client
            .notifications(true, PageRequest::default())
            .await
            .unwrap()
            .notifications
            .iter()
            .any(|n| n.kind == "task_finished")
    );
    assert!(bob.client.mark_all_notifications_read().await.unwrap() >= 2);
    drop(gateway);
}

/// The event stream through a restart of the gateway. Needs `gatewayd` to serve
/// `/v1/ws/{coop_id}` (the `gateway-ws` router merged into the binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_survives_a_gateway_restart() {
    let dir = tempfile::tempdir().unwrap();
    init_keystore(dir.path());
    let admin_identity = Identity::generate();
    let listen = free_port();
    let gateway = Gateway::start(dir.path(), &listen, admin_identity.did().as_str()).await;
    let url = gateway.url.clone();
    let coop = CoopId::parse("stream").unwrap();
    let (admin, members) = cooperative(&url, admin_identity, &coop, 1).await;
    let member = &members[0];

    let mut events = member
        .client
        .subscribe(&coop, SubscribeOptions { min_backoff: Duration::from_millis(100), ..SubscribeOptions::default() });
    let mut seen = Vec::new();
    let mut disconnects = 0;
    let mut next = async || tokio::time::timeout(Duration::from_secs(30), events.next()).await.unwrap().unwrap();
    let current_seq = match next().await {
        StreamItem::Connected { current_seq, .. } => current_seq,
        other => panic!("expected AuthOk, got {other:?} (does gatewayd serve /v1/ws/{{coop_id}}?)"),
    };

    // Live events before the restart.
    admin.client.pay(&coop, &payment(&admin, member, "1", "before"), None).await.unwrap();
    admin.client.pay(&coop, &payment(&admin, member, "2", "before"), None).await.unwrap();
    while seen.len() < 2 {
        match next().await {
            StreamItem::Event(event) => seen.push((event.seq, event.event_type)),
            other => panic!("unexpected {other:?}"),
        }
    }

    // Shutdown (what SIGTERM triggers in the binary): the gateway announces it; it comes back at the same address.
    gateway.terminate().await;
    let gateway = Gateway::start(dir.path(), &listen, admin.did().as_str()).await;
    assert_eq!(gateway.url, url);
    // These may be committed before the subscriber is back: they must then come by backfill.
    // The admin's pooled connection to the stopped gateway may not look closed yet when the
    // first is sent (its end reaches the client a moment later): as any client that pays across
    // a restart, these carry idempotency keys, so the SDK sends them again without paying twice.
    admin.client.pay(&coop, &payment(&admin, member, "3", "after"), Some("after-restart-3")).await.unwrap();
    admin.client.pay(&coop, &payment(&admin, member, "4", "after"), Some("after-restart-4")).await.unwrap();
    while seen.len() < 4 {
        match next().await {
            StreamItem::Event(event) => seen.push((event.seq, event.event_type)),
            StreamItem::Disconnected { .. } => disconnects += 1,
            StreamItem::Connected { .. } | StreamItem::BackfillComplete { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(disconnects >= 1, "the restart was noticed");
    let seqs: Vec<u64> = seen.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (current_seq + 1..=current_seq + 4).collect::<Vec<_>>(), "in order, none lost, none twice");
    assert!(seen.iter().all(|(_, kind)| kind == "PaymentCreated"), "{seen:?}");
    drop(gateway);
}

/// One member's session over plain HTTP, the way any client would speak to the gateway.
struct Raw {
    http: reqwest::Client,
    url: String,
    key: ed25519_dalek::SigningKey,
    did: String,
    token: String,
}

impl Raw {
    fn new(url: &str, seed: u8) -> Self {
        let key = ed25519_dalek::SigningKey::from_bytes(&[seed; 32]);
        let public = gateway_core::Ed25519PublicKey(key.verifying_key().to_bytes());
        let did = gateway_core::Did::key_from_public_key(&public).to_string();
        // reqwest is built without a TLS provider of its own (the SDK passes one explicitly):
        // this plain-HTTP client uses the process default, ring, as the rest of the workspace.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Raw { http: reqwest::Client::new(), url: url.to_owned(), key, did, token: String::new() }
    }

    /// Logs in for `coop` with `scopes`; returns the verify answer's status and body.
    async fn login(&mut self, coop: &str, scopes: &[&str]) -> (u16, serde_json::Value) {
        use ed25519_dalek::Signer;
        let (_, challenge) =
            self.call(reqwest::Method::POST, "/v1/auth/challenge", Some(json!({ "did": self.did }))).await;
        let nonce = challenge["nonce"].as_str().expect("a nonce");
        let signature = hex::encode(self.key.sign(nonce.as_bytes()).to_bytes());
        let body = json!({ "did": self.did, "signature": signature, "coop_id": coop, "scopes": scopes });
        let (status, answer) = self.call(reqwest::Method::POST, "/v1/auth/verify", Some(body)).await;
        if status == 200 {
            self.token = answer["token"].as_str().unwrap().to_owned();
        }
        (status, answer)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if !self.token.is_empty() {
            request = request.bearer_auth(&self.token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(serde_json::Value::Null))
    }

    async fn post(&self, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }
}

/// Asserts a refusal: its status, its code and, for 403s, the machine reason or for 400s the
/// field at fault.
fn refused(step: &str, (status, body): (u16, serde_json::Value), expected: u16, detail: &str) {
    assert_eq!(status, expected, "{step} must be refused with {expected}: {body}");
    let details = &body["details"];
    let named = details["reason"] == detail
        || details["fields"].get(detail).is_some()
        || details["refused_scopes"].as_array().is_some_and(|s| s.iter().any(|x| x == detail))
        || details["required_scopes"].as_array().is_some_and(|s| s.iter().any(|x| x == detail));
    assert!(named, "{step}: expected {detail} in the details: {body}");
}

/// The takeover an ordinary member tried before authority was fixed (a domain of their own, a
/// budget paying themselves from the treasury, a second key of theirs as admin, the real admin
/// demoted and removed, the receipt key rotated), replayed over real HTTP: every step refused,
/// and the coop unchanged afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cannot_take_over_the_cooperative() {
    let dir = tempfile::tempdir().unwrap();
    init_keystore(dir.path());
    let mut admin = Raw::new("", 1);
    let gateway = Gateway::start(dir.path(), "127.0.0.1:0", &admin.did).await;
    admin.url = gateway.url.clone();
    let coop = "bakery";
    assert_eq!(admin.login(coop, &["coop:read", "coop:write"]).await.0, 200);
    let (created, body) = admin.post("/v1/coops", json!({ "name": "Bakery", "coop_type": "worker" })).await;
    assert_eq!(created, 201, "{body}");
    assert_eq!(admin.login(coop, &Scope::ALL.map(|s| s.as_str())).await.0, 200);
    let (mut mallory, honest) = (Raw::new(&gateway.url, 66), [Raw::new(&gateway.url, 2), Raw::new(&gateway.url, 3)]);
    let second_key = Raw::new(&gateway.url, 67);
    for did in [&mallory.did, &honest[0].did, &honest[1].did] {
        assert_eq!(admin.post(&format!("/v1/coops/{coop}/members"), json!({ "did": did })).await.0, 201);
    }
    // Mallory is trusted (she may make proposals) and sits alone in a small domain.
    assert_eq!(admin.post("/v1/trust/edges", json!({ "target_did": mallory.did, "score": 0.9 })).await.0, 201);
    let kitchen = json!({ "domain_id": "kitchen", "name": "Kitchen", "members": [mallory.did] });
    assert_eq!(admin.post("/v1/gov/domains", kitchen).await.0, 201);

    // Asking for the admin's scopes.
    refused("coop:write for a member", mallory.login(coop, &["coop:write"]).await, 403, "coop:write");
    assert_eq!(mallory.login(coop, &MEMBER_SCOPES.map(|s| s.as_str())).await.0, 200);
    // A domain of her own, or the coop's domain narrowed to her.
    let mine = json!({ "domain_id": "mine", "name": "Mine", "members": [mallory.did] });
    refused("a domain of her own", mallory.post("/v1/gov/domains", mine).await, 403, "admin_only");
    let narrow = mallory.call(reqwest::Method::PUT, "/v1/gov/domains/coop", Some(json!({ "members": [mallory.did] })));
    refused("narrowing the coop domain", narrow.await, 403, "admin_only");
    // Effects on the coop from the domain where she decides alone.
    for (step, payload) in [
        ("a budget paying herself", json!({ "type": "budget", "to": mallory.did, "amount": 1_000_000_000_000u64 })),
        (
            "her second key as admin",
            json!({ "type": "membership", "action": "add", "did": second_key.did, "role": "admin" }),
        ),
        ("the admin removed", json!({ "type": "membership", "action": "remove", "did": admin.did })),
        ("the receipt key rotated", json!({ "type": "signing_key_rotation" })),
        ("a credit limit for herself", json!({ "type": "settings", "settings": { "credit_limit": -1_000_000_000 } })),
    ] {
        let body = json!({ "domain_id": "kitchen", "title": step, "payload": payload, "voting_duration_secs": 1 });
        refused(step, mallory.post("/v1/gov/proposals", body).await, 400, "payload");
    }
    // In the coop domain every member votes: alone she reaches no quorum.
    let budget = json!({ "type": "budget", "to": mallory.did, "amount": 1_000_000_000_000u64 });
    let body = json!({ "domain_id": "coop", "title": "for me", "payload": budget, "voting_duration_secs": 1 });
    let (status, proposal) = mallory.post("/v1/gov/proposals", body).await;
    assert_eq!(status, 201, "{proposal}");
    let id = proposal["id"].as_str().unwrap();
    assert_eq!(mallory.post(&format!("/v1/gov/proposals/{id}/open"), json!({})).await.0, 200);
    assert_eq!(mallory.post(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "for" })).await.0, 200);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, closed) = mallory.post(&format!("/v1/gov/proposals/{id}/close"), json!({})).await;
    assert_eq!((status, closed["outcome"].as_str()), (200, Some("NoQuorum")), "{closed}");
    assert_eq!(closed["effect"], serde_json::Value::Null, "nothing was applied: {closed}");
    // The admin's role and membership through the member routes.
    let (role, member) =
        (format!("/v1/coops/{coop}/members/{}/role", admin.did), format!("/v1/coops/{coop}/members/{}", admin.did));
    let demote = mallory.call(reqwest::Method::PUT, &role, Some(json!({ "role": "member" }))).await;
    refused("demoting the admin", demote, 403, "coop:write");
    refused("removing the admin", mallory.call(reqwest::Method::DELETE, &member, None).await, 403, "coop:write");

    // Afterwards: the same members and roles, an untouched treasury, no second key inside.
    let members = admin.get(&format!("/v1/coops/{coop}/members")).await;
    let roles: Vec<(String, String)> = members["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["did"].as_str().unwrap().to_owned(), m["role"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(roles.len(), 4, "{members}");
    assert!(roles.contains(&(admin.did.clone(), "admin".to_owned())), "{members}");
    assert!(roles.iter().all(|(did, role)| did == &admin.did || role == "member"), "{members}");
    let treasury = admin.get(&format!("/v1/ledger/{coop}/balance/coop:{coop}:treasury")).await;
    assert_eq!(treasury["balance"], json!(0), "{treasury}");
    let mut second_key = second_key;
    refused("the second key logging in", second_key.login(coop, &["coop:read"]).await, 403, "coop:read");
}
