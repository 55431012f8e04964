//! The coop's log (INTERFACE.md §12) from outside: a payment's answer names its event, a member gets
//! a proof of it that verifies offline against the published key, the tiles and entry bundles
//! are the tree's, consistency proofs join checkpoints, strangers get the public parts only, and
//! tampering with the stored log stops the signing instead of publishing a new history.

use axum::http::{Method, StatusCode, header};
use gateway_core::CoopId;
use gateway_domain::log::Round;
use gateway_tlog::policy::Policy;
use gateway_tlog::proof::TlogProof;
use gateway_tlog::{Checkpoint, Note, leaf_hash, verify_consistency};
use serde_json::{Value, json};

use crate::support::{Backend, TestApp, did_of};

fn coop(id: &str) -> CoopId {
    CoopId::parse(id).unwrap()
}

fn text(response: &crate::support::Response) -> String {
    String::from_utf8(response.bytes.to_vec()).unwrap()
}

/// The policy a member writes from the published key: this log, no witnesses.
async fn policy(app: &TestApp, id: &str) -> Policy {
    let keys = app.call(Method::GET, &format!("/v1/coops/{id}/log/key"), None, None).await;
    assert_eq!(keys.status, StatusCode::OK, "{}", text(&keys));
    let vkey = text(&keys).lines().last().expect("a key").to_owned();
    assert!(vkey.starts_with(&format!("localhost/coops/{id}+")), "{vkey}");
    Policy::parse(format!("log {vkey}\nquorum none\n").as_bytes()).unwrap()
}

async fn pay(app: &TestApp, token: &str, from: u8, to: u8, amount: f64, memo: &str) -> (Value, u64) {
    let paid = app
        .post_as(
            "/v1/ledger/c1/payment",
            json!({ "from": did_of(from), "to": did_of(to), "amount": amount, "currency": "hours", "memo": memo }),
            token,
        )
        .await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
    let seq = paid.headers["icn-event-seq"].to_str().unwrap().parse().unwrap();
    (paid.body, seq)
}

async fn signed(app: &TestApp, id: &str) -> u64 {
    match app.state.log.checkpoint(&coop(id)).await.unwrap() {
        Round::Signed { size } => size,
        other => panic!("{other:?}"),
    }
}

async fn checkpoint(app: &TestApp, id: &str) -> Checkpoint {
    let answer = app.call(Method::GET, &format!("/v1/coops/{id}/log/checkpoint"), None, None).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-cache");
    let note = Note::parse(&answer.bytes).unwrap();
    Checkpoint::parse(note.text()).unwrap()
}

