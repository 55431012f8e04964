//! The event subscriber: follows a cooperative's stream (`/v1/ws/{coop_id}`, docs/INTERFACE.md §9) and
//! survives disconnections.
//!
//! A background task connects, authenticates with `Auth{token}` (a fresh token from the client
//! each time, so a long watch outlives token expiry), and after `AuthOk` resumes with
//! `Backfill{after_seq: last_seen}`. Events are de-duplicated by `seq` and delivered in order;
//! a jump in `seq` is reported as a [`StreamItem::Gap`] and a pruned backfill as a
//! [`StreamItem::Truncated`] (the caller must re-read state over REST), never skipped
//! silently. An `AuthError` leads to one fresh login (when the client holds credentials)
//! before the subscriber gives up; a `Shutdown` for `membership_revoked` ends the subscription
//! with an authorization error at once. After any other `Shutdown` frame the task waits the `reconnect_after_ms` the gateway
//! asked for; after any other loss, a bounded exponential backoff.
//!
//! The task does not interpret event payloads, and does not persist its position: a caller
//! that must resume across process restarts stores the last `seq` it handled and passes it as
//! [`SubscribeOptions::after_seq`].

use std::collections::BTreeMap;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{SinkExt, Stream, StreamExt};
use gateway_core::{CoopId, JsonText};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Client;
use crate::error::Error;

/// Close code of a consumer the gateway dropped for falling behind (`lagged`).
const CLOSE_LAGGED: u16 = 1013;

/// How to follow a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// Resume after this sequence number (events with a greater `seq` are delivered, older
    /// ones come from a backfill). `None`: only events after the moment of connecting.
    pub after_seq: Option<u64>,
    /// The first reconnection delay after a loss; doubled on each failed attempt.
    pub min_backoff: Duration,
    /// The reconnection delay never exceeds this.
    pub max_backoff: Duration,
    /// How often an application `Ping` is sent, so that the gateway (which drops clients silent
    /// for 60 s) and proxies see a live connection.
    pub ping_interval: Duration,
    /// How long to wait for `AuthOk` after connecting.
    pub auth_timeout: Duration,
    /// Items buffered for a slow reader before the task waits for it.
    pub buffer: usize,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        Self {
            after_seq: None,
            min_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(30),
            ping_interval: Duration::from_secs(25),
            auth_timeout: Duration::from_secs(10),
            buffer: 256,
        }
    }
}

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoopEvent {
    /// Its per-coop sequence number.
    pub seq: u64,
    /// The `CoopEventType` name, e.g. `PaymentCreated`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The coop.
    pub coop_id: String,
    /// Unix seconds.
    pub timestamp: u64,
    /// Kind-specific data, as the exact text the gateway sent (amounts keep every digit; read
    /// it with [`JsonText::read`] into a type of yours, or [`JsonText::to_value`] to inspect).
    pub data: JsonText,
}

/// What the subscriber reports.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A connection was authenticated (`AuthOk`); `resuming_after` is the position a backfill
    /// was asked from, if any.
    Connected {
        /// The token's subject.
        did: String,
        /// The coop.
        coop_id: String,
        /// The highest sequence number assigned at connection time.
        current_seq: u64,
        /// `Some(n)`: events after `n` are being backfilled.
        resuming_after: Option<u64>,
    },
    /// An event, in `seq` order, each `seq` at most once.
    Event(CoopEvent),
    /// A backfill ended.
    BackfillComplete {
        /// Events the backfill sent (duplicates included).
        count: u64,
        /// The position it reached.
        current_seq: u64,
    },
    /// Events `first_missing..=last_missing` never arrived.
    Gap {
        /// The first missing `seq`.
        first_missing: u64,
        /// The last missing `seq`.
        last_missing: u64,
    },
    /// The backfill asked for events the gateway no longer keeps (older than `oldest_seq`):
    /// re-read the state over REST. Live delivery goes on.
    Truncated {
        /// The oldest retained `seq`.
        oldest_seq: u64,
    },
    /// The gateway reported a problem with a frame; the connection stays open.
    ServerError {
        /// The gateway's message.
        message: String,
    },
    /// The connection was lost or closed; the subscriber reconnects after `reconnect_in`.
    Disconnected {
        /// Why (a `Shutdown` reason, a close reason, a network error).
        reason: String,
        /// The delay before the next attempt.
        reconnect_in: Duration,
    },
    /// The subscriber gave up (authentication refused, route missing, no credentials); this is
    /// the last item.
    Failed(Error),
}

