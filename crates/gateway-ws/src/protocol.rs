//! The wire protocol of the event stream: the JSON frames clients and the server exchange, the
//! close codes, and the small transport-neutral message type the connection loop speaks.
//!
//! Frames are JSON text tagged by `type` (see `docs/WEBSOCKET.md`). `Event` frames are rendered
//! once per event by the hub and shared by every subscriber, so this module renders them from a
//! borrowed [`EventRecord`] without cloning its data. It deliberately knows nothing of sockets,
//! axum's upgrade machinery or the store: [`Frame`] converts to and from axum's `Message` at the
//! edge, and tests drive the loop with channels of `Frame`s.

use axum::body::Bytes;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes};
use gateway_domain::log::EventObject;
use gateway_domain::ports::EventRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Close code after a failed authentication, an expired token or a revoked membership (RFC 6455
/// "policy violation").
pub const CLOSE_POLICY: u16 = 1008;
/// Close code of a consumer that fell too far behind ("try again later"), reason `lagged`.
pub const CLOSE_TRY_AGAIN_LATER: u16 = 1013;
/// Close code at shutdown and for silent clients ("going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// Close code when the store failed under the connection ("internal error").
pub const CLOSE_INTERNAL: u16 = 1011;
/// Close code reported when the peer closed without a status.
pub const CLOSE_NO_STATUS: u16 = 1005;
/// Close code of a protocol error (an unmasked client frame, reserved bits, an unknown opcode, a
/// bad control frame).
pub const CLOSE_PROTOCOL: u16 = 1002;
/// Close code of a data type the endpoint does not accept (a binary frame).
pub const CLOSE_UNSUPPORTED_DATA: u16 = 1003;
/// Close code of a text message that is not UTF-8.
pub const CLOSE_INVALID_DATA: u16 = 1007;
/// Close code of a message over the size limit.
pub const CLOSE_TOO_BIG: u16 = 1009;

/// A frame a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ClientFrame {
    /// Authenticates the socket; must arrive within the auth timeout unless the upgrade carried
    /// `?access_token=`.
    Auth {
        /// The gateway's JWT.
        token: String,
    },
    /// Asks for the stored events with `seq > after_seq`, then `BackfillComplete`.
    Backfill {
        /// The last sequence number the client has.
        after_seq: u64,
    },
    /// An application-level liveness probe, answered with `Pong`.
    Ping,
}

/// The `event` object of an `Event` frame: the outbox record in the interface's shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPayload {
    /// The `CoopEventType` name, e.g. `PaymentCreated`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The cooperative whose stream this is.
    pub coop_id: String,
    /// When the change was committed, Unix seconds.
    pub timestamp: u64,
    /// Kind-specific data.
    pub data: Value,
}

/// A frame the server sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum ServerFrame {
    /// Authentication succeeded; live events with `seq > current_seq` follow.
    AuthOk {
        /// The token's subject.
        did: String,
        /// The cooperative of the stream.
        coop_id: String,
        /// The highest sequence number assigned so far (0 when none).
        current_seq: u64,
    },
    /// Authentication failed or timed out; a close frame with code 1008 follows.
    AuthError {
        /// Why.
        message: String,
    },
    /// One committed event.
    Event {
        /// Its per-coop sequence number.
        seq: u64,
        /// The event.
        event: EventPayload,
    },
    /// The end of a backfill: `count` events up to `current_seq` were sent.
    BackfillComplete {
        /// How many events the backfill sent.
        count: u64,
        /// The position the backfill reached; live events continue after it.
        current_seq: u64,
    },
    /// The requested events were pruned; the client must re-read state over REST. Live
    /// delivery continues from the current position.
    BackfillTruncated {
        /// The oldest retained sequence number.
        oldest_seq: u64,
    },
    /// A frame the server could not use (malformed, unexpected); the connection stays open.
    Error {
        /// What was wrong.
        message: String,
    },
    /// The answer to a client `Ping`.
    Pong,
    /// The socket ends, and a close frame follows: the gateway is stopping (the operator's
    /// reason, close 1001), the socket's DID was removed from the coop (`membership_revoked`,
    /// `null`: do not reconnect; close 1008), or its token expired (`token_expired`, `0`: log
    /// in again and reconnect; close 1008).
    Shutdown {
        /// Why.
        reason: String,
        /// When to reconnect; `null` when the operator did not say, or when reconnecting is
        /// pointless.
        reconnect_after_ms: Option<u64>,
    },
}