#[tokio::test]
async fn a_payment_is_proved_by_a_checkpoint_anyone_can_verify() {
    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let (payment, seq) = pay(&app, &tokens[0], 2, 3, 12.5, "rent \"May\"\n2020-01-01 open Assets:Evil").await;
        let size = signed(&app, "c1").await;
        let signed_checkpoint = checkpoint(&app, "c1").await;
        assert_eq!(signed_checkpoint.origin(), "localhost/coops/c1");
        assert_eq!(signed_checkpoint.size(), size);

        // The member asks for the proof of the event its answer named, and checks it offline.
        let proof = app.get(&format!("/v1/coops/c1/log/proof?seq={seq}"), &tokens[0]).await;
        assert_eq!(proof.status, StatusCode::OK, "{}", text(&proof));
        let proof = TlogProof::parse(&proof.bytes).unwrap();
        // Entry 0 is LogOpened after event 0: event `seq` is entry `seq`.
        assert_eq!(proof.index(), seq);
        let bundle = app.get(&format!("/v1/coops/c1/log/tile/entries/000.p/{size}"), &tokens[1]).await;
        assert_eq!(bundle.status, StatusCode::OK);
        let entries = gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap();
        assert_eq!(entries.len() as u64, size);
        let entry = entries[seq as usize];
        let policy = policy(&app, "c1").await;
        proof.verify(entry, &policy).unwrap();
        // A changed entry (another amount) does not verify.
        let forged = String::from_utf8(entry.to_vec()).unwrap().replace("12.5", "1.25");
        assert!(proof.verify(forged.as_bytes(), &policy).is_err());

        // The entry is the event: its seq, then the object the WebSocket stream sends.
        let value: Value = serde_json::from_slice(entry).unwrap();
        assert_eq!(value["seq"], seq);
        assert_eq!(value["event"]["type"], "PaymentCreated");
        assert_eq!(value["event"]["coop_id"], "c1");
        assert_eq!(value["event"]["data"], payment);
        let opened: Value = serde_json::from_slice(entries[0]).unwrap();
        assert_eq!(opened["event"]["type"], "LogOpened");
        assert_eq!(opened["event"]["data"]["after_seq"], 0);

        // The level-0 tile is the entries' leaf hashes.
        let tile = app.call(Method::GET, &format!("/v1/coops/c1/log/tile/0/000.p/{size}"), None, None).await;
        assert_eq!(tile.status, StatusCode::OK);
        let leaves: Vec<u8> = entries.iter().flat_map(|e| leaf_hash(e)).collect();
        assert_eq!(tile.bytes.as_ref(), leaves.as_slice());
        // Not yet full: there is no full tile, and no wider partial one.
        let missing = app.call(Method::GET, "/v1/coops/c1/log/tile/0/000", None, None).await;
        missing.assert_error(404, "NOT_FOUND");
        let wider = app.call(Method::GET, &format!("/v1/coops/c1/log/tile/0/000.p/{}", size + 1), None, None).await;
        wider.assert_error(404, "NOT_FOUND");
    }
}

#[tokio::test]
async fn consistency_proofs_join_every_pair_of_checkpoints() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let mut checkpoints = vec![];
    for i in 0..6 {
        pay(&app, &tokens[0], 2, 3, 1.0 + f64::from(i), "step").await;
        signed(&app, "c1").await;
        checkpoints.push(checkpoint(&app, "c1").await);
    }
    for older in &checkpoints {
        for newer in checkpoints.iter().filter(|c| c.size() >= older.size()) {
            let uri = format!("/v1/coops/c1/log/consistency?from={}&to={}", older.size(), newer.size());
            let answer = app.get(&uri, &tokens[1]).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", text(&answer));
            let hashes: Vec<[u8; 32]> =
                text(&answer).lines().map(|l| gateway_tlog::hash::hash_from_base64(l).unwrap()).collect();
            verify_consistency(older.size(), newer.size(), older.root(), newer.root(), &hashes).unwrap();
        }
    }
    let beyond =
        app.get(&format!("/v1/coops/c1/log/consistency?from=1&to={}", checkpoints[5].size() + 1), &tokens[0]).await;
    beyond.assert_error(400, "BAD_REQUEST");
    assert!(beyond.body["details"]["fields"]["to"].is_array(), "{}", beyond.body);
    app.get("/v1/coops/c1/log/consistency?from=0&to=2", &tokens[0]).await.assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn a_full_tile_is_immutable_and_proofs_span_tiles() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
    let last = three_hundred_payments(&app, &tokens).await;
    let size = signed(&app, "c1").await;
    assert!(size > 256, "{size}");
    let full = app.call(Method::GET, "/v1/coops/c1/log/tile/0/000", None, None).await;
    assert_eq!(full.status, StatusCode::OK);
    assert_eq!(full.bytes.len(), 256 * 32);
    assert_eq!(full.headers[header::CACHE_CONTROL], "public, max-age=31536000, immutable");
    let policy = policy(&app, "c1").await;
    for seq in [1, 100, 255, 256, 257, last] {
        let proof = app.get(&format!("/v1/coops/c1/log/proof?seq={seq}"), &tokens[1]).await;
        assert_eq!(proof.status, StatusCode::OK, "{seq}: {}", text(&proof));
        let proof = TlogProof::parse(&proof.bytes).unwrap();
        let bundle_index = seq / 256;
        let bundle = app
            .get(
                &format!(
                    "/v1/coops/c1/log/tile/entries/{bundle_index:03}{}",
                    if bundle_index == 0 { String::new() } else { format!(".p/{}", size - 256) }
                ),
                &tokens[0],
            )
            .await;
        assert_eq!(bundle.status, StatusCode::OK, "{seq}");
        let entries = gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap();
        proof.verify(entries[(seq % 256) as usize], &policy).unwrap();
    }
}

