//! The coop event log: [`EventTx`] (numbered appends, pruning) and the `events` row.

use async_trait::async_trait;
use gateway_core::{CoopId, Error, JsonText};
use gateway_domain::ports::{CoopSignal, EventRecord, EventTx};

use super::{Conn, to_i64, to_u64};

/// An `events` row of one coop (`seq, event_type, timestamp, data`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EventRow {
    seq: i64,
    event_type: String,
    timestamp: i64,
    data: String,
}

named_row!(EventRow { seq, event_type, timestamp, data });

/// An [`EventRow`] of `coop` as its record.
pub(crate) fn event_from_row(coop: &CoopId, row: EventRow) -> Result<EventRecord, Error> {
    Ok(EventRecord {
        coop_id: coop.clone(),
        seq: to_u64(row.seq),
        event_type: row.event_type,
        timestamp: to_u64(row.timestamp),
        data: JsonText::parse(row.data)
            .map_err(|e| Error::Internal(format!("stored data of event {} is not JSON: {e}", row.seq)))?,
    })
}

/// An event appended on PostgreSQL, waiting for [`Conn::flush_events`].
#[derive(Debug)]
pub(crate) struct PendingEvent {
    coop: CoopId,
    event_type: String,
    timestamp: i64,
    data: String,
    /// Appended by an unsigned critical operation (`gateway_domain::ports::unsigned`).
    unsigned: bool,
}

/// A coop's events after a number, in order, at most a limit (`$1` coop, `$2` after, `$3` limit).
pub(crate) const EVENTS_AFTER_SQL: &str = "SELECT seq, event_type, timestamp, data FROM events \
    WHERE coop_id = $1 AND seq > $2 ORDER BY seq LIMIT $3";

/// A coop's last event number (no row: none yet). Every number up to it is committed.
pub(crate) const COUNTER_SQL: &str = "SELECT seq FROM event_counters WHERE coop_id = $1";

/// The statement of [`APPEND_PG`] and [`APPEND_MORE_PG`], with what the placeholder's row also
/// calls.
macro_rules! append_pg {
    ($also:literal) => {
        concat!(
            "INSERT INTO events (coop_id, seq, placeholder, event_type, timestamp, data) ",
            "SELECT $1, w.placeholder, w.placeholder, $2, $3, $4 ",
            "FROM (SELECT -nextval('event_placeholders') AS placeholder",
            $also,
            ") AS w RETURNING seq"
        )
    };
}

/// Writes one event with a placeholder number (negative, kept in `placeholder` too), which the
/// coop's numbering after the commit replaces (migration `0023_events_numbered_after_commit.sql`),
/// holding the coop's writers lock shared until the commit (the log's opening of a coop from
/// before the log and a settings change take it alone). With `$5` <> 0, an unsigned critical
/// operation's, it is refused (SQLSTATE `GW401`) when the coop, read once the lock is held,
/// requires signed requests (migration 0027). Returns the placeholder.
const APPEND_PG: &str = append_pg!(", writer_enters($1, $5)");

/// Writes a further event of a coop whose first event of the unit of work [`APPEND_PG`] wrote:
/// the coop's writers lock is held, and the signing rule was kept.
const APPEND_MORE_PG: &str = append_pg!("");

/// Numbers the committed events still waiting for their number of the coops `$1`: for each
/// element of `$1` and `$2` by position `ord` (from 1), the coop's counter after, and the number
/// the event written with that placeholder got; then, `ord` NULL, each event this call numbered:
/// its coop's counter, its placeholder and its number (migration 0026).
pub(crate) const NUMBER_SQL: &str = "SELECT ord, counter, placeholder, given FROM number_events($1, $2)";

