//! The edge over a real socket, tried as a slow or hostile client (INTERFACE.md §1): a head that
//! never completes, a connection that sends nothing, an idle keep-alive connection, a body that
//! stalls, too many connections from one address, and what hyper refuses by itself. The limits
//! are shortened (hundreds of milliseconds) so the test does not wait out the real ones.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::TestApp;

const HEADER: Duration = Duration::from_millis(400);
const IDLE: Duration = Duration::from_millis(900);
const BODY: Duration = Duration::from_millis(500);

/// A gateway served over TCP with short limits: heads in 400 ms, idle connections 900 ms,
/// bodies 500 ms, 3 connections per address.
async fn served() -> SocketAddr {
    served_with(HEADER, BODY).await
}

/// [`served`] with other head and body timeouts.
async fn served_with(header: Duration, body: Duration) -> SocketAddr {
    let app = TestApp::customised(|options| options.http.body_timeout = body).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = gateway_http::serve::EdgeLimits {
        header_timeout: header,
        idle_timeout: IDLE,
        max_connections_per_address: 3,
        exempt: Arc::new(|_| false),
        drain: Duration::from_secs(1),
    };
    let router = app.router.clone();
    tokio::spawn(async move {
        let _app = app;
        gateway_http::serve::serve(listener, router, limits, std::future::pending()).await.unwrap();
    });
    addr
}

/// Everything the server sends until it closes (or 5 s pass).
async fn read_to_close(socket: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), socket.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn assert_contract_answer(answer: &str, status: u16, code: &str) {
    assert!(answer.starts_with(&format!("HTTP/1.1 {status} ")), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("x-content-type-options: nosniff"), "security headers: {answer}");
    assert!(answer.contains(&format!(r#""code":"{code}""#)) && answer.contains(r#""error":""#), "body: {answer}");
}

#[tokio::test]
async fn a_head_that_never_completes_is_answered_408_and_closed() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    socket.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let answer = read_to_close(&mut socket).await;
    assert_contract_answer(&answer, 408, "REQUEST_TIMEOUT");
    let took = started.elapsed();
    assert!(took >= HEADER - Duration::from_millis(50) && took < HEADER * 4, "{took:?}");
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut socket).await;
    assert!(answer.is_empty(), "nothing is owed to a client that asked nothing: {answer}");
    assert!(started.elapsed() < HEADER * 4, "{:?}", started.elapsed());
}

#[tokio::test]
async fn headers_sent_a_line_at_a_time_too_slowly_are_cut_off() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket.write_all(b"GET /v1/health HTTP/1.1\r\n").await.unwrap();
    for n in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        if socket.write_all(format!("X-Slow-{n}: 1\r\n").as_bytes()).await.is_err() {
            break;
        }
    }
    let answer = read_to_close(&mut socket).await;
    assert_contract_answer(&answer, 408, "REQUEST_TIMEOUT");
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_kept_for_its_idle_time_then_closed() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    socket.write_all(request).await.unwrap();
    let mut buffer = [0u8; 4096];
    let n = socket.read(&mut buffer).await.unwrap();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"));
    // Longer than the head timeout, shorter than the idle timeout: still open.
    tokio::time::sleep(HEADER + Duration::from_millis(200)).await;
    socket.write_all(request).await.unwrap();
    let n = socket.read(&mut buffer).await.unwrap();
    assert!(String::from_utf8_lossy(&buffer[..n]).starts_with("HTTP/1.1 200"), "reused after an idle wait");
    // Then idle past the idle timeout: closed, without an answer.
    let started = Instant::now();
    let rest = read_to_close(&mut socket).await;
    assert!(rest.is_empty(), "{rest}");
    let took = started.elapsed();
    assert!(took >= IDLE - Duration::from_millis(50) && took < IDLE * 3, "{took:?}");
}

#[tokio::test]
async fn a_body_that_stalls_is_answered_408() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"POST /v1/auth/challenge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{\"did\":")
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_to_close(&mut socket).await;
    assert_contract_answer(&answer, 408, "REQUEST_TIMEOUT");
    assert!(started.elapsed() >= BODY - Duration::from_millis(50), "{:?}", started.elapsed());
}

/// A head pipelined behind a request, in the same write, and never finished: hyper holds its
/// first bytes while it answers the first request, and the head is still due within the head
/// timeout of its first byte (not the idle timeout).
#[tokio::test]
async fn a_pipelined_head_left_unfinished_is_answered_408() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    socket.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let answers = read_to_close(&mut socket).await;
    let took = started.elapsed();
    let second = answers.find("HTTP/1.1 408 ").unwrap_or_else(|| panic!("no 408: {answers}"));
    assert!(answers.starts_with("HTTP/1.1 200 "), "{answers}");
    assert_contract_answer(&answers[second..], 408, "REQUEST_TIMEOUT");
    assert!(took >= HEADER - Duration::from_millis(50) && took < IDLE, "the head timeout, not the idle one: {took:?}");
}

