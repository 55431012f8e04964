//! WebSocket protocol violations (INTERFACE.md §9), sent as raw frames over a real socket by a client
//! that breaks RFC 6455 on purpose: each is answered with a Close frame carrying the RFC's code
//! (1002 protocol error, 1003 binary, 1007 invalid UTF-8, 1009 too big), never a bare TCP reset,
//! and each counts as a `ws_protocol` violation of the client's address.

mod support;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::{serve_in_process, try_request};

/// Sends a hand-written upgrade request for `/v1/ws/c1` (with `key_header`, a whole header line
/// or nothing) and reads the answer's head; the socket and the head, as sent.
async fn upgrade(api: &str, key_header: &str) -> (TcpStream, String) {
    let mut socket = TcpStream::connect(api).await.unwrap();
    let request = format!(
        "GET /v1/ws/c1 HTTP/1.1\r\nHost: {api}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         {key_header}Sec-WebSocket-Version: 13\r\n\r\n"
    );
    socket.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        socket.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    (socket, String::from_utf8_lossy(&head).into_owned())
}

/// The `Sec-WebSocket-Key` line of a valid upgrade.
const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";

/// Opens a WebSocket to `/v1/ws/c1` by hand and returns the socket after the 101.
async fn handshake(api: &str) -> TcpStream {
    let (socket, head) = upgrade(api, KEY).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    socket
}

