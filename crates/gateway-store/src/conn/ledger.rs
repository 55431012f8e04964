//! The ledger: [`LedgerTx`] and the rows of balances, transactions, rates, quotes and
//! idempotency records.

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Error};
use gateway_domain::ports::{
    ConversionLeg, IdempotencyRecord, LedgerTx, QuoteRecord, RateRecord, TransactionKind, TransactionRecord,
};

use super::{Arg, Conn, PendingEvidence, parse_coop, parse_currency, parse_did, to_i64, to_u64};
use crate::view::Touched;

/// Columns of `transactions`, in this order.
pub(crate) const TRANSACTION_COLUMNS: &str = "id, coop_id, kind, from_account, to_account, amount, currency, \
     memo, timestamp, to_currency, rate, gross_target_amount, fee_amount, net_target_amount, request_signature, batch_id";

/// A `transactions` row: [`TRANSACTION_COLUMNS`] (the conversion leg's five all set or all null).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TransactionRow {
    id: String,
    coop_id: String,
    kind: String,
    from_account: String,
    to_account: String,
    amount: i64,
    currency: String,
    memo: Option<String>,
    timestamp: i64,
    to_currency: Option<String>,
    rate: Option<i64>,
    gross_target_amount: Option<i64>,
    fee_amount: Option<i64>,
    net_target_amount: Option<i64>,
    request_signature: Option<String>,
    batch_id: Option<String>,
}

named_row!(TransactionRow {
    id,
    coop_id,
    kind,
    from_account,
    to_account,
    amount,
    currency,
    memo,
    timestamp,
    to_currency,
    rate,
    gross_target_amount,
    fee_amount,
    net_target_amount,
    request_signature,
    batch_id
});

/// A [`TransactionRow`] as its record, and its evidence apart (the record's
/// `request_signature` is `None`): the evidence's body may still have to be read from
/// `signed_bodies` ([`Conn::fill_signed_bodies`], once for a page of records).
pub(crate) fn transaction_from_row(row: TransactionRow) -> Result<(TransactionRecord, Option<PendingEvidence>), Error> {
    let conversion = match (row.to_currency, row.rate, row.gross_target_amount, row.fee_amount, row.net_target_amount) {
        (Some(c), Some(rate), Some(gross), Some(fee), Some(net)) => Some(ConversionLeg {
            to_currency: parse_currency(&c)?,
            rate: Amount::from_micros(rate),
            gross_target_amount: Amount::from_micros(gross),
            fee_amount: Amount::from_micros(fee),
            net_target_amount: Amount::from_micros(net),
        }),
        _ => None,
    };
    let evidence = row.request_signature.as_deref().map(super::parse_evidence).transpose()?;
    let record = TransactionRecord {
        id: row.id,
        coop_id: parse_coop(&row.coop_id)?,
        kind: if row.kind == "conversion" { TransactionKind::Conversion } else { TransactionKind::Payment },
        from: row.from_account,
        to: row.to_account,
        amount: Amount::from_micros(row.amount),
        currency: parse_currency(&row.currency)?,
        memo: row.memo,
        timestamp: to_u64(row.timestamp),
        conversion,
        request_signature: None,
        batch_id: row.batch_id,
    };
    Ok((record, evidence))
}

/// A `rates` row (`from_currency, to_currency, rate, set_by, set_at`).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RateRow {
    from_currency: String,
    to_currency: String,
    rate: i64,
    set_by: String,
    set_at: i64,
}

named_row!(RateRow { from_currency, to_currency, rate, set_by, set_at });

pub(crate) fn rate_from_row(row: RateRow) -> Result<RateRecord, Error> {
    Ok(RateRecord {
        from_currency: parse_currency(&row.from_currency)?,
        to_currency: parse_currency(&row.to_currency)?,
        rate: Amount::from_micros(row.rate),
        set_by: parse_did(&row.set_by)?,
        set_at: to_u64(row.set_at),
    })
}

/// Columns of `quotes`, in the order of [`QuoteRow`].
const QUOTE_COLUMNS: &str = "id, coop_id, amount, from_currency, to_currency, rate, fee_ppm, \
     gross_target_amount, fee_amount, net_target_amount, valid_until, requester";

/// A `quotes` row: [`QUOTE_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
struct QuoteRow {
    id: String,
    coop_id: String,
    amount: i64,
    from_currency: String,
    to_currency: String,
    rate: i64,
    fee_ppm: i64,
    gross_target_amount: i64,
    fee_amount: i64,
    net_target_amount: i64,
    valid_until: i64,
    requester: Option<String>,
}

