//! Reads that need no transaction, served from the connection pool (SQLite's WAL lets them run
//! beside the writer). A read that a unit of work also makes (one coop, member, rate, domain,
//! proposal or task) runs the `*Tx` statement of `conn/` on a pooled connection, so each such
//! statement is written once.

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Did, Error, PageRequest};
use gateway_domain::ports::{
    ComputeReads, CoopBalances, CoopReads, CoopRecord, DomainRecord, EventReads, EventRecord, GovReads, HistoryQuery,
    IdempotencyRecord, LedgerReads, LogHead, LogReads, LogTx, MemberRecord, NotificationReads, NotificationRecord,
    ProposalQuery, ProposalRecord, RateRecord, SigningKeyRecord, TaskRecord, TaskStatus, TransactionRecord, TrustEdge,
    TrustReads,
};
use gateway_domain::ports::{ComputeTx, CoopTx, GovTx, LedgerTx, transaction};

use crate::conn::compute::{TASK_COLUMNS, TaskRow, task_from_row};
use crate::conn::coops::{COOP_COLUMNS, CoopRow, MemberRow, coop_from_row, member_from_row};
use crate::conn::events::{EventRow, event_from_row};
use crate::conn::governance::{
    PROPOSAL_COLUMNS, ProposalRow, SIGNING_KEY_COLUMNS, SigningKeyRow, proposal_from_row, signing_key_from_row,
};
use crate::conn::ledger::{
    IDEMPOTENCY_COLUMNS, IdempotencyRow, TRANSACTION_COLUMNS, TransactionRow, idempotency_from_row,
    transaction_from_row,
};
use crate::conn::notifications::{NOTIFICATION_COLUMNS, NotificationRow, notification_from_row};
use crate::conn::trust::{EdgeRow, edge_from_row};
use crate::conn::{Arg, Conn, Db, Row, parse_coop, parse_currency, parse_json, to_i64, to_u64};
use crate::sqlite::Borrowed;
use crate::{Backend, Store, db_error};
use futures_util::FutureExt;

/// A connection borrowed for one read: a SQLite connection used on this thread, or a
/// PostgreSQL pool's.
pub(crate) enum Reader<'s> {
    Sqlite(Borrowed<'s>),
    Postgres(sqlx::pool::PoolConnection<sqlx::Postgres>),
}

impl Reader<'_> {
    /// The statement handle over this connection (outside any transaction).
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        match self {
            Reader::Sqlite(db) => Conn::new(Db::Sqlite(db.connection())),
            Reader::Postgres(pooled) => Conn::new(Db::Postgres(pooled)),
        }
    }
}

impl Store {
    /// A read without parameters that scans whole tables (the audits, the trust graph at
    /// start): on SQLite it runs on a blocking thread, so a long scan never holds up requests.
    async fn scan<R: Row + 'static>(&self, sql: &'static str) -> Result<Vec<R>, Error> {
        match self.reader().await? {
            Reader::Sqlite(mut db) => {
                db.off_thread(move |db| {
                    // Statements on SQLite never wait: the future is ready when first polled.
                    Conn::new(Db::Sqlite(db))
                        .fetch_all(sql, &[])
                        .now_or_never()
                        .unwrap_or_else(|| Err(Error::Internal("a SQLite read did not complete synchronously".into())))
                })
                .await?
            }
            mut postgres => postgres.conn().fetch_all(sql, &[]).await,
        }
    }

    /// Every row of a read.
    pub(crate) async fn read_all<R: Row>(&self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<R>, Error> {
        within_deadline(async { self.reader().await?.conn().fetch_all(sql, args).await }).await
    }

    /// The first row of a read, if any.
    pub(crate) async fn read_optional<R: Row>(&self, sql: &str, args: &[Arg<'_>]) -> Result<Option<R>, Error> {
        within_deadline(async { self.reader().await?.conn().fetch_optional(sql, args).await }).await
    }

    /// The first row of a read that always returns one.
    pub(crate) async fn read_one<R: Row>(&self, sql: &str, args: &[Arg<'_>]) -> Result<R, Error> {
        within_deadline(async { self.reader().await?.conn().fetch_one(sql, args).await }).await
    }

    /// Borrows a connection for a read: at once a 503 while the database cannot be reached
    /// (PostgreSQL; [`crate::health::Reachability`]).
    pub(crate) async fn reader(&self) -> Result<Reader<'_>, Error> {
        if matches!(self.backend, Backend::Postgres(_)) {
            self.reach.check()?;
        }
        self.connect_reader().await
    }

    /// Borrows a connection for a read, whatever the latest probe saw.
    pub(crate) async fn connect_reader(&self) -> Result<Reader<'_>, Error> {
        match &self.backend {
            Backend::Sqlite(db) => Ok(Reader::Sqlite(db.reader().await?)),
            Backend::Postgres(writes) => {
                Ok(Reader::Postgres(self.read_pool.as_ref().unwrap_or(writes).acquire().await.map_err(|e| {
                    metrics::counter!("icn_network_messages_failed_total", "backend" => "database").increment(1);
                    db_error(e)
                })?))
            }
        }
    }
}