#[tokio::test]
async fn strangers_get_the_public_parts_only() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let (_, other) = app.coop_with_members("c2", 4, &[5]).await;
    let (_, seq) = pay(&app, &tokens[0], 2, 3, 2.0, "private memo").await;
    signed(&app, "c1").await;
    // Public: checkpoint, keys, hash tiles.
    for path in ["/v1/coops/c1/log/checkpoint", "/v1/coops/c1/log/key", "/v1/coops/c1/log/tile/0/000.p/2"] {
        assert_eq!(app.call(Method::GET, path, None, None).await.status, StatusCode::OK, "{path}");
    }
    // Members only: entries (they hold memos) and the proofs.
    for path in ["/v1/coops/c1/log/tile/entries/000.p/2".to_owned(), format!("/v1/coops/c1/log/proof?seq={seq}")] {
        app.call(Method::GET, &path, None, None).await.assert_error(401, "AUTHENTICATION_FAILED");
        let foreign = app.get(&path, &other[0]).await;
        foreign.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(foreign.body["details"]["coop_id"], "c1");
    }
    // Malformed tile paths and unknown coops.
    for path in ["/v1/coops/c1/log/tile/0/1", "/v1/coops/c1/log/tile/0/000.p/0", "/v1/coops/c1/log/tile/x/000"] {
        app.call(Method::GET, path, None, None).await.assert_error(400, "BAD_REQUEST");
    }
    app.call(Method::GET, "/v1/coops/nope/log/checkpoint", None, None).await.assert_error(404, "NOT_FOUND");
    // A proof of an event not signed yet: 404, or 503 after waiting.
    let (_, later) = pay(&app, &tokens[0], 2, 3, 1.0, "later").await;
    app.get(&format!("/v1/coops/c1/log/proof?seq={later}"), &tokens[0]).await.assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn a_proof_can_wait_for_its_checkpoint() {
    let app = TestApp::new().await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let (_, seq) = pay(&app, &tokens[0], 2, 3, 2.0, "soon").await;
    let log = app.state.log.clone();
    let signer = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        log.checkpoint(&coop("c1")).await.unwrap()
    });
    let proof = app.get(&format!("/v1/coops/c1/log/proof?seq={seq}&wait=true"), &tokens[1]).await;
    assert_eq!(proof.status, StatusCode::OK, "{}", text(&proof));
    assert!(matches!(signer.await.unwrap(), Round::Signed { .. }));
    // An event the coop never committed: 404 at once, not a 503 after the wait.
    let asked = std::time::Instant::now();
    let missing = app.get(&format!("/v1/coops/c1/log/proof?seq={}&wait=true", seq + 1000), &tokens[1]).await;
    missing.assert_error(404, "NOT_FOUND");
    assert!(asked.elapsed() < std::time::Duration::from_secs(1), "{:?}", asked.elapsed());
}

