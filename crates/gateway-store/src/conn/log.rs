//! The coop's log: [`LogTx`] (its head, entries and hash tiles) and the snapshot reads of
//! `LogOpened`. Entries and tiles are only inserted, or (a partial tile) widened; a full
//! bundle of entries moves from `log_entries` to `log_bundles` whole.

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Error};
use gateway_domain::ports::{EventRecord, LogHead, LogTx, MemberRecord};

use super::coops::{MemberRow, member_from_row};
use super::events::{COUNTER_SQL, EVENTS_AFTER_SQL, EventRow, event_from_row};
use super::{Arg, Conn, parse_coop, parse_currency, shaped, to_i64, to_u64};

/// A `coop_logs` row.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LogHeadRow {
    after_seq: i64,
    size: i64,
    signed_size: i64,
    checkpoint: Option<String>,
}

named_row!(LogHeadRow { after_seq, size, signed_size, checkpoint });

impl From<LogHeadRow> for LogHead {
    fn from(row: LogHeadRow) -> Self {
        LogHead {
            after_seq: to_u64(row.after_seq),
            size: to_u64(row.size),
            signed_size: to_u64(row.signed_size),
            checkpoint: row.checkpoint,
        }
    }
}

const HEAD_SQL: &str = "SELECT after_seq, size, signed_size, checkpoint FROM coop_logs WHERE coop_id = $1";

/// Entries in an entry bundle (a full one).
const BUNDLE: u64 = 256;

/// Entries written by one statement.
const ENTRIES_PER_STATEMENT: usize = 64;

