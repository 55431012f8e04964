//! A connection's inbound bytes, followed request by request: each head line by line to the
//! blank line that ends it, then the body its `Content-Length` declares. [`Guarded`] counts the
//! heads against the answers written, so it knows whether a request is waiting for its answer
//! (the application times it) or the connection is waiting for a request (the edge times it),
//! and a head that arrived behind another (pipelined) is held to the head timeout from its
//! first byte, not to the idle timeout.
//!
//! The framing is hyper's: blank lines before a request line are skipped, a line may end in
//! `\n` as well as `\r\n`, and a head ends at its first empty line. A body whose end only
//! decoding it would find (`Transfer-Encoding`, or a length that is not one) leaves the stream
//! [`At::Lost`] until the request's answer; counting a head that hyper does not see could leave a
//! connection without deadlines, so whatever this does not understand is never taken for a head.
//!
//! [`Guarded`]: super::Guarded

use tokio::time::Instant;

/// The longest head line kept across reads. hyper refuses a head over its 64 KiB buffer (431),
/// so a longer line is never part of a request it serves.
const MAX_KEPT: usize = 64 * 1024;

/// Where the inbound bytes stand.
#[derive(Debug, Default)]
pub(super) enum At {
    /// Between requests: nothing of the next one yet.
    #[default]
    Between,
    /// In a head whose first byte arrived at `since`.
    Head {
        since: Instant,
        /// Whether the request line is behind (the lines since are header fields).
        past_request_line: bool,
        /// The line read so far, when it spans reads.
        line: Vec<u8>,
        /// The body the fields so far declare.
        body: Body,
    },
    /// In a body, `remaining` bytes of it still to come.
    Body { remaining: u64 },
    /// In a body whose end is not followed (or a head line too long to be a request's): nothing
    /// is read into the bytes until the request's answer.
    Lost,
}

/// The body a head's fields declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// `Content-Length` bytes (none without the field).
    Length(u64),
    /// Chunked, or a length hyper refuses: its end is not followed.
    Unknown,
}

/// The follower of a connection's inbound bytes.
#[derive(Debug, Default)]
pub(super) struct Inbound {
    pub(super) at: At,
}

/// What a read brought: heads completed, and the start of a head it began and did not complete.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Followed {
    pub(super) heads: u64,
    pub(super) began: Option<Instant>,
}

impl Inbound {
    /// Follows `bytes`, read at `now`, through the stream.
    pub(super) fn follow(&mut self, mut bytes: &[u8], now: Instant) -> Followed {
        let mut followed = Followed::default();
        while !bytes.is_empty() {
            match &mut self.at {
                At::Between => {
                    // hyper skips blank lines before a request line.
                    let start = bytes.iter().position(|b| !matches!(b, b'\r' | b'\n')).unwrap_or(bytes.len());
                    bytes = &bytes[start..];
                    if !bytes.is_empty() {
                        self.at =
                            At::Head { since: now, past_request_line: false, line: Vec::new(), body: Body::Length(0) };
                        followed.began = Some(now);
                    }
                }
                At::Head { past_request_line, line, body, .. } => {
                    let Some(newline) = memchr::memchr(b'\n', bytes) else {
                        if line.len() + bytes.len() > MAX_KEPT {
                            self.at = At::Lost;
                        } else {
                            line.extend_from_slice(bytes);
                        }
                        break;
                    };
                    let ended = if line.is_empty() {
                        take_line(&bytes[..newline], past_request_line, body)
                    } else {
                        line.extend_from_slice(&bytes[..newline]);
                        let ended = take_line(line, past_request_line, body);
                        line.clear();
                        ended
                    };
                    bytes = &bytes[newline + 1..];
                    if ended {
                        followed.heads += 1;
                        self.at = match *body {
                            Body::Length(0) => At::Between,
                            Body::Length(remaining) => At::Body { remaining },
                            Body::Unknown => At::Lost,
                        };
                    }
                }
                At::Body { remaining } => {
                    let n = usize::try_from(*remaining).map_or(bytes.len(), |r| r.min(bytes.len()));
                    *remaining -= n as u64;
                    bytes = &bytes[n..];
                    if *remaining == 0 {
                        self.at = At::Between;
                    }
                }
                At::Lost => break,
            }
        }
        if !matches!(self.at, At::Head { .. }) {
            followed.began = None;
        }
        followed
    }

    /// Whether part of a request head has arrived (its client is owed an answer if it times out).
    pub(super) fn in_head(&self) -> bool {
        matches!(self.at, At::Head { .. } | At::Lost)
    }

    /// When the head in progress began, if one is.
    pub(super) fn head_since(&self) -> Option<Instant> {
        match self.at {
            At::Head { since, .. } => Some(since),
            _ => None,
        }
    }
}