/// A proof is answered from the log head a proof read before, for `head_keep`, when that head's
/// checkpoint covers the entry: a later checkpoint is not read for it (the proof verifies, and
/// the later checkpoint is consistent with its own). An entry the kept head does not cover reads
/// the store's head, so a newly signed entry is proved at once, and the head read then is kept.
#[tokio::test]
async fn proofs_are_answered_from_the_kept_head_until_an_entry_needs_a_later_one() {
    let parsed = |proof: &crate::support::Response| {
        assert_eq!(proof.status, StatusCode::OK, "{}", text(proof));
        TlogProof::parse(&proof.bytes).unwrap()
    };
    let keep = |head_keep| async move {
        let app = TestApp::customised(|options| options.log.head_keep = head_keep).await;
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let (_, first) = pay(&app, &tokens[0], 2, 3, 1.0, "first").await;
        let early = signed(&app, "c1").await;
        let proof = async |seq: u64| parsed(&app.get(&format!("/v1/coops/c1/log/proof?seq={seq}"), &tokens[1]).await);
        assert_eq!(proof(first).await.checkpoint().size(), early);
        let (_, second) = pay(&app, &tokens[0], 2, 3, 2.0, "second").await;
        let later = signed(&app, "c1").await;
        assert!(later > early);
        let again = proof(first).await;
        assert_eq!(proof(second).await.checkpoint().size(), later, "a newly signed entry is proved at once");
        let after = proof(first).await.checkpoint().size();
        // Whichever checkpoint it names, the proof verifies, and the latest is consistent with it.
        let bundle = app.get(&format!("/v1/coops/c1/log/tile/entries/000.p/{later}"), &tokens[0]).await;
        let entries = gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap();
        again.verify(entries[first as usize], &policy(&app, "c1").await).unwrap();
        let (older, latest) = (again.checkpoint(), checkpoint(&app, "c1").await);
        let uri = format!("/v1/coops/c1/log/consistency?from={}&to={}", older.size(), latest.size());
        let hashes: Vec<[u8; 32]> = text(&app.get(&uri, &tokens[1]).await)
            .lines()
            .map(|l| gateway_tlog::hash::hash_from_base64(l).unwrap())
            .collect();
        verify_consistency(older.size(), latest.size(), older.root(), latest.root(), &hashes).unwrap();
        (early, later, again.checkpoint().size(), after)
    };
    let (early, later, again, after) = keep(std::time::Duration::from_secs(3_600)).await;
    assert_eq!(again, early, "the kept head covers the first entry");
    assert_eq!(after, later, "the head read for the second entry is kept");
    // Kept for no time, every proof reads the store's head: the latest checkpoint.
    let (_, later, again, after) = keep(std::time::Duration::ZERO).await;
    assert_eq!((again, after), (later, later));
}

/// Kept heads are the coop's own: proofs of two coops asked in turn, each within the other's
/// kept time, each name their own coop's checkpoint and verify with their own coop's key only.
#[tokio::test]
async fn a_kept_head_answers_only_its_own_coops_proofs() {
    let app = TestApp::customised(|options| options.log.head_keep = std::time::Duration::from_secs(3_600)).await;
    let (_, ours) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let (_, theirs) = app.coop_with_members("c2", 4, &[5, 6]).await;
    pay(&app, &ours[0], 2, 3, 1.0, "ours").await;
    pay(&app, &ours[0], 2, 3, 2.0, "ours again").await;
    let paid = app
        .post_as(
            "/v1/ledger/c2/payment",
            json!({ "from": did_of(5), "to": did_of(6), "amount": 3.0, "currency": "hours", "memo": "theirs" }),
            &theirs[0],
        )
        .await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
    let sizes = [("c1", signed(&app, "c1").await, &ours), ("c2", signed(&app, "c2").await, &theirs)];
    assert_ne!(sizes[0].1, sizes[1].1);
    let policies = [policy(&app, "c1").await, policy(&app, "c2").await];
    for round in 0..2 {
        for (i, (id, size, tokens)) in sizes.iter().enumerate() {
            let answer = app.get(&format!("/v1/coops/{id}/log/proof?seq=1"), &tokens[1]).await;
            assert_eq!(answer.status, StatusCode::OK, "{id}, round {round}: {}", text(&answer));
            let proof = TlogProof::parse(&answer.bytes).unwrap();
            assert_eq!(proof.checkpoint().origin(), format!("localhost/coops/{id}"), "round {round}");
            assert_eq!(proof.checkpoint().size(), *size, "{id}, round {round}");
            let bundle = app.get(&format!("/v1/coops/{id}/log/tile/entries/000.p/{size}"), &tokens[0]).await;
            let entries = gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap();
            proof.verify(entries[1], &policies[i]).unwrap();
            assert!(proof.verify(entries[1], &policies[1 - i]).is_err(), "{id}'s proof under the other coop's key");
        }
    }
}

