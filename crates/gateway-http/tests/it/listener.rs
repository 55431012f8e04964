//! The accept loop (`serve`) over real sockets: pipelining, heads in pieces, the trusted proxy's
//! fields, the quarantine, the deadlines, slow readers, oversized heads and the shutdown. The
//! same rules over TLS are `listener_tls.rs`'s.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{TestApp, did_of, edge_app};

/// An answer read off a socket.
#[derive(Debug)]
pub struct Wire {
    pub status: StatusCode,
    /// Lower-case names, in the order written.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Wire {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Serves `app`'s state as gatewayd does (the router, the edge's limits `limits`) on a free port
/// until `stop` resolves.
pub async fn serve_with(
    app: &TestApp,
    limits: gateway_http::serve::EdgeLimits,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = gateway_http::router(app.state.clone());
    let task = tokio::spawn(async move {
        gateway_http::serve::serve(listener, served, limits, stop).await.unwrap();
    });
    (addr, task)
}

/// [`serve_with`] with the default limits, until the test ends.
pub async fn serve(app: &TestApp) -> SocketAddr {
    serve_with(app, gateway_http::serve::EdgeLimits::default(), std::future::pending()).await.0
}

/// The head of a `GET` of `path` with `fields` (`name: value`).
pub fn get_head(path: &str, fields: &[String]) -> String {
    let mut head = format!("GET {path} HTTP/1.1\r\nhost: gateway\r\n");
    for field in fields {
        head.push_str(field);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    head
}

/// Reads one answer (a head, then its `content-length` of body) from `socket`.
pub async fn read_answer<S: tokio::io::AsyncRead + Unpin>(socket: &mut S, pending: &mut Vec<u8>) -> Wire {
    let deadline = Duration::from_secs(10);
    let end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(deadline, socket.read(&mut chunk)).await.expect("an answer in time").unwrap();
        assert!(n > 0, "the connection closed before an answer: {:?}", String::from_utf8_lossy(pending));
        pending.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(pending[..end].to_vec()).unwrap();
    pending.drain(..end + 4);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
    let status = StatusCode::from_u16(status_line[9..12].parse().unwrap()).unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_ascii_lowercase(), value.trim().to_owned())
        })
        .collect();
    let length: usize = headers.iter().find(|(n, _)| n == "content-length").map_or(0, |(_, v)| v.parse().unwrap());
    while pending.len() < length {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(deadline, socket.read(&mut chunk)).await.expect("a body in time").unwrap();
        assert!(n > 0, "the connection closed inside a body");
        pending.extend_from_slice(&chunk[..n]);
    }
    let body = pending.drain(..length).collect();
    Wire { status, headers, body }
}

/// Sends `head` on a new connection and reads its answer.
pub async fn exchange(addr: SocketAddr, head: &str) -> Wire {
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    read_answer(&mut socket, &mut Vec::new()).await
}

/// Whether the peer closed `socket` (within 5 s).
pub async fn closed<S: tokio::io::AsyncRead + Unpin>(socket: &mut S) -> bool {
    let mut byte = [0u8; 1];
    matches!(tokio::time::timeout(Duration::from_secs(5), socket.read(&mut byte)).await, Ok(Ok(0) | Err(_)))
}

pub fn bearer(token: &str) -> String {
    format!("authorization: Bearer {token}")
}

#[tokio::test]
async fn pipelined_reads_are_answered_in_order_and_a_head_may_come_in_pieces() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let addr = serve(&app).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let heads: String = [2, 3, 2]
        .iter()
        .map(|n| get_head(&format!("/v1/ledger/c1/balance/{}", did_of(*n)), &[bearer(&members[0])]))
        .collect();
    socket.write_all(heads.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    for n in [2, 3, 2] {
        let answer = read_answer(&mut socket, &mut pending).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.json()["did"], did_of(n), "answers in the order asked");
    }
    // One head in three pieces, with pauses between them.
    let head = get_head(&format!("/v1/ledger/c1/balance/{}", did_of(3)), &[bearer(&members[0])]);
    let (first, rest) = head.split_at(7);
    let (second, third) = rest.split_at(40);
    for piece in [first, second, third] {
        socket.write_all(piece.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answer = read_answer(&mut socket, &mut pending).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.json()["did"], did_of(3));
    assert!(pending.is_empty(), "nothing more than the answers");
}