/// A running subscription. Dropping it stops the background task.
#[derive(Debug)]
pub struct Subscription {
    items: mpsc::Receiver<StreamItem>,
    task: JoinHandle<()>,
}

impl Subscription {
    /// The next item; `None` once the subscriber has stopped (after [`StreamItem::Failed`]).
    pub async fn next(&mut self) -> Option<StreamItem> {
        self.items.recv().await
    }

    /// Stops the background task.
    pub fn close(self) {
        self.task.abort();
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream for Subscription {
    type Item = StreamItem;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<StreamItem>> {
        self.items.poll_recv(cx)
    }
}

impl Client {
    /// Follows `coop`'s event stream in a background task (see the module docs). The client
    /// must be able to produce tokens for that coop (a login or a session).
    pub fn subscribe(&self, coop: &CoopId, options: SubscribeOptions) -> Subscription {
        let (sender, items) = mpsc::channel(options.buffer.max(1));
        let worker = Worker { client: self.clone(), coop: coop.clone(), options, sender };
        Subscription { items, task: tokio::spawn(worker.run()) }
    }
}

/// Frames the gateway sends (docs/INTERFACE.md §9.3). Unknown types are ignored for forward
/// compatibility.
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
enum ServerFrame {
    AuthOk { did: String, coop_id: String, current_seq: u64 },
    AuthError { message: String },
    Event { seq: u64, event: EventBody },
    BackfillComplete { count: u64, current_seq: u64 },
    BackfillTruncated { oldest_seq: u64 },
    Error { message: String },
    Pong,
    Shutdown { reason: String, reconnect_after_ms: Option<u64> },
}

#[derive(Debug, Deserialize)]
struct EventBody {
    #[serde(rename = "type")]
    event_type: String,
    coop_id: String,
    timestamp: u64,
    #[serde(default)]
    data: JsonText,
}

/// Reads a frame. An `Event` is read on its own, straight from the text, so that its data keeps
/// its exact numbers: an internally tagged enum reads through serde's buffer, where a number
/// becomes an `f64` and raw text cannot be kept.
fn parse_frame(text: &str) -> Option<ServerFrame> {
    #[derive(Deserialize)]
    struct Kind<'a> {
        #[serde(rename = "type", borrow)]
        kind: std::borrow::Cow<'a, str>,
    }
    #[derive(Deserialize)]
    struct EventFrame {
        seq: u64,
        event: EventBody,
    }
    let Kind { kind } = serde_json::from_str(text).ok()?;
    if kind == "Event" {
        let EventFrame { seq, event } = serde_json::from_str(text).ok()?;
        return Some(ServerFrame::Event { seq, event });
    }
    serde_json::from_str(text).ok()
}

/// Frames the client sends.
#[derive(Debug, Serialize)]
#[serde(tag = "type")]
enum ClientFrame<'a> {
    Auth { token: &'a str },
    Backfill { after_seq: u64 },
    Ping,
}

impl ClientFrame<'_> {
    fn message(&self) -> Message {
        Message::Text(serde_json::to_string(self).expect("client frames serialise").into())
    }
}

/// Orders events by `seq`: drops repeats, holds events that arrive ahead of a running
/// backfill, and reports holes. Pure, so its rules are tested without sockets.
#[derive(Debug, Default)]
struct Sequencer {
    last_seen: Option<u64>,
    backfill_pending: bool,
    held: BTreeMap<u64, CoopEvent>,
}

impl Sequencer {
    /// A fresh connection authenticated at `current_seq`; returns the position to backfill
    /// from, if any.
    fn connected(&mut self, current_seq: u64) -> Option<u64> {
        self.held.clear();
        match self.last_seen {
            Some(last) => {
                self.backfill_pending = true;
                Some(last)
            }
            None => {
                self.last_seen = Some(current_seq);
                self.backfill_pending = false;
                None
            }
        }
    }

