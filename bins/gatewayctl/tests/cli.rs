//! The `gatewayctl` binary run as a member would run it, against a real gateway (the app) served
//! in-process on 127.0.0.1:0 (in-memory store, or a SQLite file where a test changes the
//! database behind the gateway's back; production enrollment policy, a governance signing key):
//! key files, login and the token cache, payments, errors with advice, receipt verification on
//! a good and a tampered receipt, and the coop's log (proofs checked offline, audits).

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use gateway_store::StoreSpec;
use serde_json::Value;
use support::{MASTER, Member, ctl, gateway, gateway_on, json, ok, stderr, stdout};

#[tokio::test]
async fn key_generate_writes_a_private_file_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("config").join("key.json");
    let key = key.to_str().unwrap();
    let printed = ok(&["--key", key, "key", "generate"]).await;
    assert!(printed.contains("did:key:z6Mk") && printed.contains("did:icn:z"), "{printed}");
    assert_eq!(std::fs::metadata(key).unwrap().permissions().mode() & 0o777, 0o600);
    let before = std::fs::read(key).unwrap();

    let again = ctl(&["--key", key, "key", "generate"]).await;
    assert_eq!(again.status.code(), Some(1));
    assert!(stderr(&again).contains("refusing to overwrite"), "{}", stderr(&again));
    assert_eq!(std::fs::read(key).unwrap(), before);

    let shown = json(&["--key", key, "key", "show"]).await;
    assert!(printed.contains(shown["did"].as_str().unwrap()));
    let did_only = ok(&["--key", key, "key", "show", "--did"]).await;
    assert_eq!(did_only, format!("{}\n", shown["did"].as_str().unwrap()), "only the DID, for $(…)");
    let missing = ctl(&["--key", dir.path().join("none.json").to_str().unwrap(), "key", "show"]).await;
    assert!(stderr(&missing).contains("run `gatewayctl key generate`"), "{}", stderr(&missing));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_pay_balance_history_and_advice() {
    let url = gateway().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = Member::new(dir.path(), "admin").await;
    let baker = Member::new(dir.path(), "baker").await;
    let as_admin = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--gateway", url.as_str(), "--key", admin.key(), "--coop", "bakery"];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect()
    };
    let run = |args: Vec<String>| async move { ok(&args).await };

    let not_logged_in = ctl(&as_admin(&["balance"])).await;
    assert!(
        stderr(&not_logged_in).contains("not logged in: run `gatewayctl --coop bakery login` first"),
        "{}",
        stderr(&not_logged_in)
    );
    // A member's login to a coop that does not exist yet: the advice says how to found it.
    let early = ctl(&as_admin(&["login"])).await;
    assert_eq!(early.status.code(), Some(1));
    assert!(stderr(&early).contains("this cooperative does not exist yet"), "{}", stderr(&early));
    assert!(stderr(&early).contains("`gatewayctl login --scopes bootstrap`"), "{}", stderr(&early));

    // Bootstrap: create the coop, then log in again as its admin with every scope.
    let login = run(as_admin(&["login", "--scopes", "bootstrap"])).await;
    assert!(login.contains("coop:read, coop:write"), "{login}");
    let cache = dir.path().join("admin").join("key.token.json");
    assert_eq!(std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(run(as_admin(&["coop", "create", "--name", "Bakery"])).await.contains("created cooperative bakery"));
    run(as_admin(&["login", "--scopes", "all"])).await;
    let as_baker = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["--gateway", url.as_str(), "--key", baker.key(), "--coop", "bakery"];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect()
    };
    // Not a member yet: the advice sends the baker to an admin, not back to `login`.
    let outsider = ctl(&as_baker(&["login"])).await;
    assert_eq!(outsider.status.code(), Some(1));
    assert!(
        stderr(&outsider).contains("you are not a member of this cooperative: ask one of its admins"),
        "{}",
        stderr(&outsider)
    );
    assert!(run(as_admin(&["coop", "add-member", &baker.did])).await.contains("as member"));
    let members = run(as_admin(&["coop", "members"])).await;
    assert!(members.contains(&baker.did) && members.contains("admin"), "{members}");

    run(as_baker(&["login"])).await;

    let paid = run(as_admin(&["pay", &baker.did, "2.5", "--memo", "bread", "--idempotency-key", "order-1"])).await;
    assert!(paid.contains("paid 2.5 in hours to"), "{paid}");
    // The same key again: answered from the first payment, not paid twice.
    run(as_admin(&["pay", &baker.did, "2.5", "--memo", "bread", "--idempotency-key", "order-1"])).await;

    let mut args = as_admin(&["balance"]);
    args.push("--json".into());
    let balance: Value = serde_json::from_str(&run(args).await).unwrap();
    assert_eq!(balance["balance"].to_string(), "-2.5");
    assert_eq!(run(as_baker(&["balance"])).await.trim(), "your balance: 2.5 in hours");
    let history = run(as_baker(&["history"])).await;
    assert!(history.contains("bread") && history.contains("you") && history.lines().count() == 2, "{history}");

    // A member's token lacks coop:write: the advice says it is for admins.
    let refused = ctl(&as_baker(&["coop", "add-member", &admin.did])).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("this needs coop:write, which only admins"), "{}", stderr(&refused));
    // Asking for more than the role allows is refused at login, with advice.
    let greedy = ctl(&as_baker(&["login", "--scopes", "all"])).await;
    assert!(stderr(&greedy).contains("your role does not allow"), "{}", stderr(&greedy));

    let notes = run(as_baker(&["notifications", "--unread"])).await;
    assert!(notes.contains("payment_received"), "{notes}");
    assert!(run(as_baker(&["notifications", "read", "--all"])).await.starts_with("marked"));

    let down = ctl(&["--gateway", "http://127.0.0.1:9", "--key", admin.key(), "--coop", "bakery", "balance"]).await;
    assert!(stderr(&down).contains("the cached login is for"), "{}", stderr(&down));
}