/// Pipelined requests, one with a body full of blank lines, are all answered; then the
/// connection waits for its next request for the idle time, and closes without an answer.
#[tokio::test]
async fn pipelined_requests_with_bodies_are_answered_then_the_connection_idles() {
    let addr = served().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let json = "{\"did\":\r\n\r\n\"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\"}";
    let requests = format!(
        "POST /v1/auth/challenge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{json}\
         GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        json.len()
    );
    let started = Instant::now();
    socket.write_all(requests.as_bytes()).await.unwrap();
    let answers = read_to_close(&mut socket).await;
    let took = started.elapsed();
    assert_eq!(answers.matches("HTTP/1.1 200 ").count(), 2, "{answers}");
    assert!(!answers.contains("HTTP/1.1 408 "), "{answers}");
    assert!(took >= IDLE - Duration::from_millis(50) && took < IDLE * 3, "{took:?}");
}

/// After hyper's automatic `100 Continue`, the body is timed by the body timeout, not by the
/// (shorter) head timeout: a body that takes longer than a head may, but less than a body may,
/// is served.
#[tokio::test]
async fn a_body_after_100_continue_has_the_body_timeout() {
    let (header, body) = (Duration::from_millis(300), Duration::from_millis(2_000));
    let addr = served_with(header, body).await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
    let json = format!(r#"{{"did":"{did}"}}"#);
    let head = format!(
        "POST /v1/auth/challenge HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        json.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut interim = [0u8; 25];
    socket.read_exact(&mut interim).await.unwrap();
    assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
    let (first, rest) = json.split_at(5);
    socket.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(header * 3).await;
    socket.write_all(rest.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
}

#[tokio::test]
async fn an_address_holds_at_most_its_connections() {
    let addr = served().await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        socket.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let mut buffer = [0u8; 1024];
        assert!(socket.read(&mut buffer).await.unwrap() > 0);
        held.push(socket);
    }
    let mut fourth = TcpStream::connect(addr).await.unwrap();
    let answer = read_to_close(&mut fourth).await;
    assert_contract_answer(&answer, 429, "RATE_LIMIT_EXCEEDED");
    assert!(answer.to_ascii_lowercase().contains("retry-after: 1"), "{answer}");
    assert!(answer.contains(r#""layer":"ip","limit":3"#), "the cap it hit: {answer}");
    drop(held);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut again = TcpStream::connect(addr).await.unwrap();
    again.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.unwrap();
    assert!(read_to_close(&mut again).await.starts_with("HTTP/1.1 200"), "room again once they closed");
}

#[tokio::test]
async fn what_hyper_refuses_by_itself_carries_the_contract_body() {
    let addr = served().await;
    let mut malformed = TcpStream::connect(addr).await.unwrap();
    malformed.write_all(b"NOT A REQUEST LINE\r\n\r\n").await.unwrap();
    assert_contract_answer(&read_to_close(&mut malformed).await, 400, "BAD_REQUEST");

    let mut huge = TcpStream::connect(addr).await.unwrap();
    let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\n");
    for n in 0..200 {
        head.push_str(&format!("X-Header-{n}: value\r\n"));
    }
    head.push_str("\r\n");
    huge.write_all(head.as_bytes()).await.unwrap();
    assert_contract_answer(&read_to_close(&mut huge).await, 431, "BAD_REQUEST");
}

/// A request of exactly 100 header lines is served; one more is refused 431 with INTERFACE.md
/// body (hyper's default limit, which the server keeps by not naming one).
#[tokio::test]
async fn a_head_holds_at_most_100_headers() {
    let addr = served().await;
    let head_with = |extra: usize| {
        // Host and Connection, then the extra lines.
        let mut head = String::from("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
        for n in 0..extra {
            head.push_str(&format!("X-Header-{n}: value\r\n"));
        }
        head.push_str("\r\n");
        head
    };
    let mut hundred = TcpStream::connect(addr).await.unwrap();
    hundred.write_all(head_with(98).as_bytes()).await.unwrap();
    let answer = read_to_close(&mut hundred).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "100 headers are served: {answer}");

    let mut hundred_and_one = TcpStream::connect(addr).await.unwrap();
    hundred_and_one.write_all(head_with(99).as_bytes()).await.unwrap();
    assert_contract_answer(&read_to_close(&mut hundred_and_one).await, 431, "BAD_REQUEST");
}
