//! The statement handle: every write primitive of the domain's ports, implemented once over a
//! connection that is inside a transaction, for SQLite and PostgreSQL alike (the reads of
//! `reads.rs` use the same handle outside a transaction).
//!
//! SQL is written in the dialect both backends accept (`$n` parameters, `ON CONFLICT`,
//! `RETURNING`); the few differences (row locks) are spelled out where they occur. Statements
//! are sent through [`Conn::execute`] and the `fetch_*` methods, which bind [`Arg`]s and decode
//! [`Row`]s the same way on both backends: on SQLite synchronously, on the calling thread (see
//! `sqlite`), on PostgreSQL through sqlx. This module decides nothing: the rules are the
//! domain's.

use std::borrow::Cow;

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Currency, Did, Error, Role};
use gateway_domain::governance::{COOP_DOMAIN, Effect, Outcome, ProposalPayload, ProposalStatus};
use gateway_domain::ports::{
    ComputeTx, ConversionLeg, CoopRecord, CoopSettings, CoopSignal, CoopTx, DelegationRecord, DomainRecord, EventTx,
    GovTx, IdempotencyRecord, LedgerTx, MemberRecord, NotificationFanout, NotificationRecord, NotificationTx,
    ProposalRecord, QuoteRecord, RateRecord, SigningKeyRecord, TaskRecord, TaskResult, TaskStatus, TransactionKind,
    TransactionRecord, TrustEdge, TrustTx,
};
use rusqlite::OptionalExtension;
use serde_json::Value;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Postgres};

use crate::db_error;

/// A connection inside an open transaction.
#[derive(Debug)]
pub(crate) enum Db<'a> {
    /// SQLite: a connection used synchronously on this thread (the writer's, or a reader's).
    Sqlite(&'a mut rusqlite::Connection),
    /// PostgreSQL: one job's transaction.
    Postgres(&'a mut PgConnection),
}

/// A unit of work's handle: the connection, and the events it appended (announced on the feed
/// once the transaction commits, never before).
#[derive(Debug)]
pub(crate) struct Conn<'a> {
    pub(crate) db: Db<'a>,
    pub(crate) appended: Vec<CoopSignal>,
}

/// One statement parameter, bound alike on both backends.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'q> {
    Int(Option<i64>),
    Real(f64),
    Text(Option<Cow<'q, str>>),
}

impl From<i64> for Arg<'_> {
    fn from(value: i64) -> Self {
        Arg::Int(Some(value))
    }
}

impl From<Option<i64>> for Arg<'_> {
    fn from(value: Option<i64>) -> Self {
        Arg::Int(value)
    }
}

impl From<f64> for Arg<'_> {
    fn from(value: f64) -> Self {
        Arg::Real(value)
    }
}

impl<'q> From<&'q str> for Arg<'q> {
    fn from(value: &'q str) -> Self {
        Arg::Text(Some(Cow::Borrowed(value)))
    }
}

impl<'q> From<&'q String> for Arg<'q> {
    fn from(value: &'q String) -> Self {
        Arg::Text(Some(Cow::Borrowed(value)))
    }
}

impl<'q> From<Option<&'q str>> for Arg<'q> {
    fn from(value: Option<&'q str>) -> Self {
        Arg::Text(value.map(Cow::Borrowed))
    }
}

impl From<Option<String>> for Arg<'_> {
    fn from(value: Option<String>) -> Self {
        Arg::Text(value.map(Cow::Owned))
    }
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as Sql, ValueRef};
        Ok(match self {
            Arg::Int(Some(v)) => ToSqlOutput::Owned(Sql::Integer(*v)),
            Arg::Real(v) => ToSqlOutput::Owned(Sql::Real(*v)),
            Arg::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Arg::Int(None) | Arg::Text(None) => ToSqlOutput::Owned(Sql::Null),
        })
    }
}

/// A statement's parameters: `args![a, b, …]`, each converted with `Arg::from`.
macro_rules! args {
    ($($arg:expr),* $(,)?) => {
        &[$(Arg::from($arg)),*][..]
    };
}

/// Binds `args` to a sqlx query, in order.
fn bind_pg<'q>(
    mut query: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    args: &'q [Arg<'q>],
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    for arg in args {
        query = match arg {
            Arg::Int(v) => query.bind(*v),
            Arg::Real(v) => query.bind(*v),
            Arg::Text(v) => query.bind(v.as_deref()),
        };
    }
    query
}

/// A result row decoded the same way from either backend: tuples of column values (by position),
/// single values, and the wide rows that name their columns.
pub(crate) trait Row: Sized + Send {
    fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self>;
    fn from_pg(row: &PgRow) -> Result<Self, sqlx::Error>;
}

/// A column type both drivers decode.
pub(crate) trait Column:
    rusqlite::types::FromSql + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send
{
}

impl<T: rusqlite::types::FromSql + for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send> Column for T {}

macro_rules! tuple_row {
    ($($t:ident $i:tt),+) => {
        impl<$($t: Column),+> Row for ($($t,)+) {
            fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
                Ok(($(row.get::<_, $t>($i)?,)+))
            }
            fn from_pg(row: &PgRow) -> Result<Self, sqlx::Error> {
                use sqlx::Row as _;
                Ok(($(row.try_get::<$t, _>($i)?,)+))
            }
        }
    };
}

tuple_row!(A 0);
tuple_row!(A 0, B 1);
tuple_row!(A 0, B 1, C 2);
tuple_row!(A 0, B 1, C 2, D 3);
tuple_row!(A 0, B 1, C 2, D 3, E 4);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);

/// A row struct whose fields are its columns' names; sqlx's `FromRow` derive serves the pool's
/// reads and PostgreSQL, this the SQLite writer.
macro_rules! named_row {
    ($name:ident { $($field:ident),+ $(,)? }) => {
        impl Row for $name {
            fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
                Ok(Self { $($field: row.get(stringify!($field))?),+ })
            }
            fn from_pg(row: &PgRow) -> Result<Self, sqlx::Error> {
                <Self as sqlx::FromRow<'_, PgRow>>::from_row(row)
            }
        }
    };
}

/// Turns a SQLite failure into the contract's error: a unique or primary-key constraint
/// failure (a row with that id already exists) → 409 `CONFLICT`; a full or failing disk, or a
/// database another process holds, → 503; anything else → 500.
pub(crate) fn sqlite_error(err: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode::{CannotOpen, DatabaseBusy, DatabaseLocked, DiskFull, SystemIoFailure};
    use rusqlite::ffi::{SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE};
    match &err {
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(failure.extended_code, SQLITE_CONSTRAINT_UNIQUE | SQLITE_CONSTRAINT_PRIMARYKEY) =>
        {
            Error::conflict(format!("already exists: {err}"))
        }
        rusqlite::Error::SqliteFailure(failure, _)
            if matches!(failure.code, DiskFull | SystemIoFailure | DatabaseBusy | DatabaseLocked | CannotOpen) =>
        {
            Error::ServiceUnavailable(format!("store unavailable: {err}"))
        }
        _ => Error::Internal(format!("store error: {err}")),
    }
}

/// The statement in SQLite's numbered-parameter form: `$n` becomes `?n`, which SQLite binds to
/// the n-th argument wherever it appears (a `$n` would be a name, numbered by first appearance).
fn numbered(sql: &str) -> Cow<'_, str> {
    // Every `$` of the statements sent to SQLite starts a parameter.
    if sql.contains('$') { Cow::Owned(sql.replace('$', "?")) } else { Cow::Borrowed(sql) }
}