/// A read answered within [`crate::POSTGRES_DEADLINE`] or failed with a 503 (SQLite's reads
/// finish on their first poll and never reach it).
async fn within_deadline<T>(read: impl std::future::Future<Output = Result<T, Error>>) -> Result<T, Error> {
    tokio::time::timeout(crate::POSTGRES_DEADLINE, read).await.unwrap_or_else(|_| {
        Err(Error::ServiceUnavailable(format!(
            "{}: no answer to a read within {:?}",
            crate::health::UNREACHABLE,
            crate::POSTGRES_DEADLINE
        )))
    })
}

impl Store {
    /// The transactions of `coop` a history filter matches ('' for "any account" or "any
    /// currency"), kept by the triggers of migration 0021 as transactions are recorded, so a
    /// page of history does not count the coop's history. On PostgreSQL the coop-wide totals
    /// (account '') of the transactions whose events still wait for their number are counted
    /// apart, until the numbering adds them (migration 0023): the sum is exact at any moment.
    async fn history_count(&self, coop: &CoopId, account: &str, currency: &str) -> Result<u64, Error> {
        const SQLITE: &str = "SELECT n FROM history_counts WHERE coop_id = $1 AND account = $2 AND currency = $3";
        const POSTGRES: &str = "SELECT COALESCE((SELECT n FROM history_counts \
            WHERE coop_id = $1 AND account = $2 AND currency = $3), 0) + (SELECT COUNT(*) FROM history_count_changes \
            WHERE coop_id = $1 AND $2 = '' AND currency = $3)";
        let sql = if matches!(self.backend, Backend::Postgres(_)) { POSTGRES } else { SQLITE };
        let n: Option<i64> = self.read_optional(sql, args![coop.as_str(), account, currency]).await?;
        Ok(n.map_or(0, to_u64))
    }
}

fn page_params(page: PageRequest) -> Result<(i64, i64), Error> {
    Ok((i64::from(page.limit), to_i64(page.offset)?))
}

#[async_trait]
impl LedgerReads for Store {
    async fn coop_balances(&self, coop: &CoopId, account: &str) -> Result<Option<CoopBalances>, Error> {
        // One row per currency the account holds, or one row with no balance when it holds none.
        const SQL: &str = "SELECT c.default_currency, b.currency, b.balance FROM coops c \
             LEFT JOIN balances b ON b.coop_id = c.id AND b.account = $2 WHERE c.id = $1 ORDER BY b.currency";
        let read = || async {
            let rows: Vec<(String, Option<String>, Option<i64>)> =
                self.read_all(SQL, args![coop.as_str(), account]).await?;
            let Some((default_currency, _, _)) = rows.first() else { return Ok(None) };
            let default_currency = parse_currency(default_currency)?;
            let mut balances = Vec::with_capacity(rows.len());
            for (_, currency, balance) in rows {
                if let (Some(currency), Some(balance)) = (currency, balance) {
                    balances.push((parse_currency(&currency)?, Amount::from_micros(balance)));
                }
            }
            Ok(Some(CoopBalances { default_currency, balances }))
        };
        crate::view::read_through(self.view.as_deref(), coop, account, read).await
    }

