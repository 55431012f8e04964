//! Authority and isolation (docs/INTERFACE.md §6, §7.2 "Who may do what"): no member acts for the whole coop.
//! Each test runs on every store and tries to break one rule the way an ordinary member would.

use axum::http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{TestApp, did_of};

/// Coop `c1`: admin 1, members 2, 3, 4, and domain `d` of members 1 and 2 (made by the admin).
async fn coop(app: &TestApp) -> (String, Vec<String>) {
    let (admin, members) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
    let domain = json!({ "domain_id": "d", "name": "D", "members": [did_of(1), did_of(2)] });
    let created = app.post_as("/v1/gov/domains", domain, &admin).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    (admin, members)
}

fn assert_reason(response: &crate::support::Response, reason: &str) {
    response.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(response.body["details"]["reason"], reason, "{}", response.body);
}

fn assert_field(response: &crate::support::Response, field: &str) {
    response.assert_error(400, "BAD_REQUEST");
    assert!(response.body["details"]["fields"][field].is_array(), "{field}: {}", response.body);
}

async fn put(app: &TestApp, uri: &str, body: Value, token: &str) -> crate::support::Response {
    app.call(Method::PUT, uri, Some(body), Some(token)).await
}

async fn propose(app: &TestApp, token: &str, domain: &str, payload: Value) -> crate::support::Response {
    let body = json!({ "domain_id": domain, "title": "T", "payload": payload, "voting_duration_secs": 60 });
    app.post_as("/v1/gov/proposals", body, token).await
}

/// Votes `for` with every token, lets voting end (a proposal with an effect closes only then,
/// or once every member has voted), closes with the first, and returns the closed record.
async fn pass(app: &TestApp, id: &str, voters: &[&String]) -> Value {
    for token in voters {
        let voted = app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "for" }), token).await;
        assert_eq!(voted.status, StatusCode::OK, "{}", voted.body);
    }
    app.clock.advance_secs(61);
    let closed = app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), voters[0]).await;
    assert_eq!(closed.status, StatusCode::OK, "{}", closed.body);
    closed.body
}

async fn open(app: &TestApp, token: &str, domain: &str, payload: Value) -> String {
    let created = propose(app, token, domain, payload).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_owned();
    let opened = app.post_as(&format!("/v1/gov/proposals/{id}/open"), json!({}), token).await;
    assert_eq!(opened.status, StatusCode::OK, "{}", opened.body);
    id
}

#[tokio::test]
async fn only_admins_create_and_change_domains() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = coop(&app).await;
        let mine = json!({ "domain_id": "mine", "name": "Mine", "members": [did_of(2)] });
        assert_reason(&app.post_as("/v1/gov/domains", mine, &m[0]).await, "admin_only");
        assert_reason(&put(&app, "/v1/gov/domains/d", json!({ "members": [did_of(2)] }), &m[0]).await, "admin_only");
        assert_reason(&put(&app, "/v1/gov/domains/coop", json!({ "quorum_percent": 1 }), &m[0]).await, "admin_only");

        let changed =
            put(&app, "/v1/gov/domains/d", json!({ "name": "Kitchen", "members": [did_of(3)] }), &admin).await;
        assert_eq!(changed.status, StatusCode::OK, "{}", changed.body);
        assert_eq!(changed.body["name"], "Kitchen");
        assert_eq!(changed.body["members"], json!([did_of(3)]));
        assert_field(&put(&app, "/v1/gov/domains/d", json!({ "members": [did_of(9)] }), &admin).await, "members");
        let missing = put(&app, "/v1/gov/domains/nope", json!({ "name": "x" }), &admin).await;
        missing.assert_error(404, "NOT_FOUND");
        let coop_members = put(&app, "/v1/gov/domains/coop", json!({ "members": [did_of(1)] }), &admin).await;
        assert_field(&coop_members, "members");
        let renamed =
            put(&app, "/v1/gov/domains/coop", json!({ "name": "Everyone", "quorum_percent": 60 }), &admin).await;
        assert_eq!(renamed.status, StatusCode::OK, "{}", renamed.body);
        assert_eq!(renamed.body["quorum_percent"], 60);
        assert_eq!(renamed.body["members"].as_array().unwrap().len(), 4, "{}", renamed.body);
        // A domain named like the built-in one cannot be made again.
        let again = json!({ "domain_id": "coop", "name": "C", "members": [did_of(1)] });
        app.post_as("/v1/gov/domains", again, &admin).await.assert_error(409, "CONFLICT");
    }
}