/// Someone with the database changes a stored entry or a stored hash: `fsck` names it, the
/// checkpointer refuses to sign over it, and the published checkpoint stays the last honest one.
#[tokio::test]
async fn tampering_stops_the_signing() {
    for app in TestApp::every_store().await {
        if app.backend == Backend::Memory {
            continue;
        }
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        pay(&app, &tokens[0], 2, 3, 7.0, "honest").await;
        let honest = signed(&app, "c1").await;
        assert!(app.state.log.fsck(&coop("c1")).await.unwrap().is_empty());

        gateway_store::testing::tamper(
            &app.spec,
            "UPDATE log_entries SET entry = REPLACE(entry, '\"amount\":7', '\"amount\":70') WHERE coop_id = 'c1'",
        )
        .await;
        let problems = app.state.log.fsck(&coop("c1")).await.unwrap();
        assert!(problems.iter().any(|p| p.contains("no longer hashes to its leaf")), "{problems:?}");
        // The next round hashes the stored entries again and refuses to sign over the change.
        pay(&app, &tokens[0], 2, 3, 1.0, "after").await;
        let refused = app.state.log.checkpoint(&coop("c1")).await.unwrap_err();
        assert!(refused.to_string().contains("no longer hashes to its leaf"), "{refused}");
        assert_eq!(checkpoint(&app, "c1").await.size(), honest, "no new checkpoint over a changed entry");

        // The stored hashes changed too: the tiles no longer give the signed root.
        let zero_hashes = if app.backend == Backend::Postgres {
            "UPDATE log_tiles SET hashes = decode(repeat('00', length(hashes)), 'hex') WHERE coop_id = 'c1'"
        } else {
            "UPDATE log_tiles SET hashes = zeroblob(length(hashes)) WHERE coop_id = 'c1'"
        };
        gateway_store::testing::tamper(&app.spec, zero_hashes).await;
        let refused = app.state.log.checkpoint(&coop("c1")).await.unwrap_err();
        assert!(refused.to_string().contains("log integrity"), "{refused}");
        assert_eq!(checkpoint(&app, "c1").await.size(), honest, "no new checkpoint over a changed log");
    }
}

/// 300 payments (three payers, a batch of 100 each: the velocity limit is 200 an hour) in coop
/// c1, and the last event's number.
async fn three_hundred_payments(app: &TestApp, tokens: &[String]) -> u64 {
    let mut last = 0;
    for (payer, payee, token) in [(2, 3, &tokens[0]), (3, 4, &tokens[1]), (4, 2, &tokens[2])] {
        let payments: Vec<Value> = (0..100)
            .map(|i| json!({ "from": did_of(payer), "to": did_of(payee), "amount": 0.5, "memo": format!("p{i}") }))
            .collect();
        let batch = app.post_as("/v1/ledger/c1/payments/batch", json!({ "payments": payments }), token).await;
        assert_eq!(batch.status, StatusCode::OK, "payer {payer}: {}", batch.body);
        last = batch.headers["icn-event-seq"].to_str().unwrap().parse().unwrap();
    }
    last
}