    async fn history(&self, q: &HistoryQuery) -> Result<(Vec<TransactionRecord>, u64), Error> {
        let (limit, offset) = page_params(q.page)?;
        let filter = "coop_id = $1 AND ($2 IS NULL OR from_account = $2 OR to_account = $2) \
                      AND ($3 IS NULL OR currency = $3 OR to_currency = $3)";
        let list = format!(
            "SELECT {TRANSACTION_COLUMNS} FROM transactions \
             WHERE {filter} \
             ORDER BY pos DESC \
             LIMIT $4 OFFSET $5"
        );
        let account = q.account.as_deref();
        let currency = q.currency.as_ref().map(Currency::as_str);
        let rows: Vec<TransactionRow> =
            self.read_all(&list, args![q.coop.as_str(), account, currency, limit, offset]).await?;
        let total = self.history_count(&q.coop, account.unwrap_or(""), currency.unwrap_or("")).await?;
        let mut items = Vec::with_capacity(rows.len());
        let (mut signed, mut pending) = (Vec::new(), Vec::new());
        for row in rows {
            let (item, evidence) = transaction_from_row(row)?;
            if let Some(evidence) = evidence {
                signed.push(items.len());
                pending.push(evidence);
            }
            items.push(item);
        }
        if !pending.is_empty() {
            // The signed bodies, kept once per signed request: one lookup for the page.
            let evidence = self.reader().await?.conn().fill_signed_bodies(pending).await?;
            for (index, evidence) in signed.into_iter().zip(evidence) {
                items[index].request_signature = Some(evidence);
            }
        }
        Ok((items, total))
    }

    async fn balance_sums(&self) -> Result<Vec<(CoopId, Currency, Amount)>, Error> {
        // Each coop's default currency is there from the coop's creation (summing to 0 before
        // any payment), so the gauge shows a currency as soon as it exists.
        let rows: Vec<(String, String, i64)> = self
            .scan(
                "SELECT coop_id, currency, CAST(SUM(balance) AS BIGINT) FROM (\
                     SELECT coop_id, currency, balance FROM balances \
                     UNION ALL SELECT id, default_currency, 0 FROM coops\
                 ) AS held \
                 GROUP BY coop_id, currency \
                 ORDER BY coop_id, currency",
            )
            .await?;
        rows.into_iter()
            .map(|(c, cur, s)| Ok((parse_coop(&c)?, parse_currency(&cur)?, Amount::from_micros(s))))
            .collect()
    }

    async fn rate(&self, coop: &CoopId, from: &Currency, to: &Currency) -> Result<Option<RateRecord>, Error> {
        self.reader().await?.conn().rate(coop, from, to).await
    }

    async fn coop_ledger_stats(&self, coop: &CoopId) -> Result<(u64, Vec<Currency>), Error> {
        let count = self.history_count(coop, "", "").await?;
        let currencies: Vec<String> = self
            .read_all(
                "SELECT DISTINCT currency FROM balances WHERE coop_id = $1 ORDER BY currency",
                args![coop.as_str()],
            )
            .await?;
        Ok((count, currencies.iter().map(|c| parse_currency(c)).collect::<Result<_, _>>()?))
    }

    async fn unreconciled_accounts(&self) -> Result<u64, Error> {
        static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
            format!(
                "SELECT COUNT(*) FROM balances b \
                 LEFT JOIN (\
                     SELECT coop_id, account, currency, CAST(SUM(delta) AS BIGINT) AS expected \
                     FROM ({LEGS}) legs \
                     GROUP BY coop_id, account, currency\
                 ) e ON e.coop_id = b.coop_id AND e.account = b.account AND e.currency = b.currency \
                 WHERE b.balance <> COALESCE(e.expected, 0)"
            )
        });
        let counts: Vec<i64> = self.scan(SQL.as_str()).await?;
        Ok(to_u64(counts.first().copied().unwrap_or(0)))
    }

    async fn payments_since(&self, since: u64) -> Result<Vec<(String, u64)>, Error> {
        let rows: Vec<(String, i64)> = self
            .read_all(
                "SELECT from_account, timestamp FROM transactions \
                 WHERE timestamp >= $1 AND kind IN ('payment', 'conversion') \
                 ORDER BY timestamp, pos",
                args![to_i64(since)?],
            )
            .await?;
        Ok(rows.into_iter().map(|(payer, at)| (payer, to_u64(at))).collect())
    }

    /// An answer whose last event still waits for its number (PostgreSQL) is not read here: the
    /// claim in the operation's unit of work replays it once it has the number.
    async fn idempotency(&self, key: &str, not_before: u64) -> Result<Option<IdempotencyRecord>, Error> {
        let row: Option<IdempotencyRow> = self
            .read_optional(
                &format!(
                    "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency \
                     WHERE key = $1 AND created_at >= $2 AND status <> 0 AND (event_seq IS NULL OR event_seq >= 0)"
                ),
                args![key, to_i64(not_before)?],
            )
            .await?;
        Ok(row.map(idempotency_from_row))
    }
}

