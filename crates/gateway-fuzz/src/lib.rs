//! What the gateway's fuzz targets check, one function per target, each taking the fuzzer's
//! bytes and panicking when a property breaks.
//!
//! `fuzz/` (a `cargo fuzz` project, built with the nightly toolchain) calls these from its
//! targets; `tests/replay.rs` feeds every file of the committed corpora (`fuzz/corpus/<target>`)
//! through the same functions on the stable toolchain, as part of the ordinary test suite. So a
//! corpus entry that once found a bug keeps guarding against it. This crate holds no
//! production code.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use base64::Engine;
use gateway_core::{Amount, Did, DidResolver, KeyDidResolver};

/// A target's property: panics when the input breaks it.
pub type Property = fn(&[u8]);

/// Every target, by the name of its corpus directory.
pub const TARGETS: &[(&str, Property)] = &[
    ("did", did),
    ("jwt", jwt),
    ("request_bodies", request_bodies),
    ("ccl", ccl),
    ("ws_frames", ws_frames),
    ("amount", amount),
    ("signature_input", signature_input),
];

/// DID parsing and key resolution: anything that parses prints back as itself, and a
/// resolvable `did:key` prints back from its key.
pub fn did(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(did) = Did::parse(text) else { return };
    assert_eq!(did.as_str(), text, "a parsed DID prints as it was written");
    assert!(did.as_str().len() <= 256);
    if let Ok(key) = KeyDidResolver.resolve(&did)
        && did.as_str().starts_with("did:key:")
    {
        assert_eq!(Did::key_from_public_key(&key).as_str(), did.as_str(), "did:key round trip");
    }
}

const SECRET: &[u8] = b"fuzz-secret-fuzz-secret-fuzz-secret!";

fn tokens() -> &'static gateway_auth::TokenService {
    static TOKENS: OnceLock<gateway_auth::TokenService> = OnceLock::new();
    TOKENS.get_or_init(|| {
        gateway_auth::TokenService::new(
            gateway_auth::TokenConfig::with_secret(SECRET),
            Arc::new(gateway_core::ManualClock::at_secs(1_800_000_000)),
        )
        .expect("a valid token configuration")
    })
}

/// JWT verification: whatever is accepted is an HS256 token whose signature is the HMAC of its
/// header and payload under the gateway's secret, i.e. one the gateway issued.
pub fn jwt(data: &[u8]) {
    let Ok(token) = std::str::from_utf8(data) else { return };
    let Ok(verified) = tokens().verify(token) else { return };
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "an accepted token has three parts");
    let header: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(parts[0]).expect("the header decodes"),
    )
    .expect("the header is JSON");
    assert_eq!(header["alg"], "HS256", "only HS256 is accepted");
    let expected = jsonwebtoken::crypto::sign(
        format!("{}.{}", parts[0], parts[1]).as_bytes(),
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
        jsonwebtoken::Algorithm::HS256,
    )
    .expect("signing");
    let decode = |s: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(s.trim_end_matches('='));
    assert_eq!(decode(parts[2]).ok(), decode(&expected).ok(), "the signature is the gateway's HMAC");
    assert!(!verified.did.as_str().is_empty());
}

/// The WebSocket client frames: any text parses to a frame or is refused, never a panic.
pub fn ws_frames(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(frame) = serde_json::from_str::<gateway_ws::protocol::ClientFrame>(text) {
        // What parses serialises again and parses to the same frame.
        let again = serde_json::to_string(&frame).expect("a frame serialises");
        assert_eq!(serde_json::from_str::<gateway_ws::protocol::ClientFrame>(&again).ok(), Some(frame));
    }
}

/// Amounts: what parses prints back to the same amount; payments are within (0, 10^12].
pub fn amount(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(amount) = Amount::parse_decimal(text) {
        assert_eq!(Amount::parse_decimal(&amount.to_string()), Ok(amount), "{text} → {amount}");
    }
    if let Ok(payment) = Amount::parse_payment(text) {
        assert!(payment.micros() > 0 && payment.micros() <= 1_000_000_000_000_000_000, "{text}");
    }
}

/// The CCL parser and interpreter: any contract that parses runs to an outcome within its fuel
/// (never more than the limit), deterministically. The first eight bytes choose the fuel limit.
pub fn ccl(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let fuel = u64::from_le_bytes(data[..8].try_into().expect("eight bytes")) % 100_000 + 1;
    let Ok(code) = std::str::from_utf8(&data[8..]) else { return };
    let Ok(contract) = gateway_domain::compute::ccl::parse_contract(code) else { return };
    let mut inputs = BTreeMap::new();
    inputs.insert("hours".to_owned(), "3".to_owned());
    inputs.insert("cook".to_owned(), "did:key:z6Mk".to_owned());
    let first = gateway_domain::compute::ccl::run(&contract, &inputs, fuel);
    assert!(first.fuel_used <= fuel, "fuel used {} over the limit {fuel}", first.fuel_used);
    assert_eq!(first.output.is_some(), first.error.is_none(), "an output or an error, not both");
    let second = gateway_domain::compute::ccl::run(&contract, &inputs, fuel);
    assert_eq!((first.output, first.error, first.fuel_used), (second.output, second.error, second.fuel_used));
}