/// A signed payment's history item, checked offline by `verify-request`: intact it is valid;
/// with its amount, payee, memo or payer changed after the fact (the signature left as it was)
/// it is refused with exit status 1, the message naming the field; with its kept body replaced
/// as well, the body no longer matches the signed digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_request_refuses_a_history_item_changed_after_signing() {
    let url = gateway().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = Member::new(dir.path(), "admin").await;
    let baker = Member::new(dir.path(), "baker").await;
    let with = |member: &Member, args: &[&str]| -> Vec<String> {
        let mut all = vec!["--gateway", url.as_str(), "--key", member.key(), "--coop", "bakery"];
        all.extend_from_slice(args);
        all.into_iter().map(str::to_owned).collect()
    };
    ok(&with(&admin, &["login", "--scopes", "bootstrap"])).await;
    ok(&with(&admin, &["coop", "create", "--name", "Bakery"])).await;
    ok(&with(&admin, &["login", "--scopes", "all"])).await;
    ok(&with(&admin, &["coop", "add-member", &baker.did])).await;
    ok(&with(&admin, &["pay", &baker.did, "2.50", "--memo", "bread"])).await;
    let history = json(&with(&admin, &["history"])).await;
    let item = history["transactions"][0].clone();
    assert!(item["request_signature"]["body"].is_string(), "gatewayctl signs, the body is kept: {item}");

    let check = |record: Value, name: &str| {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, record.to_string()).unwrap();
        async move { ctl(&["verify-request", path.to_str().unwrap()]).await }
    };
    let intact = check(item.clone(), "intact").await;
    assert!(intact.status.success(), "{}{}", stdout(&intact), stderr(&intact));
    assert!(stdout(&intact).contains(&format!("signed by {}", admin.did)), "{}", stdout(&intact));

    let tamper = |field: &str, value: Value| {
        let mut record = item.clone();
        record[field] = value;
        record
    };
    for (field, record) in [
        ("amount", tamper("amount", serde_json::json!(25))),
        ("amount", tamper("amount", serde_json::json!(2.500001))),
        ("to", tamper("to", Value::String(admin.did.clone()))),
        ("memo", tamper("memo", Value::String("cake".into()))),
        ("memo", tamper("memo", Value::Null)),
        ("from", tamper("from", Value::String(baker.did.clone()))),
    ] {
        let refused = check(record.clone(), &format!("tampered-{field}")).await;
        assert_eq!(refused.status.code(), Some(1), "{field}: {}{}", stdout(&refused), stderr(&refused));
        assert!(
            stderr(&refused).contains(&format!("NOT valid: the record's {field} is")),
            "{field}: {}",
            stderr(&refused)
        );
    }
    // The kept body rewritten to match the forged amount: its digest is no longer the signed one.
    let mut forged = tamper("amount", serde_json::json!(25));
    let body = item["request_signature"]["body"].as_str().unwrap().to_owned();
    // `eyJ` is the base64 of `{"`: `WyJ`, of `["`, is as valid and says otherwise.
    assert!(body.starts_with("eyJ"), "{body}");
    forged["request_signature"]["body"] = Value::String(body.replacen("eyJ", "WyJ", 1));
    let refused = check(forged, "forged-body").await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(stderr(&refused).contains("digest_mismatch"), "{}", stderr(&refused));
}