/// Every balance movement implied by the transactions: both legs of a payment, all four legs of
/// a conversion (payer → exchange in the source currency, exchange → payee in the target).
const LEGS: &str = "\
     SELECT coop_id, from_account AS account, currency, -amount AS delta FROM transactions \
     UNION ALL \
     SELECT coop_id, to_account, currency, amount FROM transactions WHERE kind = 'payment' \
     UNION ALL \
     SELECT coop_id, 'coop:' || coop_id || ':exchange', currency, amount FROM transactions \
     WHERE kind = 'conversion' \
     UNION ALL \
     SELECT coop_id, 'coop:' || coop_id || ':exchange', to_currency, -net_target_amount FROM transactions \
     WHERE kind = 'conversion' \
     UNION ALL \
     SELECT coop_id, to_account, to_currency, net_target_amount FROM transactions WHERE kind = 'conversion'";

#[async_trait]
impl CoopReads for Store {
    async fn coop(&self, id: &CoopId) -> Result<Option<CoopRecord>, Error> {
        self.reader().await?.conn().coop(id).await
    }

    async fn coops_of(&self, did: &Did, page: PageRequest) -> Result<(Vec<CoopRecord>, u64), Error> {
        let (limit, offset) = page_params(page)?;
        let sql = format!(
            "SELECT {COOP_COLUMNS} FROM coops c \
             JOIN members me ON me.coop_id = c.id AND me.did = $1 \
             ORDER BY c.id \
             LIMIT $2 OFFSET $3"
        );
        let rows: Vec<CoopRow> = self.read_all(&sql, args![did.as_str(), limit, offset]).await?;
        let total: i64 = self.read_one("SELECT COUNT(*) FROM members WHERE did = $1", args![did.as_str()]).await?;
        Ok((rows.into_iter().map(coop_from_row).collect::<Result<_, _>>()?, to_u64(total)))
    }

    async fn members(&self, coop: &CoopId, page: PageRequest) -> Result<(Vec<MemberRecord>, u64), Error> {
        let (limit, offset) = page_params(page)?;
        let rows: Vec<MemberRow> = self
            .read_all(
                "SELECT did, role, joined_at, credit_limit FROM members \
                 WHERE coop_id = $1 \
                 ORDER BY joined_at, did \
                 LIMIT $2 OFFSET $3",
                args![coop.as_str(), limit, offset],
            )
            .await?;
        let total: i64 = self.read_one("SELECT COUNT(*) FROM members WHERE coop_id = $1", args![coop.as_str()]).await?;
        Ok((rows.into_iter().map(member_from_row).collect::<Result<_, _>>()?, to_u64(total)))
    }

    async fn member(&self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error> {
        self.reader().await?.conn().member(coop, did).await
    }
}

#[async_trait]
impl NotificationReads for Store {
    async fn notifications(
        &self,
        recipient: &Did,
        coop: &CoopId,
        unread_only: bool,
        page: PageRequest,
    ) -> Result<(Vec<NotificationRecord>, u64, u64), Error> {
        let (limit, offset) = page_params(page)?;
        let mine = "recipient = $1 AND coop_id = $2";
        let filter = if unread_only { format!("{mine} AND read_at IS NULL") } else { mine.to_owned() };
        let list = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications \
             WHERE {filter} \
             ORDER BY pos DESC \
             LIMIT $3 OFFSET $4"
        );
        let rows: Vec<NotificationRow> =
            self.read_all(&list, args![recipient.as_str(), coop.as_str(), limit, offset]).await?;
        // Kept by the triggers of migration 0021 as the rows change.
        let counts: Option<(i64, i64)> = self
            .read_optional(
                "SELECT total, unread FROM notification_counts WHERE recipient = $1 AND coop_id = $2",
                args![recipient.as_str(), coop.as_str()],
            )
            .await?;
        let (total, unread) = counts.unwrap_or((0, 0));
        let total = if unread_only { unread } else { total };
        Ok((rows.into_iter().map(notification_from_row).collect::<Result<_, _>>()?, to_u64(total), to_u64(unread)))
    }

    async fn pending_notification_fanouts(&self) -> Result<bool, Error> {
        let pending: bool = self.read_one("SELECT EXISTS (SELECT 1 FROM notification_fanouts)", args![]).await?;
        Ok(pending)
    }
}

#[async_trait]
impl TrustReads for Store {
    async fn all_edges(&self) -> Result<Vec<TrustEdge>, Error> {
        let rows: Vec<EdgeRow> = self.scan("SELECT source, target, score, updated_at FROM trust_edges").await?;
        rows.into_iter().map(edge_from_row).collect()
    }
}

