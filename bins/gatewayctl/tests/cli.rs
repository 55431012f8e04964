//! The `gatewayctl` binary run as a member would run it, against a real gateway (the app) served
//! in-process on 127.0.0.1:0 (in-memory store, production enrollment policy, a governance
//! signing key): key files, login and the token cache, payments, errors with advice, and
//! receipt verification on a good and a tampered receipt.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use gateway_auth::TokenConfig;
use gateway_core::SystemClock;
use gateway_http::state::AssembleOptions;
use gateway_http::{CorsMode, HttpConfig};
use gateway_store::{Store, StoreSpec};
use serde_json::Value;

/// Runs `gatewayctl` with `args`, isolated from the caller's environment.
async fn ctl<S: AsRef<str>>(args: &[S]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gatewayctl"))
            .args(&args)
            .env_remove("GATEWAYCTL_URL")
            .env_remove("GATEWAYCTL_KEY")
            .env_remove("GATEWAYCTL_COOP")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs and expects success; returns stdout.
async fn ok<S: AsRef<str>>(args: &[S]) -> String {
    let output = ctl(args).await;
    let shown: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    assert!(output.status.success(), "{shown:?} failed:\n{}{}", stdout(&output), stderr(&output));
    stdout(&output)
}

/// Runs with `--json` and expects success; returns the parsed output.
async fn json<S: AsRef<str>>(args: &[S]) -> Value {
    let mut all: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    all.push("--json");
    serde_json::from_str(&ok(&all).await).unwrap()
}

/// A gateway over an in-memory store on 127.0.0.1:0; returns its URL.
async fn gateway() -> String {
    let store = Arc::new(Store::open(&StoreSpec::Memory).await.unwrap());
    let keys = gateway_domain::governance::MemoryReceiptKeys::new([5; 32]);
    let options = AssembleOptions {
        token: TokenConfig::with_secret("cli-test-secret-cli-test-secret-cli"),
        challenge_ttl_secs: 300,
        open_enrollment: false,
        trust_anchors: vec![],
        trust_default: 0.9,
        trusted_proxies: vec![],
        http: HttpConfig { cors: CorsMode::Development, tls: false, version: "test", ..HttpConfig::default() },
        clock: Arc::new(SystemClock),
        limiter_clock: Arc::new(gateway_limits::ManualClock::new()),
        membership_ttl: Duration::ZERO,
        receipt_keys: Arc::new(keys),
        log: gateway_domain::log::LogConfig::default(),
        cluster: None,
        nonces: None,
    };
    let state = gateway_http::state::assemble(store, options).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = gateway_http::router(state);
    tokio::spawn(async move { gateway_http::serve(listener, app, std::future::pending()).await });
    url
}

struct Member {
    key: PathBuf,
    did: String,
}

impl Member {
    async fn new(dir: &Path, name: &str) -> Self {
        let key = dir.join(name).join("key.json");
        let shown = json(&["--key", key.to_str().unwrap(), "key", "generate"]).await;
        Self { did: shown["did"].as_str().unwrap().to_owned(), key }
    }

    fn key(&self) -> &str {
        self.key.to_str().unwrap()
    }
}

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