#[async_trait]
impl LogTx for Conn<'_> {
    async fn log_head(&mut self, coop: &CoopId, lock: bool) -> Result<Option<LogHead>, Error> {
        let sql = match (lock, self.is_sqlite()) {
            // Another replica extending this log now: skipped, not waited for.
            (true, false) => {
                "SELECT after_seq, size, signed_size, checkpoint FROM coop_logs WHERE coop_id = $1 \
                              FOR UPDATE SKIP LOCKED"
            }
            _ => HEAD_SQL,
        };
        let row: Option<LogHeadRow> = self.fetch_optional(sql, args![coop.as_str()]).await?;
        Ok(row.map(LogHead::from))
    }

    async fn has_log(&mut self, coop: &CoopId) -> Result<bool, Error> {
        let found: Option<i64> =
            self.fetch_optional("SELECT 1 FROM coop_logs WHERE coop_id = $1", args![coop.as_str()]).await?;
        Ok(found.is_some())
    }

    async fn insert_log(&mut self, coop: &CoopId, head: &LogHead, opened_data: Option<&str>) -> Result<(), Error> {
        self.execute(
            "INSERT INTO coop_logs (coop_id, after_seq, size, signed_size, checkpoint, opened_data) \
             VALUES ($1, $2, $3, $4, $5, $6)",
            args![
                coop.as_str(),
                to_i64(head.after_seq)?,
                to_i64(head.size)?,
                to_i64(head.signed_size)?,
                head.checkpoint.as_deref(),
                opened_data
            ],
        )
        .await?;
        Ok(())
    }

    async fn update_log(&mut self, coop: &CoopId, head: &LogHead) -> Result<(), Error> {
        self.execute(
            "UPDATE coop_logs SET size = $2, signed_size = $3, checkpoint = $4 WHERE coop_id = $1",
            args![coop.as_str(), to_i64(head.size)?, to_i64(head.signed_size)?, head.checkpoint.as_deref()],
        )
        .await?;
        Ok(())
    }

    async fn insert_log_entries(&mut self, coop: &CoopId, first: u64, entries: &[String]) -> Result<(), Error> {
        let mut index = first;
        for chunk in entries.chunks(ENTRIES_PER_STATEMENT) {
            let sql = shaped("insert_log_entries", chunk.len(), || {
                let rows: Vec<String> =
                    (0..chunk.len()).map(|i| format!("($1, ${}, ${})", 2 * i + 2, 2 * i + 3)).collect();
                format!("INSERT INTO log_entries (coop_id, idx, entry) VALUES {}", rows.join(", "))
            });
            let mut args = Vec::with_capacity(1 + 2 * chunk.len());
            args.push(Arg::from(coop.as_str()));
            for entry in chunk {
                args.push(Arg::from(to_i64(index)?));
                args.push(Arg::from(entry.as_str()));
                index += 1;
            }
            self.execute(&sql, &args).await?;
        }
        Ok(())
    }

    async fn log_entries(&mut self, coop: &CoopId, first: u64, count: u64) -> Result<Vec<String>, Error> {
        let end = first.saturating_add(count).min(i64::MAX as u64);
        let bundles = (first / BUNDLE, end.div_ceil(BUNDLE));
        let rows: Vec<(i64, Option<String>, Option<Vec<u8>>)> = self
            .fetch_all(
                "SELECT idx, entry, NULL AS bundle FROM log_entries WHERE coop_id = $1 AND idx >= $2 AND idx < $3 \
                 UNION ALL \
                 SELECT idx * 256, NULL, bundle FROM log_bundles WHERE coop_id = $1 AND idx >= $4 AND idx < $5 \
                 ORDER BY 1",
                args![coop.as_str(), to_i64(first)?, to_i64(end)?, to_i64(bundles.0)?, to_i64(bundles.1)?],
            )
            .await?;
        let mut entries = Vec::with_capacity(usize::try_from(count.min(4_096)).unwrap_or(0));
        let mut next = first;
        let mut keep = |index: u64, entry: String| {
            // Entries in order, each once.
            if index >= next && index < end {
                entries.push(entry);
                next = index + 1;
            }
        };
        for (index, entry, bundle) in rows {
            match (entry, bundle) {
                (Some(entry), _) => keep(to_u64(index), entry),
                (None, Some(bundle)) => {
                    let parsed = gateway_tlog::tile::parse_entry_bundle(&bundle).map_err(|e| {
                        Error::Internal(format!("log integrity: coop {coop}: entry bundle at {index}: {e}"))
                    })?;
                    for (k, entry) in parsed.into_iter().enumerate() {
                        let entry = String::from_utf8(entry.to_vec()).map_err(|e| {
                            Error::Internal(format!(
                                "log integrity: coop {coop}: entry {}: {e}",
                                to_u64(index) + k as u64
                            ))
                        })?;
                        keep(to_u64(index) + k as u64, entry);
                    }
                }
                (None, None) => {}
            }
        }
        Ok(entries)
    }

    async fn first_entry_row(&mut self, coop: &CoopId) -> Result<Option<u64>, Error> {
        let first: Option<i64> =
            self.fetch_one("SELECT MIN(idx) FROM log_entries WHERE coop_id = $1", args![coop.as_str()]).await?;
        Ok(first.map(to_u64))
    }

    async fn seal_log_bundle(&mut self, coop: &CoopId, index: u64, bundle: &[u8]) -> Result<(), Error> {
        let first = to_i64(index.saturating_mul(BUNDLE))?;
        self.execute(
            "INSERT INTO log_bundles (coop_id, idx, bundle) VALUES ($1, $2, $3)",
            args![coop.as_str(), to_i64(index)?, bundle],
        )
        .await?;
        self.execute(
            "DELETE FROM log_entries WHERE coop_id = $1 AND idx >= $2 AND idx < $3",
            args![coop.as_str(), first, first + BUNDLE as i64],
        )
        .await?;
        Ok(())
    }

    async fn log_tile(&mut self, coop: &CoopId, level: u8, index: u64) -> Result<Option<Vec<u8>>, Error> {
        self.fetch_optional(
            "SELECT hashes FROM log_tiles WHERE coop_id = $1 AND level = $2 AND idx = $3",
            args![coop.as_str(), i64::from(level), to_i64(index)?],
        )
        .await
    }

    async fn put_log_tile(&mut self, coop: &CoopId, level: u8, index: u64, hashes: &[u8]) -> Result<(), Error> {
        self.execute(
            "INSERT INTO log_tiles (coop_id, level, idx, hashes) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (coop_id, level, idx) DO UPDATE SET hashes = excluded.hashes",
            args![coop.as_str(), i64::from(level), to_i64(index)?, hashes],
        )
        .await?;
        Ok(())
    }

    async fn events_to_log(&mut self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error> {
        let rows: Vec<EventRow> =
            self.fetch_all(EVENTS_AFTER_SQL, args![coop.as_str(), to_i64(after)?, i64::from(limit)]).await?;
        rows.into_iter().map(|row| event_from_row(coop, row)).collect()
    }

    async fn lock_event_counter(&mut self, coop: &CoopId) -> Result<u64, Error> {
        // SQLite's single writer: no other unit of work runs until this one ends. PostgreSQL: no
        // unit of work of the coop writes events until this one ends, and every committed one
        // is numbered (migration 0023, `hold_coop_events`).
        let sql = if self.is_sqlite() { COUNTER_SQL } else { "SELECT counter FROM hold_coop_events($1)" };
        let seq: Option<i64> = self.fetch_optional(sql, args![coop.as_str()]).await?;
        Ok(seq.map(to_u64).unwrap_or(0))
    }

    async fn all_members(&mut self, coop: &CoopId) -> Result<Vec<MemberRecord>, Error> {
        let rows: Vec<MemberRow> = self
            .fetch_all(
                "SELECT did, role, joined_at, credit_limit FROM members WHERE coop_id = $1 ORDER BY did",
                args![coop.as_str()],
            )
            .await?;
        rows.into_iter().map(member_from_row).collect()
    }

    async fn all_balances(&mut self, coop: &CoopId) -> Result<Vec<(String, Currency, Amount)>, Error> {
        let rows: Vec<(String, String, i64)> = self
            .fetch_all(
                "SELECT account, currency, balance FROM balances WHERE coop_id = $1 AND balance <> 0 \
                 ORDER BY account, currency",
                args![coop.as_str()],
            )
            .await?;
        rows.into_iter()
            .map(|(account, currency, balance)| Ok((account, parse_currency(&currency)?, Amount::from_micros(balance))))
            .collect()
    }

    async fn coops_behind_log(&mut self, limit: u32, unsigned: bool) -> Result<Vec<CoopId>, Error> {
        let rows: Vec<String> = self
            .fetch_all(
                "SELECT c.coop_id FROM event_counters c LEFT JOIN coop_logs l ON l.coop_id = c.coop_id \
                 WHERE l.coop_id IS NULL OR c.seq > l.after_seq + l.size - 1 OR ($2 = 1 AND l.signed_size < l.size) \
                 ORDER BY c.coop_id LIMIT $1",
                args![i64::from(limit), i64::from(unsigned)],
            )
            .await?;
        rows.iter().map(|id| parse_coop(id)).collect()
    }

    async fn replace_checkpoint(&mut self, coop: &CoopId, old: &str, new: &str) -> Result<bool, Error> {
        let changed = self
            .execute(
                "UPDATE coop_logs SET checkpoint = $3 WHERE coop_id = $1 AND checkpoint = $2",
                args![coop.as_str(), old, new],
            )
            .await?;
        Ok(changed == 1)
    }
}
