//! What an operator runs the gateway with (INTERFACE.md §10 "Metrics", "Alert rules", "Logs"), tried
//! against a real `gatewayd` process:
//!
//! - every family is exported with HELP text from the first scrape, counters at 0;
//! - a scripted session moves each family by exactly what it did;
//! - every metric the Grafana dashboard and the alert rules query is one the gateway exports;
//! - logs are one JSON object a line, one access line per request and one error line per failure,
//!   and a whole session's log holds no token, signature, nonce, passphrase or database password.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ed25519_dalek::Signer;
use serde_json::{Value, json};

use support::{Gateway, json_request, signing_key, start, start_on, try_request};

/// A scrape: series (name with labels, as rendered) → value, plus the HELP and TYPE lines.
struct Scrape {
    series: BTreeMap<String, f64>,
    help: BTreeSet<String>,
    types: BTreeMap<String, String>,
}

impl Scrape {
    async fn of(gateway: &Gateway) -> Self {
        let (status, text) = try_request(&gateway.metrics, "GET", "/metrics", None, &[]).await.expect("metrics");
        assert_eq!(status, 200);
        let mut scrape = Scrape { series: BTreeMap::new(), help: BTreeSet::new(), types: BTreeMap::new() };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                scrape.help.insert(rest.split_whitespace().next().unwrap().to_owned());
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut parts = rest.split_whitespace();
                scrape.types.insert(parts.next().unwrap().to_owned(), parts.next().unwrap().to_owned());
            } else if !line.starts_with('#') && !line.is_empty() {
                let (series, value) = line.rsplit_once(' ').unwrap();
                scrape.series.insert(series.to_owned(), value.parse().unwrap());
            }
        }
        scrape
    }

    /// The value of one series (`name{labels}` exactly as rendered), 0 when absent.
    fn value(&self, series: &str) -> f64 {
        self.series.get(series).copied().unwrap_or(0.0)
    }

    /// The sum over a family's series whose label text contains every one of `labels`.
    fn sum(&self, family: &str, labels: &[&str]) -> f64 {
        self.series
            .iter()
            .filter(|(s, _)| s.split('{').next() == Some(family))
            .filter(|(s, _)| labels.iter().all(|l| s.contains(l)))
            .map(|(_, v)| v)
            .sum()
    }

    /// Every family name with a series (histograms by their base name).
    fn names(&self) -> BTreeSet<String> {
        self.series
            .keys()
            .map(|s| s.split('{').next().unwrap().to_owned())
            .flat_map(|name| {
                let base = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix));
                [Some(name.clone()), base.map(str::to_owned)].into_iter().flatten()
            })
            .collect()
    }
}