    fn event(&mut self, event: CoopEvent, out: &mut Vec<StreamItem>) {
        let last = self.last_seen.unwrap_or(0);
        if event.seq <= last && self.last_seen.is_some() {
            return;
        }
        if event.seq > last + 1 && self.last_seen.is_some() {
            if self.backfill_pending {
                self.held.insert(event.seq, event);
                return;
            }
            out.push(StreamItem::Gap { first_missing: last + 1, last_missing: event.seq - 1 });
        }
        self.deliver(event, out);
        self.release(out, false);
    }

    fn deliver(&mut self, event: CoopEvent, out: &mut Vec<StreamItem>) {
        self.last_seen = Some(event.seq);
        out.push(StreamItem::Event(event));
    }

    /// Delivers held events: the contiguous ones, or (`all`) every one, reporting holes.
    fn release(&mut self, out: &mut Vec<StreamItem>, all: bool) {
        while let Some(entry) = self.held.first_entry() {
            let last = self.last_seen.unwrap_or(0);
            let seq = *entry.key();
            if seq <= last {
                entry.remove();
                continue;
            }
            if seq > last + 1 {
                if !all {
                    break;
                }
                out.push(StreamItem::Gap { first_missing: last + 1, last_missing: seq - 1 });
            }
            let event = entry.remove();
            self.deliver(event, out);
        }
    }

    fn backfill_complete(&mut self, out: &mut Vec<StreamItem>) {
        self.backfill_pending = false;
        self.release(out, true);
    }

    /// The backfill could not reach back far enough; live delivery goes on from the
    /// position the gateway had, so nothing up to it is reported as a gap.
    fn truncated(&mut self, current_seq: u64, out: &mut Vec<StreamItem>) {
        self.backfill_pending = false;
        self.last_seen = Some(self.last_seen.unwrap_or(0).max(current_seq));
        self.release(out, true);
    }
}

/// Why a connection ended.
enum Ended {
    /// Reconnect after this delay (`None`: the backoff), reporting `reason`.
    Retry { reason: String, delay: Option<Duration> },
    /// The gateway refused the token; the client dropped it and can log in again.
    AuthRefused(String),
    /// Stop for good.
    Fatal(Error),
    /// The reader dropped the subscription.
    ReaderGone,
}

struct Worker {
    client: Client,
    coop: CoopId,
    options: SubscribeOptions,
    sender: mpsc::Sender<StreamItem>,
}

