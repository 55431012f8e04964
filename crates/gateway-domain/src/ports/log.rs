//! The coop's log (INTERFACE.md §12): its head, entries and hash tiles.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Error};

use super::{EventRecord, MemberRecord};

/// Where a coop's log stands: entry 0 (`LogOpened`) follows event `after_seq`; entry `i ≥ 1` is
/// event `after_seq + i`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHead {
    /// The event sequence number entry 0 follows (0 for a coop whose log began with it).
    pub after_seq: u64,
    /// Entries stored, and hashed into the tiles.
    pub size: u64,
    /// The tree size of the latest signed checkpoint (0 before the first).
    pub signed_size: u64,
    /// The latest signed checkpoint, as the signed note published (cosignatures included).
    pub checkpoint: Option<String>,
}

impl LogHead {
    /// The sequence number of the last event in the log (`after_seq` while only entry 0 is).
    pub fn logged_seq(&self) -> u64 {
        self.after_seq + self.size.saturating_sub(1)
    }
}

/// The coop's log in a unit of work: its head, entries and hash tiles. Entries and tiles are
/// only ever added (a partial tile is replaced by a wider one); a full bundle of 256 entries
/// moves from one row per entry to one row per bundle, and nothing else is deleted.
#[async_trait]
pub trait LogTx: Send {
    /// The coop's log head; with `lock`, held until the unit of work ends, and `None` also when
    /// another unit of work holds it (PostgreSQL: `FOR UPDATE SKIP LOCKED`), so that two
    /// replicas never extend one log at once.
    async fn log_head(&mut self, coop: &CoopId, lock: bool) -> Result<Option<LogHead>, Error>;
    /// Whether the coop has a log (locked or not).
    async fn has_log(&mut self, coop: &CoopId) -> Result<bool, Error>;
    /// Creates the coop's log head (its entries and tiles are written separately), with
    /// `LogOpened`'s data whole when entry 0 holds digests of its fields.
    async fn insert_log(&mut self, coop: &CoopId, head: &LogHead, opened_data: Option<&str>) -> Result<(), Error>;
    /// Moves the coop's log head.
    async fn update_log(&mut self, coop: &CoopId, head: &LogHead) -> Result<(), Error>;
    /// Stores entries `first`, `first + 1`, … of the coop's log.
    async fn insert_log_entries(&mut self, coop: &CoopId, first: u64, entries: &[String]) -> Result<(), Error>;
    /// Entries `first .. first + count` of the coop's log that exist, in order, whether kept one a
    /// row or in their bundle.
    async fn log_entries(&mut self, coop: &CoopId, first: u64, count: u64) -> Result<Vec<String>, Error>;
    /// The index of the first entry still kept in a row of its own (not in a sealed bundle).
    async fn first_entry_row(&mut self, coop: &CoopId) -> Result<Option<u64>, Error>;
    /// Keeps entries `256 index .. 256 index + 255` as their entry `bundle` (tlog-tiles encoding)
    /// and deletes their rows.
    async fn seal_log_bundle(&mut self, coop: &CoopId, index: u64, bundle: &[u8]) -> Result<(), Error>;
    /// The stored bytes of hash tile `(level, index)` (its hashes so far, 32 bytes each).
    async fn log_tile(&mut self, coop: &CoopId, level: u8, index: u64) -> Result<Option<Vec<u8>>, Error>;
    /// Stores (or widens) hash tile `(level, index)`.
    async fn put_log_tile(&mut self, coop: &CoopId, level: u8, index: u64, hashes: &[u8]) -> Result<(), Error>;
    /// The coop's numbered events with `seq > after`, in order, at most `limit`.
    async fn events_to_log(&mut self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error>;
    /// The coop's last event number, every event committed so far numbered and no other unit
    /// of work of the coop committing events until this one ends, so that the state read
    /// afterwards is the coop's state after that event (a snapshot).
    async fn lock_event_counter(&mut self, coop: &CoopId) -> Result<u64, Error>;
    /// Every member of the coop, by DID.
    async fn all_members(&mut self, coop: &CoopId) -> Result<Vec<MemberRecord>, Error>;
    /// Every non-zero balance of the coop: `(account, currency, balance)`, by account then
    /// currency.
    async fn all_balances(&mut self, coop: &CoopId) -> Result<Vec<(String, Currency, Amount)>, Error>;
    /// Coops whose log is behind their events, or that have none yet, and, with `unsigned`,
    /// whose log holds entries no checkpoint signed yet; at most `limit`.
    async fn coops_behind_log(&mut self, limit: u32, unsigned: bool) -> Result<Vec<CoopId>, Error>;
    /// Replaces the coop's published checkpoint `old` by `new` (the same checkpoint with its
    /// cosignatures), waiting for the head if another unit of work holds it; `false` when the
    /// published checkpoint is no longer `old`.
    async fn replace_checkpoint(&mut self, coop: &CoopId, old: &str, new: &str) -> Result<bool, Error>;
}

/// Log reads outside a unit of work, for the log's HTTP routes and the audits.
#[async_trait]
pub trait LogReads: Send + Sync + fmt::Debug {
    /// The coop's log head, if it has a log.
    async fn log_head(&self, coop: &CoopId) -> Result<Option<LogHead>, Error>;
    /// Entries `first .. first + count` that exist, in order.
    async fn log_entries(&self, coop: &CoopId, first: u64, count: u64) -> Result<Vec<String>, Error>;
    /// The number of the coop's last committed event (0 before any).
    async fn last_event_seq(&self, coop: &CoopId) -> Result<u64, Error>;
    /// `LogOpened`'s data whole, kept when entry 0 holds digests of its fields.
    async fn log_opened_data(&self, coop: &CoopId) -> Result<Option<String>, Error>;
    /// The stored bytes of hash tile `(level, index)`.
    async fn log_tile(&self, coop: &CoopId, level: u8, index: u64) -> Result<Option<Vec<u8>>, Error>;
    /// Every coop that has a log.
    async fn logged_coops(&self) -> Result<Vec<CoopId>, Error>;
    /// [`LogTx::coops_behind_log`], read outside a unit of work (the checkpointer's sweep: a
    /// read must not pass for a commit in the store's write health).
    async fn coops_behind_log(&self, limit: u32, unsigned: bool) -> Result<Vec<CoopId>, Error>;
}