#[async_trait]
impl EventTx for Conn<'_> {
    async fn append_event(
        &mut self,
        coop: &CoopId,
        event_type: &str,
        timestamp: u64,
        data: &JsonText,
    ) -> Result<(), Error> {
        let timestamp = to_i64(timestamp)?;
        if !self.is_sqlite() {
            // Written last, just before the commit (see `flush_events`), numbered after it.
            self.pending_events.push(PendingEvent {
                coop: coop.clone(),
                event_type: event_type.to_owned(),
                timestamp,
                data: data.as_str().to_owned(),
                unsigned: gateway_domain::ports::unsigned::current(),
            });
            return Ok(());
        }
        // SQLite's single writer runs one unit of work at a time: numbered at once.
        let seq: i64 = self
            .fetch_one(
                "INSERT INTO event_counters (coop_id, seq) VALUES ($1, 1) \
             ON CONFLICT (coop_id) DO UPDATE SET seq = event_counters.seq + 1 RETURNING seq",
                args![coop.as_str()],
            )
            .await?;
        self.execute(
            "INSERT INTO events (coop_id, seq, event_type, timestamp, data) VALUES ($1, $2, $3, $4, $5)",
            args![coop.as_str(), seq, event_type, timestamp, data.as_str()],
        )
        .await?;
        self.appended.push(CoopSignal { coop_id: coop.clone(), seq: to_u64(seq) });
        Ok(())
    }

    async fn prune_events(&mut self, keep_last: u64, older_than: u64) -> Result<u64, Error> {
        // Never an event the coop's log has not copied yet (INTERFACE.md §12: the log keeps every
        // event; the outbox's retention limits backfill only). A coop without a log (one from
        // before the log) will open it at its latest event and needs none of the older ones.
        // Never one still waiting for its number (PostgreSQL: `seq < 0`).
        let sql = "DELETE FROM events WHERE timestamp < $1 AND seq > 0 AND seq <= \
                   (SELECT c.seq FROM event_counters c WHERE c.coop_id = events.coop_id) - $2 \
                   AND seq <= COALESCE((SELECT l.after_seq + l.size - 1 FROM coop_logs l \
                                        WHERE l.coop_id = events.coop_id), seq)";
        self.execute(sql, args![to_i64(older_than)?, to_i64(keep_last)?]).await
    }
}

impl Conn<'_> {
    /// PostgreSQL: writes the unit of work's appended events, as its last statements before the
    /// commit, each with a placeholder number, coop by coop in the order of the coops' ids (a
    /// coop's own events keep their order). A keyed answer the unit of work decided keeps the
    /// placeholder of its last event (see `idempotency_put`) until the numbering gives it the
    /// number. Returns the coops, each once, with the placeholder of their last event: to be
    /// numbered and announced after the commit ([`NUMBER_SQL`]).
    pub(crate) async fn flush_events(&mut self) -> Result<Vec<(CoopId, i64)>, Error> {
        let mut pending = std::mem::take(&mut self.pending_events);
        pending.sort_by(|a, b| a.coop.as_str().cmp(b.coop.as_str()));
        let mut coops: Vec<(CoopId, i64)> = Vec::new();
        for event in pending {
            let (coop, kind, data) = (event.coop.as_str(), event.event_type.as_str(), event.data.as_str());
            // The first carries the unit of work's held writes (`Conn::defer`).
            let placeholder: i64 = if coops.last().is_some_and(|(last, _)| *last == event.coop) {
                self.fetch_one_with_deferred(APPEND_MORE_PG, args![coop, kind, event.timestamp, data]).await?
            } else {
                // A settings change holds the coop's writers alone: what it read under its row
                // lock decided, and its own new setting must not refuse it.
                let unsigned = i64::from(event.unsigned && !self.writers_alone.contains(&event.coop));
                self.fetch_one_with_deferred(APPEND_PG, args![coop, kind, event.timestamp, data, unsigned]).await?
            };
            match coops.last_mut() {
                Some((coop, last)) if *coop == event.coop => *last = placeholder,
                _ => coops.push((event.coop, placeholder)),
            }
        }
        if let Some((_, last)) = coops.last() {
            self.number_answer_with(*last).await?;
        }
        self.flush_deferred().await?;
        Ok(coops)
    }
}
