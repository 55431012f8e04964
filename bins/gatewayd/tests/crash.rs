//! Durability under SIGKILL: a gateway on a SQLite file is killed in the middle of a stream of
//! payments. After a restart on the same file every acknowledged payment is there, retrying every
//! request with its `Idempotency-Key` creates no duplicate, and balances still sum to zero.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use support::{json_request, login, signing_key, start, try_request};

const PAYERS: u8 = 6;

fn payment_body(payer: u8, n: u32) -> Value {
    let to = 1 + (payer % PAYERS);
    json!({ "from": signing_key(payer).1, "to": signing_key(to).1, "amount": 0.5 + f64::from(n % 7), "memo": format!("{payer}-{n}") })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_payments_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    let mut gateway = start(dir.path(), &flags);
    let api = gateway.api.clone();
    let all = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let admin = login(&api, 1, "crash", &all).await;
    let (status, _) =
        json_request(&api, "POST", "/v1/coops", Some(json!({ "name": "Crash", "coop_type": "worker" })), Some(&admin))
            .await;
    assert_eq!(status, 201);
    for seed in 2..=PAYERS {
        let (status, body) = json_request(
            &api,
            "POST",
            "/v1/coops/crash/members",
            Some(json!({ "did": signing_key(seed).1 })),
            Some(&admin),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }
    let mut tokens = BTreeMap::new();
    for seed in 1..=PAYERS {
        tokens.insert(seed, login(&api, seed, "crash", &all).await);
    }

    // Each payer streams payments, each with its own Idempotency-Key; acknowledged ids are kept.
    let acknowledged: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
    let sent: Arc<Mutex<BTreeSet<(u8, u32)>>> = Arc::default();
    let mut streams = Vec::new();
    for (&payer, token) in &tokens {
        let (api, token, acknowledged, sent) = (api.clone(), token.clone(), acknowledged.clone(), sent.clone());
        streams.push(tokio::spawn(async move {
            for n in 0..150u32 {
                sent.lock().unwrap().insert((payer, n));
                let auth = format!("Bearer {token}");
                let key = format!("{payer}-{n}");
                let headers = [("authorization", auth.as_str()), ("idempotency-key", key.as_str())];
                match try_request(&api, "POST", "/v1/ledger/crash/payment", Some(payment_body(payer, n)), &headers)
                    .await
                {
                    Some((201, body)) => {
                        let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_owned();
                        acknowledged.lock().unwrap().insert(key, id);
                    }
                    Some((status, body)) => panic!("payment {key} answered {status}: {body}"),
                    None => return,
                }
            }
        }));
    }
    // Kill once a good share is acknowledged, while the streams are still running.
    while acknowledged.lock().unwrap().len() < 120 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    for stream in streams {
        stream.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    assert!(acknowledged.len() < (usize::from(PAYERS) * 150), "the kill happened mid-stream");

    let restarted = start(dir.path(), &flags);
    let api = restarted.api.clone();
    let history = |offset: u64| {
        let api = api.clone();
        let token = tokens[&1].clone();
        async move {
            json_request(
                &api,
                "GET",
                &format!("/v1/ledger/crash/history?limit=100&offset={offset}"),
                None,
                Some(&token),
            )
            .await
            .1
        }
    };
    let mut ids = BTreeSet::new();
    let mut offset = 0;
    loop {
        let page = history(offset).await;
        for t in page["transactions"].as_array().unwrap() {
            assert!(ids.insert(t["id"].as_str().unwrap().to_owned()), "duplicate transaction");
        }
        if !page["pagination"]["has_more"].as_bool().unwrap() {
            break;
        }
        offset += 100;
    }
    for (key, id) in &acknowledged {
        assert!(ids.contains(id), "acknowledged payment {key} ({id}) lost");
    }

    // Retrying everything that was sent: replays for what committed, new payments for the rest,
    // never a second copy.
    let sent = sent.lock().unwrap().clone();
    for (payer, n) in &sent {
        let auth = format!("Bearer {}", tokens[payer]);
        let key = format!("{payer}-{n}");
        let headers = [("authorization", auth.as_str()), ("idempotency-key", key.as_str())];
        let (status, body) =
            try_request(&api, "POST", "/v1/ledger/crash/payment", Some(payment_body(*payer, *n)), &headers)
                .await
                .unwrap();
        assert_eq!(status, 201, "{body}");
        let id = serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_owned();
        if let Some(first) = acknowledged.get(&key) {
            assert_eq!(&id, first, "a replay returns the first answer");
        }
    }
    let (_, after) = json_request(&api, "GET", "/v1/ledger/crash/history?limit=1", None, Some(&tokens[&1])).await;
    assert_eq!(after["pagination"]["total"].as_u64().unwrap(), sent.len() as u64, "one transaction per key");

    let mut sum = 0i128;
    for seed in 1..=PAYERS {
        let (_, b) = json_request(
            &api,
            "GET",
            &format!("/v1/ledger/crash/balance/{}", signing_key(seed).1),
            None,
            Some(&tokens[&1]),
        )
        .await;
        sum += (b["balance"].as_f64().unwrap() * 1e6).round() as i128;
    }
    assert_eq!(sum, 0, "balances sum to zero");
}
