//! The governance keystore through the real binary: `gatewayd keystore init`, unlocking with
//! `ICN_PASSPHRASE`, signed receipts, and a wrong passphrase leaving the gateway running without
//! receipts (the reason in the log and in the 404 body).

mod support;

use std::process::Command;

use serde_json::{Value, json};

use support::{json_request, login, signing_key, start_with_env};

const PASS: &str = "correct horse battery staple";

async fn close_a_proposal(api: &str) -> (String, String) {
    let all = ["coop:read", "coop:write", "gov:read", "gov:write"];
    let admin = login(api, 1, "k", &all).await;
    json_request(api, "POST", "/v1/coops", Some(json!({ "name": "K", "coop_type": "worker" })), Some(&admin)).await;
    let domain = json!({ "domain_id": "d", "name": "D", "members": [signing_key(1).1] });
    json_request(api, "POST", "/v1/gov/domains", Some(domain), Some(&admin)).await;
    let body = json!({ "domain_id": "d", "title": "T", "description": "x" });
    let (_, created) = json_request(api, "POST", "/v1/gov/proposals", Some(body), Some(&admin)).await;
    let id = created["proposal_id"].as_str().unwrap().to_owned();
    json_request(api, "POST", &format!("/v1/gov/proposals/{id}/open"), Some(json!({})), Some(&admin)).await;
    json_request(api, "POST", &format!("/v1/gov/proposals/{id}/vote"), Some(json!({ "choice": "for" })), Some(&admin))
        .await;
    let (status, closed) =
        json_request(api, "POST", &format!("/v1/gov/proposals/{id}/close"), Some(json!({})), Some(&admin)).await;
    assert_eq!(status, 200, "{closed}");
    (admin, id)
}

#[tokio::test]
async fn keystore_init_unlock_and_locked_behaviour() {
    let dir = tempfile::tempdir().unwrap();
    let keystore = dir.path().join("keystore.json");
    let init = || {
        Command::new(env!("CARGO_BIN_EXE_gatewayd"))
            .args(["keystore", "init", "--keystore", keystore.to_str().unwrap()])
            .env("ICN_PASSPHRASE", PASS)
            .output()
            .unwrap()
    };
    let created = init();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let printed = String::from_utf8_lossy(&created.stdout).into_owned();
    let public_key = printed.lines().find_map(|l| l.strip_prefix("public key ")).unwrap().trim().to_owned();
    assert!(!init().status.success(), "init refuses to overwrite");

    let flags = ["--open-enrollment", "true", "--trust-default", "0.9", "--keystore", keystore.to_str().unwrap()];
    {
        let unlocked = start_with_env(dir.path(), &flags, &[("ICN_PASSPHRASE", PASS)]);
        let (token, id) = close_a_proposal(&unlocked.api).await;
        let (status, receipt) =
            json_request(&unlocked.api, "GET", &format!("/v1/gov/proposals/{id}/proof"), None, Some(&token)).await;
        assert_eq!(status, 200, "{receipt}");
        assert_eq!(receipt["public_key"], Value::String(public_key.clone()));
        let (_, keys) = json_request(&unlocked.api, "GET", "/v1/gov/signing-keys", None, None).await;
        assert_eq!(keys["keys"][0]["public_key"], Value::String(public_key));
    }

    let other = tempfile::tempdir().unwrap();
    std::fs::copy(&keystore, other.path().join("keystore.json")).unwrap();
    let copied = other.path().join("keystore.json");
    let locked_flags = ["--open-enrollment", "true", "--trust-default", "0.9", "--keystore", copied.to_str().unwrap()];
    let locked = start_with_env(other.path(), &locked_flags, &[("ICN_PASSPHRASE", "wrong")]);
    let (token, id) = close_a_proposal(&locked.api).await;
    let (status, body) =
        json_request(&locked.api, "GET", &format!("/v1/gov/proposals/{id}/proof"), None, Some(&token)).await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "RECEIPT_UNAVAILABLE");
    assert_eq!(body["details"]["reason"], "keystore_locked");
    let logs = locked.logs.lock().unwrap().join("\n");
    assert!(logs.contains("could not be unlocked"), "{logs}");
}