named_row!(QuoteRow {
    id,
    coop_id,
    amount,
    from_currency,
    to_currency,
    rate,
    fee_ppm,
    gross_target_amount,
    fee_amount,
    net_target_amount,
    valid_until,
    requester
});

fn quote_from_row(row: QuoteRow) -> Result<QuoteRecord, Error> {
    Ok(QuoteRecord {
        id: row.id,
        coop_id: parse_coop(&row.coop_id)?,
        amount: Amount::from_micros(row.amount),
        from_currency: parse_currency(&row.from_currency)?,
        to_currency: parse_currency(&row.to_currency)?,
        rate: Amount::from_micros(row.rate),
        fee_ppm: u32::try_from(row.fee_ppm).unwrap_or(0),
        gross_target_amount: Amount::from_micros(row.gross_target_amount),
        fee_amount: Amount::from_micros(row.fee_amount),
        net_target_amount: Amount::from_micros(row.net_target_amount),
        valid_until: to_u64(row.valid_until),
        requester: row.requester,
    })
}

/// Columns of `idempotency`, in the order of [`IdempotencyRow`].
pub(crate) const IDEMPOTENCY_COLUMNS: &str = "key, request_hash, status, body, created_at, event_seq";

/// An `idempotency` row: [`IDEMPOTENCY_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct IdempotencyRow {
    key: String,
    request_hash: String,
    status: i64,
    body: String,
    created_at: i64,
    event_seq: Option<i64>,
}

named_row!(IdempotencyRow { key, request_hash, status, body, created_at, event_seq });

/// An [`IdempotencyRow`] as its record.
pub(crate) fn idempotency_from_row(row: IdempotencyRow) -> IdempotencyRecord {
    IdempotencyRecord {
        key: row.key,
        request_hash: row.request_hash,
        status: u16::try_from(row.status).unwrap_or(500),
        body: row.body,
        created_at: to_u64(row.created_at),
        // PostgreSQL: a placeholder (negative) until the numbering after the commit: no number yet.
        event_seq: row.event_seq.filter(|seq| *seq > 0).map(to_u64),
    }
}