/// Takes one head line (without its `\n`): whether it is the empty line that ends the head.
fn take_line(line: &[u8], past_request_line: &mut bool, body: &mut Body) -> bool {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return true;
    }
    if !*past_request_line {
        *past_request_line = true;
    } else if line.get(14) == Some(&b':') && line[..14].eq_ignore_ascii_case(b"content-length") {
        let value = line[15..].trim_ascii();
        let length = (!value.is_empty() && value.len() <= 18 && value.iter().all(u8::is_ascii_digit))
            .then(|| value.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')));
        *body = match (*body, length) {
            // A second length equal to the first is what hyper accepts; any other, it refuses.
            (Body::Length(0), Some(n)) => Body::Length(n),
            (Body::Length(m), Some(n)) if m == n => Body::Length(n),
            _ => Body::Unknown,
        };
    } else if line.get(17) == Some(&b':') && line[..17].eq_ignore_ascii_case(b"transfer-encoding") {
        *body = Body::Unknown;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn heads_in(reads: &[&[u8]]) -> (u64, Inbound) {
        let (mut inbound, now) = (Inbound::default(), Instant::now());
        let heads = reads.iter().map(|read| inbound.follow(read, now).heads).sum();
        (heads, inbound)
    }

    #[test]
    fn a_head_and_its_body_then_the_next_head() {
        let (heads, inbound) = heads_in(&[
            b"POST /a HTTP/1.1\r\nContent-Length: 12\r\n\r\n\r\n\r\nGET /b HTT",
            b"P/1.1\r\n\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n",
        ]);
        assert_eq!(heads, 2, "the body's blank lines are body, not heads");
        assert!(inbound.head_since().is_some(), "/c's head is under way");
    }

    #[test]
    fn a_length_spanning_reads_and_lf_only_lines() {
        let (heads, inbound) =
            heads_in(&[b"PUT /a HTTP/1.1\ncontent-len", b"gth:  3 \n", b"\nabc", b"GET / HTTP/1.1\n\n"]);
        assert_eq!(heads, 2);
        assert!(matches!(inbound.at, At::Between));
    }

    #[test]
    fn blank_lines_before_a_request_are_skipped() {
        let (heads, inbound) = heads_in(&[b"\r\n\r\n\n", b"\r\nGET / HTTP/1.1\r\n\r\n"]);
        assert_eq!(heads, 1);
        assert!(matches!(inbound.at, At::Between));
    }

    #[test]
    fn a_chunked_or_doubtful_body_is_not_followed() {
        for head in [
            &b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: -3\r\n\r\n",
        ] {
            let (heads, inbound) = heads_in(&[head, b"3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n"]);
            assert_eq!(heads, 1, "{}", String::from_utf8_lossy(head));
            assert!(matches!(inbound.at, At::Lost));
        }
    }

    #[test]
    fn equal_lengths_are_one_length() {
        let (heads, inbound) = heads_in(&[b"POST / HTTP/1.1\r\nContent-Length: 2\r\ncontent-length: 2\r\n\r\nab"]);
        assert_eq!(heads, 1);
        assert!(matches!(inbound.at, At::Between));
    }

    #[test]
    fn a_line_longer_than_any_head_is_lost() {
        let long = vec![b'a'; MAX_KEPT];
        let (heads, inbound) = heads_in(&[b"GET / HTTP/1.1\r\nX-Long: ", &long, b"\r\n\r\n"]);
        assert_eq!(heads, 0);
        assert!(inbound.in_head(), "still owed a 408 when its deadline passes");
    }

    /// A request of the strategy below: a head with a declared body.
    fn request(path: u8, body: &[u8], lf_only: bool, padding: usize) -> Vec<u8> {
        let eol = if lf_only { "\n" } else { "\r\n" };
        let mut out = "\r\n".repeat(padding).into_bytes();
        out.extend(format!("POST /{path} HTTP/1.1{eol}Host: x{eol}Content-Length: {}{eol}{eol}", body.len()).bytes());
        out.extend_from_slice(body);
        out
    }

    proptest! {
        /// However a stream of requests (bodies full of blank lines and head-like text
        /// included) is cut into reads, every head is counted once, in the read that ends it,
        /// and the stream ends between requests.
        #[test]
        fn every_head_is_counted_once_across_any_split(
            requests in proptest::collection::vec(
                (any::<u8>(), proptest::collection::vec(prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'G'), Just(b'a')], 0..30), any::<bool>(), 0usize..3),
                1..6,
            ),
            cuts in proptest::collection::vec(1usize..40, 1..12),
        ) {
            let stream: Vec<u8> =
                requests.iter().flat_map(|(path, body, lf, pad)| request(*path, body, *lf, *pad)).collect();
            let (mut inbound, now) = (Inbound::default(), Instant::now());
            let (mut at, mut heads) = (0, 0);
            for cut in cuts.iter().cycle() {
                if at >= stream.len() {
                    break;
                }
                let end = (at + cut).min(stream.len());
                heads += inbound.follow(&stream[at..end], now).heads;
                at = end;
            }
            prop_assert_eq!(heads, requests.len() as u64);
            prop_assert!(matches!(inbound.at, At::Between), "{:?}", inbound.at);
        }
    }
}