/// The worked example of docs/RECEIPTS.md and the key that signed it.
const RECEIPT: &str = r#"{"decision_hash":"0xbcafc26a2ed6c21d278c4af78414dd37051d2c939a6fb86fab707e22f3f01dac","proposal_id":"prop-7","domain_id":"budget","outcome":"Approved","tally":{"for":4,"against":1,"abstain":0},"votes_hash":"0xa614242c8fbe23152b5a093209c12a77ded94c364bbf5123d41fdb923097a2bb","timestamp":1735689600,"signer":"did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX","public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","signature":"be0d6a92d8315bbac3002a2e20ea9ca8cbb87b9d26e0e1736623992169124f7c1fc99dd550446de1e3df2870ebdae76e02cf2ea0553af65b640083c0096bd209"}"#;
const KEYS: &str = r#"{"keys":[{"public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","did":"did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX","valid_from":1700000000,"valid_until":null,"current":true}]}"#;

#[tokio::test]
async fn receipt_verify_offline_accepts_a_good_receipt_and_refuses_a_tampered_one() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    let tampered = dir.path().join("tampered.json");
    let keys = dir.path().join("keys.json");
    std::fs::write(&good, RECEIPT).unwrap();
    std::fs::write(&tampered, RECEIPT.replace("\"Approved\"", "\"Rejected\"")).unwrap();
    std::fs::write(&keys, KEYS).unwrap();
    // No gateway runs and no key exists: verification is fully offline.
    let offline = ["--gateway", "http://127.0.0.1:9", "--key", "/nonexistent/key.json"];

    let valid =
        ok(&[&offline[..], &["receipt", "verify", good.to_str().unwrap(), "--keys", keys.to_str().unwrap()]].concat())
            .await;
    assert!(valid.contains("receipt valid: proposal prop-7 (domain budget) Approved"), "{valid}");

    let refused =
        ctl(&[&offline[..], &["receipt", "verify", tampered.to_str().unwrap(), "--keys", keys.to_str().unwrap()]]
            .concat())
        .await;
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("decision_hash does not match"), "{}", stderr(&refused));

    // A key that was not the gateway's at the receipt's time.
    let later = dir.path().join("later.json");
    std::fs::write(&later, KEYS.replace("1700000000", "1800000000")).unwrap();
    let refused = ctl(&[
        &offline[..],
        &["receipt", "verify", good.to_str().unwrap(), "--keys", later.to_str().unwrap()],
    ]
    .concat())
    .await;
    assert_eq!(refused.status.code(), Some(3));
    assert!(stderr(&refused).contains("valid only from"), "{}", stderr(&refused));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn governance_through_the_cli_ends_in_a_verified_receipt() {
    let url = gateway().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = Member::new(dir.path(), "admin").await;
    let base = ["--gateway", url.as_str(), "--key", admin.key(), "--coop", "gov"];
    let with = |args: &[&str]| -> Vec<String> { base.iter().chain(args).map(|a| (*a).to_owned()).collect() };
    ok(&with(&["login", "--scopes", "bootstrap"])).await;
    ok(&with(&["coop", "create", "--name", "Gov"])).await;
    ok(&with(&["login", "--scopes", "all"])).await;
    ok(&with(&["domain", "create", "budget", "--member", &admin.did])).await;
    let created = json(&with(&["proposal", "create", "--domain", "budget", "--title", "Oven", "--open"])).await;
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(ok(&with(&["proposal", "vote", &id, "yes"])).await.contains("voted For"));
    let closed = ok(&with(&["proposal", "close", &id])).await;
    assert!(closed.contains("outcome  Approved (for 1, against 0, abstain 0)"), "{closed}");
    let listed = ok(&with(&["proposal", "list", "--status", "closed"])).await;
    assert!(listed.contains(&id) && listed.contains("Approved"), "{listed}");

    let saved = dir.path().join("receipt.json");
    let verified = ok(&with(&["proposal", "verify", &id, "--save", saved.to_str().unwrap()])).await;
    assert!(verified.contains("receipt valid") && verified.contains("Approved"), "{verified}");
    // The saved receipt verifies against the gateway's published keys, and against a saved
    // copy of them without the gateway.
    assert!(ok(&with(&["receipt", "verify", saved.to_str().unwrap()])).await.contains("receipt valid"));
    let keys = dir.path().join("keys.json");
    std::fs::write(&keys, ok(&with(&["receipt", "keys"])).await).unwrap();
    let offline = ok(&[
        "--gateway",
        "http://127.0.0.1:9",
        "receipt",
        "verify",
        saved.to_str().unwrap(),
        "--keys",
        keys.to_str().unwrap(),
    ])
    .await;
    assert!(offline.contains("receipt valid"), "{offline}");
}

