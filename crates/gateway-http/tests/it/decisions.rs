//! Who decides (INTERFACE.md §7): a proposal with an effect, and every proposal of the `coop`
//! domain, is decided by its domain's rule and quorum, never by a rule its author picks, and
//! its author cannot close it early. The attack these rules stop is replayed step by step on
//! every store; a property test compares the outcome with a brute-force recount over random
//! domains, rules, quorums, electorates, delegations, votes, closers and close times.

use std::collections::BTreeMap;

use axum::http::{Method, StatusCode};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{Response, TestApp, did_of};

fn assert_field(response: &Response, field: &str) {
    response.assert_error(400, "BAD_REQUEST");
    assert!(response.body["details"]["fields"][field].is_array(), "{field}: {}", response.body);
}

async fn put(app: &TestApp, uri: &str, body: Value, token: &str) -> Response {
    app.call(Method::PUT, uri, Some(body), Some(token)).await
}

async fn create(app: &TestApp, token: &str, domain: &str, payload: Value, rule: Option<&str>) -> Response {
    let mut body = json!({ "domain_id": domain, "title": "T", "payload": payload, "voting_duration_secs": 60 });
    if let Some(rule) = rule {
        body["rule_ccl"] = json!(rule);
    }
    app.post_as("/v1/gov/proposals", body, token).await
}

async fn open(app: &TestApp, token: &str, domain: &str, payload: Value, rule: Option<&str>) -> String {
    let created = create(app, token, domain, payload, rule).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let opened = app.post_as(&format!("/v1/gov/proposals/{id}/open"), json!({}), token).await;
    assert_eq!(opened.status, StatusCode::OK, "{}", opened.body);
    id
}

async fn vote(app: &TestApp, id: &str, token: &str, choice: &str) {
    let voted = app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": choice }), token).await;
    assert_eq!(voted.status, StatusCode::OK, "{}", voted.body);
}

async fn close(app: &TestApp, id: &str, token: &str) -> Response {
    app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), token).await
}

/// The member's role in `c1`, `None` when not a member.
async fn role(app: &TestApp, token: &str, seed: u8) -> Option<String> {
    let listed = app.get("/v1/coops/c1/members?limit=100", token).await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    listed.body["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["did"] == json!(did_of(seed)))
        .map(|m| m["role"].as_str().unwrap().to_owned())
}

async fn is_member(app: &TestApp, token: &str, seed: u8) -> bool {
    role(app, token, seed).await.is_some()
}

/// The attack of the third review, on every store: an ordinary member (trust 0.9) tries to
/// pass a budget to herself and a second admin key of her own with `supermajority:1` (one vote
/// for beats any number against), closing early herself, or letting the sweeper close. Each
/// step is refused, and the coop's own rule (`unanimous`, 75 % quorum) decides.
#[tokio::test]
async fn one_member_cannot_bend_a_coop_decision() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
        let changed =
            put(&app, "/v1/gov/domains/coop", json!({ "rule": "unanimous", "quorum_percent": 75 }), &admin).await;
        assert_eq!(changed.status, StatusCode::OK, "{}", changed.body);
        let attacker = &m[0];
        let budget = json!({ "type": "budget", "to": did_of(2), "amount": 1_000_000_000_000u64 });
        let second_key = json!({ "type": "membership", "action": "add", "did": did_of(9), "role": "admin" });

        // 1. Her own loose rule: 400 naming rule_ccl, for an effect and for text in `coop`.
        for payload in [&budget, &second_key, &json!({ "type": "text", "content": "x" })] {
            for rule in ["supermajority:1", "majority", "unanimous"] {
                assert_field(&create(&app, attacker, "coop", payload.clone(), Some(rule)).await, "rule_ccl");
            }
        }

        // 2. Without it, the proposal carries the domain's rule; one for and three against.
        let pay = open(&app, attacker, "coop", budget.clone(), None).await;
        let add = open(&app, attacker, "coop", second_key.clone(), None).await;
        for id in [&pay, &add] {
            vote(&app, id, attacker, "for").await;
            for token in [&admin, &m[1], &m[2]] {
                vote(&app, id, token, "against").await;
            }
        }
        let read = app.get(&format!("/v1/gov/proposals/{pay}"), attacker).await;
        assert_eq!(read.body["rule"], "unanimous", "{}", read.body);

        // 3. Early close by the author: every vote is in, so the close is allowed, and the
        //    domain's rule decides: rejected, nothing paid, nobody added.
        let closed = close(&app, &pay, attacker).await;
        assert_eq!(closed.status, StatusCode::OK, "{}", closed.body);
        assert_eq!(
            (closed.body["outcome"].as_str(), closed.body["rule"].as_str()),
            (Some("Rejected"), Some("unanimous"))
        );
        assert_eq!(closed.body["effect"], Value::Null, "{}", closed.body);
        let balance = app.get(&format!("/v1/ledger/c1/balance/{}", did_of(2)), attacker).await;
        assert_eq!(balance.body["balance"].as_f64(), Some(0.0), "{}", balance.body);

        // 4. A fresh one while votes are missing: the author may not close it early.
        let early = open(&app, attacker, "coop", second_key.clone(), None).await;
        vote(&app, &early, attacker, "for").await;
        close(&app, &early, attacker).await.assert_error(409, "CONFLICT");

        // 5. The sweeper, once voting has ended, applies the same rule.
        app.clock.advance_secs(61);
        assert!(app.state.governance.sweep().await.unwrap() >= 2);
        for id in [&add, &early] {
            let swept = app.get(&format!("/v1/gov/proposals/{id}"), &admin).await.body;
            assert_eq!(swept["status"], "closed", "{swept}");
            assert_ne!(swept["outcome"], "Approved", "{swept}");
        }
        assert!(!is_member(&app, &admin, 9).await, "the second key was never added");
        // The founder is still an admin.
        assert_eq!(role(&app, &admin, 1).await.as_deref(), Some("admin"));
    }
}