impl<'a> Conn<'a> {
    pub(crate) fn new(db: Db<'a>) -> Self {
        Self { db, appended: Vec::new() }
    }

    fn is_sqlite(&self) -> bool {
        matches!(self.db, Db::Sqlite(_))
    }

    /// The row-lock clause ending a `SELECT` that holds what it reads until the transaction
    /// ends: ` FOR UPDATE` on PostgreSQL; nothing on SQLite, whose single writer already runs
    /// every write transaction alone (and which has no such clause).
    fn for_update(&self) -> &'static str {
        if self.is_sqlite() { "" } else { " FOR UPDATE" }
    }

    /// Runs a statement; returns the number of rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, Error> {
        match &mut self.db {
            Db::Sqlite(c) => c
                .prepare_cached(&numbered(sql))
                .and_then(|mut statement| statement.execute(rusqlite::params_from_iter(args)))
                .map(|changed| changed as u64)
                .map_err(sqlite_error),
            Db::Postgres(c) => {
                bind_pg(sqlx::query(sql), args).execute(&mut **c).await.map(|r| r.rows_affected()).map_err(db_error)
            }
        }
    }

    /// Every row a query returns.
    pub(crate) async fn fetch_all<R: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<R>, Error> {
        match &mut self.db {
            Db::Sqlite(c) => {
                let mut statement = c.prepare_cached(&numbered(sql)).map_err(sqlite_error)?;
                let rows =
                    statement.query_map(rusqlite::params_from_iter(args), R::from_sqlite).map_err(sqlite_error)?;
                rows.collect::<Result<_, _>>().map_err(sqlite_error)
            }
            Db::Postgres(c) => {
                let rows = bind_pg(sqlx::query(sql), args).fetch_all(&mut **c).await.map_err(db_error)?;
                rows.iter().map(R::from_pg).collect::<Result<_, _>>().map_err(db_error)
            }
        }
    }

    /// The first row a query returns, if any.
    pub(crate) async fn fetch_optional<R: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<R>, Error> {
        match &mut self.db {
            Db::Sqlite(c) => c
                .prepare_cached(&numbered(sql))
                .and_then(|mut statement| {
                    statement.query_row(rusqlite::params_from_iter(args), R::from_sqlite).optional()
                })
                .map_err(sqlite_error),
            Db::Postgres(c) => {
                let row = bind_pg(sqlx::query(sql), args).fetch_optional(&mut **c).await.map_err(db_error)?;
                row.as_ref().map(R::from_pg).transpose().map_err(db_error)
            }
        }
    }

    /// The first row of a query that always returns one.
    pub(crate) async fn fetch_one<R: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<R, Error> {
        self.fetch_optional(sql, args)
            .await?
            .ok_or_else(|| Error::Internal(format!("the store returned no row for: {sql}")))
    }
}

macro_rules! value_row {
    ($($t:ty),+) => {
        $(impl Row for $t {
            fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
                row.get(0)
            }
            fn from_pg(row: &PgRow) -> Result<Self, sqlx::Error> {
                use sqlx::Row as _;
                row.try_get(0)
            }
        })+
    };
}

value_row!(i64, Option<i64>, String, bool);

pub(crate) fn to_u64(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

pub(crate) fn to_i64(value: u64) -> Result<i64, Error> {
    i64::try_from(value).map_err(|_| Error::bad_request("value out of range"))
}

/// Rows that the database aggregated into one JSON array of arrays (`json_group_array` /
/// `json_agg`), decoded as tuples.
fn from_json_rows<T: serde::de::DeserializeOwned>(json: &str) -> Result<Vec<T>, Error> {
    serde_json::from_str(json).map_err(|e| Error::Internal(format!("aggregated rows do not decode: {e}")))
}

pub(crate) fn parse_did(text: &str) -> Result<Did, Error> {
    Did::parse(text).map_err(|e| Error::Internal(format!("stored DID '{text}' is invalid: {e}")))
}

pub(crate) fn parse_coop(text: &str) -> Result<CoopId, Error> {
    CoopId::parse(text).map_err(|e| Error::Internal(format!("stored coop id '{text}' is invalid: {e}")))
}

pub(crate) fn parse_currency(text: &str) -> Result<Currency, Error> {
    Currency::parse(text).map_err(|e| Error::Internal(format!("stored currency '{text}' is invalid: {e}")))
}

pub(crate) fn parse_json(text: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::Internal(format!("stored JSON is invalid: {e}")))
}

pub(crate) fn parse_role(text: &str) -> Result<Role, Error> {
    Role::parse(text).ok_or_else(|| Error::Internal(format!("unknown role '{text}' in store")))
}

/// Columns of `coops` plus the member count, in this order.
pub(crate) const COOP_COLUMNS: &str = "c.id, c.name, c.coop_type, c.description, c.created_at, c.created_by, \
     c.default_currency, c.credit_limit, c.high_value_threshold, c.conversion_fee_ppm, c.quorum_percent, c.member_count";

pub(crate) type CoopRow = (String, String, String, String, i64, String, String, i64, i64, i64, i64, i64);

pub(crate) fn coop_from_row(row: CoopRow) -> Result<CoopRecord, Error> {
    let (id, name, coop_type, description, created_at, created_by, currency, credit, threshold, fee, quorum, count) =
        row;
    Ok(CoopRecord {
        id: parse_coop(&id)?,
        name,
        coop_type,
        description,
        created_at: to_u64(created_at),
        created_by: parse_did(&created_by)?,
        settings: CoopSettings {
            default_currency: parse_currency(&currency)?,
            credit_limit: Amount::from_micros(credit),
            high_value_threshold: Amount::from_micros(threshold),
            conversion_fee_ppm: u32::try_from(fee).unwrap_or(0),
            quorum_percent: u32::try_from(quorum).unwrap_or(50),
        },
        member_count: to_u64(count),
    })
}

pub(crate) type MemberRow = (String, String, i64, Option<i64>);

pub(crate) fn member_from_row(row: MemberRow) -> Result<MemberRecord, Error> {
    let (did, role, joined_at, credit_limit) = row;
    Ok(MemberRecord {
        did: parse_did(&did)?,
        role: parse_role(&role)?,
        joined_at: to_u64(joined_at),
        credit_limit: credit_limit.map(Amount::from_micros),
    })
}

/// Columns of `transactions`, in this order.
pub(crate) const TRANSACTION_COLUMNS: &str = "id, coop_id, kind, from_account, to_account, amount, currency, memo, timestamp, \
     to_currency, rate, gross_target_amount, fee_amount, net_target_amount";