/// `proposal list` and `proposal show` give a closed proposal the time it closed, never the end
/// its voting was scheduled for (a text proposal's author closes it early here, a day before
/// that end); a proposal still open shows when its voting closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_proposal_shows_when_it_closed_not_its_scheduled_end() {
    let url = gateway().await;
    let dir = tempfile::tempdir().unwrap();
    let admin = Member::new(dir.path(), "admin").await;
    let base = ["--gateway", url.as_str(), "--key", admin.key(), "--coop", "gov"];
    let with = |args: &[&str]| -> Vec<String> { base.iter().chain(args).map(|a| (*a).to_owned()).collect() };
    ok(&with(&["login", "--scopes", "bootstrap"])).await;
    ok(&with(&["coop", "create", "--name", "Gov"])).await;
    ok(&with(&["login", "--scopes", "all"])).await;
    ok(&with(&["domain", "create", "budget", "--member", &admin.did])).await;
    // Opens a one-day vote; returns the proposal's id and the end `proposal open` announces.
    let open = |title: &'static str| {
        let with = &with;
        async move {
            let created =
                json(&with(&["proposal", "create", "--domain", "budget", "--title", title, "--duration", "86400"]))
                    .await;
            let id = created["id"].as_str().unwrap().to_owned();
            let opened = ok(&with(&["proposal", "open", &id])).await;
            let end = opened
                .split("voting closes ")
                .nth(1)
                .and_then(|rest| rest.strip_suffix(" UTC\n"))
                .unwrap_or_else(|| panic!("no closing time in {opened:?}"))
                .to_owned();
            (id, end)
        }
    };
    let (oven, oven_end) = open("Oven").await;
    let (fridge, fridge_end) = open("Fridge").await;

    ok(&with(&["proposal", "vote", &oven, "yes"])).await;
    let closed = ok(&with(&["proposal", "close", &oven])).await;
    let closed_at = closed
        .lines()
        .find_map(|line| line.strip_prefix("closed   "))
        .unwrap_or_else(|| panic!("no closing line in {closed:?}"))
        .to_owned();
    assert!(!closed.contains(&oven_end) && !closed.contains("closes "), "{closed}");
    assert_ne!(closed_at, oven_end, "closed a day early");

    let listed = ok(&with(&["proposal", "list"])).await;
    let row = |id: &str| {
        listed.lines().find(|line| line.starts_with(id)).unwrap_or_else(|| panic!("{id} in {listed}")).to_owned()
    };
    assert!(listed.lines().next().unwrap().contains("VOTING (UTC)"), "{listed}");
    let oven_row = row(&oven);
    assert!(oven_row.contains(&format!("closed {closed_at}")) && oven_row.contains("Approved"), "{listed}");
    assert!(!oven_row.contains(&oven_end) && !oven_row.contains("closes"), "{listed}");
    let fridge_row = row(&fridge);
    assert!(fridge_row.contains(&format!("closes {fridge_end}")), "{listed}");

    let shown = ok(&with(&["proposal", "show", &oven])).await;
    assert!(shown.contains(&format!("closed   {closed_at}")) && !shown.contains(&oven_end), "{shown}");
    let shown = ok(&with(&["proposal", "show", &fridge])).await;
    assert!(shown.contains(&format!("closes   {fridge_end}")), "{shown}");
}

/// `args` run as `member` against `url` in cooperative `coop`.
fn as_member(url: &str, member: &Member, coop: &str, args: &[&str]) -> Vec<String> {
    ["--gateway", url, "--key", member.key(), "--coop", coop].iter().chain(args).map(|a| (*a).to_owned()).collect()
}