/// Outside the coop domain, a text proposal may ask for a rule at least as strict as its
/// domain's, never a looser one; at close the stricter of the two decides, so an admin's later
/// tightening of the domain counts too.
#[tokio::test]
async fn elsewhere_a_proposal_may_only_tighten_its_domains_rule() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let domain = json!({ "domain_id": "d", "name": "D", "members": [did_of(1), did_of(2), did_of(3)], "rule": "supermajority:67" });
        assert_eq!(app.post_as("/v1/gov/domains", domain, &admin).await.status, StatusCode::CREATED);
        let text = json!({ "type": "text", "content": "lunch" });
        for looser in ["majority", "supermajority:50", "supermajority:66"] {
            assert_field(&create(&app, &m[0], "d", text.clone(), Some(looser)).await, "rule_ccl");
        }
        assert_field(&create(&app, &m[0], "d", text.clone(), Some("plurality")).await, "rule_ccl");
        let stricter = open(&app, &m[0], "d", text.clone(), Some("supermajority:67")).await;
        // 2 for, 1 against is 66.7 %: below the domain's 67 %.
        vote(&app, &stricter, &m[0], "for").await;
        vote(&app, &stricter, &admin, "for").await;
        vote(&app, &stricter, &m[1], "against").await;
        let closed = close(&app, &stricter, &m[0]).await;
        assert_eq!(closed.body["outcome"], "Rejected", "{}", closed.body);

        // The author of a text proposal may still close it early.
        let early = open(&app, &m[0], "d", text.clone(), Some("unanimous")).await;
        vote(&app, &early, &m[0], "for").await;
        // The admin tightens the domain to unanimous... and loosens it again: the proposal's own
        // unanimous rule stays the floor.
        let tightened = put(&app, "/v1/gov/domains/d", json!({ "rule": "majority" }), &admin).await;
        assert_eq!(tightened.status, StatusCode::OK, "{}", tightened.body);
        vote(&app, &early, &admin, "for").await;
        vote(&app, &early, &m[1], "against").await;
        let closed = close(&app, &early, &m[0]).await;
        assert_eq!(
            (closed.body["outcome"].as_str(), closed.body["rule"].as_str()),
            (Some("Rejected"), Some("unanimous"))
        );

        // And a proposal made under a loose domain rule is decided by the domain's rule as it is
        // at the close.
        let later = open(&app, &m[0], "d", text.clone(), None).await;
        let tightened = put(&app, "/v1/gov/domains/d", json!({ "rule": "unanimous" }), &admin).await;
        assert_eq!(tightened.status, StatusCode::OK, "{}", tightened.body);
        vote(&app, &later, &m[0], "for").await;
        vote(&app, &later, &admin, "for").await;
        vote(&app, &later, &m[1], "against").await;
        let closed = close(&app, &later, &m[0]).await;
        assert_eq!(
            (closed.body["outcome"].as_str(), closed.body["rule"].as_str()),
            (Some("Rejected"), Some("unanimous"))
        );
    }
}