/// The request-signature parser and verifier: any `Signature-Input` / `Signature` pair (the
/// input's lines: input, signature, content-digest, body) is verified or refused without a
/// panic, and anything accepted also verifies as stored evidence.
pub fn signature_input(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.splitn(4, '\n');
    let (input, signature) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let digest = lines.next().unwrap_or("");
    let body = lines.next().unwrap_or("").as_bytes();
    let headers = [("content-digest", digest)];
    let message = gateway_httpsig::Message {
        method: "POST",
        authority: "gateway.example",
        // The worked example's (docs/SIGNING.md), so that a seed verifies all the way.
        path: "/v1/ledger/bakery/payment",
        query: None,
        headers: &headers,
    };
    let signer = Did::parse("did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX").expect("a DID");
    let result = gateway_httpsig::verify(
        &message,
        body,
        input,
        signature,
        &signer,
        1_800_000_000,
        gateway_httpsig::Limits::default(),
    );
    if let Ok(verified) = result {
        assert_eq!(gateway_httpsig::verify_evidence(&verified.evidence), Ok(signer));
    }
    let _ = gateway_httpsig::check_content_digest(digest, body);
}

/// The request bodies of every route that takes one, with their validation: through the real
/// router (in memory, a token with every scope), any body is answered, never 5xx, and every
/// refusal has the error body. The first byte picks the route.
pub fn request_bodies(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else { return };
    let app = app();
    app.limiter_clock.advance(std::time::Duration::from_secs(60));
    let (method, path) = ROUTES[usize::from(pick) % ROUTES.len()];
    let request = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {}", app.token))
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_vec()))
        .expect("a request");
    let (status, answer) = app.runtime.block_on(async {
        use http_body_util::BodyExt;
        use tower::ServiceExt;
        let response = app.router.clone().oneshot(request).await.expect("the router answers");
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.expect("a body").to_bytes();
        (status, bytes)
    });
    assert!(status < 500, "{method} {path} answered {status}: {}", String::from_utf8_lossy(&answer));
    if status >= 400 {
        let error: serde_json::Value = serde_json::from_slice(&answer).expect("an error body is JSON");
        assert!(
            error["error"].is_string() && error["code"].is_string() && error["details"].is_object(),
            "{method} {path}: {error}"
        );
    }
}

/// The routes that take a JSON body, on the coop `c` the fuzzing token belongs to.
const ROUTES: &[(&str, &str)] = &[
    ("POST", "/v1/auth/challenge"),
    ("POST", "/v1/auth/verify"),
    ("POST", "/v1/ledger/c/payment"),
    ("POST", "/ledger/transaction"),
    ("POST", "/v1/ledger/c/payments/batch"),
    ("POST", "/v1/ledger/c/payment/convert/quote"),
    ("POST", "/v1/ledger/c/payment/convert"),
    ("POST", "/v1/oracle/rate"),
    ("POST", "/v1/coops"),
    ("POST", "/v1/coops/c/members"),
    ("PUT", "/v1/coops/c/members/did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH/role"),
    ("PUT", "/v1/coops/c/members/did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH/credit-limit"),
    ("PUT", "/v1/coops/c/settings"),
    ("POST", "/v1/trust/edges"),
    ("POST", "/v1/gov/domains"),
    ("PUT", "/v1/gov/domains/coop"),
    ("POST", "/v1/gov/proposals"),
    ("POST", "/governance/proposals"),
    ("POST", "/v1/gov/proposals/p/vote"),
    ("POST", "/v1/gov/delegations"),
    ("POST", "/v1/compute/submit"),
    ("POST", "/v1/compute/tasks/t/complete"),
];

struct App {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    token: String,
    /// The limiters' clock: a minute passes between inputs, so the rate limits (a minute's
    /// allowance, an hour's payments) never become all the fuzzer sees.
    limiter_clock: gateway_limits::ManualClock,
}

/// One in-memory gateway for the whole fuzzing process: a coop `c` whose admin the token is.
fn app() -> &'static App {
    static APP: OnceLock<App> = OnceLock::new();
    APP.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let limiter_clock = gateway_limits::ManualClock::new();
        let (router, token) = runtime.block_on(async {
            let store = Arc::new(gateway_store::Store::open(&gateway_store::StoreSpec::Memory).await.expect("a store"));
            let clock = gateway_core::ManualClock::at_secs(1_800_000_000);
            let options = gateway_http::state::AssembleOptions {
                token: gateway_auth::TokenConfig::with_secret(SECRET),
                challenge_ttl_secs: 300,
                open_enrollment: true,
                trust_anchors: vec![],
                trust_default: 0.9,
                trusted_proxies: vec![],
                http: gateway_http::HttpConfig { metrics: false, ..gateway_http::HttpConfig::default() },
                clock: Arc::new(clock.clone()),
                limiter_clock: Arc::new(limiter_clock.clone()),
                membership_ttl: std::time::Duration::from_secs(3600),
                receipt_keys: Arc::new(gateway_domain::governance::MemoryReceiptKeys::new([7; 32])),
                log: gateway_domain::log::LogConfig::default(),
                cluster: None,
                nonces: None,
            };
            let state = gateway_http::state::assemble(store, options).await.expect("the state");
            let admin = Did::parse("did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX").expect("a DID");
            let coop = gateway_core::CoopId::parse("c").expect("a coop id");
            let token = state.auth.tokens().issue(&admin, Some(&coop), gateway_core::ScopeSet::all()).token;
            let router = gateway_http::router(state);
            // The coop the routes name, with its founder as admin.
            let create = axum::http::Request::builder()
                .method("POST")
                .uri("/v1/coops")
                .header("authorization", format!("Bearer {token}"))
                .header("content-type", "application/json")
                .body(axum::body::Body::from(r#"{"name":"Fuzz","coop_type":"worker"}"#))
                .expect("a request");
            use tower::ServiceExt;
            let created = router.clone().oneshot(create).await.expect("the router answers");
            assert_eq!(created.status(), 201, "the fuzzing coop is created");
            (router, token)
        });
        App { runtime, router, token, limiter_clock }
    })
}
