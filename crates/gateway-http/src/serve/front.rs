//! The front of a plain HTTP connection: while its requests are plain balance reads, the
//! connection answers them itself ([`crate::hot::Front`]); at the first request that is anything
//! else, the connection, with every byte read so far, goes to hyper for the rest of its life.
//!
//! A request is a plain balance read when its head parses completely, as hyper's parser
//! (`httparse`, hyper's configuration) parses it, and is a `GET` of HTTP/1.1 whose target is the
//! balance route's exact shape, of unreserved and sub-delimiter characters only, and has no field
//! that makes hyper or the router do anything else: no body (`Content-Length`,
//! `Transfer-Encoding`), no `Connection`, `Upgrade` or `Expect`, no `Origin` (cross-origin
//! headers), no request signature. Nothing is decided and nothing is counted before that: a
//! request left to hyper is read by hyper from its first byte. Deadlines are the socket's
//! ([`super::Guarded`]), which follows the bytes read and the answers written whoever reads and
//! writes them.

use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::watch;

use crate::hot::{Front, PlainRead};

/// At most this much of a head is read here; a longer one is left to hyper (which takes heads up
/// to its 64 KiB buffer).
const MAX_HEAD: usize = 16 * 1024;

/// Header fields a request may have at most, as hyper's default (more: hyper answers 431).
const MAX_FIELDS: usize = 100;

/// Fields whose presence leaves a request to hyper and the router.
const LEFT_TO_HYPER: [&str; 8] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "expect",
    "origin",
    "signature",
    "signature-input",
];

/// What the buffered bytes begin with.
#[derive(Debug)]
pub(super) enum Head<'a> {
    /// A plain balance read, whose head is the first `len` bytes.
    Plain { len: usize, read: PlainRead<'a> },
    /// Not a whole head yet, and it may still be one.
    Incomplete,
    /// Anything else: hyper's.
    Other,
}

/// Classifies the start of `bytes` (see the module's description).
pub(super) fn classify(bytes: &[u8]) -> Head<'_> {
    // hyper's parser configuration (the default) over slots it need not clear first, as hyper's.
    let mut slots = [const { std::mem::MaybeUninit::uninit() }; MAX_FIELDS];
    let mut request = httparse::Request::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_request_with_uninit_headers(&mut request, bytes, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Partial) if bytes.len() < MAX_HEAD => return Head::Incomplete,
        Ok(httparse::Status::Complete(_)) => return Head::Other,
        Ok(httparse::Status::Partial) | Err(_) => return Head::Other,
    };
    let (Some("GET"), Some(1), Some(path)) = (request.method, request.version, request.path) else {
        return Head::Other;
    };
    let Some((coop, did)) = crate::hot::balance_path(path).filter(|_| path.bytes().all(plain)) else {
        return Head::Other;
    };
    let mut authorization = None;
    let mut proxy: Option<HeaderMap> = None;
    for field in request.headers.iter() {
        let kept = match field.name {
            name if LEFT_TO_HYPER.iter().any(|left| name.eq_ignore_ascii_case(left)) => return Head::Other,
            name if name.eq_ignore_ascii_case("authorization") => {
                if authorization.replace(field.value).is_some() {
                    return Head::Other;
                }
                continue;
            }
            name if name.eq_ignore_ascii_case("x-forwarded-for") => HeaderName::from_static("x-forwarded-for"),
            name if name.eq_ignore_ascii_case("x-request-id") => crate::middleware::REQUEST_ID,
            _ => continue,
        };
        let Ok(value) = HeaderValue::from_bytes(field.value) else { return Head::Other };
        proxy.get_or_insert_with(HeaderMap::new).append(kept, value);
    }
    Head::Plain { len, read: PlainRead { path, coop, did, authorization, proxy } }
}

/// A byte of a plain path: unreserved, a sub-delimiter, `:`, `@` or `/` (RFC 3986), never `%`,
/// `?` or `#`.
fn plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&byte)
}

/// How the front left a connection.
pub(super) enum Left {
    /// Closed: the client went away, a deadline passed, or the gateway is stopping and nothing
    /// was under way.
    Closed,
    /// To hyper, with the bytes read and not answered; `stopping` when the shutdown signal has
    /// come already.
    ToHyper { stopping: bool },
}