impl ServerFrame {
    /// The frame as JSON text.
    pub fn to_text(&self) -> Utf8Bytes {
        Utf8Bytes::from(serde_json::to_string(self).expect("server frames always serialize"))
    }
}

/// A borrowed view of an `Event` frame, so rendering does not clone the event's data.
#[derive(Serialize)]
#[serde(tag = "type", rename = "Event")]
struct EventFrameRef<'a> {
    seq: u64,
    /// The event object the coop's log holds byte for byte (INTERFACE.md §12).
    event: EventObject<'a>,
}

/// Renders the `Event` frame of an outbox record as JSON text.
pub fn render_event(record: &EventRecord) -> Utf8Bytes {
    let frame = EventFrameRef { seq: record.seq, event: EventObject::of(record) };
    Utf8Bytes::from(serde_json::to_string(&frame).expect("event frames always serialize"))
}

/// A WebSocket message as the connection loop sees it, independent of the socket library, so
/// that the loop runs over channels in tests and over axum's socket in production.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A text message (every protocol frame is one).
    Text(Utf8Bytes),
    /// A binary message; the endpoint does not accept one and closes with 1003.
    Binary(Bytes),
    /// A WebSocket ping (the server sends one every ping interval).
    Ping(Bytes),
    /// A WebSocket pong (clients answer pings with it; it counts as a sign of life).
    Pong(Bytes),
    /// A close frame with its status code and reason.
    Close {
        /// Status code (1005 when the peer sent none).
        code: u16,
        /// Human-readable reason, at most 123 bytes.
        reason: Utf8Bytes,
    },
    /// Not a frame the peer sent: the socket layer refused what it sent (INTERFACE.md §9's protocol
    /// violations), and the connection closes with `code`. Never sent.
    Violation {
        /// The RFC 6455 close code the violation calls for.
        code: u16,
        /// The close reason.
        reason: &'static str,
    },
}

impl Frame {
    /// A text frame holding a server frame.
    pub fn server(frame: &ServerFrame) -> Self {
        Frame::Text(frame.to_text())
    }

    /// A close frame.
    pub fn close(code: u16, reason: &'static str) -> Self {
        Frame::Close { code, reason: Utf8Bytes::from_static(reason) }
    }
}

impl From<Frame> for Message {
    fn from(frame: Frame) -> Self {
        match frame {
            Frame::Text(text) => Message::Text(text),
            Frame::Binary(bytes) => Message::Binary(bytes),
            Frame::Ping(bytes) => Message::Ping(bytes),
            Frame::Pong(bytes) => Message::Pong(bytes),
            Frame::Close { code, reason } => Message::Close(Some(CloseFrame { code, reason })),
            Frame::Violation { code, reason } => {
                Message::Close(Some(CloseFrame { code, reason: Utf8Bytes::from_static(reason) }))
            }
        }
    }
}