/// One random case of the property.
#[derive(Debug, Clone)]
struct Case {
    /// Members of the coop besides the admin (seed 1): seeds 2..=n+1.
    n_members: u8,
    rule_at_creation: String,
    rule_at_close: String,
    quorum: u32,
    author: u8,
    /// The author's attempt at her own rule, always refused.
    own_rule: Option<String>,
    /// Per member (index = seed - 1): whom they delegate to (a member index), if anyone.
    delegations: Vec<Option<u8>>,
    /// Per member: their direct vote, if any (0 for, 1 against, 2 abstain).
    votes: Vec<Option<u8>>,
    /// Who tries to close first: 0 the author, 1 another member, 2 the sweeper.
    closer: u8,
    /// Whether that first try comes before voting has ended.
    early: bool,
}

fn rule() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("majority".to_owned()),
        Just("unanimous".to_owned()),
        (1u32..=100).prop_map(|p| format!("supermajority:{p}")),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (1u8..=5).prop_flat_map(|n| {
        let everyone = usize::from(n) + 1;
        (
            rule(),
            rule(),
            0u32..=100,
            1u8..=n + 1,
            proptest::option::of(rule()),
            proptest::collection::vec(proptest::option::weighted(0.4, 0u8..n + 1), everyone),
            proptest::collection::vec(proptest::option::weighted(0.6, 0u8..3), everyone),
            0u8..3,
            any::<bool>(),
        )
            .prop_map(
                move |(
                    rule_at_creation,
                    rule_at_close,
                    quorum,
                    author,
                    own_rule,
                    delegations,
                    votes,
                    closer,
                    early,
                )| {
                    Case {
                        n_members: n,
                        rule_at_creation,
                        rule_at_close,
                        quorum,
                        author,
                        own_rule,
                        delegations,
                        votes,
                        closer,
                        early,
                    }
                },
            )
    })
}

/// The recount, written from INTERFACE.md §7 without the gateway's code: each member's vote goes
/// to the end of their delegation chain when nobody on it before voted, a cycle or a silent
/// end casts nothing; quorum on participants, then the domain's rule.
fn brute_force(case: &Case) -> (&'static str, u64) {
    let everyone = case.votes.len();
    let (mut for_, mut against, mut participants) = (0u64, 0u64, 0u64);
    for member in 0..everyone {
        let mut at = member;
        let mut seen = vec![false; everyone];
        let cast = loop {
            if let Some(choice) = case.votes[at] {
                break Some(choice);
            }
            seen[at] = true;
            match case.delegations[at] {
                Some(next) if usize::from(next) != at && !seen[usize::from(next)] => at = usize::from(next),
                _ => break None,
            }
        };
        match cast {
            Some(0) => for_ += 1,
            Some(1) => against += 1,
            Some(_) => {}
            None => continue,
        }
        participants += 1;
    }
    if participants * 100 < u64::from(case.quorum) * everyone as u64 {
        return ("NoQuorum", participants);
    }
    let passes = match case.rule_at_close.as_str() {
        "majority" => for_ > against,
        "unanimous" => for_ > 0 && against == 0,
        other => {
            let pct: u64 = other.strip_prefix("supermajority:").unwrap().parse().unwrap();
            for_ > 0 && for_ * 100 >= pct * (for_ + against)
        }
    };
    (if passes { "Approved" } else { "Rejected" }, participants)
}