async fn login_as(api: &str, seed: u8, coop: &str, scopes: &[&str], from: &str) -> (String, String, String) {
    let (signing, did) = signing_key(seed);
    let headers = [("x-forwarded-for", from)];
    let (status, text) =
        try_request(api, "POST", "/v1/auth/challenge", Some(json!({ "did": did })), &headers).await.unwrap();
    assert_eq!(status, 200, "{text}");
    let nonce = serde_json::from_str::<Value>(&text).unwrap()["nonce"].as_str().unwrap().to_owned();
    let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    let body = json!({ "did": did, "signature": signature, "coop_id": coop, "scopes": scopes });
    let (status, text) = try_request(api, "POST", "/v1/auth/verify", Some(body), &headers).await.unwrap();
    assert_eq!(status, 200, "{text}");
    let token = serde_json::from_str::<Value>(&text).unwrap()["token"].as_str().unwrap().to_owned();
    (token, signature, nonce)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_is_exported_and_a_session_moves_each_by_what_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9", "--trusted-proxy", "127.0.0.1"];
    let gateway = start(dir.path(), &flags);
    let api = gateway.api.clone();

    // At start: every family of the catalogue has HELP, and the counters read 0.
    let first = Scrape::of(&gateway).await;
    for name in gatewayd::metrics::families_at_start() {
        assert!(first.help.contains(name), "{name} has no HELP line at start");
    }
    for (series, zero) in [
        ("icn_compute_tasks_timeout_total", 0.0),
        ("icn_compute_signatures_invalid_total", 0.0),
        ("icn_misbehavior_auto_bans_total", 0.0),
        ("icn_misbehavior_quarantined_peers", 0.0),
        ("icn_misbehavior_violations_total{violation_type=\"ws_protocol\"}", 0.0),
        ("icn_gateway_rate_limit_exceeded_total{layer=\"velocity\"}", 0.0),
        ("icn_gateway_rate_limit_backend_errors_total{layer=\"ip\"}", 0.0),
        ("icn_network_messages_failed_total{backend=\"redis\"}", 0.0),
        ("icn_gateway_governance_votes_total{choice=\"Abstain\"}", 0.0),
    ] {
        assert_eq!(first.series.get(series), Some(&zero), "{series} is registered at 0 from the start");
    }
    for process in
        ["process_resident_memory_bytes", "process_open_fds", "process_max_fds", "process_start_time_seconds"]
    {
        assert!(first.value(process) > 0.0, "{process}");
    }
    assert!(first.series.contains_key("process_cpu_seconds_total"));
    assert!(first.value("icn_network_connections_active") >= 2.0, "the SQLite writer and checkpointer at least");

    // The session.
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write", "gov:read", "gov:write"];
    let (admin, _, _) = login_as(&api, 1, "ops", &scopes, "203.0.113.1").await; // 2 requests, 1 challenge
    let (status, _) =
        json_request(&api, "POST", "/v1/coops", Some(json!({ "name": "Ops", "coop_type": "worker" })), Some(&admin))
            .await;
    assert_eq!(status, 201);
    let (status, _) =
        json_request(&api, "POST", "/v1/coops/ops/members", Some(json!({ "did": signing_key(2).1 })), Some(&admin))
            .await;
    assert_eq!(status, 201);
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 2.5 });
    let (status, _) = json_request(&api, "POST", "/v1/ledger/ops/payment", Some(pay), Some(&admin)).await;
    assert_eq!(status, 201);
    let (member, _, _) = login_as(&api, 2, "ops", &["coop:read", "gov:write", "gov:read"], "203.0.113.2").await;
    // Authorization: a member may not change settings (403).
    let (status, _) =
        json_request(&api, "PUT", "/v1/coops/ops/settings", Some(json!({ "credit_limit": -5 })), Some(&member)).await;
    assert_eq!(status, 403);
    // A bad login signature and a forged token: auth failures and violations.
    let (_, did3) = signing_key(3);
    let headers = [("x-forwarded-for", "203.0.113.3")];
    try_request(&api, "POST", "/v1/auth/challenge", Some(json!({ "did": did3 })), &headers).await.unwrap();
    let bad = json!({ "did": did3, "signature": "00".repeat(64), "coop_id": "ops", "scopes": ["coop:read"] });
    let (status, _) = try_request(&api, "POST", "/v1/auth/verify", Some(bad), &headers).await.unwrap();
    assert_eq!(status, 401);
    let forged = format!("Bearer {}x", &admin[..admin.len() - 1]);
    let forged_from = [("authorization", forged.as_str()), ("x-forwarded-for", "203.0.113.3")];
    let (status, _) = try_request(&api, "GET", "/v1/coops/ops", None, &forged_from).await.unwrap();
    assert_eq!(status, 401);
    // The trusted proxy itself (no X-Forwarded-For) is never counted as misbehaving.
    let (status, _) = try_request(&api, "GET", "/v1/coops/ops", None, &[("authorization", &forged)]).await.unwrap();
    assert_eq!(status, 401);
    // A body declared over the limit.
    let big = [("content-length", "2000000"), ("x-forwarded-for", "203.0.113.4")];
    let (status, _) = try_request(&api, "POST", "/v1/auth/challenge", None, &big).await.unwrap();
    assert_eq!(status, 413);
    // The IP layer: the 21st challenge of one address is refused.
    let mut refused = 0;
    for _ in 0..21 {
        let headers = [("x-forwarded-for", "203.0.113.5")];
        let (status, _) =
            try_request(&api, "POST", "/v1/auth/challenge", Some(json!({ "did": did3 })), &headers).await.unwrap();
        refused += usize::from(status == 429);
    }
    assert_eq!(refused, 1);
    // Governance: a text proposal, one vote for, closed by its author: Approved.
    let proposal =
        json!({ "domain_id": "coop", "title": "T", "description": "d", "payload": { "type": "text", "content": "c" } });
    let (status, created) = json_request(&api, "POST", "/v1/gov/proposals", Some(proposal), Some(&admin)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["proposal_id"].as_str().unwrap();
    let (status, _) =
        json_request(&api, "POST", &format!("/v1/gov/proposals/{id}/open"), Some(json!({})), Some(&admin)).await;
    assert_eq!(status, 200);
    for token in [&admin, &member] {
        let path = format!("/v1/gov/proposals/{id}/vote");
        let (status, _) = json_request(&api, "POST", &path, Some(json!({ "choice": "for" })), Some(token)).await;
        assert_eq!(status, 200);
    }
    let (status, closed) =
        json_request(&api, "POST", &format!("/v1/gov/proposals/{id}/close"), Some(json!({})), Some(&admin)).await;
    assert_eq!((status, closed["outcome"].as_str()), (200, Some("Approved")), "{closed}");
    // An unknown path.
    let (status, _) = json_request(&api, "GET", "/no/such/route", None, None).await;
    assert_eq!(status, 404);

    // The balance sums are exported every 10 s: wait for the payment's currency.
    let waited = std::time::Instant::now();
    let after = loop {
        let scrape = Scrape::of(&gateway).await;
        if scrape.series.contains_key("icn_ledger_balances_total{currency=\"hours\"}") {
            break scrape;
        }
        assert!(waited.elapsed() < Duration::from_secs(15), "no balance sum for the payment's currency");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(after.value("icn_ledger_balances_total{currency=\"hours\"}"), 0.0, "zero-sum");
    let moved = |series: &str| after.value(series) - first.value(series);
    let moved_sum = |family: &str, labels: &[&str]| after.sum(family, labels) - first.sum(family, labels);
    assert_eq!(moved("icn_gateway_auth_challenges_total"), 23.0, "1 + 1 + 1 + 20 issued (the 21st was refused)");
    assert_eq!(moved("icn_gateway_auth_verifications_total{result=\"success\"}"), 2.0);
    assert_eq!(moved("icn_gateway_auth_verifications_total{result=\"failure\"}"), 1.0);
    assert_eq!(moved("icn_gateway_auth_failures_total{reason=\"bad_signature\"}"), 1.0);
    assert_eq!(moved("icn_gateway_auth_failures_total{reason=\"invalid_token\"}"), 2.0);
    assert_eq!(moved("icn_misbehavior_violations_total{violation_type=\"bad_signature\"}"), 1.0);
    assert_eq!(moved("icn_misbehavior_violations_total{violation_type=\"forged_token\"}"), 1.0);
    assert_eq!(moved("icn_misbehavior_violations_total{violation_type=\"oversized_body\"}"), 1.0);
    assert_eq!(moved("icn_misbehavior_auto_bans_total"), 0.0, "three violations from three addresses");
    assert_eq!(moved("icn_gateway_authorization_failures_total{code=\"AUTHORIZATION_FAILED\"}"), 1.0);
    assert_eq!(moved("icn_gateway_rate_limit_exceeded_total{layer=\"ip\"}"), 1.0);
    assert_eq!(moved("icn_gateway_governance_proposals_closed_total{outcome=\"Approved\"}"), 1.0);
    assert_eq!(moved("icn_gateway_governance_votes_total{choice=\"For\"}"), 2.0);
    assert_eq!(moved_sum("icn_gateway_http_requests_total", &["route=\"/v1/coops\"", "status=\"201\""]), 1.0);
    assert_eq!(moved_sum("icn_gateway_http_requests_total", &["route=\"/v1/auth/challenge\"", "status=\"429\""]), 1.0);
    assert_eq!(moved_sum("icn_gateway_http_requests_total", &["route=\"unmatched\"", "status=\"404\""]), 1.0);
    assert_eq!(
        moved_sum("icn_gateway_http_requests_total", &["route=\"/v1/coops/{id}/settings\"", "status=\"403\""]),
        1.0
    );
    assert_eq!(
        moved_sum("icn_gateway_http_request_duration_seconds_count", &["route=\"/v1/gov/proposals/{id}/vote\""]),
        2.0
    );
    // 2 logins × 2 + 3 (coop, member, payment) + 1 (settings) + 2 (bad login) + 2 (forged) + 1 (413)
    // + 21 (challenges) + 1 (proposal) + 1 (open) + 2 (votes) + 1 (close) + 1 (404) = 40.
    assert_eq!(moved_sum("icn_gateway_http_requests_total", &[]), 40.0);
    assert_eq!(after.value("icn_gateway_http_requests_in_flight"), 0.0);
    assert_eq!(after.types["icn_gateway_http_request_duration_seconds"], "histogram");
    for series in after.series.keys() {
        assert!(!series.contains("did:key") && !series.contains("/v1/coops/ops"), "unbounded label: {series}");
    }

    for name in gatewayd::metrics::family_names() {
        assert!(after.help.contains(name), "{name} has no HELP line after the session");
    }
    // Every metric the dashboard and the alert rules query is one the gateway exports.
    let exported = after.names();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("deploy/grafana/gateway.json")).unwrap()).unwrap();
    let mut expressions = Vec::new();
    collect_exprs(&dashboard, &mut expressions);
    assert!(expressions.len() >= 20, "the dashboard has its queries: {}", expressions.len());
    // The alert rules' text without its comments (the expressions and their annotations).
    let alerts = std::fs::read_to_string(root.join("deploy/prometheus/alerts.yml")).unwrap();
    expressions.push(alerts.lines().filter(|l| !l.trim_start().starts_with('#')).collect::<Vec<_>>().join("\n"));
    let mut queried = BTreeSet::new();
    for expression in &expressions {
        queried.extend(metric_names(expression));
    }
    let missing: Vec<_> = queried.iter().filter(|name| !exported.contains(*name)).collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");
}