pub(crate) type TransactionRow = (
    String,
    String,
    String,
    String,
    String,
    i64,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

pub(crate) fn transaction_from_row(row: TransactionRow) -> Result<TransactionRecord, Error> {
    let (id, coop, kind, from, to, amount, currency, memo, timestamp, to_currency, rate, gross, fee, net) = row;
    let conversion = match (to_currency, rate, gross, fee, net) {
        (Some(c), Some(rate), Some(gross), Some(fee), Some(net)) => Some(ConversionLeg {
            to_currency: parse_currency(&c)?,
            rate: Amount::from_micros(rate),
            gross_target_amount: Amount::from_micros(gross),
            fee_amount: Amount::from_micros(fee),
            net_target_amount: Amount::from_micros(net),
        }),
        _ => None,
    };
    Ok(TransactionRecord {
        id,
        coop_id: parse_coop(&coop)?,
        kind: if kind == "conversion" { TransactionKind::Conversion } else { TransactionKind::Payment },
        from,
        to,
        amount: Amount::from_micros(amount),
        currency: parse_currency(&currency)?,
        memo,
        timestamp: to_u64(timestamp),
        conversion,
    })
}

pub(crate) const NOTIFICATION_COLUMNS: &str = "id, recipient, coop_id, kind, title, body, data, created_at, read_at";

pub(crate) type NotificationRow = (String, String, String, String, String, String, String, i64, Option<i64>);

pub(crate) fn notification_from_row(row: NotificationRow) -> Result<NotificationRecord, Error> {
    let (id, recipient, coop, kind, title, body, data, created_at, read_at) = row;
    Ok(NotificationRecord {
        id,
        recipient: parse_did(&recipient)?,
        coop_id: parse_coop(&coop)?,
        kind,
        title,
        body,
        data: parse_json(&data)?,
        created_at: to_u64(created_at),
        read_at: read_at.map(to_u64),
    })
}

pub(crate) type RateRow = (String, String, i64, String, i64);

pub(crate) fn rate_from_row(row: RateRow) -> Result<RateRecord, Error> {
    let (from, to, rate, set_by, set_at) = row;
    Ok(RateRecord {
        from_currency: parse_currency(&from)?,
        to_currency: parse_currency(&to)?,
        rate: Amount::from_micros(rate),
        set_by: parse_did(&set_by)?,
        set_at: to_u64(set_at),
    })
}

#[async_trait]
impl LedgerTx for Conn<'_> {
    async fn lock_balances(&mut self, coop: &CoopId, accounts: &[(String, Currency)]) -> Result<Vec<Amount>, Error> {
        if self.is_sqlite() {
            // The single writer holds the only write transaction: plain reads are locks, and one
            // query reads every account.
            let conditions: Vec<String> = (0..accounts.len())
                .map(|i| format!("(account = ${} AND currency = ${})", 2 * i + 2, 2 * i + 3))
                .collect();
            let sql = format!(
                "SELECT account, currency, balance FROM balances WHERE coop_id = $1 AND ({})",
                conditions.join(" OR ")
            );
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
        // Lock in sorted order so two transactions touching the same accounts cannot deadlock.
        let mut order: Vec<usize> = (0..accounts.len()).collect();
        order.sort_by(|&a, &b| (&accounts[a].0, accounts[a].1.as_str()).cmp(&(&accounts[b].0, accounts[b].1.as_str())));
        let mut balances = vec![Amount::ZERO; accounts.len()];
        for index in order {
            let (account, currency) = &accounts[index];
            let key = args![coop.as_str(), account, currency.as_str()];
            self.execute(
                "INSERT INTO balances (coop_id, account, currency, balance) VALUES ($1, $2, $3, 0) ON CONFLICT DO NOTHING",
                key,
            )
            .await?;
            let balance: Option<i64> = self
                .fetch_optional(
                    "SELECT balance FROM balances WHERE coop_id = $1 AND account = $2 AND currency = $3 FOR UPDATE",
                    key,
                )
                .await?;
            balances[index] = Amount::from_micros(balance.unwrap_or(0));
        }
        Ok(balances)
    }

    async fn apply_deltas(&mut self, coop: &CoopId, deltas: &[(&str, &Currency, Amount)]) -> Result<(), Error> {
        if deltas.is_empty() {
            return Ok(());
        }
        let rows: Vec<String> =
            (0..deltas.len()).map(|i| format!("($1, ${}, ${}, ${})", 3 * i + 2, 3 * i + 3, 3 * i + 4)).collect();
        let sql = format!(
            "INSERT INTO balances (coop_id, account, currency, balance) VALUES {} \
             ON CONFLICT (coop_id, account, currency) DO UPDATE SET balance = balances.balance + excluded.balance",
            rows.join(", ")
        );
        let mut args = vec![Arg::from(coop.as_str())];
        for (account, currency, delta) in deltas {
            args.extend([Arg::from(*account), Arg::from(currency.as_str()), Arg::from(delta.micros())]);
        }
        self.execute(&sql, &args).await.map(|_| ())
    }

    async fn add_to_balance(
        &mut self,
        coop: &CoopId,
        account: &str,
        currency: &Currency,
        delta: Amount,
    ) -> Result<(), Error> {
        self.execute(
            "INSERT INTO balances (coop_id, account, currency, balance) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (coop_id, account, currency) DO UPDATE SET balance = balances.balance + excluded.balance",
            args![coop.as_str(), account, currency.as_str(), delta.micros()],
        )
        .await
        .map(|_| ())
    }

    async fn insert_transaction(&mut self, r: &TransactionRecord) -> Result<(), Error> {
        let leg = r.conversion.as_ref();
        let sql = format!(
            "INSERT INTO transactions ({TRANSACTION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        );
        self.execute(
            &sql,
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
                leg.map(|l| l.net_target_amount.micros())
            ],
        )
        .await
        .map(|_| ())
    }

    async fn idempotency_get(&mut self, key: &str, not_before: u64) -> Result<Option<IdempotencyRecord>, Error> {
        let row: Option<IdempotencyRow> = self.fetch_optional("SELECT key, request_hash, status, body, created_at FROM idempotency WHERE key = $1 AND created_at >= $2", args![key, to_i64(not_before)?]).await?;
        Ok(row.map(idempotency_from_row))
    }

    async fn idempotency_put(&mut self, r: &IdempotencyRecord) -> Result<(), Error> {
        self.execute(
            "INSERT INTO idempotency (key, request_hash, status, body, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (key) DO UPDATE SET request_hash = excluded.request_hash, status = excluded.status, \
             body = excluded.body, created_at = excluded.created_at",
            args![&r.key, &r.request_hash, i64::from(r.status), &r.body, to_i64(r.created_at)?],
        )
        .await
        .map(|_| ())
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
                "INSERT INTO idempotency (key, request_hash, status, body, created_at) VALUES ($1, $2, 0, '', $3) \
                 ON CONFLICT (key) DO NOTHING",
                args![key, request_hash, to_i64(now)?],
            )
            .await?;
        if claimed > 0 {
            return Ok(None);
        }
        self.idempotency_get(key, 0).await
    }

    async fn put_rate(&mut self, coop: &CoopId, r: &RateRecord) -> Result<(), Error> {
        self.execute("INSERT INTO rates (coop_id, from_currency, to_currency, rate, set_by, set_at) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (coop_id, from_currency, to_currency) DO UPDATE SET rate = excluded.rate, \
             set_by = excluded.set_by, set_at = excluded.set_at", args![coop.as_str(), r.from_currency.as_str(), r.to_currency.as_str(), r.rate.micros(), r.set_by.as_str(), to_i64(r.set_at)?]).await.map(|_| ())
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
            "INSERT INTO quotes (id, coop_id, amount, from_currency, to_currency, rate, fee_ppm, gross_target_amount, \
             fee_amount, net_target_amount, valid_until) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
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
                to_i64(q.valid_until)?
            ],
        )
        .await
        .map(|_| ())
    }

    async fn quote(&mut self, coop: &CoopId, id: &str) -> Result<Option<QuoteRecord>, Error> {
        type QuoteRow = (String, String, i64, String, String, i64, i64, i64, i64, i64, i64);
        let row: Option<QuoteRow> = self.fetch_optional("SELECT id, coop_id, amount, from_currency, to_currency, rate, fee_ppm, gross_target_amount, fee_amount, \
             net_target_amount, valid_until FROM quotes WHERE coop_id = $1 AND id = $2", args![coop.as_str(), id]).await?;
        row.map(|(id, coop, amount, from, to, rate, fee_ppm, gross, fee, net, valid_until)| {
            Ok(QuoteRecord {
                id,
                coop_id: parse_coop(&coop)?,
                amount: Amount::from_micros(amount),
                from_currency: parse_currency(&from)?,
                to_currency: parse_currency(&to)?,
                rate: Amount::from_micros(rate),
                fee_ppm: u32::try_from(fee_ppm).unwrap_or(0),
                gross_target_amount: Amount::from_micros(gross),
                fee_amount: Amount::from_micros(fee),
                net_target_amount: Amount::from_micros(net),
                valid_until: to_u64(valid_until),
            })
        })
        .transpose()
    }
}