#[async_trait]
impl LedgerTx for Conn<'_> {
    async fn lock_balances(&mut self, coop: &CoopId, accounts: &[(String, Currency)]) -> Result<Vec<Amount>, Error> {
        if self.is_sqlite() {
            // The single writer holds the only write transaction: plain reads are locks, and one
            // query reads every account.
            let sql = super::shaped("lock_balances", accounts.len(), || {
                let conditions: Vec<String> = (0..accounts.len())
                    .map(|i| format!("(account = ${} AND currency = ${})", 2 * i + 2, 2 * i + 3))
                    .collect();
                format!(
                    "SELECT account, currency, balance FROM balances WHERE coop_id = $1 AND ({})",
                    conditions.join(" OR ")
                )
            });
            let mut args = vec![Arg::from(coop.as_str())];
            for (account, currency) in accounts {
                args.extend([Arg::from(account), Arg::from(currency.as_str())]);
            }
            let rows: Vec<(String, String, i64)> = self.fetch_all(&sql, &args).await?;
            return Ok(accounts
                .iter()
                .map(|(account, currency)| {
                    rows.iter()
                        .find(|(a, c, _)| a == account && c == currency.as_str())
                        .map(|(_, _, b)| Amount::from_micros(*b))
                        .unwrap_or(Amount::ZERO)
                })
                .collect());
        }
        // One call creates each missing row and locks every row, in the order of (account,
        // currency), byte by byte, so two transactions touching the same accounts cannot
        // deadlock (migration `0025_fewer_round_trips.sql`).
        let (names, currencies): (Vec<&str>, Vec<&str>) =
            accounts.iter().map(|(account, currency)| (account.as_str(), currency.as_str())).unzip();
        let args = [Arg::from(coop.as_str()), Arg::Texts(names), Arg::Texts(currencies)];
        let rows: Vec<(i64, i64)> = self.fetch_all("SELECT ord, locked FROM lock_balances($1, $2, $3)", &args).await?;
        let mut balances = vec![Amount::ZERO; accounts.len()];
        for (ord, locked) in rows {
            if let Some(slot) = usize::try_from(ord).ok().and_then(|ord| balances.get_mut(ord.wrapping_sub(1))) {
                *slot = Amount::from_micros(locked);
            }
        }
        Ok(balances)
    }

    async fn apply_deltas(&mut self, coop: &CoopId, deltas: &[(&str, &Currency, Amount)]) -> Result<(), Error> {
        if deltas.is_empty() {
            return Ok(());
        }
        let sql = super::shaped("apply_deltas", deltas.len(), || {
            let rows: Vec<String> =
                (0..deltas.len()).map(|i| format!("($1, ${}, ${}, ${})", 3 * i + 2, 3 * i + 3, 3 * i + 4)).collect();
            format!(
                "INSERT INTO balances (coop_id, account, currency, balance) \
                 VALUES {} \
                 ON CONFLICT (coop_id, account, currency) \
                 DO UPDATE SET balance = balances.balance + excluded.balance",
                rows.join(", ")
            )
        });
        let mut args = vec![Arg::from(coop.as_str())];
        for (account, currency, delta) in deltas {
            args.extend([Arg::from(*account), Arg::from(currency.as_str()), Arg::from(delta.micros())]);
            self.touched.push(Touched::Balance(coop.clone(), (*account).to_owned()));
        }
        self.defer("balances", sql, &args).await
    }

    async fn add_to_balance(
        &mut self,
        coop: &CoopId,
        account: &str,
        currency: &Currency,
        delta: Amount,
    ) -> Result<(), Error> {
        self.touched.push(Touched::Balance(coop.clone(), account.to_owned()));
        self.execute(
            "INSERT INTO balances (coop_id, account, currency, balance) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (coop_id, account, currency) \
             DO UPDATE SET balance = balances.balance + excluded.balance",
            args![coop.as_str(), account, currency.as_str(), delta.micros()],
        )
        .await
        .map(|_| ())
    }

    async fn insert_transaction(&mut self, r: &TransactionRecord) -> Result<(), Error> {
        let leg = r.conversion.as_ref();
        let evidence = match &r.request_signature {
            Some(signature) => Some(self.evidence_json(signature).await?),
            None => None,
        };
        let sql = super::shaped("insert_transaction", 0, || {
            format!(
                "INSERT INTO transactions ({TRANSACTION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
            )
        });
        self.defer(
            "transactions",
            sql,
            args![
                &r.id,
                r.coop_id.as_str(),
                r.kind.as_str(),
                &r.from,
                &r.to,
                r.amount.micros(),
                r.currency.as_str(),
                r.memo.as_deref(),
                to_i64(r.timestamp)?,
                leg.map(|l| l.to_currency.to_string()),
                leg.map(|l| l.rate.micros()),
                leg.map(|l| l.gross_target_amount.micros()),
                leg.map(|l| l.fee_amount.micros()),
                leg.map(|l| l.net_target_amount.micros()),
                evidence,
                r.batch_id.as_deref()
            ],
        )
        .await
    }

    async fn idempotency_get(&mut self, key: &str, not_before: u64) -> Result<Option<IdempotencyRecord>, Error> {
        let sql = format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency \
             WHERE key = $1 AND created_at >= $2"
        );
        let row: Option<IdempotencyRow> = self.fetch_optional(&sql, args![key, to_i64(not_before)?]).await?;
        Ok(row.map(idempotency_from_row))
    }

    async fn idempotency_put(&mut self, r: &IdempotencyRecord) -> Result<(), Error> {
        // Given the number of the unit of work's last event once it has appended them all: at
        // the end of the job on SQLite, by the numbering after the commit on PostgreSQL
        // (`Conn::number_answer_with`).
        self.pending_answer = Some(r.key.clone());
        self.write_answer(r, None).await
    }

    async fn idempotency_claim(
        &mut self,
        key: &str,
        request_hash: &str,
        now: u64,
        not_before: u64,
    ) -> Result<Option<IdempotencyRecord>, Error> {
        self.execute("DELETE FROM idempotency WHERE key = $1 AND created_at < $2", args![key, to_i64(not_before)?])
            .await?;
        let claimed = self
            .execute(
                "INSERT INTO idempotency (key, request_hash, status, body, created_at) \
                 VALUES ($1, $2, 0, '', $3) \
                 ON CONFLICT (key) DO NOTHING",
                args![key, request_hash, to_i64(now)?],
            )
            .await?;
        if claimed > 0 {
            return Ok(None);
        }
        let sql = format!("SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency WHERE key = $1");
        let row: Option<IdempotencyRow> = self.fetch_optional(&sql, args![key]).await?;
        // PostgreSQL: a negative number is the placeholder of an event still waiting for its
        // number; a replay reads the number once the numbering gave it.
        let waiting = row.as_ref().is_some_and(|row| row.event_seq.is_some_and(|seq| seq < 0));
        let stored = row.map(idempotency_from_row);
        if let Some(record) = &stored
            && record.request_hash == request_hash
        {
            self.replayed = record.event_seq;
            if waiting {
                self.replayed_waiting = Some(key.to_owned());
            }
        }
        Ok(stored)
    }

    async fn put_rate(&mut self, coop: &CoopId, r: &RateRecord) -> Result<(), Error> {
        self.execute(
            "INSERT INTO rates (coop_id, from_currency, to_currency, rate, set_by, set_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (coop_id, from_currency, to_currency) \
             DO UPDATE SET rate = excluded.rate, set_by = excluded.set_by, set_at = excluded.set_at",
            args![
                coop.as_str(),
                r.from_currency.as_str(),
                r.to_currency.as_str(),
                r.rate.micros(),
                r.set_by.as_str(),
                to_i64(r.set_at)?
            ],
        )
        .await
        .map(|_| ())
    }

    async fn rate(&mut self, coop: &CoopId, from: &Currency, to: &Currency) -> Result<Option<RateRecord>, Error> {
        let row: Option<RateRow> = self
            .fetch_optional(
                "SELECT from_currency, to_currency, rate, set_by, set_at FROM rates \
                 WHERE coop_id = $1 AND from_currency = $2 AND to_currency = $3",
                args![coop.as_str(), from.as_str(), to.as_str()],
            )
            .await?;
        row.map(rate_from_row).transpose()
    }

    async fn put_quote(&mut self, q: &QuoteRecord) -> Result<(), Error> {
        self.execute(
            "INSERT INTO quotes (id, coop_id, amount, from_currency, to_currency, rate, fee_ppm, \
             gross_target_amount, fee_amount, net_target_amount, valid_until, requester) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            args![
                &q.id,
                q.coop_id.as_str(),
                q.amount.micros(),
                q.from_currency.as_str(),
                q.to_currency.as_str(),
                q.rate.micros(),
                i64::from(q.fee_ppm),
                q.gross_target_amount.micros(),
                q.fee_amount.micros(),
                q.net_target_amount.micros(),
                to_i64(q.valid_until)?,
                q.requester.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }

    async fn quote(&mut self, coop: &CoopId, id: &str) -> Result<Option<QuoteRecord>, Error> {
        let sql = format!("SELECT {QUOTE_COLUMNS} FROM quotes WHERE coop_id = $1 AND id = $2");
        let row: Option<QuoteRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(quote_from_row).transpose()
    }

    async fn use_quote(&mut self, coop: &CoopId, id: &str, now: u64) -> Result<bool, Error> {
        let used = self
            .execute(
                "UPDATE quotes SET used_at = $1 WHERE coop_id = $2 AND id = $3 AND used_at IS NULL",
                args![to_i64(now)?, coop.as_str(), id],
            )
            .await?;
        Ok(used == 1)
    }

    async fn prune_expired(&mut self, answers_before: u64, quotes_before: u64) -> Result<u64, Error> {
        let answers =
            self.execute("DELETE FROM idempotency WHERE created_at < $1", args![to_i64(answers_before)?]).await?;
        let quotes = self.execute("DELETE FROM quotes WHERE valid_until < $1", args![to_i64(quotes_before)?]).await?;
        Ok(answers + quotes)
    }
}