impl Frame {
    /// The frame a socket-level error becomes: a protocol violation with its close code, or
    /// `None` for errors after which nothing can be sent (the peer went away).
    pub fn violation(error: &(dyn std::error::Error + 'static)) -> Option<Self> {
        use tungstenite::error::{CapacityError, Error as WsError, ProtocolError};
        let error = error.downcast_ref::<WsError>()?;
        let (code, reason) = match error {
            WsError::Capacity(CapacityError::MessageTooLong { .. }) => (CLOSE_TOO_BIG, "message too big"),
            WsError::Capacity(_) => (CLOSE_TOO_BIG, "frame too big"),
            WsError::Utf8(_) => (CLOSE_INVALID_DATA, "invalid UTF-8"),
            WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => return None,
            WsError::Protocol(_) => (CLOSE_PROTOCOL, "protocol error"),
            _ => return None,
        };
        Some(Frame::Violation { code, reason })
    }
}

impl From<Message> for Frame {
    fn from(message: Message) -> Self {
        match message {
            Message::Text(text) => Frame::Text(text),
            Message::Binary(bytes) => Frame::Binary(bytes),
            Message::Ping(bytes) => Frame::Ping(bytes),
            Message::Pong(bytes) => Frame::Pong(bytes),
            Message::Close(Some(close)) => Frame::Close { code: close.code, reason: close.reason },
            Message::Close(None) => Frame::Close { code: CLOSE_NO_STATUS, reason: Utf8Bytes::from_static("") },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::CoopId;
    use serde_json::json;

    #[test]
    fn event_frames_have_the_contract_shape() {
        let record = EventRecord {
            coop_id: CoopId::parse("c1").unwrap(),
            seq: 7,
            event_type: "PaymentCreated".into(),
            timestamp: 1_700_000_000,
            data: json!({"amount": "1.5"}).into(),
        };
        let text = render_event(&record);
        let value: Value = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(
            value,
            json!({"type": "Event", "seq": 7, "event": {"type": "PaymentCreated", "coop_id": "c1",
                   "timestamp": 1_700_000_000u64, "data": {"amount": "1.5"}}})
        );
        // The borrowed rendering and the owned frame agree, so clients may parse with `ServerFrame`.
        let parsed: ServerFrame = serde_json::from_str(text.as_str()).unwrap();
        assert_eq!(
            parsed,
            ServerFrame::Event {
                seq: 7,
                event: EventPayload {
                    event_type: "PaymentCreated".into(),
                    coop_id: "c1".into(),
                    timestamp: 1_700_000_000,
                    data: json!({"amount": "1.5"}),
                },
            }
        );
    }

    #[test]
    fn server_frames_are_tagged_by_type() {
        let cases = [
            (
                ServerFrame::AuthOk { did: "did:key:z1".into(), coop_id: "c1".into(), current_seq: 0 },
                json!({"type": "AuthOk", "did": "did:key:z1", "coop_id": "c1", "current_seq": 0}),
            ),
            (ServerFrame::AuthError { message: "m".into() }, json!({"type": "AuthError", "message": "m"})),
            (
                ServerFrame::BackfillComplete { count: 3, current_seq: 9 },
                json!({"type": "BackfillComplete", "count": 3, "current_seq": 9}),
            ),
            (ServerFrame::BackfillTruncated { oldest_seq: 5 }, json!({"type": "BackfillTruncated", "oldest_seq": 5})),
            (ServerFrame::Error { message: "m".into() }, json!({"type": "Error", "message": "m"})),
            (ServerFrame::Pong, json!({"type": "Pong"})),
            (
                ServerFrame::Shutdown { reason: "r".into(), reconnect_after_ms: None },
                json!({"type": "Shutdown", "reason": "r", "reconnect_after_ms": null}),
            ),
            (
                ServerFrame::Shutdown { reason: "r".into(), reconnect_after_ms: Some(500) },
                json!({"type": "Shutdown", "reason": "r", "reconnect_after_ms": 500}),
            ),
        ];
        for (frame, expected) in cases {
            let value: Value = serde_json::from_str(frame.to_text().as_str()).unwrap();
            assert_eq!(value, expected);
        }
    }

    #[test]
    fn client_frames_parse() {
        assert_eq!(
            serde_json::from_str::<ClientFrame>(r#"{"type":"Auth","token":"t"}"#).unwrap(),
            ClientFrame::Auth { token: "t".into() }
        );
        assert_eq!(
            serde_json::from_str::<ClientFrame>(r#"{"type":"Backfill","after_seq":12}"#).unwrap(),
            ClientFrame::Backfill { after_seq: 12 }
        );
        assert_eq!(serde_json::from_str::<ClientFrame>(r#"{"type":"Ping"}"#).unwrap(), ClientFrame::Ping);
        assert!(serde_json::from_str::<ClientFrame>(r#"{"type":"Backfill","after_seq":-1}"#).is_err());
        assert!(serde_json::from_str::<ClientFrame>(r#"{"type":"Subscribe"}"#).is_err());
    }

    #[test]
    fn frames_round_trip_through_axum_messages() {
        for frame in [
            Frame::Text(Utf8Bytes::from("x")),
            Frame::Binary(Bytes::from_static(b"b")),
            Frame::Ping(Bytes::new()),
            Frame::Pong(Bytes::from_static(b"p")),
            Frame::close(CLOSE_TRY_AGAIN_LATER, "lagged"),
        ] {
            assert_eq!(Frame::from(Message::from(frame.clone())), frame);
        }
        assert_eq!(Frame::from(Message::Close(None)), Frame::close(CLOSE_NO_STATUS, ""));
    }
}