/// Every proof of the log verifies against its entry as the bundles serve it.
async fn every_proof_verifies(app: &TestApp, token: &str, size: u64) {
    let policy = policy(app, "c1").await;
    let mut entries = Vec::new();
    for bundle in 0..size.div_ceil(256) {
        let width = (size - bundle * 256).min(256);
        let path = if width == 256 { format!("{bundle:03}") } else { format!("{bundle:03}.p/{width}") };
        let answer = app.get(&format!("/v1/coops/c1/log/tile/entries/{path}"), token).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}: {}", text(&answer));
        entries.extend(gateway_tlog::tile::parse_entry_bundle(&answer.bytes).unwrap().into_iter().map(<[u8]>::to_vec));
    }
    assert_eq!(entries.len() as u64, size);
    for seq in 1..size {
        let proof = app.get(&format!("/v1/coops/c1/log/proof?seq={seq}"), token).await;
        assert_eq!(proof.status, StatusCode::OK, "{seq}: {}", text(&proof));
        TlogProof::parse(&proof.bytes).unwrap().verify(&entries[seq as usize], &policy).unwrap();
    }
}

/// A full bundle of 256 entries is kept as one row (the entry bundle served), the entries after
/// it one a row; proofs and bundles read the same either way, and a change inside a kept bundle
/// is found by `fsck` and by the first read of the bundle, which then stops the coop's signing.
#[tokio::test]
async fn full_bundles_are_kept_whole_and_checked() {
    for app in TestApp::every_store().await {
        if app.backend == Backend::Memory {
            continue;
        }
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
        three_hundred_payments(&app, &tokens).await;
        let size = signed(&app, "c1").await;
        let count = |sql: &'static str| gateway_store::testing::scalar(&app.spec, sql);
        assert_eq!(count("SELECT COUNT(*) FROM log_bundles WHERE coop_id = 'c1'").await, 1);
        assert_eq!(count("SELECT COUNT(*) FROM log_entries WHERE coop_id = 'c1'").await, size as i64 - 256);
        assert_eq!(count("SELECT MIN(idx) FROM log_entries WHERE coop_id = 'c1'").await, 256);
        every_proof_verifies(&app, &tokens[1], size).await;
        assert!(app.state.log.fsck(&coop("c1")).await.unwrap().is_empty());

        // One byte of a kept entry changed (the same length: the bundle still parses).
        let change = if app.backend == Backend::Postgres {
            "UPDATE log_bundles SET bundle = overlay(bundle placing '\\x37'::bytea \
             from position('\"memo\":\"p9\"'::bytea in bundle) + 9 for 1) WHERE coop_id = 'c1'"
        } else {
            "UPDATE log_bundles SET bundle = CAST(REPLACE(CAST(bundle AS TEXT), '\"memo\":\"p9\"', '\"memo\":\"p7\"') AS BLOB) \
             WHERE coop_id = 'c1'"
        };
        gateway_store::testing::tamper(&app.spec, change).await;
        let problems = app.state.log.fsck(&coop("c1")).await.unwrap();
        assert!(problems.iter().any(|p| p.contains("no longer hashes to its leaf")), "{problems:?}");
        // The changed bundle is not served, and reading it stops the coop's signing.
        let honest = checkpoint(&app, "c1").await.size();
        app.get("/v1/coops/c1/log/tile/entries/000", &tokens[0]).await.assert_error(500, "INTERNAL_ERROR");
        pay(&app, &tokens[0], 2, 3, 1.0, "after").await;
        let refused = app.state.log.checkpoint(&coop("c1")).await.unwrap_err();
        assert!(refused.to_string().contains("no longer hashes to its leaf"), "{refused}");
        assert_eq!(checkpoint(&app, "c1").await.size(), honest, "no new checkpoint over a changed bundle");
    }
}