#[async_trait]
impl EventReads for Store {
    async fn events_after(&self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error> {
        let rows: Vec<EventRow> = self
            .read_all(crate::conn::events::EVENTS_AFTER_SQL, args![coop.as_str(), to_i64(after)?, i64::from(limit)])
            .await?;
        rows.into_iter().map(|row| event_from_row(coop, row)).collect()
    }

    async fn current_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        let seq: Option<i64> = self.read_optional(crate::conn::events::COUNTER_SQL, args![coop.as_str()]).await?;
        Ok(seq.map(to_u64).unwrap_or(0))
    }

    async fn prune_events(&self, keep_last: u64, older_than: u64) -> Result<u64, Error> {
        // A delete is a write: it runs as a unit of work, on the writer.
        transaction(self, move |tx| Box::pin(async move { tx.prune_events(keep_last, older_than).await })).await
    }

    async fn oldest_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        let seq: Option<i64> =
            self.read_one("SELECT MIN(seq) FROM events WHERE coop_id = $1 AND seq > 0", args![coop.as_str()]).await?;
        Ok(seq.map(to_u64).unwrap_or(0))
    }
}

#[async_trait]
impl GovReads for Store {
    async fn member_dids(&self, coop: &CoopId) -> Result<Vec<Did>, Error> {
        self.reader().await?.conn().member_dids(coop).await
    }