/// Answers the connection's plain balance reads until it closes or a request is anything else.
/// (An answer the client does not take within the idle timeout closes the connection: the
/// socket's write deadline, [`super::Guarded`].)
pub(super) async fn serve<T: AsyncRead + AsyncWrite + Unpin>(
    front: &Front,
    io: &mut T,
    buffer: &mut BytesMut,
    peer: IpAddr,
    stopped: &mut watch::Receiver<()>,
) -> Left {
    let (mut out, mut body) = (Vec::new(), Vec::new());
    // Whether the shutdown signal has come, asked without waiting (and without the channel's
    // lock); the wait itself is one future for the connection's whole time here.
    let probe = stopped.clone();
    let stop = stopped.changed();
    tokio::pin!(stop);
    // How much of the buffer is known to hold no end of a head: a head that arrives in pieces
    // is parsed once it may be whole, not again after every piece.
    let mut searched = 0;
    loop {
        if buffer.len() >= MAX_HEAD || may_end_head(buffer, searched) {
            match classify(buffer) {
                Head::Plain { len, read } => {
                    out.clear();
                    if front.answer(read, peer, &mut out, &mut body).await.is_err() {
                        return Left::Closed;
                    }
                    buffer.advance(len);
                    searched = 0;
                    // The shutdown signal: the answer under way says the connection closes, as
                    // hyper's graceful shutdown does, and it does.
                    let closing = probe.has_changed().unwrap_or(true);
                    if closing {
                        closes(&mut out);
                    }
                    if io.write_all(&out).await.is_err() || closing {
                        return Left::Closed;
                    }
                    continue;
                }
                Head::Incomplete => {}
                Head::Other => return Left::ToHyper { stopping: false },
            }
        }
        searched = buffer.len();
        buffer.reserve(4096);
        tokio::select! {
            read = io.read_buf(buffer) => match read {
                Ok(0) | Err(_) => return Left::Closed,
                Ok(_) => {}
            },
            _ = &mut stop => {
                // Idle: close now. Part of a head: hyper reads the rest and answers it.
                return if buffer.is_empty() { Left::Closed } else { Left::ToHyper { stopping: true } };
            }
        }
    }
}

/// Whether `bytes` past the first `searched` (known to hold no end of a head) may complete a
/// head: an empty line, `\n\n` or `\n\r\n` (a line may end in `\n` alone, as hyper reads it).
fn may_end_head(bytes: &[u8], searched: usize) -> bool {
    let from = &bytes[searched.saturating_sub(2)..];
    memchr::memmem::find(from, b"\n\r\n").is_some() || memchr::memmem::find(from, b"\n\n").is_some()
}

/// Adds `connection: close` to the answer in `out` (a head and its body).
fn closes(out: &mut Vec<u8>) {
    if let Some(end) = memchr::memmem::find(out, b"\r\n\r\n") {
        out.splice(end + 2..end + 2, b"connection: close\r\n".iter().copied());
    }
}

/// A socket whose first bytes are the ones the front read before leaving the connection to
/// hyper.
pub(super) struct Rewind<T> {
    read: Bytes,
    inner: T,
}

