//! The receipt keystore through the real binary: `gatewayd keystore init`, unlocking with
//! `ICN_PASSPHRASE`, signed receipts, the operator's `gatewayd keystore rotate` (old receipts
//! stay verifiable with the retired keys), and a wrong passphrase leaving the gateway running
//! without receipts (the reason in the log and in the 404 body).

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
    assert!(printed.lines().any(|l| l.starts_with("master 0")), "{printed}");
    assert!(!init().status.success(), "init refuses to overwrite");

    let flags = ["--open-enrollment", "true", "--trust-default", "0.9", "--keystore", keystore.to_str().unwrap()];
    let (old_receipt, old_keys) = {
        let unlocked = start_with_env(dir.path(), &flags, &[("ICN_PASSPHRASE", PASS)]);
        let (_, health) = json_request(&unlocked.api, "GET", "/v1/health", None, None).await;
        assert_eq!(health["receipts"], "ok", "{health}");
        let (token, id) = close_a_proposal(&unlocked.api).await;
        let (status, receipt) =
            json_request(&unlocked.api, "GET", &format!("/v1/gov/proposals/{id}/proof"), None, Some(&token)).await;
        assert_eq!(status, 200, "{receipt}");
        let (status, _) = json_request(&unlocked.api, "GET", "/v1/gov/signing-keys", None, None).await;
        assert_eq!(status, 401, "the list is the token's coop's");
        let (_, keys) = json_request(&unlocked.api, "GET", "/v1/gov/signing-keys", None, Some(&token)).await;
        assert_eq!(keys["keys"].as_array().unwrap().len(), 1, "{keys}");
        assert_eq!(keys["keys"][0]["public_key"], receipt["public_key"]);
        assert_eq!((keys["keys"][0]["master"].as_u64(), keys["keys"][0]["generation"].as_u64()), (Some(0), Some(0)));
        (receipt, keys)
    };

    // The operator rotates the master (the gateway is stopped; a wrong passphrase changes nothing).
    let rotate = |passphrase: &str| {
        Command::new(env!("CARGO_BIN_EXE_gatewayd"))
            .args(["keystore", "rotate", "--keystore", keystore.to_str().unwrap()])
            .env("ICN_PASSPHRASE", passphrase)
            .output()
            .unwrap()
    };
    let before = std::fs::read(&keystore).unwrap();
    assert!(!rotate("wrong").status.success());
    assert_eq!(std::fs::read(&keystore).unwrap(), before);
    let rotated = rotate(PASS);
    assert!(rotated.status.success(), "{}", String::from_utf8_lossy(&rotated.stderr));
    let printed = String::from_utf8_lossy(&rotated.stdout).into_owned();
    assert!(printed.contains("master 1 (current)") && printed.contains("retired masters 0"), "{printed}");
    let file: Value = serde_json::from_slice(&std::fs::read(&keystore).unwrap()).unwrap();
    assert_eq!(file["version"], 2);
    assert_eq!(file["masters"].as_array().unwrap().len(), 2, "the retired master is kept: {file}");
    {
        let restarted = start_with_env(dir.path(), &flags, &[("ICN_PASSPHRASE", PASS)]);
        let (token, id) = close_a_proposal(&restarted.api).await;
        let (_, receipt) =
            json_request(&restarted.api, "GET", &format!("/v1/gov/proposals/{id}/proof"), None, Some(&token)).await;
        let (_, keys) = json_request(&restarted.api, "GET", "/v1/gov/signing-keys", None, Some(&token)).await;
        let keys = keys["keys"].as_array().unwrap().clone();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert_eq!(keys[0]["public_key"], old_keys["keys"][0]["public_key"], "the master-0 key stays listed");
        assert_eq!(keys[0]["current"], false);
        assert_eq!((keys[1]["master"].as_u64(), keys[1]["current"].as_bool()), (Some(1), Some(true)));
        assert_eq!(receipt["public_key"], keys[1]["public_key"], "new receipts use the master-1 key");
        // The old receipt still verifies, with the retired key listed, valid at its time.
        let old: gateway_domain::governance::Receipt = serde_json::from_value(old_receipt.clone()).unwrap();
        gateway_domain::governance::verify_receipt(&old).unwrap();
        let t = old.timestamp;
        assert!(keys[0]["valid_from"].as_u64().unwrap() <= t && t < keys[0]["valid_until"].as_u64().unwrap());
    }

    let other = tempfile::tempdir().unwrap();
    std::fs::copy(&keystore, other.path().join("keystore.json")).unwrap();
    let copied = other.path().join("keystore.json");
    let locked_flags = ["--open-enrollment", "true", "--trust-default", "0.9", "--keystore", copied.to_str().unwrap()];
    // A keystore that cannot be unlocked stops start-up, saying why and what to do: a wrong
    // passphrase, and none at all.
    for env in [&[("ICN_PASSPHRASE", "wrong")][..], &[][..]] {
        let refused = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", "memory"])
            .args(locked_flags)
            .env_remove("ICN_PASSPHRASE")
            .envs(env.iter().copied())
            .env("ICN_GATEWAY_JWT_SECRET", "s".repeat(32))
            .output()
            .unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
        assert!(!refused.status.success(), "{env:?}: {said}");
        assert!(said.contains("refusing to start") && said.contains("--allow-unsigned-receipts"), "{env:?}: {said}");
        assert!(!said.contains("listening on"), "{env:?}: it never served: {said}");
    }
    // Only when the operator says so does it serve locked, and its health says so.
    let allowed: Vec<&str> = locked_flags.iter().copied().chain(["--allow-unsigned-receipts", "true"]).collect();
    let locked = start_with_env(other.path(), &allowed, &[("ICN_PASSPHRASE", "wrong")]);
    let (_, health) = json_request(&locked.api, "GET", "/v1/health", None, None).await;
    assert_eq!(health["receipts"], "unavailable", "{health}");
    let (token, id) = close_a_proposal(&locked.api).await;
    let (status, body) =
        json_request(&locked.api, "GET", &format!("/v1/gov/proposals/{id}/proof"), None, Some(&token)).await;
    assert_eq!(status, 404);
    assert_eq!(body["code"], "RECEIPT_UNAVAILABLE");
    assert_eq!(body["details"]["reason"], "keystore_locked");
    let logs = locked.logs.lock().unwrap().join("\n");
    assert!(logs.contains("could not be unlocked"), "{logs}");
}

