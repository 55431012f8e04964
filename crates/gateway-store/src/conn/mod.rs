//! The statement handle shared by every write primitive of the domain's ports: [`Conn`] over a
//! SQLite or PostgreSQL connection, its [`Arg`]s and [`Row`]s, error mapping and the small
//! parsers of stored values. The `*Tx` impls live in one submodule per aggregate.
//!
//! SQL is written in the dialect both backends accept (`$n` parameters, `ON CONFLICT`,
//! `RETURNING`); the few differences (row locks) are spelled out where they occur. Statements
//! are sent through [`Conn::execute`] and the `fetch_*` methods, which bind [`Arg`]s and decode
//! [`Row`]s the same way on both backends: on SQLite synchronously, on the calling thread (see
//! `sqlite`), on PostgreSQL through sqlx. This module decides nothing: the rules are the
//! domain's.

use std::borrow::Cow;

use gateway_core::{CoopId, Currency, Did, Error, Role};
use gateway_domain::ports::CoopSignal;
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
        &[$($crate::conn::Arg::from($arg)),*][..]
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

/// A result row decoded the same way from either backend: single values and small tuples of
/// column values (by position), and the records' row structs, whose fields name their columns
/// (`named_row!`).
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

// Records decode by column name (`named_row!`); tuples are for a few ad-hoc values.
tuple_row!(A 0);
tuple_row!(A 0, B 1);
tuple_row!(A 0, B 1, C 2);

/// A row struct whose fields are its columns' names; sqlx's `FromRow` derive serves the pool's
/// reads and PostgreSQL, this the SQLite writer. Fields listed after `flatten` are row structs
/// of their own, decoded from the same row (and marked `#[sqlx(flatten)]` for the derive).
macro_rules! named_row {
    ($name:ident { $($field:ident),+ $(,)? } $(flatten { $($nested:ident),+ $(,)? })?) => {
        impl $crate::conn::Row for $name {
            fn from_sqlite(row: &::rusqlite::Row<'_>) -> ::rusqlite::Result<Self> {
                Ok(Self {
                    $($($nested: $crate::conn::Row::from_sqlite(row)?,)+)?
                    $($field: row.get(stringify!($field))?),+
                })
            }
            fn from_pg(row: &::sqlx::postgres::PgRow) -> Result<Self, ::sqlx::Error> {
                <Self as ::sqlx::FromRow<'_, ::sqlx::postgres::PgRow>>::from_row(row)
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
/// `json_agg`), decoded by position (tuples, or row structs in their fields' order).
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

// The aggregates' statements; declared after the macros above, which they use.
pub(crate) mod compute;
pub(crate) mod coops;
pub(crate) mod events;
pub(crate) mod governance;
pub(crate) mod ledger;
pub(crate) mod notifications;
pub(crate) mod trust;