/// A log written before bundles were kept holds every entry in a row of its own: its rounds move
/// the full bundles into bundle rows (hashing each again first), and nothing a member reads
/// changes.
#[tokio::test]
async fn a_log_kept_one_entry_a_row_is_moved_into_bundles() {
    for app in TestApp::every_store().await {
        if app.backend == Backend::Memory {
            continue;
        }
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
        three_hundred_payments(&app, &tokens).await;
        signed(&app, "c1").await;
        // Back to one row per entry, as an earlier version kept them.
        let answer = app.get("/v1/coops/c1/log/tile/entries/000", &tokens[0]).await;
        assert_eq!(answer.status, StatusCode::OK);
        let rows: Vec<String> = gateway_tlog::tile::parse_entry_bundle(&answer.bytes)
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, entry)| {
                format!("('c1', {i}, '{}')", String::from_utf8(entry.to_vec()).unwrap().replace('\'', "''"))
            })
            .collect();
        gateway_store::testing::tamper(
            &app.spec,
            &format!(
                "DELETE FROM log_bundles WHERE coop_id = 'c1'; INSERT INTO log_entries (coop_id, idx, entry) VALUES {};",
                rows.join(", ")
            ),
        )
        .await;
        let count = |sql: &'static str| gateway_store::testing::scalar(&app.spec, sql);
        assert_eq!(count("SELECT COUNT(*) FROM log_bundles WHERE coop_id = 'c1'").await, 0);
        let before = signed_size(&app).await;
        every_proof_verifies(&app, &tokens[1], before).await;
        pay(&app, &tokens[0], 2, 3, 1.0, "next").await;
        let size = signed(&app, "c1").await;
        assert_eq!(count("SELECT COUNT(*) FROM log_bundles WHERE coop_id = 'c1'").await, 1);
        assert_eq!(count("SELECT MIN(idx) FROM log_entries WHERE coop_id = 'c1'").await, 256);
        every_proof_verifies(&app, &tokens[1], size).await;
        assert!(app.state.log.fsck(&coop("c1")).await.unwrap().is_empty());
    }
}

async fn signed_size(app: &TestApp) -> u64 {
    checkpoint(app, "c1").await.size()
}

/// A coop whose log begins after its first events (one from before the log existed) starts with
/// a snapshot of its members and balances after the events so far.
#[tokio::test]
async fn an_existing_coop_gets_a_log_that_opens_with_its_state() {
    for app in TestApp::every_store().await {
        if app.backend == Backend::Memory {
            continue;
        }
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let (_, seq) = pay(&app, &tokens[0], 2, 3, 4.25, "before the log").await;
        gateway_store::testing::tamper(
            &app.spec,
            "DELETE FROM coop_logs; DELETE FROM log_entries; DELETE FROM log_tiles;",
        )
        .await;
        // The opening round commits the snapshot unsigned; the next one signs it.
        let opened = app.state.log.checkpoint(&coop("c1")).await.unwrap();
        assert_eq!(opened, Round::Unsigned { size: 1, reason: "log_opened" });
        signed(&app, "c1").await;
        let bundle = app.get("/v1/coops/c1/log/tile/entries/000.p/1", &tokens[0]).await;
        let entries = gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap();
        let opened: Value = serde_json::from_slice(entries[0]).unwrap();
        assert_eq!(opened["seq"], seq);
        let data = &opened["event"]["data"];
        assert_eq!(data["after_seq"], seq);
        assert_eq!(data["members"].as_array().unwrap().len(), 3);
        let balances = data["balances"].as_array().unwrap();
        assert!(balances.iter().any(|b| b["account"] == did_of(3) && b["balance"] == json!(4.25)), "{balances:?}");
        assert!(balances.iter().any(|b| b["account"] == did_of(2) && b["balance"] == json!(-4.25)), "{balances:?}");
        // The next event is entry 1.
        let (_, next) = pay(&app, &tokens[0], 2, 3, 1.0, "after the log").await;
        assert_eq!(next, seq + 1);
        signed(&app, "c1").await;
        let proof = app.get(&format!("/v1/coops/c1/log/proof?seq={next}"), &tokens[0]).await;
        assert_eq!(TlogProof::parse(&proof.bytes).unwrap().index(), 1);
    }
}