/// The passphrase through the real binary from each source: `--passphrase-file` (its trailing
/// newline ignored), `ICN_GATEWAY_PASSPHRASE_FILE`, the systemd credential in
/// `$CREDENTIALS_DIRECTORY`, and `ICN_PASSPHRASE`; an explicit file wins over the credential and
/// the variable, the credential over the variable. A wrong passphrase fails the rotation, so each
/// success below shows which source was read.
#[test]
fn the_passphrase_comes_from_a_file_a_credential_or_the_variable_in_that_order() {
    let dir = tempfile::tempdir().unwrap();
    let keystore = dir.path().join("keystore.json");
    let right = dir.path().join("right");
    std::fs::write(&right, format!("{PASS}\n")).unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "not the passphrase\n").unwrap();
    let credentials = tempfile::tempdir().unwrap();
    let gatewayd = |action: &str, flags: &[&str], env: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gatewayd"));
        command.args(["keystore", action, "--keystore", keystore.to_str().unwrap()]).args(flags);
        for name in ["ICN_PASSPHRASE", "ICN_GATEWAY_PASSPHRASE_FILE", "CREDENTIALS_DIRECTORY"] {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        let output = command.output().unwrap();
        (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (right_flag, wrong_flag) =
        (["--passphrase-file", right.to_str().unwrap()], ["--passphrase-file", wrong.to_str().unwrap()]);

    let (ok, err) = gatewayd("init", &right_flag, &[]);
    assert!(ok, "init from --passphrase-file: {err}");
    // The same passphrase as the variable alone: the file's newline was not part of it.
    let (ok, err) = gatewayd("rotate", &[], &[("ICN_PASSPHRASE", PASS)]);
    assert!(ok, "the variable: {err}");
    let (ok, err) = gatewayd("rotate", &[], &[("ICN_GATEWAY_PASSPHRASE_FILE", right.to_str().unwrap())]);
    assert!(ok, "ICN_GATEWAY_PASSPHRASE_FILE: {err}");
    // The file wins over the variable, whichever of the two is right.
    assert!(gatewayd("rotate", &right_flag, &[("ICN_PASSPHRASE", "wrong")]).0, "the right file beats a wrong variable");
    assert!(
        !gatewayd("rotate", &wrong_flag, &[("ICN_PASSPHRASE", PASS)]).0,
        "a wrong file is not rescued by the variable"
    );

    // The systemd credential: read when present, beats the variable, loses to the file.
    let directory = credentials.path().to_str().unwrap();
    std::fs::write(credentials.path().join("icn-passphrase"), format!("{PASS}\n")).unwrap();
    let (ok, err) = gatewayd("rotate", &[], &[("CREDENTIALS_DIRECTORY", directory), ("ICN_PASSPHRASE", "wrong")]);
    assert!(ok, "the credential beats a wrong variable: {err}");
    assert!(
        !gatewayd("rotate", &wrong_flag, &[("CREDENTIALS_DIRECTORY", directory)]).0,
        "the file beats the credential"
    );
    std::fs::write(credentials.path().join("icn-passphrase"), "wrong\n").unwrap();
    assert!(!gatewayd("rotate", &[], &[("CREDENTIALS_DIRECTORY", directory), ("ICN_PASSPHRASE", PASS)]).0);

    // A named file that does not exist is an error, not a fall-back to the variable.
    let missing = dir.path().join("missing");
    let (ok, err) = gatewayd("rotate", &["--passphrase-file", missing.to_str().unwrap()], &[("ICN_PASSPHRASE", PASS)]);
    assert!(!ok && err.contains("cannot read the passphrase file"), "{err}");
    let (ok, err) = gatewayd("rotate", &[], &[]);
    assert!(!ok && err.contains("--passphrase-file"), "no source at all names the ways to give one: {err}");
}