/// Founds `coop` with `admin` (logged in with every scope) and `members` (logged in as members).
async fn found(url: &str, coop: &str, admin: &Member, members: &[&Member]) {
    ok(&as_member(url, admin, coop, &["login", "--scopes", "bootstrap"])).await;
    ok(&as_member(url, admin, coop, &["coop", "create", "--name", coop])).await;
    ok(&as_member(url, admin, coop, &["login", "--scopes", "all"])).await;
    for member in members {
        ok(&as_member(url, admin, coop, &["coop", "add-member", &member.did])).await;
        ok(&as_member(url, member, coop, &["login"])).await;
    }
}

/// Signs a checkpoint of `coop`'s log now (what the gateway's checkpointer does within a second
/// of every commit); returns its size.
async fn sign(state: &gateway_http::AppState, coop: &str) -> u64 {
    match state.log.checkpoint(&gateway_core::CoopId::parse(coop).unwrap()).await.unwrap() {
        gateway_domain::log::Round::Signed { size } => size,
        other => panic!("no checkpoint signed: {other:?}"),
    }
}

/// The event `pay` says its payment appended.
fn event_of(paid: &str) -> u64 {
    let line = paid.lines().find(|l| l.starts_with("event ")).unwrap_or_else(|| panic!("no event in {paid:?}"));
    line["event ".len()..].split(':').next().unwrap().parse().unwrap()
}

fn write(dir: &Path, name: &str, content: impl AsRef<[u8]>) -> String {
    let path = dir.join(name);
    std::fs::write(&path, content).unwrap();
    path.to_str().unwrap().to_owned()
}

/// A member proves a payment with `log proof` and `log entry`, writes a policy from the
/// published key with `log policy`, and anyone checks it with `log verify` and no gateway: the
/// real proof verifies; a changed entry, another log key and an unmet witness quorum are refused
/// with exit status 3; an unreadable policy is exit status 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_verify_checks_a_members_proof_offline() {
    let (url, state) = gateway_on(&StoreSpec::Memory).await;
    let dir = tempfile::tempdir().unwrap();
    let admin = Member::new(dir.path(), "admin").await;
    let baker = Member::new(dir.path(), "baker").await;
    found(&url, "bakery", &admin, &[&baker]).await;
    let paid = ok(&as_member(&url, &admin, "bakery", &["pay", &baker.did, "2.5", "--memo", "rent \"May\""])).await;
    let seq = event_of(&paid);
    assert!(paid.contains(&format!("`gatewayctl log proof --seq {seq} --wait`")), "{paid}");
    sign(&state, "bakery").await;

    let seq_text = seq.to_string();
    let proof = ok(&as_member(&url, &baker, "bakery", &["log", "proof", "--seq", &seq_text, "--wait"])).await;
    assert!(proof.starts_with("c2sp.org/tlog-proof@v1\n"), "{proof}");
    assert!(proof.contains("\n\u{2014} localhost/coops/bakery "), "signed under the log's origin: {proof}");
    let also = dir.path().join("also-proof.txt");
    let entry = ok(&as_member(
        &url,
        &baker,
        "bakery",
        &["log", "entry", "--seq", &seq_text, "--proof", also.to_str().unwrap()],
    ))
    .await;
    assert!(!entry.ends_with('\n'), "the exact bytes: {entry:?}");
    let value: Value = serde_json::from_str(&entry).unwrap();
    assert_eq!((value["seq"].as_u64(), value["event"]["type"].as_str()), (Some(seq), Some("PaymentCreated")));
    assert_eq!(value["event"]["data"]["amount"].to_string(), "2.5");
    // The policy needs neither a key nor a login.
    let policy =
        ok(&["--gateway", url.as_str(), "--key", "/nonexistent/key.json", "--coop", "bakery", "log", "policy"]).await;
    assert!(policy.contains("\nlog localhost/coops/bakery+") && policy.ends_with("quorum none\n"), "{policy}");

    let files = dir.path();
    let (proof_file, entry_file, policy_file) =
        (write(files, "proof.txt", &proof), write(files, "entry.json", &entry), write(files, "policy.txt", &policy));
    let offline = ["--gateway", "http://127.0.0.1:9", "--key", "/nonexistent/key.json"];
    let verify = |proof: &str, entry: &str, policy: &str| -> Vec<String> {
        offline
            .iter()
            .chain(&["log", "verify", proof, "--entry", entry, "--policy", policy])
            .map(|a| (*a).to_owned())
            .collect()
    };
    let valid = ok(&verify(&proof_file, &entry_file, &policy_file)).await;
    assert_eq!(valid.lines().count(), 1, "{valid}");
    assert!(
        valid
            .starts_with(&format!("valid: entry {seq} (event {seq}, PaymentCreated) is in localhost/coops/bakery of ")),
        "{valid}"
    );
    assert!(ok(&verify(also.to_str().unwrap(), &entry_file, &policy_file)).await.starts_with("valid: "));
    let mut as_json = verify(&proof_file, &entry_file, &policy_file);
    as_json.push("--json".into());
    let shown: Value = serde_json::from_str(&ok(&as_json).await).unwrap();
    assert_eq!((shown["valid"].as_bool(), shown["index"].as_u64()), (Some(true), Some(seq)));
    // An editor's final newline does not matter.
    let newline = write(files, "newline.json", format!("{entry}\n"));
    assert!(ok(&verify(&proof_file, &newline, &policy_file)).await.starts_with("valid: "));

    // Another amount: not the entry the log holds.
    let forged = write(files, "forged.json", entry.replace("2.5", "25"));
    let refused = ctl(&verify(&proof_file, &forged, &policy_file)).await;
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains(&format!("NOT valid: the entry is not entry {seq}")), "{}", stderr(&refused));
    // Another key under the log's name: the policy does not accept the checkpoint.
    let impostor = gateway_client::tlog::Signer::from_seed("localhost/coops/bakery", &[9; 32]).unwrap();
    let wrong_key = write(files, "wrong-key.txt", format!("log {}\nquorum none\n", impostor.vkey()));
    let refused = ctl(&verify(&proof_file, &entry_file, &wrong_key)).await;
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("the policy does not accept the checkpoint"), "{}", stderr(&refused));
    // A witness the policy requires did not cosign.
    let witness = gateway_client::tlog::Cosigner::from_seed("witness.example", &[8; 32]).unwrap();
    let quorum = policy.replace("quorum none", &format!("witness w1 {}\nquorum w1", witness.vkey()));
    let refused = ctl(&verify(&proof_file, &entry_file, &write(files, "quorum.txt", quorum))).await;
    assert_eq!(refused.status.code(), Some(3), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("quorum"), "{}", stderr(&refused));
    // An unreadable policy is not a verdict.
    let broken = ctl(&verify(&proof_file, &entry_file, &write(files, "broken.txt", "log nonsense\n"))).await;
    assert_eq!(broken.status.code(), Some(1), "{}", stderr(&broken));
    assert!(stderr(&broken).contains("not a c2sp.org/tlog-policy"), "{}", stderr(&broken));
}