#[tokio::test]
async fn the_coop_domain_follows_the_membership() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = coop(&app).await;
        let members = |body: &Value| {
            let mut listed: Vec<String> =
                body["members"].as_array().unwrap().iter().map(|d| d.as_str().unwrap().to_owned()).collect();
            listed.sort();
            listed
        };
        let mut expected: Vec<String> = [1, 2, 3, 4].map(did_of).to_vec();
        expected.sort();
        assert_eq!(members(&app.get("/v1/gov/domains/coop", &admin).await.body), expected);

        let added = app.post_as("/v1/coops/c1/members", json!({ "did": did_of(5) }), &admin).await;
        assert_eq!(added.status, StatusCode::CREATED);
        assert!(members(&app.get("/v1/gov/domains/coop", &m[0]).await.body).contains(&did_of(5)));
        let removed =
            app.call(Method::DELETE, &format!("/v1/coops/c1/members/{}", did_of(4)), None, Some(&admin)).await;
        assert_eq!(removed.status, StatusCode::NO_CONTENT, "{}", removed.body);
        let now = members(&app.get("/v1/gov/domains/coop", &admin).await.body);
        assert!(now.contains(&did_of(5)) && !now.contains(&did_of(4)), "{now:?}");

        // The list is paginated and names a bad parameter.
        let page = app.get("/v1/gov/domains?limit=1&offset=1", &admin).await;
        assert_eq!(page.body["domains"].as_array().unwrap().len(), 1, "{}", page.body);
        assert_eq!(page.body["domains"][0]["domain_id"], "d", "id order: coop, d");
        assert_eq!(page.body["pagination"]["total"], 2);
        assert_eq!(page.body["pagination"]["has_more"], false);
        assert_field(&app.get("/v1/gov/domains?limit=-1", &admin).await, "limit");
        assert_field(&app.get("/v1/gov/domains?offset=x", &admin).await, "offset");
    }
}

#[tokio::test]
async fn effects_belong_to_the_coop_domain_and_authors_to_their_domain() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (_admin, m) = coop(&app).await;
        let me = did_of(2);
        for payload in [
            json!({ "type": "budget", "to": me, "amount": 1_000_000_000_000u64 }),
            json!({ "type": "membership", "action": "add", "did": did_of(8), "role": "admin" }),
            json!({ "type": "settings", "settings": { "credit_limit": -1_000_000 } }),
            json!({ "type": "signing_key_rotation" }),
        ] {
            assert_field(&propose(&app, &m[0], "d", payload.clone()).await, "payload");
            let allowed = propose(&app, &m[0], "coop", payload.clone()).await;
            assert_eq!(allowed.status, StatusCode::CREATED, "{payload}: {}", allowed.body);
        }
        let labelled = json!({ "domain_id": "d", "title": "T", "kind": "budget" });
        assert_field(&app.post_as("/v1/gov/proposals", labelled, &m[0]).await, "payload");
        let text = propose(&app, &m[0], "d", json!({ "type": "text", "content": "lunch" })).await;
        assert_eq!(text.status, StatusCode::CREATED, "{}", text.body);
        // Member 3 is not in domain d: no proposal, no vote, no close there.
        let outsider = propose(&app, &m[1], "d", json!({ "type": "text", "content": "x" })).await;
        assert_reason(&outsider, "not_a_domain_member");
        let id = open(&app, &m[0], "d", json!({ "type": "text", "content": "x" })).await;
        let vote = app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "for" }), &m[1]).await;
        assert_reason(&vote, "not_a_domain_member");
        let close = app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), &m[1]).await;
        assert_reason(&close, "not_a_domain_member");
    }
}