#[async_trait]
impl EventTx for Conn<'_> {
    async fn append_event(
        &mut self,
        coop: &CoopId,
        event_type: &str,
        timestamp: u64,
        data: &Value,
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
        let data = data.to_string();
        self.execute(
            "INSERT INTO events (coop_id, seq, event_type, timestamp, data) VALUES ($1, $2, $3, $4, $5)",
            args![coop.as_str(), seq, event_type, to_i64(timestamp)?, &data],
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

#[async_trait]
impl NotificationTx for Conn<'_> {
    async fn insert_notification(&mut self, n: &NotificationRecord) -> Result<(), Error> {
        let sql =
            format!("INSERT INTO notifications ({NOTIFICATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)");
        let data = n.data.to_string();
        self.execute(
            &sql,
            args![
                &n.id,
                n.recipient.as_str(),
                n.coop_id.as_str(),
                &n.kind,
                &n.title,
                &n.body,
                &data,
                to_i64(n.created_at)?,
                n.read_at.map(to_i64).transpose()?
            ],
        )
        .await
        .map(|_| ())
    }

    async fn insert_notification_fanout(&mut self, f: &NotificationFanout) -> Result<(), Error> {
        let recipients = serde_json::Value::from(f.recipients.iter().map(Did::as_str).collect::<Vec<_>>()).to_string();
        let data = f.data.to_string();
        self.execute(
            "INSERT INTO notification_fanouts (recipients, coop_id, kind, title, body, data, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            args![&recipients, f.coop_id.as_str(), &f.kind, &f.title, &f.body, &data, to_i64(f.created_at)?],
        )
        .await
        .map(|_| ())
    }

    async fn expand_notification_fanouts(&mut self) -> Result<u64, Error> {
        // Each recipient's notification gets a fresh id of the same form as `new_id`'s (32 hex
        // digits: the time in milliseconds, then 80 random bits), made by the database as it
        // unpacks the recipients. (The first 12 digits of a version-4 UUID are all random.)
        if self.is_sqlite() {
            // One writer at a time: what is pending now is claimed by this transaction.
            let last: Option<i64> = self.fetch_one("SELECT MAX(pos) FROM notification_fanouts", args![]).await?;
            let Some(last) = last else { return Ok(0) };
            let created = self
                .execute(
                    &format!(
                        "INSERT INTO notifications ({NOTIFICATION_COLUMNS}) \
                         SELECT printf('%012x', CAST(unixepoch('subsec') * 1000 AS INTEGER)) || lower(hex(randomblob(10))), r.value, f.coop_id, f.kind, f.title, f.body, f.data, f.created_at, NULL \
                         FROM notification_fanouts f, json_each(f.recipients) r WHERE f.pos <= $1 ORDER BY f.pos, r.key"
                    ),
                    args![last],
                )
                .await?;
            self.execute("DELETE FROM notification_fanouts WHERE pos <= $1", args![last]).await?;
            return Ok(created);
        }
        // Replicas may expand at the same time: deleting claims the rows (a concurrent
        // expansion waits for the lock and then finds them gone).
        let created = self
            .execute(
                &format!(
                    "WITH claimed AS (DELETE FROM notification_fanouts RETURNING *) \
                     INSERT INTO notifications ({NOTIFICATION_COLUMNS}) \
                     SELECT lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') \
                     || left(replace(gen_random_uuid()::text, '-', ''), 12) || left(gen_random_uuid()::text, 8), r.value, f.coop_id, f.kind, f.title, f.body, f.data, \
                     f.created_at, NULL \
                     FROM claimed f, json_array_elements_text(f.recipients::json) WITH ORDINALITY AS r(value, n) \
                     ORDER BY f.pos, r.n"
                ),
                args![],
            )
            .await?;
        Ok(created)
    }

    async fn mark_notification_read(
        &mut self,
        recipient: &Did,
        coop: &CoopId,
        id: &str,
        at: u64,
    ) -> Result<Option<NotificationRecord>, Error> {
        self.execute(
            "UPDATE notifications SET read_at = $4 WHERE recipient = $1 AND coop_id = $2 AND id = $3 AND read_at IS NULL",
            args![recipient.as_str(), coop.as_str(), id, to_i64(at)?],
        )
        .await
        .map(|_| ())?;
        let sql = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE recipient = $1 AND coop_id = $2 AND id = $3"
        );
        let row: Option<NotificationRow> =
            self.fetch_optional(&sql, args![recipient.as_str(), coop.as_str(), id]).await?;
        row.map(notification_from_row).transpose()
    }

    async fn mark_all_notifications_read(&mut self, recipient: &Did, coop: &CoopId, at: u64) -> Result<u64, Error> {
        let done = self
            .execute(
                "UPDATE notifications SET read_at = $3 WHERE recipient = $1 AND coop_id = $2 AND read_at IS NULL",
                args![recipient.as_str(), coop.as_str(), to_i64(at)?],
            )
            .await?;
        Ok(done)
    }
}