/// A member audits a coop whose log holds payments, a batch, a conversion with a fee, a closed
/// text proposal and a budget the treasury paid: the audit passes and keeps the checkpoint; the
/// next audit extends it. A saved checkpoint of the same size with another root (one the coop's
/// own key signed: a forked history) fails the audit, and so do balances changed in the
/// database behind the log's back; neither failure replaces the saved state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_audit_replays_the_ledger_and_holds_the_log_to_what_it_signed() {
    use gateway_client::{ConversionRequest, PaymentRequest, SettingsPatch};
    use gateway_core::{Amount, CoopId, Currency, Scope};

    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::SqliteFile(dir.path().join("gateway.db").to_str().unwrap().to_owned());
    let (url, state) = gateway_on(&spec).await;
    let admin = Member::new(dir.path(), "admin").await;
    let baker = Member::new(dir.path(), "baker").await;
    let cook = Member::new(dir.path(), "cook").await;
    found(&url, "bakery", &admin, &[&baker, &cook]).await;
    let coop = CoopId::parse("bakery").unwrap();
    let (hours, eur) = (Currency::parse("hours").unwrap(), Currency::parse("eur").unwrap());
    let did = |m: &Member| gateway_core::Did::parse(&m.did).unwrap();

    // What gatewayctl has no command for, through the SDK as the admin: a 1 % conversion fee, a
    // rate, a batch, a conversion.
    let key: gateway_client::KeyFile = serde_json::from_str(&std::fs::read_to_string(&admin.key).unwrap()).unwrap();
    let sdk = gateway_client::Client::new(&url).unwrap();
    sdk.login(gateway_client::Identity::from_key_file(&key).unwrap(), coop.clone(), &Scope::ALL).await.unwrap();
    let fee = SettingsPatch { conversion_fee_percent: Some(Amount::from_units(1)), ..SettingsPatch::default() };
    sdk.update_settings(&coop, &fee).await.unwrap();
    sdk.set_rate(&hours, &eur, Amount::parse_decimal("1.5").unwrap()).await.unwrap();
    let payment = |to: &Member, amount: &str| PaymentRequest {
        from: did(&admin),
        to: did(to),
        amount: Amount::parse_payment(amount).unwrap(),
        currency: None,
        memo: Some(format!("batch {amount}")),
    };
    let batch = [payment(&baker, "1"), payment(&cook, "2.25"), payment(&baker, "0.000001")];
    assert_eq!(sdk.pay_batch(&coop, &batch, false, None).await.unwrap().succeeded, 3);
    let conversion = ConversionRequest {
        from: did(&admin),
        to: did(&cook),
        amount: Amount::from_units(10),
        from_currency: hours.clone(),
        to_currency: eur.clone(),
        max_target_amount: None,
        min_target_amount: None,
        quote_id: None,
    };
    let converted = sdk.convert(&coop, &conversion, None).await.unwrap();
    assert_eq!(converted.net_target_amount, Some(Amount::parse_decimal("14.85").unwrap()));

    // Through gatewayctl: a payment, a text proposal closed, a budget the treasury pays.
    ok(&as_member(&url, &admin, "bakery", &["pay", &baker.did, "2.5", "--memo", "bread"])).await;
    ok(&as_member(&url, &admin, "bakery", &["domain", "create", "kitchen", "--member", &admin.did])).await;
    let oven = json(&as_member(
        &url,
        &admin,
        "bakery",
        &["proposal", "create", "--domain", "kitchen", "--title", "Oven", "--open"],
    ))
    .await;
    let oven = oven["id"].as_str().unwrap().to_owned();
    ok(&as_member(&url, &admin, "bakery", &["proposal", "vote", &oven, "yes"])).await;
    ok(&as_member(&url, &admin, "bakery", &["proposal", "close", &oven])).await;
    let payload = format!(r#"{{"type":"budget","to":"{}","amount":5}}"#, cook.did);
    let flour = json(&as_member(
        &url,
        &admin,
        "bakery",
        &["proposal", "create", "--domain", "coop", "--title", "Flour", "--payload", &payload, "--open"],
    ))
    .await;
    let flour = flour["id"].as_str().unwrap().to_owned();
    ok(&as_member(&url, &admin, "bakery", &["proposal", "vote", &flour, "yes"])).await;
    ok(&as_member(&url, &baker, "bakery", &["proposal", "vote", &flour, "yes"])).await;
    // A proposal that acts on the coop closes early once every member has voted.
    ok(&as_member(&url, &cook, "bakery", &["proposal", "vote", &flour, "abstain"])).await;
    let closed = ok(&as_member(&url, &admin, "bakery", &["proposal", "close", &flour])).await;
    assert!(closed.contains("Approved"), "{closed}");
    let size = sign(&state, "bakery").await;

    // The baker, a plain member, audits and keeps what it verified.
    let audits = dir.path().join("audits");
    let audit = |member: &Member, state: &Path| {
        as_member(&url, member, "bakery", &["log", "audit", "--state", state.to_str().unwrap()])
    };
    let first = ok(&audit(&baker, &audits)).await;
    assert!(
        first.starts_with(&format!("audit passed: log of bakery (localhost/coops/bakery): {size} entries")),
        "{first}"
    );
    // Both decisions' receipts are in the log, and verify.
    assert!(first.contains("receipts   2 verified, 0 closed proposals without one in the log"), "{first}");
    assert!(first.contains("note: first audit of this log"), "{first}");
    assert!(!first.contains("MISMATCH"), "{first}");
    let saved = std::fs::read_to_string(audits.join("bakery.checkpoint")).unwrap();
    assert!(saved.starts_with(&format!("localhost/coops/bakery\n{size}\n")), "{saved}");
    assert!(std::fs::read_to_string(audits.join("bakery.keys")).unwrap().starts_with("localhost/coops/bakery+"));
    let mut as_json = audit(&baker, &audits);
    as_json.push("--json".into());
    let report: Value = serde_json::from_str(&ok(&as_json).await).unwrap();
    assert_eq!(report["passed"], true, "{report}");
    // Three batch items, a conversion, a payment, the budget.
    assert_eq!(report["events"]["PaymentCreated"], 6, "{report}");
    assert_eq!(report["events"]["GovernanceProposalClosed"], 2, "{report}");
    assert_eq!(report["receipts_verified"], 2, "{report}");
    assert_eq!(report["signed_by"].as_str().map(|k| k.starts_with("localhost/coops/bakery+")), Some(true));
    assert_eq!(report["previous"]["size"], size, "the second audit compares with the first's checkpoint");
    // Three members, the treasury (-5 hours) and the exchange (+10 hours, -14.85 eur).
    assert!(report["accounts_checked"].as_u64().unwrap() >= 5, "{report}");
    assert!(report["balances_checked"].as_u64().unwrap() >= 7, "{report}");

    // More happens; the next audit extends the saved checkpoint.
    ok(&as_member(&url, &baker, "bakery", &["pay", &cook.did, "1"])).await;
    let grown = sign(&state, "bakery").await;
    let second = ok(&audit(&baker, &audits)).await;
    assert!(
        second.starts_with(&format!("audit passed: log of bakery (localhost/coops/bakery): {grown} entries")),
        "{second}"
    );
    assert!(second.contains(&format!("extends    the checkpoint of {size} entries saved last time")), "{second}");
    let honest = std::fs::read_to_string(audits.join("bakery.checkpoint")).unwrap();
    assert!(honest.starts_with(&format!("localhost/coops/bakery\n{grown}\n")), "{honest}");

    // Another history of the same size, signed with the coop's own key (what an operator
    // showed someone else): the log does not extend it.
    let forked = dir.path().join("forked");
    std::fs::create_dir_all(&forked).unwrap();
    let coop_key = gateway_domain::governance::derive_receipt_key(&MASTER, &coop, 0);
    let signer = gateway_client::tlog::Signer::new("localhost/coops/bakery", coop_key).unwrap();
    let other = gateway_client::tlog::Checkpoint::new("localhost/coops/bakery", grown, [0xab; 32]).unwrap();
    let mut note = gateway_client::tlog::Note::new(other.to_text()).unwrap();
    note.sign(&signer).unwrap();
    std::fs::write(forked.join("bakery.checkpoint"), note.to_string()).unwrap();
    std::fs::copy(audits.join("bakery.keys"), forked.join("bakery.keys")).unwrap();
    let refused = ctl(&audit(&baker, &forked)).await;
    assert_eq!(refused.status.code(), Some(3), "{}{}", stdout(&refused), stderr(&refused));
    assert!(stdout(&refused).starts_with("audit FAILED: log of bakery"), "{}", stdout(&refused));
    assert!(
        stdout(&refused).contains(&format!(
            "MISMATCH consistency with the saved checkpoint: at size {grown} the log's entries make the root"
        )),
        "{}",
        stdout(&refused)
    );
    assert!(stderr(&refused).contains("the audit of bakery found 1 mismatch (listed above)"), "{}", stderr(&refused));
    assert_eq!(std::fs::read_to_string(forked.join("bakery.checkpoint")).unwrap(), note.to_string(), "kept as it was");

    // One hour moved from the baker to the cook in the database, behind the log's back; the
    // baker's next payment builds on it.
    let moved = |account: &str, delta: i64| {
        format!(
            "UPDATE balances SET balance = balance + ({delta}) WHERE coop_id = 'bakery' AND account = '{account}' AND currency = 'hours';"
        )
    };
    gateway_store::testing::tamper(&spec, &format!("{}{}", moved(&baker.did, -1_000_000), moved(&cook.did, 1_000_000)))
        .await;
    ok(&as_member(&url, &baker, "bakery", &["pay", &cook.did, "0.5"])).await;
    sign(&state, "bakery").await;
    let refused = ctl(&audit(&baker, &audits)).await;
    assert_eq!(refused.status.code(), Some(3), "{}{}", stdout(&refused), stderr(&refused));
    let listed = stdout(&refused);
    assert!(listed.contains(&format!("MISMATCH balance of {} in hours: the log gives", baker.did)), "{listed}");
    assert!(listed.contains(&format!("MISMATCH balance of {} in hours: the log gives", cook.did)), "{listed}");
    assert_eq!(listed.matches("MISMATCH").count(), 2, "{listed}");
    assert!(listed.contains("saved      nothing: the saved state is kept as it was"), "{listed}");
    assert_eq!(std::fs::read_to_string(audits.join("bakery.checkpoint")).unwrap(), honest);
}