#[tokio::test]
async fn settings_proposals_are_checked_like_the_settings_route() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = coop(&app).await;
        for (setting, value) in [
            ("credit_limit", json!(5)),
            ("quorum_percent", json!(150)),
            ("high_value_threshold", json!(0)),
            ("default_currency", json!("no spaces allowed")),
            ("conversion_fee_percent", json!(0.00001)),
        ] {
            let route = put(&app, "/v1/coops/c1/settings", json!({ setting: value }), &admin).await;
            assert_field(&route, setting);
            let proposal =
                propose(&app, &m[0], "coop", json!({ "type": "settings", "settings": { setting: value } })).await;
            // Named where it stands in the request.
            assert_field(&proposal, &format!("payload.{setting}"));
            assert!(proposal.body["error"].as_str().unwrap().contains(setting), "{}", proposal.body);
        }
        let unknown = propose(&app, &m[0], "coop", json!({ "type": "settings", "settings": { "owner": "me" } })).await;
        assert_field(&unknown, "payload");
        // A valid one passes and applies exactly what the route would.
        let id = open(&app, &admin, "coop", json!({ "type": "settings", "settings": { "credit_limit": -50 } })).await;
        let closed = pass(&app, &id, &[&admin, &m[0], &m[1], &m[2]]).await;
        assert_eq!(closed["effect"], json!({ "applied": true, "error": null }));
        assert_eq!(app.get("/v1/coops/c1", &admin).await.body["settings"]["credit_limit"], json!(-50));
    }
}

#[tokio::test]
async fn an_effect_that_no_longer_applies_does_not_undo_the_close() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = coop(&app).await;
        let voters = [&admin, &m[0], &m[1], &m[2]];
        let join = open(&app, &m[0], "coop", json!({ "type": "membership", "action": "add", "did": did_of(7) })).await;
        // The admin adds the DID before the proposal closes.
        let added = app.post_as("/v1/coops/c1/members", json!({ "did": did_of(7) }), &admin).await;
        assert_eq!(added.status, StatusCode::CREATED);
        // The coop domain grew to five: four vote for, and once voting has ended it closes.
        for token in [&m[0], &admin, &m[1], &m[2]] {
            let voted = app.post_as(&format!("/v1/gov/proposals/{join}/vote"), json!({ "choice": "for" }), token).await;
            assert_eq!(voted.status, StatusCode::OK, "{}", voted.body);
        }
        let early = app.post_as(&format!("/v1/gov/proposals/{join}/close"), json!({}), &m[0]).await;
        early.assert_error(409, "CONFLICT");
        app.clock.advance_secs(61);
        let closed = app.post_as(&format!("/v1/gov/proposals/{join}/close"), json!({}), &m[0]).await;
        assert_eq!(closed.status, StatusCode::OK, "{}", closed.body);
        let closed = closed.body;
        assert_eq!(closed["status"], "closed");
        assert_eq!(closed["outcome"], "Approved");
        assert_eq!(closed["effect"]["applied"], false, "{closed}");
        assert!(closed["effect"]["error"].as_str().unwrap().contains("already a member"), "{closed}");
        let read = app.get(&format!("/v1/gov/proposals/{join}"), &admin).await;
        assert_eq!(read.body["effect"], closed["effect"], "the effect is stored with the record");
        let text = open(&app, &m[0], "d", json!({ "type": "text", "content": "x" })).await;
        let text_closed = pass(&app, &text, &[&admin, &m[0]]).await;
        assert_eq!(text_closed["effect"], Value::Null, "a text proposal has no effect");
        let budget = open(&app, &admin, "coop", json!({ "type": "budget", "to": did_of(3), "amount": 5 })).await;
        assert_eq!(pass(&app, &budget, &voters).await["effect"], json!({ "applied": true, "error": null }));
    }
}