#[async_trait]
impl CoopTx for Conn<'_> {
    async fn coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error> {
        let sql = format!("SELECT {COOP_COLUMNS} FROM coops c WHERE c.id = $1");
        let row: Option<CoopRow> = self.fetch_optional(&sql, args![id.as_str()]).await?;
        row.map(coop_from_row).transpose()
    }

    async fn lock_coop(&mut self, id: &CoopId) -> Result<Option<CoopRecord>, Error> {
        let sql = format!("SELECT {COOP_COLUMNS} FROM coops c WHERE c.id = $1{}", self.for_update());
        let row: Option<CoopRow> = self.fetch_optional(&sql, args![id.as_str()]).await?;
        row.map(coop_from_row).transpose()
    }

    async fn members_among(&mut self, coop: &CoopId, dids: &[&Did]) -> Result<Vec<MemberRecord>, Error> {
        // In chunks: a statement takes at most 32,766 parameters on SQLite and 65,535 on
        // PostgreSQL, and a governance domain may list more members than that.
        const CHUNK: usize = 10_000;
        let mut members = Vec::with_capacity(dids.len());
        for chunk in dids.chunks(CHUNK) {
            let placeholders: Vec<String> = (0..chunk.len()).map(|i| format!("${}", i + 2)).collect();
            let sql = format!(
                "SELECT did, role, joined_at, credit_limit FROM members WHERE coop_id = $1 AND did IN ({})",
                placeholders.join(", ")
            );
            let mut args = vec![Arg::from(coop.as_str())];
            args.extend(chunk.iter().map(|did| Arg::from(did.as_str())));
            let rows: Vec<MemberRow> = self.fetch_all(&sql, &args).await?;
            for row in rows {
                members.push(member_from_row(row)?);
            }
        }
        Ok(members)
    }

    async fn member(&mut self, coop: &CoopId, did: &Did) -> Result<Option<MemberRecord>, Error> {
        let row: Option<MemberRow> = self
            .fetch_optional(
                "SELECT did, role, joined_at, credit_limit FROM members WHERE coop_id = $1 AND did = $2",
                args![coop.as_str(), did.as_str()],
            )
            .await?;
        row.map(member_from_row).transpose()
    }

    async fn insert_coop(&mut self, r: &CoopRecord) -> Result<(), Error> {
        let s = &r.settings;
        self.execute("INSERT INTO coops (id, name, coop_type, description, created_at, created_by, default_currency, credit_limit, \
             high_value_threshold, conversion_fee_ppm, quorum_percent) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", args![r.id.as_str(), &r.name, &r.coop_type, &r.description, to_i64(r.created_at)?, r.created_by.as_str(), s.default_currency.as_str(), s.credit_limit.micros(), s.high_value_threshold.micros(), i64::from(s.conversion_fee_ppm), i64::from(s.quorum_percent)]).await.map(|_| ())
    }

    async fn update_settings(&mut self, coop: &CoopId, s: &CoopSettings) -> Result<(), Error> {
        self.execute(
            "UPDATE coops SET default_currency = $2, credit_limit = $3, high_value_threshold = $4, \
             conversion_fee_ppm = $5, quorum_percent = $6 WHERE id = $1",
            args![
                coop.as_str(),
                s.default_currency.as_str(),
                s.credit_limit.micros(),
                s.high_value_threshold.micros(),
                i64::from(s.conversion_fee_ppm),
                i64::from(s.quorum_percent)
            ],
        )
        .await
        .map(|_| ())
    }

    async fn insert_member(&mut self, coop: &CoopId, m: &MemberRecord) -> Result<(), Error> {
        self.execute(
            "INSERT INTO members (coop_id, did, role, joined_at, credit_limit) VALUES ($1, $2, $3, $4, $5)",
            args![
                coop.as_str(),
                m.did.as_str(),
                m.role.as_str(),
                to_i64(m.joined_at)?,
                m.credit_limit.map(Amount::micros)
            ],
        )
        .await
        .map(|_| ())?;
        self.adjust_member_count(coop, 1).await
    }

    async fn update_member(&mut self, coop: &CoopId, m: &MemberRecord) -> Result<(), Error> {
        self.execute(
            "UPDATE members SET role = $3, credit_limit = $4 WHERE coop_id = $1 AND did = $2",
            args![coop.as_str(), m.did.as_str(), m.role.as_str(), m.credit_limit.map(Amount::micros)],
        )
        .await
        .map(|_| ())
    }

    async fn delete_member(&mut self, coop: &CoopId, did: &Did) -> Result<(), Error> {
        let removed = self
            .execute("DELETE FROM members WHERE coop_id = $1 AND did = $2", args![coop.as_str(), did.as_str()])
            .await?;
        if removed > 0 { self.adjust_member_count(coop, -1).await } else { Ok(()) }
    }

    async fn count_admins(&mut self, coop: &CoopId) -> Result<u64, Error> {
        let count: i64 = self
            .fetch_one("SELECT COUNT(*) FROM members WHERE coop_id = $1 AND role = 'admin'", args![coop.as_str()])
            .await?;
        Ok(to_u64(count))
    }

    async fn member_dids(&mut self, coop: &CoopId) -> Result<Vec<Did>, Error> {
        let dids: Vec<String> =
            self.fetch_all("SELECT did FROM members WHERE coop_id = $1 ORDER BY did", args![coop.as_str()]).await?;
        dids.iter().map(|d| parse_did(d)).collect()
    }
}

#[async_trait]
impl TrustTx for Conn<'_> {
    async fn upsert_edge(&mut self, e: &TrustEdge) -> Result<bool, Error> {
        let existed: bool = self
            .fetch_one(
                "SELECT EXISTS (SELECT 1 FROM trust_edges WHERE source = $1 AND target = $2)",
                args![e.source.as_str(), e.target.as_str()],
            )
            .await?;
        self.execute(
            "INSERT INTO trust_edges (source, target, score, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (source, target) DO UPDATE SET score = excluded.score, updated_at = excluded.updated_at",
            args![e.source.as_str(), e.target.as_str(), e.score, to_i64(e.updated_at)?],
        )
        .await
        .map(|_| ())?;
        Ok(existed)
    }

    async fn delete_edge(&mut self, source: &Did, target: &Did) -> Result<bool, Error> {
        let done = self
            .execute(
                "DELETE FROM trust_edges WHERE source = $1 AND target = $2",
                args![source.as_str(), target.as_str()],
            )
            .await?;
        Ok(done > 0)
    }
}

/// Columns of `proposals`, in this order.
pub(crate) const PROPOSAL_COLUMNS: &str = "id, coop_id, domain_id, title, description, payload, rule, author, status, \
     voting_duration_secs, created_at, opened_at, closes_at, closed_at, outcome, tally_for, tally_against, tally_abstain, \
     receipt_unavailable, effect";

/// A `proposals` row (more columns than sqlx's tuple rows allow).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ProposalRow {
    id: String,
    coop_id: String,
    domain_id: String,
    title: String,
    description: String,
    payload: String,
    rule: String,
    author: String,
    status: String,
    voting_duration_secs: i64,
    created_at: i64,
    opened_at: Option<i64>,
    closes_at: Option<i64>,
    closed_at: Option<i64>,
    outcome: Option<String>,
    tally_for: Option<i64>,
    tally_against: Option<i64>,
    tally_abstain: Option<i64>,
    receipt_unavailable: Option<String>,
    effect: Option<String>,
}

named_row!(ProposalRow {
    id,
    coop_id,
    domain_id,
    title,
    description,
    payload,
    rule,
    author,
    status,
    voting_duration_secs,
    created_at,
    opened_at,
    closes_at,
    closed_at,
    outcome,
    tally_for,
    tally_against,
    tally_abstain,
    receipt_unavailable,
    effect
});