impl Worker {
    async fn run(self) {
        let mut sequencer = Sequencer { last_seen: self.options.after_seq, ..Sequencer::default() };
        let mut failures: u32 = 0;
        let mut auth_refused_once = false;
        loop {
            let (ended, authenticated) = self.connection(&mut sequencer).await;
            if authenticated {
                failures = 0;
                auth_refused_once = false;
            }
            let (reason, delay) = match ended {
                Ended::ReaderGone => return,
                Ended::AuthRefused(message) if !auth_refused_once => {
                    // The token may have been revoked or the gateway's secret rotated: one
                    // fresh login is worth a try before giving up.
                    auth_refused_once = true;
                    (format!("authentication refused ({message}); logging in again"), Some(self.options.min_backoff))
                }
                Ended::AuthRefused(message) => {
                    let _ = self.sender.send(StreamItem::Failed(Error::Authentication { message, reason: None })).await;
                    return;
                }
                Ended::Fatal(error) => {
                    let _ = self.sender.send(StreamItem::Failed(error)).await;
                    return;
                }
                Ended::Retry { reason, delay } => (reason, delay),
            };
            let delay = delay.unwrap_or_else(|| self.backoff(failures));
            failures = failures.saturating_add(1);
            if self.sender.send(StreamItem::Disconnected { reason, reconnect_in: delay }).await.is_err() {
                return;
            }
            tokio::time::sleep(delay).await;
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        self.options.min_backoff.saturating_mul(2u32.saturating_pow(failures.min(20))).min(self.options.max_backoff)
    }

    fn url(&self) -> String {
        let mut url = self.client.url(&["v1".into(), "ws".into(), self.coop.to_string()]);
        let scheme = if url.scheme() == "https" { "wss" } else { "ws" };
        url.set_scheme(scheme).expect("ws and wss are valid schemes for an http(s) URL");
        url.to_string()
    }

    /// One connection, from connecting to its end. Also says whether it got past `AuthOk`.
    async fn connection(&self, sequencer: &mut Sequencer) -> (Ended, bool) {
        let token = match self.client.token().await {
            Ok(token) => token,
            Err(error @ (Error::Transport { .. } | Error::Server { .. } | Error::RateLimited { .. })) => {
                return (Ended::Retry { reason: format!("cannot log in: {error}"), delay: None }, false);
            }
            Err(error) => return (Ended::Fatal(error), false),
        };
        let connector = tokio_tungstenite::Connector::Rustls(self.client.inner.tls.clone());
        let connected = tokio_tungstenite::connect_async_tls_with_config(self.url(), None, true, Some(connector)).await;
        let mut socket = match connected {
            Ok((socket, _)) => socket,
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let status = response.status().as_u16();
                let body = response.body().as_deref().unwrap_or_default();
                let error = Error::from_response(status, None, body);
                return match error {
                    Error::Server { .. } | Error::RateLimited { .. } => {
                        (Ended::Retry { reason: format!("upgrade refused: {error}"), delay: None }, false)
                    }
                    _ => (Ended::Fatal(error), false),
                };
            }
            Err(error) => return (Ended::Retry { reason: format!("cannot connect: {error}"), delay: None }, false),
        };
        if socket.send(ClientFrame::Auth { token: &token }.message()).await.is_err() {
            return (Ended::Retry { reason: "connection lost while authenticating".into(), delay: None }, false);
        }
        let mut authenticated = false;
        let mut auth_current_seq = 0;
        let mut shutdown_delay: Option<Option<Duration>> = None;
        let mut shutdown_reason = String::new();
        let auth_deadline = tokio::time::sleep(self.options.auth_timeout);
        tokio::pin!(auth_deadline);
        let mut ping = tokio::time::interval(self.options.ping_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            let message = tokio::select! {
                message = socket.next() => message,
                _ = &mut auth_deadline, if !authenticated => {
                    return (Ended::Retry { reason: "no AuthOk in time".into(), delay: None }, false);
                }
                _ = ping.tick() => {
                    if socket.send(ClientFrame::Ping.message()).await.is_err() {
                        return (Ended::Retry { reason: "connection lost".into(), delay: None }, authenticated);
                    }
                    continue;
                }
            };
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) =
                        frame.map(|f| (u16::from(f.code), f.reason.to_string())).unwrap_or((1005, String::new()));
                    if let Some(delay) = shutdown_delay {
                        return (Ended::Retry { reason: shutdown_reason, delay }, authenticated);
                    }
                    let delay = (code == CLOSE_LAGGED).then_some(self.options.min_backoff);
                    let reason = if reason.is_empty() {
                        format!("closed by the gateway ({code})")
                    } else {
                        format!("closed by the gateway ({code} {reason})")
                    };
                    return (Ended::Retry { reason, delay }, authenticated);
                }
                Some(Ok(_)) => continue,
                Some(Err(error)) => {
                    let reason =
                        if shutdown_delay.is_some() { shutdown_reason } else { format!("connection lost: {error}") };
                    return (Ended::Retry { reason, delay: shutdown_delay.flatten() }, authenticated);
                }
                None => {
                    let reason = if shutdown_delay.is_some() { shutdown_reason } else { "connection closed".into() };
                    return (Ended::Retry { reason, delay: shutdown_delay.flatten() }, authenticated);
                }
            };
            let Some(frame) = parse_frame(text.as_str()) else {
                tracing::debug!(frame = text.as_str(), "ignoring an unknown frame");
                continue;
            };
            let mut out = Vec::new();
            match frame {
                ServerFrame::AuthOk { did, coop_id, current_seq } => {
                    authenticated = true;
                    let resume = sequencer.connected(current_seq);
                    out.push(StreamItem::Connected { did, coop_id, current_seq, resuming_after: resume });
                    if let Some(after_seq) = resume
                        && socket.send(ClientFrame::Backfill { after_seq }.message()).await.is_err()
                    {
                        return (Ended::Retry { reason: "connection lost".into(), delay: None }, true);
                    }
                    auth_current_seq = current_seq;
                }
                ServerFrame::AuthError { message } => {
                    let _ = socket.close(None).await;
                    if self.client.invalidate_session(&token).await {
                        return (Ended::AuthRefused(message), false);
                    }
                    return (Ended::Fatal(Error::Authentication { message, reason: None }), false);
                }
                ServerFrame::Event { seq, event } => sequencer.event(
                    CoopEvent {
                        seq,
                        event_type: event.event_type,
                        coop_id: event.coop_id,
                        timestamp: event.timestamp,
                        data: event.data,
                    },
                    &mut out,
                ),
                ServerFrame::BackfillComplete { count, current_seq } => {
                    sequencer.backfill_complete(&mut out);
                    out.push(StreamItem::BackfillComplete { count, current_seq });
                }
                ServerFrame::BackfillTruncated { oldest_seq } => {
                    out.push(StreamItem::Truncated { oldest_seq });
                    sequencer.truncated(auth_current_seq, &mut out);
                }
                ServerFrame::Error { message } => out.push(StreamItem::ServerError { message }),
                ServerFrame::Pong => {}
                ServerFrame::Shutdown { reason, .. } if reason == "membership_revoked" => {
                    // No longer a member: reconnecting cannot succeed, so the subscription ends.
                    let _ = socket.send(Message::Close(None)).await;
                    return (
                        Ended::Fatal(Error::Authorization {
                            message: "the gateway ended the stream: this DID is no longer a member of the cooperative"
                                .into(),
                            required_scopes: Vec::new(),
                            refused_scopes: Vec::new(),
                            reason: Some(reason),
                            trust: None,
                        }),
                        authenticated,
                    );
                }
                ServerFrame::Shutdown { reason, reconnect_after_ms } => {
                    shutdown_delay = Some(reconnect_after_ms.map(Duration::from_millis));
                    shutdown_reason = format!("gateway shutting down: {reason}");
                    // Answer the gateway's close at once rather than waiting for it.
                    let _ = socket.send(Message::Close(None)).await;
                }
            }
            for item in out {
                if self.sender.send(item).await.is_err() {
                    return (Ended::ReaderGone, authenticated);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_keeps_every_digit_of_its_data() {
        let text = r#"{"type":"Event","seq":7,"event":{"type":"PaymentCreated","coop_id":"c1","timestamp":9,"data":{"amount":999999999999.999999,"memo":"a \"quoted\" memo"}}}"#;
        let Some(ServerFrame::Event { seq, event }) = parse_frame(text) else { panic!("an Event frame") };
        assert_eq!(
            (seq, event.event_type.as_str(), event.coop_id.as_str(), event.timestamp),
            (7, "PaymentCreated", "c1", 9)
        );
        assert_eq!(event.data.as_str(), r#"{"amount":999999999999.999999,"memo":"a \"quoted\" memo"}"#);
        // Without data the event still reads, with `null`.
        let bare = r#"{"type":"Event","seq":1,"event":{"type":"X","coop_id":"c","timestamp":1}}"#;
        let Some(ServerFrame::Event { event, .. }) = parse_frame(bare) else { panic!("an Event frame") };
        assert_eq!(event.data.as_str(), "null");
    }

    #[test]
    fn other_frames_read_as_before_and_unknown_ones_are_ignored() {
        assert!(matches!(
            parse_frame(r#"{"type":"BackfillComplete","count":3,"current_seq":9}"#),
            Some(ServerFrame::BackfillComplete { count: 3, current_seq: 9 })
        ));
        assert!(matches!(parse_frame(r#"{"type":"Pong"}"#), Some(ServerFrame::Pong)));
        assert!(parse_frame(r#"{"type":"SomethingNew","x":1}"#).is_none());
        assert!(parse_frame(r#"{"type":"Event","seq":"not a number"}"#).is_none());
        assert!(parse_frame("not json").is_none());
    }
}