/// A client frame: `first` is FIN/RSV/opcode, the payload masked with a fixed key unless
/// `masked` is false.
fn frame(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(mask_bit | n as u8),
        n if n < 65536 => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        let key = [0x11, 0x22, 0x33, 0x44];
        out.extend_from_slice(&key);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

/// Reads server frames until a Close frame; returns its code. Panics if the connection ends
/// without one (a bare reset) or nothing comes within 5 s.
async fn close_code(socket: &mut TcpStream) -> u16 {
    let mut buffer = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut chunk))
            .await
            .expect("an answer within 5 s")
            .unwrap_or(0);
        assert!(read > 0 || !buffer.is_empty(), "the connection ended without a Close frame");
        buffer.extend_from_slice(&chunk[..read]);
        // Server frames are unmasked; walk them.
        let mut at = 0;
        while buffer.len() >= at + 2 {
            let opcode = buffer[at] & 0x0f;
            let (len, header) = match buffer[at + 1] & 0x7f {
                126 if buffer.len() >= at + 4 => (u16::from_be_bytes([buffer[at + 2], buffer[at + 3]]) as usize, 4),
                127 => panic!("no server frame here is that long"),
                126 => break,
                n => (n as usize, 2),
            };
            if buffer.len() < at + header + len {
                break;
            }
            if opcode == 0x8 {
                let payload = &buffer[at + header..at + header + len];
                assert!(payload.len() >= 2, "a Close frame with a code");
                return u16::from_be_bytes([payload[0], payload[1]]);
            }
            at += header + len;
        }
        assert!(read > 0, "the connection ended without a Close frame: {buffer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_protocol_violation_is_closed_with_its_rfc_6455_code() {
    let gateway = serve_in_process("memory", &["--open-enrollment", "true"]).await;
    let text = |payload: &[u8]| frame(0x81, payload, true);
    for (name, bytes, code) in [
        ("an unmasked client frame", frame(0x81, br#"{"type":"Ping"}"#, false), 1002),
        ("reserved bits", frame(0x81 | 0x40, br#"{"type":"Ping"}"#, true), 1002),
        ("an unknown data opcode", frame(0x83, b"x", true), 1002),
        ("an unknown control opcode", frame(0x8b, b"", true), 1002),
        ("a control frame over 125 bytes", frame(0x89, &[b'p'; 126], true), 1002),
        ("a fragmented control frame", frame(0x09, b"ping", true), 1002),
        ("a continuation without a start", frame(0x80, b"x", true), 1002),
        ("a binary frame", frame(0x82, b"\x00\x01", true), 1003),
        ("invalid UTF-8", text(b"{\"type\":\"\xff\xfe\"}"), 1007),
        ("a message over 64 KiB", text(&vec![b' '; 70_000]), 1009),
    ] {
        let mut socket = handshake(&gateway.api).await;
        socket.write_all(&bytes).await.unwrap();
        assert_eq!(close_code(&mut socket).await, code, "{name}");
    }
    // Counted as violations of the client's address (each from 127.0.0.1).
    let (_, metrics) = try_request(&gateway.metrics, "GET", "/metrics", None, &[]).await.unwrap();
    let counted: f64 = metrics
        .lines()
        .find(|l| l.starts_with("icn_misbehavior_violations_total{violation_type=\"ws_protocol\"}"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(counted >= 10.0, "ws_protocol violations counted: {counted}");
}

/// The upgrade is answered by the edge like any route: the 101 and a refused upgrade (400, no
/// key) both carry a fresh request id and the security headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_answers_carry_a_request_id_and_the_security_headers() {
    let gateway = serve_in_process("memory", &["--open-enrollment", "true"]).await;
    let switched = upgrade(&gateway.api, KEY).await.1.to_ascii_lowercase();
    let refused = upgrade(&gateway.api, "").await.1.to_ascii_lowercase();
    assert!(switched.starts_with("http/1.1 101"), "{switched}");
    assert!(refused.starts_with("http/1.1 400"), "{refused}");
    let id =
        |head: &str| head.lines().find_map(|l| l.strip_prefix("x-request-id: ")).map(str::to_owned).unwrap_or_default();
    for (kind, head) in [("101", &switched), ("400", &refused)] {
        assert_eq!(id(head).len(), 36, "{kind}: a fresh UUID in {head}");
        for header in [
            "x-content-type-options: nosniff",
            "x-frame-options: deny",
            "content-security-policy: default-src 'self'",
            "referrer-policy: no-referrer",
        ] {
            assert!(head.lines().any(|l| l == header), "{kind}: {header} missing from {head}");
        }
    }
    assert_ne!(id(&switched), id(&refused));
}

/// A hostile page can make its visitors' browsers open sockets and send binary frames: however
/// many, they never quarantine the address (INTERFACE.md §10), though each is still counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_frames_never_quarantine_the_address() {
    let gateway = serve_in_process("memory", &["--open-enrollment", "true", "--quarantine-violations", "3"]).await;
    for _ in 0..10 {
        let mut socket = handshake(&gateway.api).await;
        socket.write_all(&frame(0x82, b"\x00\x01", true)).await.unwrap();
        assert_eq!(close_code(&mut socket).await, 1003);
    }
    let (status, body) = try_request(&gateway.api, "GET", "/v1/health", None, &[]).await.unwrap();
    assert_eq!(status, 200, "ten binary frames over a threshold of three: {body}");
    let switched = upgrade(&gateway.api, KEY).await.1;
    assert!(switched.starts_with("HTTP/1.1 101"), "{switched}");
}

/// In production, an upgrade from a page of another origin is refused 403 with the interface's
/// body before any frame; the configured origin, and a client without `Origin`, are switched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_from_another_origin_is_refused_before_any_frame() {
    let gateway =
        serve_in_process("memory", &["--open-enrollment", "true", "--cors-origin", "https://coop.example"]).await;
    let (mut socket, head) = upgrade(&gateway.api, &format!("{KEY}Origin: https://evil.example\r\n")).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let mut rest = vec![0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut rest)).await.unwrap().unwrap();
    let body = String::from_utf8_lossy(&rest[..read]);
    assert!(body.contains("\"code\":\"AUTHORIZATION_FAILED\""), "{body}");
    assert!(body.contains("origin_not_allowed"), "{body}");
    for origin in ["Origin: https://coop.example\r\n", ""] {
        let head = upgrade(&gateway.api, &format!("{KEY}{origin}")).await.1;
        assert!(head.starts_with("HTTP/1.1 101"), "{origin:?}: {head}");
    }
}