pub(crate) fn proposal_from_row(row: ProposalRow) -> Result<ProposalRecord, Error> {
    let tally = match (row.tally_for, row.tally_against, row.tally_abstain) {
        (Some(f), Some(a), Some(ab)) => Some((to_u64(f), to_u64(a), to_u64(ab))),
        _ => None,
    };
    let payload = ProposalPayload::from_json(&parse_json(&row.payload)?)
        .map_err(|e| Error::Internal(format!("stored payload of proposal {}: {e}", row.id)))?;
    Ok(ProposalRecord {
        id: row.id,
        coop_id: parse_coop(&row.coop_id)?,
        domain_id: row.domain_id,
        title: row.title,
        description: row.description,
        payload,
        rule: row.rule,
        author: parse_did(&row.author)?,
        status: ProposalStatus::parse(&row.status)
            .ok_or_else(|| Error::Internal(format!("stored proposal status '{}'", row.status)))?,
        voting_duration_secs: to_u64(row.voting_duration_secs),
        created_at: to_u64(row.created_at),
        opened_at: row.opened_at.map(to_u64),
        closes_at: row.closes_at.map(to_u64),
        closed_at: row.closed_at.map(to_u64),
        outcome: row
            .outcome
            .map(|o| Outcome::parse(&o).ok_or_else(|| Error::Internal(format!("stored proposal outcome '{o}'"))))
            .transpose()?,
        tally,
        receipt_unavailable: row.receipt_unavailable,
        effect: row.effect.as_deref().map(effect_from_json).transpose()?,
    })
}

/// `tally_for`, `tally_against`, `tally_abstain`.
type TallyColumns = (Option<i64>, Option<i64>, Option<i64>);

/// The three tally columns of a proposal: all set once it has closed, all null before.
fn tally_columns(p: &ProposalRecord) -> Result<TallyColumns, Error> {
    Ok(match p.tally {
        Some((f, a, ab)) => (Some(to_i64(f)?), Some(to_i64(a)?), Some(to_i64(ab)?)),
        None => (None, None, None),
    })
}

/// The stored form of an effect: `{"applied", "error"}`.
pub(crate) fn effect_to_json(effect: &Effect) -> String {
    serde_json::json!({ "applied": effect.applied, "error": effect.error }).to_string()
}

fn effect_from_json(text: &str) -> Result<Effect, Error> {
    let value = parse_json(text)?;
    let applied = value["applied"].as_bool().ok_or_else(|| Error::Internal(format!("stored effect: {text}")))?;
    Ok(Effect { applied, error: value["error"].as_str().map(str::to_owned) })
}

const DOMAIN_COLUMNS: &str = "coop_id, domain_id, name, members, quorum_percent, rule, created_at";

pub(crate) type DomainRow = (String, String, String, String, Option<i64>, Option<String>, i64);

pub(crate) fn domain_from_row(row: DomainRow) -> Result<DomainRecord, Error> {
    let (coop, domain_id, name, members, quorum, rule, created_at) = row;
    let members: Vec<String> =
        serde_json::from_str(&members).map_err(|e| Error::Internal(format!("stored members: {e}")))?;
    Ok(DomainRecord {
        coop_id: parse_coop(&coop)?,
        domain_id,
        name,
        members: members.iter().map(|m| parse_did(m)).collect::<Result<_, _>>()?,
        quorum_percent: quorum.and_then(|q| u32::try_from(q).ok()),
        rule,
        created_at: to_u64(created_at),
    })
}

/// The stored member list: the coop domain's members are the coop's and are not stored.
fn domain_members_json(d: &DomainRecord) -> String {
    let members: Vec<&str> =
        if d.domain_id == COOP_DOMAIN { Vec::new() } else { d.members.iter().map(Did::as_str).collect() };
    serde_json::to_string(&members).expect("strings")
}

pub(crate) type DelegationRow = (String, String, String, String, String, Option<i64>, i64);

pub(crate) fn delegation_from_row(row: DelegationRow) -> Result<DelegationRecord, Error> {
    let (id, coop, delegator, delegate, scope, expires_at, created_at) = row;
    Ok(DelegationRecord {
        id,
        coop_id: parse_coop(&coop)?,
        delegator: parse_did(&delegator)?,
        delegate: parse_did(&delegate)?,
        scope,
        expires_at: expires_at.map(to_u64),
        created_at: to_u64(created_at),
    })
}