#[tokio::test]
async fn reads_and_other_requests_share_a_pipelined_connection() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let addr = serve(&app).await;
    let read = get_head(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &[bearer(&members[0])]);
    let mut socket = TcpStream::connect(addr).await.unwrap();
    // A read, then a health check and two more reads behind it in the same write.
    let pipelined = format!("{read}{}{read}{read}", get_head("/v1/health", &[]));
    socket.write_all(pipelined.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    assert_eq!(read_answer(&mut socket, &mut pending).await.status, StatusCode::OK);
    let health = read_answer(&mut socket, &mut pending).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.json()["status"], "ok", "{:?}", health.json());
    for _ in 0..2 {
        let answer = read_answer(&mut socket, &mut pending).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.json()["did"], did_of(2));
    }
    // With a body, a close, a cross-origin origin: answered alike.
    for fields in
        [vec!["content-length: 2".to_owned()], vec!["connection: close".into()], vec!["origin: https://x".into()]]
    {
        let mut all = vec![bearer(&members[0])];
        all.extend(fields.clone());
        let mut head = get_head(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &all);
        if fields[0].starts_with("content-length") {
            head.push_str("{}");
        }
        let answer = exchange(addr, &head).await;
        assert_eq!(answer.status, StatusCode::OK, "{fields:?}");
    }
}

#[tokio::test]
async fn a_trusted_proxys_fields_are_kept_and_a_quarantined_client_is_refused() {
    let app = edge_app().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let addr = serve(&app).await;
    let path = format!("/v1/ledger/c1/balance/{}", did_of(2));
    // 127.0.0.1 is the trusted proxy: its request id is kept, and its client is the forwarded one.
    let answer = exchange(addr, &get_head(&path, &[bearer(&members[0]), "x-request-id: proxy-id-1".into()])).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("x-request-id"), Some("proxy-id-1"));
    // Forged tokens from one forwarded client: quarantined after three.
    let forged = format!("{}AAAA", &members[0][..members[0].len() - 4]);
    let from = "x-forwarded-for: 203.0.113.7".to_owned();
    for _ in 0..3 {
        let answer = exchange(addr, &get_head(&path, &[bearer(&forged), from.clone()])).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    }
    let refused = exchange(addr, &get_head(&path, &[bearer(&members[0]), from.clone()])).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(refused.json()["details"]["reason"], "quarantined", "{:?}", refused.json());
    assert!(refused.header("retry-after").is_some());
    assert_eq!(refused.header("x-content-type-options"), Some("nosniff"), "the edge's headers");
    assert_eq!(refused.headers.iter().filter(|(n, _)| n == "x-request-id").count(), 1);
    // Another forwarded client is not.
    let other = exchange(addr, &get_head(&path, &[bearer(&members[0]), "x-forwarded-for: 203.0.113.8".into()])).await;
    assert_eq!(other.status, StatusCode::OK);
}

#[tokio::test]
async fn a_slow_head_is_timed_out_and_at_shutdown_an_idle_connection_closes_and_a_head_under_way_is_answered() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let limits = gateway_http::serve::EdgeLimits {
        header_timeout: Duration::from_millis(300),
        ..gateway_http::serve::EdgeLimits::default()
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (addr, server) = serve_with(&app, limits, async move {
        let _ = stopped.await;
    })
    .await;
    let head = get_head(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &[bearer(&members[0])]);
    // Half a read's head, then nothing: 408 with the error body, then the close.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(&head.as_bytes()[..30]).await.unwrap();
    let answer = read_answer(&mut slow, &mut Vec::new()).await;
    assert_eq!(answer.status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(answer.json()["code"], "REQUEST_TIMEOUT");
    assert!(closed(&mut slow).await);
    // A read answered, then the connection idles until the gateway stops.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(head.as_bytes()).await.unwrap();
    assert_eq!(read_answer(&mut idle, &mut Vec::new()).await.status, StatusCode::OK);
    // A head under way when the gateway stops is answered, then the connection closes.
    let mut partial = TcpStream::connect(addr).await.unwrap();
    partial.write_all(&head.as_bytes()[..20]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    stop.send(()).unwrap();
    assert!(closed(&mut idle).await, "the idle connection closes");
    partial.write_all(&head.as_bytes()[20..]).await.unwrap();
    let answer = read_answer(&mut partial, &mut Vec::new()).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(closed(&mut partial).await, "then it closes");
    tokio::time::timeout(Duration::from_secs(15), server).await.expect("the server stops").unwrap();
}

#[tokio::test]
async fn a_client_that_does_not_take_its_answers_is_let_go_after_the_idle_timeout() {
    let app = TestApp::new().await;
    let limits = gateway_http::serve::EdgeLimits {
        idle_timeout: Duration::from_millis(400),
        ..gateway_http::serve::EdgeLimits::default()
    };
    let (addr, _server) = serve_with(&app, limits, std::future::pending()).await;
    for fields in [vec![], vec!["connection: keep-alive".to_owned()]] {
        // A small receive window, many pipelined reads (refused: no token), and no reading.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut socket = socket.connect(addr).await.unwrap();
        let reads = 6000;
        let heads = get_head(&format!("/v1/ledger/c1/balance/{}", did_of(2)), &fields).repeat(reads);
        let (mut reader, mut writer) = socket.split();
        let (_, drained) = tokio::join!(
            async {
                // The server stops reading once it cannot write: part of this may never be taken.
                let _ = tokio::time::timeout(Duration::from_secs(3), writer.write_all(heads.as_bytes())).await;
            },
            async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let mut answers = Vec::new();
                let ended = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut answers)).await;
                (ended, answers)
            }
        );
        let (ended, answers) = drained;
        assert!(ended.is_ok(), "{fields:?}: the connection ends");
        let answered = memchr::memmem::find_iter(&answers, b"HTTP/1.1 401").count();
        assert!(answered > 0 && answered < reads, "{fields:?}: {answered} of {reads} answered before it was let go");
    }
}

