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

#[async_trait]
impl EventTx for Conn<'_> {
    async fn append_event(
        &mut self,
        coop: &CoopId,
        event_type: &str,
        timestamp: u64,
        data: &JsonText,
    ) -> Result<u64, Error> {
        // The counter row is the coop's sequence lock: concurrent writers of one coop serialise
        // here, so numbers are assigned without gaps in commit order.
        let seq: i64 = self
            .fetch_one(
                "INSERT INTO event_counters (coop_id, seq) VALUES ($1, 1) \
             ON CONFLICT (coop_id) DO UPDATE SET seq = event_counters.seq + 1 RETURNING seq",
                args![coop.as_str()],
            )
            .await?;
        let data = data.as_str();
        self.execute(
            "INSERT INTO events (coop_id, seq, event_type, timestamp, data) VALUES ($1, $2, $3, $4, $5)",
            args![coop.as_str(), seq, event_type, to_i64(timestamp)?, data],
        )
        .await
        .map(|_| ())?;
        let seq = to_u64(seq);
        if !self.is_sqlite() {
            // Delivered to listening replicas when (and only if) the transaction commits.
            let payload = format!("{coop}\t{seq}");
            self.execute("SELECT pg_notify($1, $2)", args![crate::EVENT_CHANNEL, payload.as_str()]).await?;
        }
        self.appended.push(CoopSignal { coop_id: coop.clone(), seq });
        Ok(seq)
    }

    async fn prune_events(&mut self, keep_last: u64, older_than: u64) -> Result<u64, Error> {
        let sql = "DELETE FROM events WHERE timestamp < $1 AND seq <= \
                   (SELECT c.seq FROM event_counters c WHERE c.coop_id = events.coop_id) - $2";
        self.execute(sql, args![to_i64(older_than)?, to_i64(keep_last)?]).await
    }
}