    async fn domains(&self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error> {
        self.reader().await?.conn().domains(coop).await
    }

    async fn proposal(&self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error> {
        self.reader().await?.conn().proposal(coop, id).await
    }

    async fn proposals(&self, q: &ProposalQuery) -> Result<(Vec<ProposalRecord>, u64), Error> {
        let (limit, offset) = page_params(q.page)?;
        let filter = "coop_id = $1 AND ($2 IS NULL OR domain_id = $2) AND ($3 IS NULL OR status = $3)";
        let list = format!(
            "SELECT {PROPOSAL_COLUMNS} FROM proposals \
             WHERE {filter} \
             ORDER BY pos DESC \
             LIMIT $4 OFFSET $5"
        );
        let rows: Vec<ProposalRow> = self
            .read_all(&list, args![q.coop.as_str(), q.domain.as_deref(), q.status.map(|s| s.as_str()), limit, offset])
            .await?;
        let count = format!("SELECT COUNT(*) FROM proposals WHERE {filter}");
        let total: i64 =
            self.read_one(&count, args![q.coop.as_str(), q.domain.as_deref(), q.status.map(|s| s.as_str())]).await?;
        Ok((rows.into_iter().map(proposal_from_row).collect::<Result<_, _>>()?, to_u64(total)))
    }

    async fn proposal_counts(&self, coop: &CoopId) -> Result<(u64, u64), Error> {
        let (all, open): (i64, i64) = self
            .read_one(
                "SELECT COUNT(*), \
                     CAST(COALESCE(SUM(CASE WHEN status = 'open' THEN 1 ELSE 0 END), 0) AS BIGINT) \
                 FROM proposals \
                 WHERE coop_id = $1",
                args![coop.as_str()],
            )
            .await?;
        Ok((to_u64(all), to_u64(open)))
    }

    async fn expired_proposals(&self, now: u64) -> Result<Vec<(CoopId, String)>, Error> {
        let rows: Vec<(String, String)> = self
            .read_all(
                "SELECT coop_id, id FROM proposals \
                 WHERE status = 'open' AND closes_at <= $1 \
                 ORDER BY closes_at \
                 LIMIT 500",
                args![to_i64(now)?],
            )
            .await?;
        rows.into_iter().map(|(c, id)| Ok((parse_coop(&c)?, id))).collect()
    }

    async fn receipt(&self, coop: &CoopId, proposal_id: &str) -> Result<Option<serde_json::Value>, Error> {
        let body: Option<String> = self
            .read_optional(
                "SELECT body FROM receipts WHERE coop_id = $1 AND proposal_id = $2",
                args![coop.as_str(), proposal_id],
            )
            .await?;
        body.map(|b| parse_json(&b)).transpose()
    }

    async fn signing_keys(&self, coop: &CoopId) -> Result<Vec<SigningKeyRecord>, Error> {
        let rows: Vec<SigningKeyRow> = self
            .read_all(
                &format!(
                    "SELECT {} FROM signing_keys WHERE coop_id = $1 OR coop_id IS NULL \
                     ORDER BY valid_from, COALESCE(master, -1), generation, public_key",
                    SIGNING_KEY_COLUMNS
                ),
                args![coop.as_str()],
            )
            .await?;
        rows.into_iter().map(signing_key_from_row).collect()
    }
}

#[async_trait]
impl ComputeReads for Store {
    async fn task(&self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error> {
        self.reader().await?.conn().task(coop, id).await
    }

    async fn tasks(
        &self,
        coop: &CoopId,
        statuses: &[TaskStatus],
        page: PageRequest,
    ) -> Result<(Vec<TaskRecord>, u64), Error> {
        let (limit, offset) = page_params(page)?;
        // Statuses are the domain's enum, spelled by `as_str`, never client text: inlined.
        let filter = if statuses.is_empty() {
            "coop_id = $1".to_owned()
        } else {
            let list: Vec<String> = statuses.iter().map(|s| format!("'{}'", s.as_str())).collect();
            format!("coop_id = $1 AND status IN ({})", list.join(", "))
        };
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM compute_tasks \
             WHERE {filter} \
             ORDER BY pos DESC \
             LIMIT $2 OFFSET $3"
        );
        let rows: Vec<TaskRow> = self.read_all(&sql, args![coop.as_str(), limit, offset]).await?;
        let count = format!("SELECT COUNT(*) FROM compute_tasks WHERE {filter}");
        let total: i64 = self.read_one(&count, args![coop.as_str()]).await?;
        Ok((rows.into_iter().map(task_from_row).collect::<Result<_, _>>()?, to_u64(total)))
    }

    async fn pending_tasks(&self, limit: u32) -> Result<Vec<(CoopId, String)>, Error> {
        let rows: Vec<(String, String)> = self
            .read_all(
                "SELECT coop_id, task_id FROM compute_tasks \
                 WHERE status = $1 \
                 ORDER BY CASE priority WHEN 'high' THEN 0 WHEN 'normal' THEN 1 ELSE 2 END, pos \
                 LIMIT $2",
                args![TaskStatus::Pending.as_str(), i64::from(limit)],
            )
            .await?;
        rows.into_iter().map(|(c, id)| Ok((parse_coop(&c)?, id))).collect()
    }

    async fn expired_claims(&self, now: u64) -> Result<Vec<(CoopId, String)>, Error> {
        let rows: Vec<(String, String)> = self
            .read_all(
                "SELECT coop_id, task_id FROM compute_tasks \
                 WHERE status IN ($1, $2) AND deadline <= $3 \
                 ORDER BY deadline \
                 LIMIT 500",
                args![TaskStatus::Claimed.as_str(), TaskStatus::Running.as_str(), to_i64(now)?],
            )
            .await?;
        rows.into_iter().map(|(c, id)| Ok((parse_coop(&c)?, id))).collect()
    }
}

#[async_trait]
impl LogReads for Store {
    async fn log_head(&self, coop: &CoopId) -> Result<Option<LogHead>, Error> {
        self.reader().await?.conn().log_head(coop, false).await
    }

    async fn log_entries(&self, coop: &CoopId, first: u64, count: u64) -> Result<Vec<String>, Error> {
        self.reader().await?.conn().log_entries(coop, first, count).await
    }

    async fn log_tile(&self, coop: &CoopId, level: u8, index: u64) -> Result<Option<Vec<u8>>, Error> {
        self.reader().await?.conn().log_tile(coop, level, index).await
    }

    async fn last_event_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        let seq: Option<i64> = self.read_optional(crate::conn::events::COUNTER_SQL, args![coop.as_str()]).await?;
        Ok(seq.map_or(0, to_u64))
    }

    async fn log_opened_data(&self, coop: &CoopId) -> Result<Option<String>, Error> {
        let row: Option<(Option<String>,)> =
            self.read_optional("SELECT opened_data FROM coop_logs WHERE coop_id = $1", args![coop.as_str()]).await?;
        Ok(row.and_then(|(data,)| data))
    }

    async fn coops_behind_log(&self, limit: u32, unsigned: bool) -> Result<Vec<CoopId>, Error> {
        self.reader().await?.conn().coops_behind_log(limit, unsigned).await
    }

    async fn logged_coops(&self) -> Result<Vec<CoopId>, Error> {
        let ids: Vec<String> = self.read_all("SELECT coop_id FROM coop_logs ORDER BY coop_id", &[]).await?;
        ids.iter().map(|id| parse_coop(id)).collect()
    }
}