#[tokio::test]
async fn a_long_head_is_served_and_one_past_64_kib_is_refused_at_once() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let addr = serve(&app).await;
    let path = format!("/v1/ledger/c1/balance/{}", did_of(2));
    // 20 KiB: within hyper's 64, answered as any other read.
    let long =
        exchange(addr, &get_head(&path, &[bearer(&members[0]), format!("x-long: {}", "a".repeat(20 * 1024))])).await;
    assert_eq!(long.status, StatusCode::OK);
    // A head that goes on past hyper's 64 KiB without ending: hyper's 431 with the interface's
    // body, at once (not at the head deadline).
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let endless = get_head(&path, &[bearer(&members[0]), format!("x-long: {}", "a".repeat(70 * 1024))]);
    let endless = endless.trim_end_matches("\r\n");
    for piece in endless.as_bytes().chunks(8 * 1024) {
        if socket.write_all(piece).await.is_err() {
            break;
        }
    }
    let refused = tokio::time::timeout(Duration::from_secs(5), read_answer(&mut socket, &mut Vec::new()))
        .await
        .expect("refused well before the head deadline");
    assert_eq!(refused.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    assert_eq!(refused.json()["code"], "BAD_REQUEST");
}

/// A refusal given before a POST's body was read says `Connection: close` (hyper will not read
/// the rest to keep the connection); an answer after the body was read keeps it, and the next
/// request on it is answered. A client that follows `Connection` never sends into a dead one.
#[tokio::test]
async fn a_refusal_before_the_body_was_read_closes_and_says_so() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let addr = serve(&app).await;
    let body = serde_json::json!({ "from": did_of(2), "to": did_of(1), "amount": 1 }).to_string();
    let post = |fields: &[String], body: &str| {
        let mut head = format!(
            "POST /v1/ledger/c1/payment HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
        for field in fields {
            head.push_str(field);
            head.push_str("\r\n");
        }
        format!("{head}\r\n{body}")
    };
    let health = get_head("/v1/health", &[]);
    // Refused before the body is read: no token, a forged one, a route that does not exist.
    let forged = format!("{}AAAA", &members[0][..members[0].len() - 4]);
    for (request, status) in [
        (post(&[], &body), StatusCode::UNAUTHORIZED),
        (post(&[bearer(&forged)], &body), StatusCode::UNAUTHORIZED),
        (
            format!("POST /v1/nowhere HTTP/1.1\r\nhost: gateway\r\ncontent-length: {}\r\n\r\n{body}", body.len()),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut socket, &mut Vec::new()).await;
        assert_eq!(answer.status, status);
        assert_eq!(answer.header("connection"), Some("close"), "{status}: {:?}", answer.headers);
        assert!(closed(&mut socket).await, "{status}: closed as it said");
    }
    // Read, then refused (a field of the body is wrong), or accepted: the connection carries on.
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let mut pending = Vec::new();
    let wrong = serde_json::json!({ "from": did_of(2), "to": did_of(1), "amount": "lots" }).to_string();
    for (request, status) in [
        (post(&[bearer(&members[0])], &wrong), StatusCode::BAD_REQUEST),
        (post(&[bearer(&members[0])], &body), StatusCode::CREATED),
    ] {
        socket.write_all(request.as_bytes()).await.unwrap();
        let answer = read_answer(&mut socket, &mut pending).await;
        assert_eq!(answer.status, status, "{:?}", answer.json());
        assert_eq!(answer.header("connection"), None, "{status}: kept");
        socket.write_all(health.as_bytes()).await.unwrap();
        assert_eq!(read_answer(&mut socket, &mut pending).await.status, StatusCode::OK, "after {status}");
    }
}