impl<T> Rewind<T> {
    pub(super) fn new(read: Bytes, inner: T) -> Self {
        Self { read, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if !self.read.is_empty() {
            let n = self.read.len().min(buf.remaining());
            buf.put_slice(&self.read[..n]);
            self.read.advance(n);
            if self.read.is_empty() {
                // The front's buffer is not kept for the connection's life.
                self.read = Bytes::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Rewind<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DID: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

    fn head(lines: &[&str]) -> Vec<u8> {
        let mut text = lines.join("\r\n");
        text.push_str("\r\n\r\n");
        text.into_bytes()
    }

    #[test]
    fn a_plain_read_is_taken_with_its_fields() {
        let bytes = head(&[
            &format!("GET /v1/ledger/c1/balance/{DID} HTTP/1.1"),
            "Host: x",
            "Authorization: Bearer a",
            "User-Agent: test",
            "X-Forwarded-For: 10.0.0.1",
            "x-request-id: r1",
            "X-Forwarded-For: 10.0.0.2",
        ]);
        let mut pipelined = bytes.clone();
        pipelined.extend_from_slice(b"GET /next");
        let Head::Plain { len, read } = classify(&pipelined) else { panic!("taken") };
        assert_eq!(len, bytes.len(), "the head only");
        assert_eq!(read.path, format!("/v1/ledger/c1/balance/{DID}"));
        assert_eq!((read.coop, read.did), ("c1", DID));
        assert_eq!(read.authorization, Some(b"Bearer a".as_slice()));
        let proxy = read.proxy.expect("the proxy's fields");
        assert_eq!(proxy.get_all("x-forwarded-for").iter().collect::<Vec<_>>(), ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(proxy.get("x-request-id").unwrap(), "r1");
        assert_eq!(proxy.len(), 3, "nothing else is kept");
        let bare = head(&[&format!("GET /v1/ledger/c1/balance/{DID} HTTP/1.1"), "Host: x"]);
        let Head::Plain { read, .. } = classify(&bare) else { panic!("taken") };
        assert!(read.authorization.is_none() && read.proxy.is_none());
    }

    proptest::proptest! {
        /// Every path the front takes is a URI hyper would have made of it (the router's steps
        /// get it as one when they answer).
        #[test]
        fn a_plain_path_is_a_uri(coop in "[-._~!$&'()*+,;=:@A-Za-z0-9]{1,40}", did in "[-._~!$&'()*+,;=:@A-Za-z0-9]{1,80}") {
            let path = format!("/v1/ledger/{coop}/balance/{did}");
            let bytes = head(&[&format!("GET {path} HTTP/1.1")]);
            let Head::Plain { read, .. } = classify(&bytes) else { panic!("taken: {path}") };
            let uri: axum::http::Uri = read.path.parse().expect("a URI");
            proptest::prop_assert_eq!(uri.path(), path.as_str());
            proptest::prop_assert!(uri.query().is_none());
        }
    }

    #[test]
    fn anything_else_is_left_to_hyper() {
        let plain = format!("GET /v1/ledger/c1/balance/{DID} HTTP/1.1");
        let others = [
            head(&[&format!("HEAD /v1/ledger/c1/balance/{DID} HTTP/1.1")]),
            head(&[&format!("POST /v1/ledger/c1/balance/{DID} HTTP/1.1")]),
            head(&[&format!("GET /v1/ledger/c1/balance/{DID} HTTP/1.0")]),
            head(&[&format!("GET /v1/ledger/c1/balance/{DID}?currency=h HTTP/1.1")]),
            head(&["GET /v1/ledger/c1/balance/did%3Akey HTTP/1.1"]),
            head(&[&format!("GET /v1/ledger/c1/balance/{DID}/ HTTP/1.1")]),
            head(&[&format!("GET /v1/ledger/c1/balance/{DID}#x HTTP/1.1")]),
            head(&[&format!("GET /v1/ledger/c\"1/balance/{DID} HTTP/1.1")]),
            head(&[&format!("GET http://host/v1/ledger/c1/balance/{DID} HTTP/1.1")]),
            head(&["GET /v1/ledger/c1/history HTTP/1.1"]),
            head(&["GET /v1/health HTTP/1.1"]),
            head(&[&plain, "Content-Length: 0"]),
            head(&[&plain, "Transfer-Encoding: chunked"]),
            head(&[&plain, "Connection: keep-alive"]),
            head(&[&plain, "connection: close"]),
            head(&[&plain, "Upgrade: websocket"]),
            head(&[&plain, "Expect: 100-continue"]),
            head(&[&plain, "Origin: https://app.example"]),
            head(&[&plain, "Signature-Input: sig1=()"]),
            head(&[&plain, "SIGNATURE: sig1=:AA:"]),
            head(&[&plain, "Bad Name: x"]),
            head(&[&plain, "Authorization: Bearer a", "authorization: Bearer b"]),
            b"GARBAGE\r\n\r\n".to_vec(),
            vec![b'G'; MAX_HEAD],
            head(&[&plain, &format!("x-long: {}", "a".repeat(MAX_HEAD))]),
        ];
        for bytes in others {
            assert!(matches!(classify(&bytes), Head::Other), "{}", String::from_utf8_lossy(&bytes));
        }
        let many: Vec<String> = (0..=MAX_FIELDS).map(|i| format!("x-{i}: y")).collect();
        let mut lines = vec![plain.as_str()];
        lines.extend(many.iter().map(String::as_str));
        assert!(matches!(classify(&head(&lines)), Head::Other), "more fields than hyper takes");
    }

    #[test]
    fn a_head_is_parsed_once_it_may_be_whole() {
        let bytes = head(&[&format!("GET /v1/ledger/c1/balance/{DID} HTTP/1.1"), "Authorization: Bearer a"]);
        assert!(may_end_head(&bytes, 0));
        for cut in 1..bytes.len() {
            // Whatever was searched before, the end is found among the new bytes.
            assert!(may_end_head(&bytes, cut.min(bytes.len() - 1)), "searched {cut}");
        }
        assert!(!may_end_head(&bytes[..bytes.len() - 2], 0), "no empty line yet");
        assert!(may_end_head(b"GET / HTTP/1.1\nhost: x\n\n", 10), "lines ending in LF");
        assert!(may_end_head(b"GET / HTTP/1.1\nhost: x\n\r\n", 24));
    }

    #[test]
    fn an_answer_at_shutdown_says_the_connection_closes() {
        let mut out = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody".to_vec();
        closes(&mut out);
        assert_eq!(out, b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbody");
    }

    #[test]
    fn a_head_under_way_is_waited_for() {
        let bytes = head(&[&format!("GET /v1/ledger/c1/balance/{DID} HTTP/1.1"), "Authorization: Bearer a"]);
        for cut in [0, 1, 10, bytes.len() - 1] {
            assert!(matches!(classify(&bytes[..cut]), Head::Incomplete), "{cut} bytes");
        }
    }
}