async fn run_case(case: Case) {
    let app = TestApp::new().await;
    let seeds: Vec<u8> = (2..=case.n_members + 1).collect();
    let (admin, members) = app.coop_with_members("c1", 1, &seeds).await;
    let mut tokens = vec![admin.clone()];
    tokens.extend(members);
    let domain = json!({ "rule": case.rule_at_creation, "quorum_percent": case.quorum });
    assert_eq!(put(&app, "/v1/gov/domains/coop", domain, &admin).await.status, StatusCode::OK);

    let author = &tokens[usize::from(case.author) - 1];
    let payload = json!({ "type": "membership", "action": "add", "did": did_of(99) });
    if let Some(own) = &case.own_rule {
        assert_field(&create(&app, author, "coop", payload.clone(), Some(own)).await, "rule_ccl");
    }
    let id = open(&app, author, "coop", payload, None).await;
    let mut given = BTreeMap::new();
    for (from, to) in case.delegations.iter().enumerate() {
        if let Some(to) = to.filter(|&to| usize::from(to) != from) {
            let body = json!({ "delegate": did_of(to + 1), "scope": "blanket" });
            let made = app.post_as("/v1/gov/delegations", body, &tokens[from]).await;
            assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
            given.insert(from, to);
        }
    }
    let case = Case { delegations: (0..tokens.len()).map(|i| given.get(&i).copied()).collect(), ..case };
    for (voter, choice) in case.votes.iter().enumerate() {
        if let Some(choice) = choice {
            vote(&app, &id, &tokens[voter], ["for", "against", "abstain"][usize::from(*choice)]).await;
        }
    }
    let domain = json!({ "rule": case.rule_at_close });
    assert_eq!(put(&app, "/v1/gov/domains/coop", domain, &admin).await.status, StatusCode::OK);

    let (expected, participants) = brute_force(&case);
    let participants_all = participants >= tokens.len() as u64;
    let other = &tokens[usize::from(case.author) % tokens.len()];
    if !case.early {
        app.clock.advance_secs(61);
    }
    let first_try = match case.closer {
        0 => Some(close(&app, &id, author).await),
        1 => Some(close(&app, &id, other).await),
        _ => {
            app.state.governance.sweep().await.unwrap();
            None
        }
    };
    let may_close_now = !case.early || (participants_all && case.closer != 2);
    match &first_try {
        Some(response) if may_close_now => assert_eq!(response.status, StatusCode::OK, "{}", response.body),
        Some(response) => response.assert_error(409, "CONFLICT"),
        None => {}
    }
    if case.early && !may_close_now {
        // Nobody closed it early; once voting has ended the sweeper does.
        app.clock.advance_secs(61);
        assert_eq!(app.state.governance.sweep().await.unwrap(), 1);
    }
    let record = app.get(&format!("/v1/gov/proposals/{id}"), &admin).await.body;
    assert_eq!(record["status"], "closed", "{record}");
    assert_eq!(record["outcome"], expected, "{case:?}: {record}");
    assert_eq!(record["rule"], json!(case.rule_at_close), "{record}");
    assert_eq!(is_member(&app, &admin, 99).await, expected == "Approved", "{case:?}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Whoever closes, whenever: the outcome is the brute-force recount under the domain's rule
    /// and quorum at the close, and the effect is applied exactly when that says `Approved`.
    #[test]
    fn the_outcome_of_an_effect_is_the_domains_recount(case in case()) {
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(run_case(case));
    }
}

/// One author fills neither the coop's agenda nor everyone's notifications: at most 20
/// proposals an hour per author and coop (429 with `Retry-After`, even when eight arrive at
/// once), and titles, descriptions and text content have caps.
#[tokio::test]
async fn proposal_creation_is_bounded_per_author_and_in_size() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let text = json!({ "type": "text", "content": "lunch" });
        for _ in 0..16 {
            assert_eq!(create(&app, &m[0], "coop", text.clone(), None).await.status, StatusCode::CREATED);
        }
        let racing =
            futures_util::future::join_all((0..8).map(|_| create(&app, &m[0], "coop", text.clone(), None))).await;
        let created = racing.iter().filter(|r| r.status == StatusCode::CREATED).count();
        assert_eq!(created, 4, "{:?}", racing.iter().map(|r| r.status).collect::<Vec<_>>());
        for refused in racing.iter().filter(|r| r.status != StatusCode::CREATED) {
            refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
            assert!(refused.headers.contains_key("retry-after"), "{:?}", refused.headers);
        }
        // Another author, and another coop, are not affected.
        assert_eq!(create(&app, &m[1], "coop", text.clone(), None).await.status, StatusCode::CREATED);
        // An hour later the author may propose again.
        app.clock.advance_secs(3_601);
        let again = create(&app, &m[0], "coop", text.clone(), None).await;
        assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);

        let long = "x".repeat(20_001);
        let body = json!({ "domain_id": "coop", "title": "T", "description": long, "payload": text });
        assert_field(&app.post_as("/v1/gov/proposals", body, &admin).await, "description");
        let body = json!({ "domain_id": "coop", "title": "x".repeat(301), "payload": text });
        assert_field(&app.post_as("/v1/gov/proposals", body, &admin).await, "title");
        let content = json!({ "type": "text", "content": "x".repeat(20_001) });
        assert_field(&create(&app, &admin, "coop", content, None).await, "payload.content");
        let at_cap = json!({ "type": "text", "content": "é".repeat(20_000) });
        assert_eq!(create(&app, &admin, "coop", at_cap, None).await.status, StatusCode::CREATED);
    }
}