#[tokio::test]
async fn the_sweeper_closes_every_due_proposal_even_when_an_effect_fails() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = coop(&app).await;
        let (other_admin, _) = app.coop_with_members("c2", 11, &[12]).await;
        let failing =
            open(&app, &m[0], "coop", json!({ "type": "membership", "action": "remove", "did": did_of(9) })).await;
        let voted = app.post_as(&format!("/v1/gov/proposals/{failing}/vote"), json!({ "choice": "for" }), &admin).await;
        assert_eq!(voted.status, StatusCode::OK);
        for token in &m {
            app.post_as(&format!("/v1/gov/proposals/{failing}/vote"), json!({ "choice": "for" }), token).await;
        }
        let elsewhere = open(&app, &other_admin, "coop", json!({ "type": "text", "content": "c2" })).await;
        app.clock.advance_secs(61);
        assert_eq!(app.state.governance.sweep().await.unwrap(), 2, "both due proposals close");
        let first = app.get(&format!("/v1/gov/proposals/{failing}"), &admin).await.body;
        assert_eq!((first["status"].as_str(), first["effect"]["applied"].as_bool()), (Some("closed"), Some(false)));
        let second = app.get(&format!("/v1/gov/proposals/{elsewhere}"), &other_admin).await.body;
        assert_eq!(second["status"], "closed");
    }
}

#[tokio::test]
async fn removal_takes_effect_everywhere_at_once() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, m) = coop(&app).await;
        // Member 2 is in domain d, gave a delegation to 3 and received one from 4.
        let given =
            app.post_as("/v1/gov/delegations", json!({ "delegate": did_of(3), "scope": "blanket" }), &m[0]).await;
        assert_eq!(given.status, StatusCode::CREATED, "{}", given.body);
        let received =
            app.post_as("/v1/gov/delegations", json!({ "delegate": did_of(2), "scope": "blanket" }), &m[2]).await;
        assert_eq!(received.status, StatusCode::CREATED, "{}", received.body);
        assert_eq!(app.get("/v1/coops/c1/members", &m[0]).await.status, StatusCode::OK, "cached as a member");

        let removed =
            app.call(Method::DELETE, &format!("/v1/coops/c1/members/{}", did_of(2)), None, Some(&admin)).await;
        assert_eq!(removed.status, StatusCode::NO_CONTENT, "{}", removed.body);
        // The removed member's unexpired token is refused on every route at once.
        for uri in ["/v1/coops/c1/members", "/v1/gov/domains", "/v1/ledger/c1/history", "/v1/gov/delegations"] {
            assert_reason(&app.get(uri, &m[0]).await, "not_a_member");
        }
        assert_eq!(app.get("/v1/gov/domains/d", &admin).await.body["members"], json!([did_of(1)]));
        assert_eq!(app.get("/v1/gov/delegations", &m[1]).await.body["received"], json!([]));
        assert_eq!(app.get("/v1/gov/delegations", &m[2]).await.body["given"], json!([]));

        // Removal by an approved proposal takes effect at once too.
        let remove =
            open(&app, &admin, "coop", json!({ "type": "membership", "action": "remove", "did": did_of(4) })).await;
        assert_eq!(app.get("/v1/coops/c1/members", &m[2]).await.status, StatusCode::OK, "cached as a member");
        let closed = pass(&app, &remove, &[&admin, &m[1], &m[2]]).await;
        assert_eq!(closed["effect"]["applied"], true, "{closed}");
        assert_reason(&app.get("/v1/coops/c1/members", &m[2]).await, "not_a_member");
        // And so does an addition by proposal: the new member's token works at once.
        let add = open(&app, &admin, "coop", json!({ "type": "membership", "action": "add", "did": did_of(6) })).await;
        pass(&app, &add, &[&admin, &m[1]]).await;
        let newcomer = app.token(6, "c1", &["coop:read"]).await;
        assert_eq!(app.get("/v1/coops/c1/members", &newcomer).await.status, StatusCode::OK);
        // The quorum counts current members only: 3 left (1, 3, 6), 2 of them suffice.
        let quorum = open(&app, &admin, "coop", json!({ "type": "text", "content": "q" })).await;
        let closed = pass(&app, &quorum, &[&admin, &m[1]]).await;
        assert_eq!(closed["outcome"], "Approved", "{closed}");
    }
}

#[tokio::test]
async fn delegations_go_to_members_only() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (_admin, m) = coop(&app).await;
        let stranger =
            app.post_as("/v1/gov/delegations", json!({ "delegate": did_of(9), "scope": "blanket" }), &m[0]).await;
        assert_field(&stranger, "delegate");
    }
}