/// A coop with hundreds of members when its log begins: `LogOpened` would not fit in an entry
/// (65,535 bytes), so the entry holds the SHA-256 and length of its `members` field, and
/// `GET /log/opened` (members only) serves the data whole, whose `members` text has exactly that
/// digest, so an auditor can check it and replay from it.
#[tokio::test]
async fn a_large_coops_snapshot_is_served_whole_and_matches_its_digest() {
    use sha2::Digest as _;
    for app in TestApp::every_store().await {
        if app.backend == Backend::Memory {
            continue;
        }
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let (_, small) = app.coop_with_members("c2", 4, &[5]).await;
        pay(&app, &tokens[0], 2, 3, 4.25, "before the log").await;
        let series = if app.backend == Backend::Postgres {
            "SELECT n FROM generate_series(1, 1500) AS n"
        } else {
            "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 1500) SELECT n FROM s"
        };
        gateway_store::testing::tamper(
            &app.spec,
            &format!(
                "DELETE FROM coop_logs WHERE coop_id = 'c1'; DELETE FROM log_entries WHERE coop_id = 'c1'; \
                 DELETE FROM log_tiles WHERE coop_id = 'c1'; \
                 INSERT INTO members (coop_id, did, role, joined_at, credit_limit) \
                 SELECT 'c1', 'did:key:z6MkLargeCoopMember' || n, 'member', 1, NULL FROM ({series}) AS series;"
            ),
        )
        .await;
        assert_eq!(
            app.state.log.checkpoint(&coop("c1")).await.unwrap(),
            Round::Unsigned { size: 1, reason: "log_opened" }
        );
        let early = app.get("/v1/coops/c1/log/opened", &tokens[0]).await;
        assert_eq!(early.status, StatusCode::NOT_FOUND, "not before a checkpoint signs entry 0: {}", early.body);
        signed(&app, "c1").await;

        let bundle = app.get("/v1/coops/c1/log/tile/entries/000.p/1", &tokens[0]).await;
        let entries = gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap();
        assert!(entries[0].len() <= 65_535, "{}", entries[0].len());
        let entry: Value = serde_json::from_slice(entries[0]).unwrap();
        let digest = &entry["event"]["data"]["members"];
        assert!(digest["sha256"].is_string(), "the members field is a digest");

        let whole = app.get("/v1/coops/c1/log/opened", &tokens[0]).await;
        assert_eq!(whole.status, StatusCode::OK, "{}", whole.body);
        assert_eq!(whole.headers[axum::http::header::CONTENT_TYPE], "application/json");
        let text = std::str::from_utf8(&whole.bytes).unwrap();
        #[derive(serde::Deserialize)]
        struct Members<'a> {
            #[serde(borrow)]
            members: &'a serde_json::value::RawValue,
        }
        let members: Members<'_> = serde_json::from_str(text).unwrap();
        let field = members.members.get();
        assert_eq!(digest["sha256"], hex::encode(sha2::Sha256::digest(field.as_bytes())), "{:?}", app.backend);
        assert_eq!(digest["bytes"], field.len());
        let data: Value = serde_json::from_str(text).unwrap();
        assert_eq!(data["members"].as_array().unwrap().len(), 1503);
        assert_eq!(data["settings"], entry["event"]["data"]["settings"], "the other fields are the entry's");
        assert_eq!(data["after_seq"], entry["seq"]);

        // Members only, like the entries.
        app.get("/v1/coops/c1/log/opened", &small[0]).await.assert_error(403, "AUTHORIZATION_FAILED");
        // A small coop's log serves entry 0's own data.
        signed(&app, "c2").await;
        let own = app.get("/v1/coops/c2/log/opened", &small[0]).await;
        assert_eq!(own.status, StatusCode::OK, "{}", own.body);
        let bundle = app.get("/v1/coops/c2/log/tile/entries/000.p/1", &small[0]).await;
        let entry: Value =
            serde_json::from_slice(gateway_tlog::tile::parse_entry_bundle(&bundle.bytes).unwrap()[0]).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&own.bytes).unwrap(), entry["event"]["data"]);
    }
}