impl Conn<'_> {
    /// SQLite: gives the keyed answer this unit of work decided the number of the last event it
    /// appended, once it appended them all. Nothing when it decided no answer or appended no
    /// event.
    pub(crate) async fn number_answer(&mut self) -> Result<(), Error> {
        match self.appended.last() {
            Some(signal) => self.number_answer_with(to_i64(signal.seq)?).await,
            None => Ok(()),
        }
    }

    /// Gives the keyed answer this unit of work decided, if any, `seq`: on SQLite the number of
    /// its last event; on PostgreSQL that event's placeholder, which the numbering after the
    /// commit replaces with its number (migration 0023).
    pub(crate) async fn number_answer_with(&mut self, seq: i64) -> Result<(), Error> {
        let Some(key) = self.pending_answer.take() else { return Ok(()) };
        self.execute("UPDATE idempotency SET event_seq = $2 WHERE key = $1", args![key.as_str(), seq]).await.map(|_| ())
    }

    /// Writes a keyed answer with the number of its last event (`None`: not known yet).
    pub(crate) async fn write_answer(&mut self, r: &IdempotencyRecord, event_seq: Option<i64>) -> Result<(), Error> {
        self.execute(
            "INSERT INTO idempotency (key, request_hash, status, body, created_at, event_seq) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (key) \
             DO UPDATE SET request_hash = excluded.request_hash, status = excluded.status, \
             body = excluded.body, created_at = excluded.created_at, event_seq = excluded.event_seq",
            args![&r.key, &r.request_hash, i64::from(r.status), &r.body, to_i64(r.created_at)?, event_seq],
        )
        .await
        .map(|_| ())
    }
}