/// Every `expr` and `query` string of a Grafana dashboard.
fn collect_exprs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match value {
                    Value::String(text) if key == "expr" || key == "query" => out.push(text.clone()),
                    Value::Object(_) if key == "query" => {
                        if let Some(text) = value.get("query").and_then(Value::as_str) {
                            out.push(text.to_owned());
                        }
                    }
                    _ => collect_exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_exprs(v, out)),
        _ => {}
    }
}

/// The gateway's metric names a PromQL text mentions (`icn_*` and `process_*`).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts_word && (text[i..].starts_with("icn_") || text[i..].starts_with("process_")) {
            let end = text[i..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(text.len(), |e| i + e);
            names.insert(text[i..end].to_owned());
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

/// A request counts as in flight while its route waits for the rest of its body, and stops
/// counting once its client has gone away before sending it: the gauge never keeps a request
/// that no one will answer. (Here the route ends on the broken body; a route future dropped
/// unfinished drops the edge's count with it, by construction.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_gauge_lets_go_of_a_request_whose_client_leaves_mid_body() {
    use tokio::io::AsyncWriteExt;

    let dir = tempfile::tempdir().unwrap();
    let gateway = start(dir.path(), &[]);
    let in_flight = |scrape: Scrape| scrape.value("icn_gateway_http_requests_in_flight");
    let until = |want: f64| {
        let gateway = &gateway;
        async move {
            let waited = std::time::Instant::now();
            loop {
                let now = in_flight(Scrape::of(gateway).await);
                if now == want {
                    return;
                }
                assert!(waited.elapsed() < Duration::from_secs(10), "in flight: {now}, waiting for {want}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    until(0.0).await;
    let mut socket = tokio::net::TcpStream::connect(&gateway.api).await.unwrap();
    let head = "POST /v1/auth/challenge HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n\
                Content-Length: 200\r\n\r\n{\"did\": \"did:key:z6Mk";
    socket.write_all(head.as_bytes()).await.unwrap();
    until(1.0).await;
    drop(socket);
    until(0.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_json_lines_one_per_request_one_per_failure_and_hold_no_secret() {
    let url = std::env::var("GATEWAY_TEST_POSTGRES_URL").ok();
    let dir = tempfile::tempdir().unwrap();
    // A database password in the store URL (PostgreSQL's trust authentication ignores it) when
    // PostgreSQL is there; the SQLite file otherwise.
    const DB_PASSWORD: &str = "db-pa55word-never-logged";
    let store = match &url {
        Some(url) => url.replacen("postgres@", &format!("postgres:{DB_PASSWORD}@"), 1),
        None => {
            eprintln!("GATEWAY_TEST_POSTGRES_URL is not set: the log test runs on SQLite, without a database password");
            format!("sqlite:{}", dir.path().join("gw.db").display())
        }
    };
    const PASSPHRASE: &str = "keystore-passphrase-never-logged";
    let keystore = dir.path().join("keystore.json");
    let init = std::process::Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["keystore", "init", "--keystore", keystore.to_str().unwrap()])
        .env("ICN_PASSPHRASE", PASSPHRASE)
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let flags = [
        "--log-format",
        "json",
        "--open-enrollment",
        "true",
        "--trust-default",
        "0.9",
        "--keystore",
        keystore.to_str().unwrap(),
        // Redis that is not there: logins answer 503, one failure line each.
        "--redis",
        "redis://127.0.0.1:1",
        "--redis-velocity-fallback",
        "local",
    ];
    let failing = start_on(&store, &flags, &[("ICN_PASSPHRASE", PASSPHRASE)]);
    let (status, body) =
        json_request(&failing.api, "POST", "/v1/auth/challenge", Some(json!({ "did": signing_key(5).1 })), None).await;
    assert_eq!(status, 503, "{body}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let failing_logs = failing.logs.lock().unwrap().clone();
    drop(failing);

    let working_flags = &flags[..8];
    let gateway = start_on(&store, working_flags, &[("ICN_PASSPHRASE", PASSPHRASE)]);
    let api = gateway.api.clone();
    let coop = format!("logs{}", std::process::id());
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let (token, signature, nonce) = login_as(&api, 1, &coop, &scopes, "127.0.0.1").await;
    let (status, _) =
        json_request(&api, "POST", "/v1/coops", Some(json!({ "name": "L", "coop_type": "worker" })), Some(&token))
            .await;
    assert_eq!(status, 201);
    let (status, _) = json_request(&api, "GET", &format!("/v1/coops/{coop}"), None, Some(&token)).await;
    assert_eq!(status, 200);
    let (status, _) =
        try_request(&api, "GET", "/v1/coops", None, &[("authorization", "Bearer not-a-token")]).await.unwrap();
    assert_eq!(status, 401);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logs = gateway.logs.lock().unwrap().clone();

    let mut access = 0;
    for line in logs.iter().chain(&failing_logs) {
        let entry: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        for secret in [token.as_str(), &signature, &nonce, PASSPHRASE, DB_PASSWORD, support::SECRET] {
            assert!(!line.contains(secret), "a secret reached the log: {line}");
        }
        if entry["target"] == "gateway::access" {
            let fields = &entry["fields"];
            for field in ["client", "method", "route", "status", "latency_ms"] {
                assert!(!fields[field].is_null(), "{field} missing: {line}");
            }
            assert!(entry["span"]["request_id"].is_string(), "the request's span: {line}");
            assert!(fields["request_id"].is_null() && entry["spans"].is_null(), "the request id once: {line}");
            access += 1;
        }
    }
    // challenge, verify, create, get, the refused token: five requests, five access lines.
    assert_eq!(access, 5 + 1, "one line per request (and the failing gateway's one challenge)");
    let failure = failing_logs
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["fields"]["message"] == "request failed")
        .expect("the 503 has its error line");
    let request_id = failure["span"]["request_id"].as_str().unwrap().to_owned();
    let lines_of_that_request = failing_logs.iter().filter(|l| l.contains(&request_id)).count();
    assert_eq!(lines_of_that_request, 2, "one access line and one error line for the failed request");
}

/// The served document is the whole gateway's (HTTP and WebSocket routes merged): each tag is
/// declared once, and every operation's tags are declared ones, so Swagger UI groups each route
/// under one heading.
#[tokio::test]
async fn the_served_openapi_document_declares_each_tag_once_and_uses_only_declared_tags() {
    let gateway = support::serve_in_process("memory", &[]).await;
    let (status, doc) = json_request(&gateway.api, "GET", "/api-docs/openapi.json", None, None).await;
    assert_eq!(status, 200);
    let declared: Vec<&str> = doc["tags"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    let unique: BTreeSet<&str> = declared.iter().copied().collect();
    assert_eq!(declared.len(), unique.len(), "a tag is declared twice: {declared:?}");
    assert!(unique.contains("events"), "the WebSocket routes' tag is declared: {declared:?}");
    let mut used = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Some(tags) = operation["tags"].as_array() else { continue };
            for tag in tags {
                let tag = tag.as_str().unwrap();
                assert!(unique.contains(tag), "{method} {path} uses the undeclared tag {tag}");
                used.insert(tag.to_owned());
            }
        }
    }
    assert!(used.contains("events"), "the stream routes are in the served document");
}

/// Waits up to `within` for `series` to be on the gateway's `/metrics`; its value.
async fn series_within(gateway: &Gateway, series: &str, within: Duration) -> Option<f64> {
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = Scrape::of(gateway).await.series.get(series) {
            return Some(*value);
        }
        if started.elapsed() > within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `icn_ledger_balances_total{currency}` (INTERFACE.md §10; the sum of every balance of a currency,
/// 0 in a sound mutual-credit ledger): a coop's currency is there once the coop is, a payment's
/// new currency within a second of the payment, and a gateway started on a store with
/// currencies has them on its very first scrape. On every store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balance_gauge_is_there_from_the_start_and_follows_payments_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let mut stores =
        vec![("memory".to_owned(), false), (format!("sqlite:{}", dir.path().join("g.db").display()), true)];
    match gateway_store::testing::fresh_postgres_schema("balance_gauge").await {
        Some(url) => stores.push((url, true)),
        None => eprintln!("GATEWAY_TEST_POSTGRES_URL is unset: the balance gauge is not tried on PostgreSQL"),
    }
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    for (store, durable) in stores {
        let gateway = start_on(&store, &flags, &[]);
        let api = gateway.api.clone();
        let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
        let (admin, _, _) = login_as(&api, 1, "gauge", &scopes, "203.0.113.1").await;
        let (status, _) = json_request(
            &api,
            "POST",
            "/v1/coops",
            Some(json!({ "name": "Gauge", "coop_type": "worker" })),
            Some(&admin),
        )
        .await;
        assert_eq!(status, 201, "{store}");
        let hours = "icn_ledger_balances_total{currency=\"hours\"}";
        assert_eq!(
            series_within(&gateway, hours, Duration::from_secs(1)).await,
            Some(0.0),
            "{store}: the coop's currency"
        );
        let (status, _) = json_request(
            &api,
            "POST",
            "/v1/coops/gauge/members",
            Some(json!({ "did": signing_key(2).1 })),
            Some(&admin),
        )
        .await;
        assert_eq!(status, 201, "{store}");
        let beans = "icn_ledger_balances_total{currency=\"beans\"}";
        assert!(!Scrape::of(&gateway).await.series.contains_key(beans), "{store}: no beans before the payment");
        let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 4.25, "currency": "beans" });
        let (status, text) = json_request(&api, "POST", "/v1/ledger/gauge/payment", Some(pay), Some(&admin)).await;
        assert_eq!(status, 201, "{store}: {text}");
        let paid = std::time::Instant::now();
        assert_eq!(series_within(&gateway, beans, Duration::from_secs(1)).await, Some(0.0), "{store}: zero-sum");
        assert!(paid.elapsed() < Duration::from_millis(1_500), "{store}: within a second of the payment");
        drop(gateway);
        if durable {
            // A gateway started on the same store: its first scrape already has both.
            let again = start_on(&store, &flags, &[]);
            let first = Scrape::of(&again).await;
            assert_eq!(first.series.get(hours), Some(&0.0), "{store}: exported from the start");
            assert_eq!(first.series.get(beans), Some(&0.0), "{store}: exported from the start");
        }
    }
}
