//! The accept loop over TLS (`serve_tls`): the same edge rules as over plain TCP
//! (`listener.rs`), with the handshake counted in the first head's time. Tried as a slow or
//! greedy client would: a handshake that never comes, a head sent one line at a time, an idle
//! keep-alive connection, more connections than an address may hold, a head past 64 KiB.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use gateway_http::serve::EdgeLimits;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, pki_types};

use crate::listener::{bearer, closed, get_head, read_answer};
use crate::support::{TestApp, did_of};

/// A gateway served over TLS with `limits`, and a connector that trusts its certificate.
async fn serve_tls(app: &TestApp, limits: EdgeLimits) -> (SocketAddr, TlsConnector) {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = pki_types::CertificateDer::from(generated.cert.der().to_vec());
    let key = pki_types::PrivateKeyDer::Pkcs8(generated.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = gateway_http::router(app.state.clone());
    tokio::spawn(async move {
        gateway_http::serve::serve_tls(listener, router, Arc::new(server), limits, std::future::pending())
            .await
            .unwrap();
    });
    (addr, TlsConnector::from(Arc::new(client)))
}

async fn connect(addr: SocketAddr, connector: &TlsConnector) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    connector.connect(pki_types::ServerName::try_from("localhost").unwrap(), tcp).await.expect("a TLS handshake")
}

fn short(header_ms: u64, idle_ms: u64) -> EdgeLimits {
    EdgeLimits {
        header_timeout: Duration::from_millis(header_ms),
        idle_timeout: Duration::from_millis(idle_ms),
        ..EdgeLimits::default()
    }
}

#[tokio::test]
async fn a_tls_client_is_served_by_the_one_router_with_the_edges_headers() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let (addr, connector) = serve_tls(&app, EdgeLimits::default()).await;
    let mut tls = connect(addr, &connector).await;
    let read = get_head(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &[bearer(&members[0])]);
    // Pipelined: two reads and a health check in one write.
    let pipelined = format!("{read}{}{read}", get_head("/v1/health", &[]));
    tls.write_all(pipelined.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    for _ in 0..3 {
        let answer = read_answer(&mut tls, &mut pending).await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.json());
        assert_eq!(answer.header("x-content-type-options"), Some("nosniff"));
        assert!(answer.header("x-request-id").is_some());
    }
    assert_eq!(tls.get_ref().1.alpn_protocol(), None, "HTTP/1.1, no other protocol");
}

/// The attack that went through the old TLS listener: one header line every so often, never
/// the end of the head. The head deadline (here 300 ms) closes it with a 408.
#[tokio::test]
async fn a_head_sent_a_line_at_a_time_is_cut_at_the_head_deadline() {
    let app = TestApp::new().await;
    let (addr, connector) = serve_tls(&app, short(300, 75_000)).await;
    let tls = connect(addr, &connector).await;
    let started = Instant::now();
    let (mut reader, mut writer) = tokio::io::split(tls);
    let trickle = tokio::spawn(async move {
        writer.write_all(b"GET /v1/health HTTP/1.1\r\nhost: localhost\r\n").await?;
        for n in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            writer.write_all(format!("x-slow-{n}: 1\r\n").as_bytes()).await?;
        }
        Ok::<_, std::io::Error>(())
    });
    let answer = tokio::time::timeout(Duration::from_secs(3), read_answer(&mut reader, &mut Vec::new()))
        .await
        .expect("cut well before 3 s");
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(answer.json()["code"], "REQUEST_TIMEOUT");
    assert!(closed(&mut reader).await, "then closed");
    trickle.abort();
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
}

/// A client that connects and never starts its handshake is closed at the head deadline: the
/// handshake is part of the first head's time.
#[tokio::test]
async fn a_handshake_that_never_comes_is_cut_at_the_head_deadline() {
    let app = TestApp::new().await;
    let (addr, _) = serve_tls(&app, short(300, 75_000)).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    assert!(closed(&mut silent).await, "closed without a handshake");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(250) && waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn an_idle_keep_alive_tls_connection_is_closed_after_the_idle_timeout() {
    let app = TestApp::new().await;
    let (addr, connector) = serve_tls(&app, short(10_000, 400)).await;
    let mut tls = connect(addr, &connector).await;
    tls.write_all(get_head("/v1/health", &[]).as_bytes()).await.unwrap();
    assert_eq!(read_answer(&mut tls, &mut Vec::new()).await.status, StatusCode::OK);
    let idle = Instant::now();
    assert!(closed(&mut tls).await, "the idle connection closes");
    let waited = idle.elapsed();
    assert!(waited >= Duration::from_millis(350) && waited < Duration::from_secs(3), "{waited:?}");
}

/// An address over its connection cap is answered 429 with the error body, over TLS.
#[tokio::test]
async fn the_per_address_connection_cap_holds_over_tls() {
    let app = TestApp::new().await;
    let limits = EdgeLimits { max_connections_per_address: 2, ..EdgeLimits::default() };
    let (addr, connector) = serve_tls(&app, limits).await;
    let mut held = vec![connect(addr, &connector).await, connect(addr, &connector).await];
    for tls in &mut held {
        tls.write_all(get_head("/v1/health", &[]).as_bytes()).await.unwrap();
        assert_eq!(read_answer(tls, &mut Vec::new()).await.status, StatusCode::OK);
    }
    let mut third = connect(addr, &connector).await;
    let refused = read_answer(&mut third, &mut Vec::new()).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.json()["code"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.json()["details"]["limit"], 2);
    // One given back: the next connection is served.
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut again = connect(addr, &connector).await;
    again.write_all(get_head("/v1/health", &[]).as_bytes()).await.unwrap();
    assert_eq!(read_answer(&mut again, &mut Vec::new()).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_head_past_64_kib_over_tls_is_refused_with_the_contracts_body() {
    let app = TestApp::new().await;
    let (addr, connector) = serve_tls(&app, EdgeLimits::default()).await;
    let mut tls = connect(addr, &connector).await;
    let endless = get_head("/v1/health", &[format!("x-long: {}", "a".repeat(70 * 1024))]);
    for piece in endless.trim_end_matches("\r\n").as_bytes().chunks(8 * 1024) {
        if tls.write_all(piece).await.is_err() {
            break;
        }
    }
    let refused = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut tls, &mut Vec::new()))
        .await
        .expect("refused well before the head deadline");
    assert_eq!(refused.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(refused.json()["code"], "BAD_REQUEST");
}
