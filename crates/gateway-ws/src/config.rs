//! Tunables of the event stream, with the interface's defaults.
//!
//! Only numbers live here; how they are read from flags or files is the binary's business.

use std::time::Duration;

/// Timeouts, queue sizes and socket buffer sizes of the stream.
#[derive(Debug, Clone)]
pub struct WsConfig {
    /// A socket that has not authenticated within this time is closed with 1008 (INTERFACE.md §9: 10 s).
    pub auth_timeout: Duration,
    /// The server sends a WebSocket ping this often (INTERFACE.md §9: 30 s), so that idle but healthy
    /// clients answer with pongs and are not mistaken for dead ones.
    pub ping_interval: Duration,
    /// A client from which no frame of any kind arrived for this long is dropped (INTERFACE.md §9: 60 s).
    pub idle_timeout: Duration,
    /// The most live events a connection may be behind (committed but not yet written to its
    /// socket) before it is closed with 1013 `lagged` (INTERFACE.md §9: 1024). Also the most event
    /// frames queued per connection at once.
    pub queue_capacity: usize,
    /// Events read from the store per query when a connection or the hub catches up.
    pub read_batch: u32,
    /// Recent events kept per active coop, rendered once and shared by its subscribers, so that
    /// a thousand subscribers cost one store read per batch rather than a thousand.
    pub cache_events: usize,
    /// Upper bound on the bytes of rendered frames the per-coop cache holds.
    pub cache_bytes: usize,
    /// How often each active coop re-reads its outbox even without a signal: a safety net for
    /// signals lost while the PostgreSQL listener reconnects.
    pub poll_interval: Duration,
    /// How long a closing connection (lagged, idle, auth failure) may take to write its last
    /// frames before the socket is dropped.
    pub close_timeout: Duration,
    /// Largest client message accepted, in bytes; clients only send small control frames.
    pub max_message_bytes: usize,
    /// Read buffer of each socket. tungstenite zero-fills the buffer's free space on every read,
    /// so its 128 KiB default costs CPU per incoming frame (half the CPU of the load harness's
    /// clients, which read many frames); client frames are small, and the buffer grows for a
    /// larger one.
    pub read_buffer_bytes: usize,
    /// Bytes the socket buffers before writing when several frames are sent in a row (frames
    /// are always flushed once the connection has nothing more to send).
    pub write_buffer_bytes: usize,
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            auth_timeout: Duration::from_secs(10),
            ping_interval: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            queue_capacity: 1024,
            read_batch: 256,
            cache_events: 2048,
            cache_bytes: 1 << 20,
            poll_interval: Duration::from_secs(5),
            close_timeout: Duration::from_secs(5),
            max_message_bytes: 64 * 1024,
            read_buffer_bytes: 2048,
            write_buffer_bytes: 8 * 1024,
        }
    }
}

/// How long events are kept: whichever of the two rules keeps more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// The newest events of each coop that are always kept (INTERFACE.md §9: 10 000).
    pub keep_last: u64,
    /// Events younger than this are always kept (INTERFACE.md §9: 7 days).
    pub max_age: Duration,
    /// How often the pruning task runs.
    pub interval: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Self { keep_last: 10_000, max_age: Duration::from_secs(7 * 24 * 3600), interval: Duration::from_secs(60) }
    }
}