#[async_trait]
impl GovTx for Conn<'_> {
    async fn domain(&mut self, coop: &CoopId, domain_id: &str) -> Result<Option<DomainRecord>, Error> {
        let row: Option<DomainRow> = self
            .fetch_optional(
                &format!("SELECT {DOMAIN_COLUMNS} FROM gov_domains WHERE coop_id = $1 AND domain_id = $2"),
                args![coop.as_str(), domain_id],
            )
            .await?;
        row.map(domain_from_row).transpose()
    }

    async fn domains(&mut self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error> {
        let rows: Vec<DomainRow> = self
            .fetch_all(
                &format!("SELECT {DOMAIN_COLUMNS} FROM gov_domains WHERE coop_id = $1 ORDER BY domain_id"),
                args![coop.as_str()],
            )
            .await?;
        rows.into_iter().map(domain_from_row).collect()
    }

    async fn update_domain(&mut self, d: &DomainRecord) -> Result<(), Error> {
        let members = domain_members_json(d);
        self.execute(
            "UPDATE gov_domains SET name = $3, members = $4, quorum_percent = $5, rule = $6 \
             WHERE coop_id = $1 AND domain_id = $2",
            args![
                d.coop_id.as_str(),
                &d.domain_id,
                &d.name,
                &members,
                d.quorum_percent.map(i64::from),
                d.rule.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }

    async fn delete_delegations_involving(&mut self, coop: &CoopId, did: &Did) -> Result<u64, Error> {
        self.execute(
            "DELETE FROM delegations WHERE coop_id = $1 AND (delegator = $2 OR delegate = $2)",
            args![coop.as_str(), did.as_str()],
        )
        .await
    }

    async fn insert_domain(&mut self, d: &DomainRecord) -> Result<(), Error> {
        let members = domain_members_json(d);
        self.execute(
            "INSERT INTO gov_domains (coop_id, domain_id, name, members, quorum_percent, rule, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            args![
                d.coop_id.as_str(),
                &d.domain_id,
                &d.name,
                &members,
                d.quorum_percent.map(i64::from),
                d.rule.as_deref(),
                to_i64(d.created_at)?
            ],
        )
        .await
        .map(|_| ())
    }

    async fn proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error> {
        let sql = format!("SELECT {PROPOSAL_COLUMNS} FROM proposals WHERE coop_id = $1 AND id = $2");
        let row: Option<ProposalRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(proposal_from_row).transpose()
    }

    async fn lock_proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error> {
        let sql =
            format!("SELECT {PROPOSAL_COLUMNS} FROM proposals WHERE coop_id = $1 AND id = $2{}", self.for_update());
        let row: Option<ProposalRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(proposal_from_row).transpose()
    }

    async fn insert_proposal(&mut self, p: &ProposalRecord) -> Result<(), Error> {
        let sql = format!(
            "INSERT INTO proposals ({PROPOSAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20)"
        );
        let payload = p.payload.to_json().to_string();
        let (f, a, ab) = tally_columns(p)?;
        self.execute(
            &sql,
            args![
                &p.id,
                p.coop_id.as_str(),
                &p.domain_id,
                &p.title,
                &p.description,
                &payload,
                &p.rule,
                p.author.as_str(),
                p.status.as_str(),
                to_i64(p.voting_duration_secs)?,
                to_i64(p.created_at)?,
                p.opened_at.map(to_i64).transpose()?,
                p.closes_at.map(to_i64).transpose()?,
                p.closed_at.map(to_i64).transpose()?,
                p.outcome.map(Outcome::as_str),
                f,
                a,
                ab,
                p.receipt_unavailable.as_deref(),
                p.effect.as_ref().map(effect_to_json)
            ],
        )
        .await
        .map(|_| ())
    }

    async fn update_proposal(&mut self, p: &ProposalRecord) -> Result<(), Error> {
        let (f, a, ab) = tally_columns(p)?;
        self.execute(
            "UPDATE proposals SET status = $3, opened_at = $4, closes_at = $5, closed_at = $6, outcome = $7, \
             tally_for = $8, tally_against = $9, tally_abstain = $10, receipt_unavailable = $11, effect = $12 \
             WHERE coop_id = $1 AND id = $2",
            args![
                p.coop_id.as_str(),
                &p.id,
                p.status.as_str(),
                p.opened_at.map(to_i64).transpose()?,
                p.closes_at.map(to_i64).transpose()?,
                p.closed_at.map(to_i64).transpose()?,
                p.outcome.map(Outcome::as_str),
                f,
                a,
                ab,
                p.receipt_unavailable.as_deref(),
                p.effect.as_ref().map(effect_to_json)
            ],
        )
        .await
        .map(|_| ())
    }

    async fn upsert_vote(&mut self, proposal_id: &str, voter: &Did, choice: &str, at: u64) -> Result<bool, Error> {
        let existed: bool = self
            .fetch_one(
                "SELECT EXISTS (SELECT 1 FROM votes WHERE proposal_id = $1 AND voter = $2)",
                args![proposal_id, voter.as_str()],
            )
            .await?;
        self.execute(
            "INSERT INTO votes (proposal_id, voter, choice, cast_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (proposal_id, voter) DO UPDATE SET choice = excluded.choice, cast_at = excluded.cast_at",
            args![proposal_id, voter.as_str(), choice, to_i64(at)?],
        )
        .await
        .map(|_| ())?;
        Ok(existed)
    }

    async fn votes(&mut self, proposal_id: &str) -> Result<Vec<(Did, String)>, Error> {
        // A close reads every vote of a proposal, thousands of rows: aggregated into one JSON
        // array by the database, they cross from the driver in one value instead of row by row.
        let sql = match self.db {
            Db::Sqlite(_) => "SELECT json_group_array(json_array(voter, choice)) FROM votes WHERE proposal_id = $1",
            Db::Postgres(_) => {
                "SELECT COALESCE(json_agg(json_build_array(voter, choice)), '[]')::text FROM votes WHERE proposal_id = $1"
            }
        };
        let json: String = self.fetch_one(sql, args![proposal_id]).await?;
        let rows: Vec<(String, String)> = from_json_rows(&json)?;
        rows.into_iter().map(|(v, ch)| Ok((parse_did(&v)?, ch))).collect()
    }

    async fn insert_delegation(&mut self, d: &DelegationRecord) -> Result<(), Error> {
        self.execute("INSERT INTO delegations (id, coop_id, delegator, delegate, scope, expires_at, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)", args![&d.id, d.coop_id.as_str(), d.delegator.as_str(), d.delegate.as_str(), &d.scope, d.expires_at.map(to_i64).transpose()?, to_i64(d.created_at)?]).await.map(|_| ())
    }

    async fn delegations(&mut self, coop: &CoopId) -> Result<Vec<DelegationRecord>, Error> {
        // Read in full by every close: one JSON array rather than a row at a time, as for votes.
        let sql = match self.db {
            Db::Sqlite(_) => {
                "SELECT json_group_array(json_array(id, coop_id, delegator, delegate, scope, expires_at, created_at) \
                 ORDER BY created_at, id) FROM delegations WHERE coop_id = $1"
            }
            Db::Postgres(_) => {
                "SELECT COALESCE(json_agg(json_build_array(id, coop_id, delegator, delegate, scope, expires_at, created_at) \
                 ORDER BY created_at, id), '[]')::text FROM delegations WHERE coop_id = $1"
            }
        };
        let json: String = self.fetch_one(sql, args![coop.as_str()]).await?;
        let rows: Vec<DelegationRow> = from_json_rows(&json)?;
        rows.into_iter().map(delegation_from_row).collect()
    }

    async fn delete_delegation(&mut self, coop: &CoopId, delegator: &Did, id: &str) -> Result<bool, Error> {
        let done = self
            .execute(
                "DELETE FROM delegations WHERE coop_id = $1 AND delegator = $2 AND id = $3",
                args![coop.as_str(), delegator.as_str(), id],
            )
            .await?;
        Ok(done > 0)
    }

    async fn insert_receipt(
        &mut self,
        coop: &CoopId,
        proposal_id: &str,
        timestamp: u64,
        body: &Value,
    ) -> Result<(), Error> {
        let body = body.to_string();
        self.execute(
            "INSERT INTO receipts (proposal_id, coop_id, timestamp, body) VALUES ($1, $2, $3, $4)",
            args![proposal_id, coop.as_str(), to_i64(timestamp)?, &body],
        )
        .await
        .map(|_| ())
    }

    async fn receipt_key_generation(&mut self, coop: &CoopId) -> Result<u32, Error> {
        // An upsert rather than a read: it locks the coop's row in PostgreSQL (creating it at 0
        // on first use), which a plain SELECT of a missing row could not.
        let generation: i64 = self
            .fetch_one(
                "INSERT INTO receipt_key_generations (coop_id, generation) VALUES ($1, 0) \
                 ON CONFLICT (coop_id) DO UPDATE SET generation = receipt_key_generations.generation \
                 RETURNING generation",
                args![coop.as_str()],
            )
            .await?;
        to_u32(generation)
    }

    async fn bump_receipt_key_generation(&mut self, coop: &CoopId, at: u64) -> Result<u32, Error> {
        let generation: i64 = self
            .fetch_one(
                "INSERT INTO receipt_key_generations (coop_id, generation) VALUES ($1, 1) \
                 ON CONFLICT (coop_id) DO UPDATE SET generation = receipt_key_generations.generation + 1 \
                 RETURNING generation",
                args![coop.as_str()],
            )
            .await?;
        let generation = to_u32(generation)?;
        self.execute(
            "UPDATE signing_keys SET valid_until = $1 WHERE coop_id = $2 AND valid_until IS NULL",
            args![to_i64(at)?.saturating_add(1), coop.as_str()],
        )
        .await?;
        Ok(generation)
    }

    async fn current_signing_key(&mut self, coop: &CoopId) -> Result<Option<SigningKeyRecord>, Error> {
        let row: Option<SigningKeyRow> = self
            .fetch_optional(
                &format!(
                    "SELECT {SIGNING_KEY_COLUMNS} FROM signing_keys WHERE coop_id = $1 AND valid_until IS NULL \
                     ORDER BY valid_from DESC LIMIT 1"
                ),
                args![coop.as_str()],
            )
            .await?;
        row.map(signing_key_from_row).transpose()
    }

    async fn activate_signing_key(&mut self, key: &SigningKeyRecord) -> Result<(), Error> {
        let coop =
            key.coop_id.as_ref().ok_or_else(|| Error::Internal("a signing key to activate names its coop".into()))?;
        let at = to_i64(key.valid_from)?;
        self.execute(
            "UPDATE signing_keys SET valid_until = $1 WHERE coop_id = $2 AND valid_until IS NULL AND public_key <> $3",
            args![at.saturating_add(1), coop.as_str(), &key.public_key],
        )
        .await?;
        self.execute(
            "INSERT INTO signing_keys (public_key, did, valid_from, valid_until, coop_id, master, generation) \
             VALUES ($1, $2, $3, NULL, $4, $5, $6) ON CONFLICT (public_key) DO UPDATE SET valid_until = NULL",
            args![
                &key.public_key,
                &key.did,
                at,
                coop.as_str(),
                key.master.map(i64::from),
                key.generation.map(i64::from)
            ],
        )
        .await
        .map(|_| ())
    }
}

/// Columns of `signing_keys`, in the order of [`SigningKeyRow`].
pub(crate) const SIGNING_KEY_COLUMNS: &str = "public_key, did, valid_from, valid_until, coop_id, master, generation";

/// A `signing_keys` row: [`SIGNING_KEY_COLUMNS`].
pub(crate) type SigningKeyRow = (String, String, i64, Option<i64>, Option<String>, Option<i64>, Option<i64>);

pub(crate) fn signing_key_from_row(row: SigningKeyRow) -> Result<SigningKeyRecord, Error> {
    let (public_key, did, from, until, coop, master, generation) = row;
    Ok(SigningKeyRecord {
        public_key,
        did,
        valid_from: to_u64(from),
        valid_until: until.map(to_u64),
        coop_id: coop.as_deref().map(parse_coop).transpose()?,
        master: master.map(to_u32).transpose()?,
        generation: generation.map(to_u32).transpose()?,
    })
}

fn to_u32(value: i64) -> Result<u32, Error> {
    u32::try_from(value).map_err(|_| Error::Internal(format!("stored key number {value} is out of range")))
}

/// Columns of `compute_tasks`, in this order.
pub(crate) const TASK_COLUMNS: &str = "task_id, coop_id, task_hash, status, submitter, executor, code_type, code, inputs, \
     fuel_limit, priority, submitted_at, claimed_at, deadline, attempts, finished_at, result";

/// A `compute_tasks` row.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct TaskRow {
    task_id: String,
    coop_id: String,
    task_hash: String,
    status: String,
    submitter: String,
    executor: Option<String>,
    code_type: String,
    code: String,
    inputs: String,
    fuel_limit: i64,
    priority: String,
    submitted_at: i64,
    claimed_at: Option<i64>,
    deadline: Option<i64>,
    attempts: i64,
    finished_at: Option<i64>,
    result: Option<String>,
}

named_row!(TaskRow {
    task_id,
    coop_id,
    task_hash,
    status,
    submitter,
    executor,
    code_type,
    code,
    inputs,
    fuel_limit,
    priority,
    submitted_at,
    claimed_at,
    deadline,
    attempts,
    finished_at,
    result
});

pub(crate) fn task_from_row(row: TaskRow) -> Result<TaskRecord, Error> {
    Ok(TaskRecord {
        task_id: row.task_id,
        coop_id: parse_coop(&row.coop_id)?,
        task_hash: row.task_hash,
        status: TaskStatus::parse(&row.status)
            .ok_or_else(|| Error::Internal(format!("stored task status '{}' is unknown", row.status)))?,
        submitter: parse_did(&row.submitter)?,
        executor: row.executor,
        code_type: row.code_type,
        code: row.code,
        inputs: parse_json(&row.inputs)?,
        fuel_limit: to_u64(row.fuel_limit),
        priority: row.priority,
        submitted_at: to_u64(row.submitted_at),
        claimed_at: row.claimed_at.map(to_u64),
        deadline: row.deadline.map(to_u64),
        attempts: u32::try_from(row.attempts).unwrap_or(u32::MAX),
        finished_at: row.finished_at.map(to_u64),
        result: row.result.as_deref().map(parse_task_result).transpose()?,
    })
}

/// A stored task result (`{"outcome", "output", "error", "fuel_used"}`).
fn parse_task_result(text: &str) -> Result<TaskResult, Error> {
    serde_json::from_str(text).map_err(|e| Error::Internal(format!("stored task result does not decode: {e}")))
}

fn task_result_text(result: Option<&TaskResult>) -> Result<Option<String>, Error> {
    result
        .map(|r| serde_json::to_string(r).map_err(|e| Error::Internal(format!("task result does not encode: {e}"))))
        .transpose()
}

#[async_trait]
impl ComputeTx for Conn<'_> {
    async fn insert_task(&mut self, t: &TaskRecord) -> Result<(), Error> {
        let sql = format!(
            "INSERT INTO compute_tasks ({TASK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
        );
        let inputs = t.inputs.to_string();
        let result = task_result_text(t.result.as_ref())?;
        self.execute(
            &sql,
            args![
                &t.task_id,
                t.coop_id.as_str(),
                &t.task_hash,
                t.status.as_str(),
                t.submitter.as_str(),
                t.executor.as_deref(),
                &t.code_type,
                &t.code,
                &inputs,
                to_i64(t.fuel_limit)?,
                &t.priority,
                to_i64(t.submitted_at)?,
                t.claimed_at.map(to_i64).transpose()?,
                t.deadline.map(to_i64).transpose()?,
                i64::from(t.attempts),
                t.finished_at.map(to_i64).transpose()?,
                result.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }

    async fn task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error> {
        let sql = format!("SELECT {TASK_COLUMNS} FROM compute_tasks WHERE coop_id = $1 AND task_id = $2");
        let row: Option<TaskRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(task_from_row).transpose()
    }

    async fn lock_task(&mut self, coop: &CoopId, id: &str) -> Result<Option<TaskRecord>, Error> {
        let sql = format!(
            "SELECT {TASK_COLUMNS} FROM compute_tasks WHERE coop_id = $1 AND task_id = $2{}",
            self.for_update()
        );
        let row: Option<TaskRow> = self.fetch_optional(&sql, args![coop.as_str(), id]).await?;
        row.map(task_from_row).transpose()
    }

    async fn update_task(&mut self, t: &TaskRecord) -> Result<(), Error> {
        let result = task_result_text(t.result.as_ref())?;
        self.execute(
            "UPDATE compute_tasks SET status = $3, executor = $4, claimed_at = $5, deadline = $6, attempts = $7, \
             finished_at = $8, result = $9 WHERE coop_id = $1 AND task_id = $2",
            args![
                t.coop_id.as_str(),
                &t.task_id,
                t.status.as_str(),
                t.executor.as_deref(),
                t.claimed_at.map(to_i64).transpose()?,
                t.deadline.map(to_i64).transpose()?,
                i64::from(t.attempts),
                t.finished_at.map(to_i64).transpose()?,
                result.as_deref()
            ],
        )
        .await
        .map(|_| ())
    }
}

impl Conn<'_> {
    /// Keeps `coops.member_count` equal to the number of member rows.
    async fn adjust_member_count(&mut self, coop: &CoopId, delta: i64) -> Result<(), Error> {
        self.execute("UPDATE coops SET member_count = member_count + $2 WHERE id = $1", args![coop.as_str(), delta])
            .await
            .map(|_| ())
    }
}

/// An `idempotency` row: key, request_hash, status, body, created_at.
pub(crate) type IdempotencyRow = (String, String, i64, String, i64);

/// An [`IdempotencyRow`] as its record.
pub(crate) fn idempotency_from_row((key, request_hash, status, body, created_at): IdempotencyRow) -> IdempotencyRecord {
    IdempotencyRecord {
        key,
        request_hash,
        status: u16::try_from(status).unwrap_or(500),
        body,
        created_at: to_u64(created_at),
    }
}
