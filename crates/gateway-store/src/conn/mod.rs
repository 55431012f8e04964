//! The statement layer's shared machinery: [`Conn`], one connection (inside a transaction, or a
//! pool's reader) on SQLite or PostgreSQL; statement parameters ([`Arg`]); rows decoded alike on
//! both backends ([`Row`], `named_row!`); error mapping and the parsers of stored values. Each
//! submodule holds one aggregate's `*Tx` impl and its row structs.
//!
//! SQL is written once, in the dialect both backends accept (`$n` parameters, `ON CONFLICT`,
//! `RETURNING`); the few differences (row locks) are spelled out where they occur. On SQLite a
//! statement runs synchronously on the calling thread (see `sqlite`), on PostgreSQL through
//! sqlx. Nothing is decided here: the rules are the domain's.

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

/// A unit of work's handle: the connection, and the events it appended.
#[derive(Debug)]
pub(crate) struct Conn<'a> {
    pub(crate) db: Db<'a>,
    /// SQLite: the signals of the events it appended (numbered at once), announced on the feed
    /// once the group commits, never before.
    pub(crate) appended: Vec<CoopSignal>,
    /// PostgreSQL: the events appended by the unit of work, written by [`Conn::flush_events`]
    /// just before the commit and numbered after it (see
    /// [`gateway_domain::ports::EventTx::append_event`]).
    pub(crate) pending_events: Vec<events::PendingEvent>,
    /// PostgreSQL: writes whose answer the unit of work does not need ([`Conn::defer`]), sent
    /// together with its next statement.
    deferred: Vec<Deferred>,
    /// The balances and coop rows its statements changed, for the balance read model.
    pub(crate) touched: Vec<crate::view::Touched>,
    /// The keys of the signed bodies this unit of work wrote to `signed_bodies`: a signed
    /// batch's payments share one body, sent to the database once.
    pub(crate) bodies_kept: Vec<String>,
    /// The key of the answer this unit of work decided, given the number of its last event
    /// once the work is done (`Conn::number_answer`, `Conn::number_answer_with`).
    pub(crate) pending_answer: Option<String>,
    /// The event number of an answer this unit of work found stored under its key and replays,
    /// reported as the job's `ICN-Event-Seq`.
    pub(crate) replayed: Option<u64>,
    /// PostgreSQL: the key of that answer when its last event still waited for its number
    /// (migration 0023): the number is read once the numbering gave it.
    pub(crate) replayed_waiting: Option<String>,
    /// PostgreSQL: the coops whose writers lock this unit of work holds alone (a settings
    /// change: `update_settings`).
    pub(crate) writers_alone: Vec<CoopId>,
}

/// A write of a unit of work on PostgreSQL, held until its next statement ([`Conn::defer`]).
#[derive(Debug)]
struct Deferred {
    /// The table it writes: a statement holds at most one write of each table.
    table: &'static str,
    sql: std::sync::Arc<str>,
    args: Vec<Arg<'static>>,
}

/// One statement parameter, bound alike on both backends.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'q> {
    Int(Option<i64>),
    Real(f64),
    Text(Option<Cow<'q, str>>),
    Blob(Cow<'q, [u8]>),
    /// A `text[]` (PostgreSQL only: SQLite has no arrays).
    Texts(Vec<&'q str>),
}

impl<'q> From<&'q [u8]> for Arg<'q> {
    fn from(value: &'q [u8]) -> Self {
        Arg::Blob(Cow::Borrowed(value))
    }
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

impl Arg<'_> {
    /// The same parameter owning its value, to be bound later ([`Conn::defer`]); `None` for a
    /// list of texts, which borrows its elements.
    fn to_static(&self) -> Option<Arg<'static>> {
        Some(match self {
            Arg::Int(v) => Arg::Int(*v),
            Arg::Real(v) => Arg::Real(*v),
            Arg::Text(v) => Arg::Text(v.as_deref().map(|t| Cow::Owned(t.to_owned()))),
            Arg::Blob(v) => Arg::Blob(Cow::Owned(v.to_vec())),
            Arg::Texts(_) => return None,
        })
    }
}

impl rusqlite::ToSql for Arg<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as Sql, ValueRef};
        Ok(match self {
            Arg::Int(Some(v)) => ToSqlOutput::Owned(Sql::Integer(*v)),
            Arg::Real(v) => ToSqlOutput::Owned(Sql::Real(*v)),
            Arg::Text(Some(v)) => ToSqlOutput::Borrowed(ValueRef::Text(v.as_bytes())),
            Arg::Blob(v) => ToSqlOutput::Borrowed(ValueRef::Blob(v.as_ref())),
            Arg::Int(None) | Arg::Text(None) => ToSqlOutput::Owned(Sql::Null),
            Arg::Texts(_) => {
                return Err(rusqlite::Error::ToSqlConversionFailure("SQLite has no array parameters".into()));
            }
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
            Arg::Blob(v) => query.bind(v.as_ref()),
            Arg::Texts(v) => query.bind(v.as_slice()),
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

/// Turns a SQLite failure into the interface's error: a unique or primary-key constraint
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

/// The statement in SQLite's numbered-parameter form: each parameter `$n` becomes `?n`, which
/// SQLite binds to the n-th argument wherever it appears (a `$n` would be a name, numbered by
/// first appearance). A parameter is a `$` followed by a digit in the statement's code: not in
/// a string literal (`'…'`, `''` for a quote), a quoted identifier (`"…"`) or a comment, and not
/// inside a word (`a$1` is an identifier in both dialects). Every other `$` is left as it is,
/// and a statement without parameters is returned as it is, unallocated.
fn numbered(sql: &str) -> Cow<'_, str> {
    rewrite_parameters(sql, |out, digits| {
        out.push('?');
        out.push_str(digits);
    })
}

/// The statement with each parameter `$n` renumbered `$(n + by)`: its text to run after `by`
/// parameters of another, within one statement ([`Conn::flush_deferred`]). Parameters are found
/// as [`numbered`] finds them; digits too many to be a number are kept as they are (PostgreSQL
/// refuses them either way).
fn shifted(sql: &str, by: usize) -> Cow<'_, str> {
    rewrite_parameters(sql, |out, digits| {
        use std::fmt::Write as _;
        match digits.parse::<usize>() {
            Ok(n) => {
                let _ = write!(out, "${}", n.saturating_add(by));
            }
            Err(_) => {
                out.push('$');
                out.push_str(digits);
            }
        }
    })
}

/// `sql` with each parameter (a `$` and the digits after it, where [`numbered`] says) replaced
/// by what `write` writes for its digits; every other byte is kept. A statement without
/// parameters is returned as it is, unallocated.
fn rewrite_parameters<'s>(sql: &'s str, write: impl Fn(&mut String, &str)) -> Cow<'s, str> {
    /// Where the byte being read is.
    #[derive(Clone, Copy)]
    enum In {
        Code,
        /// A literal or quoted identifier, until this closing quote. A doubled quote (`''`)
        /// closes and at once reopens it: the same as reading on.
        Quotes(u8),
        LineComment,
        BlockComment,
    }
    let bytes = sql.as_bytes();
    let mut rewritten: Option<String> = None;
    // The end of the part of `sql` already copied into `rewritten`.
    let mut copied = 0;
    let mut at = In::Code;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let next = bytes.get(i + 1).copied();
        match at {
            In::Quotes(closing) if byte == closing => at = In::Code,
            In::LineComment if byte == b'\n' => at = In::Code,
            In::BlockComment if byte == b'*' && next == Some(b'/') => {
                at = In::Code;
                i += 1;
            }
            In::Code => match byte {
                b'\'' | b'"' => at = In::Quotes(byte),
                b'-' if next == Some(b'-') => {
                    at = In::LineComment;
                    i += 1;
                }
                b'/' if next == Some(b'*') => {
                    at = In::BlockComment;
                    i += 1;
                }
                b'$' if next.is_some_and(|b| b.is_ascii_digit())
                    && !i.checked_sub(1).and_then(|p| bytes.get(p)).is_some_and(|&b| is_word_byte(b)) =>
                {
                    let end = (i + 1..bytes.len()).find(|&j| !bytes[j].is_ascii_digit()).unwrap_or(bytes.len());
                    let out = rewritten.get_or_insert_with(|| String::with_capacity(sql.len() + 8));
                    out.push_str(&sql[copied..i]);
                    write(out, &sql[i + 1..end]);
                    copied = end;
                    i = end - 1;
                }
                _ => {}
            },
            In::Quotes(_) | In::LineComment | In::BlockComment => {}
        }
        i += 1;
    }
    match rewritten {
        Some(mut out) => {
            out.push_str(&sql[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(sql),
    }
}

/// Most statement texts [`with_numbered`] keeps rewritten per thread before it starts over.
/// The store's statements number a few hundred texts (lists of parameters give one per length).
const NUMBERED_TEXTS: usize = 1024;

thread_local! {
    /// The numbered form of each statement text this thread ran, by its text. The writer runs
    /// the same few dozen statements for every job: looking a text up (a fast hash and one
    /// comparison) costs a fraction of rewriting it, which reads it byte by byte and allocates.
    static NUMBERED: std::cell::RefCell<std::collections::HashMap<Box<str>, Box<str>, foldhash::fast::FixedState>> =
        const { std::cell::RefCell::new(std::collections::HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0))) };
}

/// Runs `run` with `sql` in SQLite's numbered-parameter form ([`numbered`]), rewritten once per
/// text and thread.
fn with_numbered<T>(sql: &str, run: impl FnOnce(&str) -> T) -> T {
    NUMBERED.with(|cache| {
        if let Some(rewritten) = cache.borrow().get(sql) {
            return run(rewritten);
        }
        let rewritten: Box<str> = numbered(sql).into();
        let mut texts = cache.borrow_mut();
        if texts.len() >= NUMBERED_TEXTS {
            texts.clear();
        }
        let rewritten = texts.entry(sql.into()).or_insert(rewritten).clone();
        drop(texts);
        run(&rewritten)
    })
}

thread_local! {
    /// Statement texts built from a shape ([`shaped`]), by their site and shape.
    static SHAPED: std::cell::RefCell<std::collections::HashMap<(&'static str, usize), std::sync::Arc<str>, foldhash::fast::FixedState>> =
        const { std::cell::RefCell::new(std::collections::HashMap::with_hasher(foldhash::fast::FixedState::with_seed(0))) };
}

/// The statement text `build` makes for `shape` (a list's length, or 0 for a text that never
/// changes), built once per thread for each `site` and shape: the writer runs the same few
/// statements for every job, and building their texts (`format!`, a list of fragments, a join)
/// was work it redid for each. The shapes are few (lists of one or two accounts or members),
/// and longer lists are built every time rather than kept.
pub(crate) fn shaped(site: &'static str, shape: usize, build: impl FnOnce() -> String) -> std::sync::Arc<str> {
    /// The longest list whose text is kept.
    const KEPT: usize = 8;
    if shape > KEPT {
        return build().into();
    }
    SHAPED.with(|texts| {
        if let Some(text) = texts.borrow().get(&(site, shape)) {
            return text.clone();
        }
        let text: std::sync::Arc<str> = build().into();
        texts.borrow_mut().insert((site, shape), text.clone());
        text
    })
}

/// A byte that continues an identifier or a number: a `$` after one is part of the word.
fn is_word_byte(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'$' || !byte.is_ascii()
}

impl<'a> Conn<'a> {
    pub(crate) fn new(db: Db<'a>) -> Self {
        Self {
            db,
            appended: Vec::new(),
            pending_events: Vec::new(),
            deferred: Vec::new(),
            touched: Vec::new(),
            bodies_kept: Vec::new(),
            pending_answer: None,
            replayed: None,
            replayed_waiting: None,
            writers_alone: Vec::new(),
        }
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

    /// Runs a write whose answer (the rows it changed) the unit of work does not need, an
    /// `INSERT` into `table`. SQLite runs it at once. PostgreSQL holds it until the unit of
    /// work's next statement, which carries it (see [`Conn::flush_deferred`]): the writes a
    /// payment makes after its checks (balances, transaction, payee's notification, event)
    /// reach the server as one statement, not one round trip each. The statement after it,
    /// whatever it is, therefore sees it, and a write that fails fails that statement and the
    /// unit of work. Two writes of the same table are never sent as one statement (within one,
    /// a second change of a row the first changed would be refused or lost): the first is sent
    /// before the second is held.
    pub(crate) async fn defer(
        &mut self,
        table: &'static str,
        sql: std::sync::Arc<str>,
        args: &[Arg<'_>],
    ) -> Result<(), Error> {
        let owned: Option<Vec<Arg<'static>>> = args.iter().map(Arg::to_static).collect();
        let Some(args) = owned.filter(|_| !self.is_sqlite()) else {
            return self.execute(&sql, args).await.map(|_| ());
        };
        if self.deferred.iter().any(|d| d.table == table) {
            self.flush_deferred().await?;
        }
        self.deferred.push(Deferred { table, sql, args });
        Ok(())
    }

    /// Sends the held writes ([`Conn::defer`]) as one statement: each in a `WITH` clause of its
    /// own (PostgreSQL runs every data-modifying `WITH` clause once, whether or not the query
    /// reads it), before `then`, the statement whose rows are returned; with no `then`, the
    /// last write is that statement. Returns its rows.
    async fn send_with_deferred(&mut self, then: Option<(&str, &[Arg<'_>])>) -> Result<Vec<PgRow>, Error> {
        let mut deferred = std::mem::take(&mut self.deferred);
        let Db::Postgres(c) = &mut self.db else {
            return Err(Error::Internal("writes were held on SQLite".into()));
        };
        let last;
        let (main, main_args): (&str, &[Arg<'_>]) = match then {
            Some(then) => then,
            None => {
                last = deferred.pop().ok_or_else(|| Error::Internal("no held write to send".into()))?;
                (&last.sql, &last.args)
            }
        };
        let mut sql = String::new();
        let mut args: Vec<Arg<'_>> = main_args.to_vec();
        for (i, write) in deferred.iter().enumerate() {
            use std::fmt::Write as _;
            let _ =
                write!(sql, "{}held{i} AS ({}) ", if i == 0 { "WITH " } else { ", " }, shifted(&write.sql, args.len()));
            args.extend(write.args.iter().cloned());
        }
        sql.push_str(main);
        bind_pg(sqlx::query(&sql), &args).fetch_all(&mut **c).await.map_err(db_error)
    }

    /// Sends the held writes, if any ([`Conn::defer`]).
    pub(crate) async fn flush_deferred(&mut self) -> Result<(), Error> {
        if !self.deferred.is_empty() {
            self.send_with_deferred(None).await?;
        }
        Ok(())
    }

    /// The first row of a query that always returns one, sent with the held writes
    /// ([`Conn::defer`]).
    pub(crate) async fn fetch_one_with_deferred<R: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<R, Error> {
        if self.deferred.is_empty() {
            return self.fetch_one(sql, args).await;
        }
        let rows = self.send_with_deferred(Some((sql, args))).await?;
        let row = rows.first().ok_or_else(|| Error::Internal(format!("the store returned no row for: {sql}")))?;
        R::from_pg(row).map_err(db_error)
    }

    /// Runs a statement; returns the number of rows it changed.
    pub(crate) async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<u64, Error> {
        self.flush_deferred().await?;
        match &mut self.db {
            Db::Sqlite(c) => with_numbered(sql, |sql| {
                c.prepare_cached(sql).and_then(|mut statement| statement.execute(rusqlite::params_from_iter(args)))
            })
            .map(|changed| changed as u64)
            .map_err(sqlite_error),
            Db::Postgres(c) => {
                bind_pg(sqlx::query(sql), args).execute(&mut **c).await.map(|r| r.rows_affected()).map_err(db_error)
            }
        }
    }

    /// Every row a query returns.
    pub(crate) async fn fetch_all<R: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<R>, Error> {
        self.flush_deferred().await?;
        match &mut self.db {
            Db::Sqlite(c) => with_numbered(sql, |sql| {
                let mut statement = c.prepare_cached(sql)?;
                let rows = statement.query_map(rusqlite::params_from_iter(args), R::from_sqlite)?;
                rows.collect::<Result<_, _>>()
            })
            .map_err(sqlite_error),
            Db::Postgres(c) => {
                let rows = bind_pg(sqlx::query(sql), args).fetch_all(&mut **c).await.map_err(db_error)?;
                rows.iter().map(R::from_pg).collect::<Result<_, _>>().map_err(db_error)
            }
        }
    }

    /// The first row a query returns, if any.
    pub(crate) async fn fetch_optional<R: Row>(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Option<R>, Error> {
        self.flush_deferred().await?;
        match &mut self.db {
            Db::Sqlite(c) => with_numbered(sql, |sql| {
                c.prepare_cached(sql).and_then(|mut statement| {
                    statement.query_row(rusqlite::params_from_iter(args), R::from_sqlite).optional()
                })
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

value_row!(i64, Option<i64>, String, Option<String>, bool, Vec<u8>);

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

/// The evidence of a signed request as a record keeps it (INTERFACE.md §11): its JSON without the
/// signed body when the body is kept in `signed_bodies` (migration 0015) under `body_key`, once
/// per signed request however many payments it made; the body inline otherwise (a request
/// without a `Content-Digest`, whose body is `""`). Evidence stored before has its `body`
/// inline or `null`, and no `body_key`.
#[derive(serde::Serialize)]
struct StoredEvidence<'a> {
    #[serde(flatten)]
    evidence: gateway_core::EvidenceWithoutBody<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body_key: Option<&'a str>,
}

/// [`StoredEvidence`] as read back: the evidence (its `body` still `None` when it is kept in
/// `signed_bodies`) and the key of its body there.
#[derive(serde::Deserialize)]
struct ReadEvidence {
    #[serde(flatten)]
    evidence: gateway_core::RequestSignature,
    #[serde(default)]
    body_key: Option<String>,
}

/// Stored evidence whose body, when it is kept apart, is still to be filled in
/// ([`Conn::fill_signed_bodies`]).
#[derive(Debug)]
pub(crate) struct PendingEvidence {
    pub(crate) evidence: gateway_core::RequestSignature,
    body_key: Option<String>,
}

/// The key of a signed body in `signed_bodies`: the lowercase hex SHA-256 of the request's
/// `Content-Digest` field, fixed-size whatever that field's length. The gateway checked the
/// field's `sha-256` member against the body, so one key names one body.
fn body_key(content_digest: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(content_digest.as_bytes()))
}

/// The evidence of a signed request, stored as its JSON ([`StoredEvidence`]); its body is
/// filled in by [`Conn::fill_signed_bodies`].
pub(crate) fn parse_evidence(text: &str) -> Result<PendingEvidence, Error> {
    let read: ReadEvidence =
        serde_json::from_str(text).map_err(|e| Error::Internal(format!("stored request signature is invalid: {e}")))?;
    Ok(PendingEvidence { evidence: read.evidence, body_key: read.body_key })
}

/// Most keys one `signed_bodies` lookup names (both backends bind far more parameters; a
/// proposal's votes may hold thousands of signatures).
const BODY_LOOKUP_CHUNK: usize = 256;

impl Conn<'_> {
    /// The JSON a request signature is stored as ([`StoredEvidence`]), its body written to
    /// `signed_bodies` once in this unit of work (a row already there is left as it is: the
    /// same key is the same body).
    pub(crate) async fn evidence_json(&mut self, evidence: &gateway_core::RequestSignature) -> Result<String, Error> {
        let key = match (&evidence.content_digest, &evidence.body) {
            (Some(digest), Some(body)) => {
                let key = body_key(digest);
                if !self.bodies_kept.contains(&key) {
                    self.execute(
                        "INSERT INTO signed_bodies (digest, body) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                        args![&key, &**body],
                    )
                    .await?;
                    self.bodies_kept.push(key.clone());
                }
                Some(key)
            }
            _ => None,
        };
        let stored = StoredEvidence {
            evidence: evidence.without_body(),
            body: if key.is_some() { None } else { evidence.body.as_deref() },
            body_key: key.as_deref(),
        };
        serde_json::to_string(&stored).map_err(|e| Error::Internal(format!("serialising a request signature: {e}")))
    }

    /// Fills in the bodies of `pending`'s evidence kept in `signed_bodies`, with one lookup per
    /// [`BODY_LOOKUP_CHUNK`] distinct keys (a page of a signed batch's payments: one key, one
    /// lookup), and returns the evidence in the same order.
    pub(crate) async fn fill_signed_bodies(
        &mut self,
        pending: Vec<PendingEvidence>,
    ) -> Result<Vec<gateway_core::RequestSignature>, Error> {
        let mut keys: Vec<&str> = pending.iter().filter_map(|p| p.body_key.as_deref()).collect();
        keys.sort_unstable();
        keys.dedup();
        let mut bodies: std::collections::HashMap<String, std::sync::Arc<str>> = std::collections::HashMap::new();
        for chunk in keys.chunks(BODY_LOOKUP_CHUNK) {
            let sql = shaped("signed_bodies", chunk.len(), || {
                let list: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
                format!("SELECT digest, body FROM signed_bodies WHERE digest IN ({})", list.join(", "))
            });
            let args: Vec<Arg<'_>> = chunk.iter().map(|k| Arg::from(*k)).collect();
            let rows: Vec<(String, String)> = self.fetch_all(&sql, &args).await?;
            bodies.extend(rows.into_iter().map(|(key, body)| (key, std::sync::Arc::from(body))));
        }
        pending
            .into_iter()
            .map(|PendingEvidence { mut evidence, body_key }| {
                if let Some(key) = body_key {
                    let body = bodies.get(&key).ok_or_else(|| {
                        Error::Internal(format!("the signed body {key} of a stored request signature is missing"))
                    })?;
                    evidence.body = Some(body.clone());
                }
                Ok(evidence)
            })
            .collect()
    }
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
pub(crate) mod log;
pub(crate) mod notifications;
pub(crate) mod trust;

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::cell::Cell;

    use super::{NUMBERED, NUMBERED_TEXTS, numbered, shaped, shifted, with_numbered};

    /// A shaped text is built once per site and shape on a thread, and a list longer than the
    /// kept ones is built every time.
    #[test]
    fn shaped_texts_are_built_once_per_site_and_shape() {
        let builds = Cell::new(0);
        let build = |n: usize| {
            builds.set(builds.get() + 1);
            format!("SELECT {n}")
        };
        assert_eq!(&*shaped("test_site", 2, || build(2)), "SELECT 2");
        assert_eq!(&*shaped("test_site", 2, || build(99)), "SELECT 2", "kept");
        assert_eq!(builds.get(), 1);
        assert_eq!(&*shaped("test_site", 3, || build(3)), "SELECT 3", "another shape");
        assert_eq!(&*shaped("other_site", 2, || build(7)), "SELECT 7", "another site");
        assert_eq!(builds.get(), 3);
        assert_eq!(&*shaped("test_site", 9, || build(9)), "SELECT 9");
        assert_eq!(&*shaped("test_site", 9, || build(10)), "SELECT 10", "not kept");
        assert_eq!(builds.get(), 5);
    }

    /// The kept rewrite of a text is the rewrite of that text, on the first run and after, and
    /// the texts kept stay bounded however many distinct ones a thread runs.
    #[test]
    fn kept_rewrites_are_the_rewrites_and_stay_bounded() {
        let texts: Vec<String> =
            (0..NUMBERED_TEXTS * 2 + 7).map(|n| format!("SELECT $1 + {n} WHERE x = '$2' AND y = $2")).collect();
        for _ in 0..2 {
            for text in &texts {
                let expected = numbered(text).into_owned();
                with_numbered(text, |kept| assert_eq!(kept, expected, "{text}"));
                let kept = NUMBERED.with(|cache| cache.borrow().len());
                assert!((1..=NUMBERED_TEXTS).contains(&kept), "{kept} texts kept");
            }
        }
        with_numbered("SELECT 1", |kept| assert_eq!(kept, "SELECT 1"));
    }

    /// The rewritten statement, and whether it had to be copied.
    fn rewrite(sql: &str) -> (String, bool) {
        let out = numbered(sql);
        let copied = matches!(out, Cow::Owned(_));
        (out.into_owned(), copied)
    }

    #[test]
    fn parameters_become_numbered() {
        assert_eq!(
            rewrite("SELECT a FROM t WHERE b = $1 AND c = $2"),
            ("SELECT a FROM t WHERE b = ?1 AND c = ?2".into(), true)
        );
        assert_eq!(rewrite("$1"), ("?1".into(), true));
        assert_eq!(rewrite("VALUES ($1,$2)"), ("VALUES (?1,?2)".into(), true));
    }

    #[test]
    fn multi_digit_and_repeated_parameters() {
        assert_eq!(rewrite("x IN ($10, $2, $10, $123)"), ("x IN (?10, ?2, ?10, ?123)".into(), true));
        assert_eq!(rewrite("(delegator = $2 OR delegate = $2)"), ("(delegator = ?2 OR delegate = ?2)".into(), true));
    }

    #[test]
    fn shifted_parameters_follow_another_statements() {
        assert_eq!(
            shifted("INSERT INTO t VALUES ($1, $2, $10), ($1, $12)", 4),
            "INSERT INTO t VALUES ($5, $6, $14), ($5, $16)"
        );
        assert_eq!(
            shifted("SELECT '$1', \"a$1\", b$1, $ 1 -- $1\n, $3", 2),
            "SELECT '$1', \"a$1\", b$1, $ 1 -- $1\n, $5"
        );
        assert!(matches!(shifted("SELECT 1", 3), Cow::Borrowed("SELECT 1")));
        assert_eq!(shifted("$1", 0), "$1");
    }

    #[test]
    fn no_parameters_is_borrowed() {
        let sql = "SELECT COUNT(*) FROM members";
        assert!(matches!(numbered(sql), Cow::Borrowed(s) if std::ptr::eq(s, sql)));
        assert!(matches!(numbered(""), Cow::Borrowed("")));
    }

    #[test]
    fn dollar_in_a_string_literal_is_kept() {
        assert_eq!(rewrite("SELECT '$1'"), ("SELECT '$1'".into(), false));
        assert_eq!(rewrite("SELECT 'costs $5' WHERE a = $1"), ("SELECT 'costs $5' WHERE a = ?1".into(), true));
        // A literal that is never closed: everything after its quote is inside it.
        assert_eq!(rewrite("SELECT $1, 'open $2"), ("SELECT ?1, 'open $2".into(), true));
    }

    #[test]
    fn escaped_quotes_stay_inside_the_literal() {
        assert_eq!(rewrite("SELECT 'it''s $2' WHERE a = $1"), ("SELECT 'it''s $2' WHERE a = ?1".into(), true));
        assert_eq!(rewrite("SELECT '''$1''', $1"), ("SELECT '''$1''', ?1".into(), true));
        assert_eq!(rewrite("SELECT '', $1, ''''"), ("SELECT '', ?1, ''''".into(), true));
        assert_eq!(rewrite("'a''b' = $1 AND 'c$3''' = $2"), ("'a''b' = ?1 AND 'c$3''' = ?2".into(), true));
    }

    #[test]
    fn dollar_in_a_quoted_identifier_is_kept() {
        assert_eq!(
            rewrite(r#"SELECT "col$1" FROM t WHERE "a""$2" = $1"#),
            (r#"SELECT "col$1" FROM t WHERE "a""$2" = ?1"#.into(), true)
        );
        // Each kind of quote is plain text inside the other.
        assert_eq!(
            rewrite(r#"SELECT 'say "$1"', "it's $2", $3"#),
            (r#"SELECT 'say "$1"', "it's $2", ?3"#.into(), true)
        );
    }

    #[test]
    fn dollar_not_followed_by_a_digit_is_kept() {
        assert_eq!(rewrite("SELECT $ FROM t"), ("SELECT $ FROM t".into(), false));
        assert_eq!(rewrite("SELECT $a, $_1, $"), ("SELECT $a, $_1, $".into(), false));
        assert_eq!(rewrite("SELECT $$1"), ("SELECT $$1".into(), false));
        assert_eq!(rewrite("x = $1 AND y = $z"), ("x = ?1 AND y = $z".into(), true));
    }

    #[test]
    fn dollar_inside_a_word_is_kept() {
        assert_eq!(
            rewrite("SELECT col$1, t.x$2 FROM t WHERE a = $1"),
            ("SELECT col$1, t.x$2 FROM t WHERE a = ?1".into(), true)
        );
        assert_eq!(rewrite("SELECT é$1"), ("SELECT é$1".into(), false));
    }

    #[test]
    fn text_around_parameters_is_kept_byte_for_byte() {
        let sql = "SELECT 'ünïcødé $1', $1 || 'ß', \"ø$2\" WHERE x = $2";
        assert_eq!(rewrite(sql), ("SELECT 'ünïcødé $1', ?1 || 'ß', \"ø$2\" WHERE x = ?2".into(), true));
    }

    proptest::proptest! {
        /// On any text, the rewrite only turns some `$` followed by a digit into `?`, and
        /// copies the statement exactly when it does.
        #[test]
        fn only_dollars_before_digits_change(sql in "[$?'\"0-9a_ \\-/*\n]{0,40}") {
            let out = numbered(&sql);
            let borrowed = matches!(out, Cow::Borrowed(_));
            let (before, after) = (sql.as_bytes(), out.as_bytes());
            proptest::prop_assert_eq!(before.len(), after.len());
            let mut changed = false;
            for (i, (&b, &a)) in before.iter().zip(after).enumerate() {
                if b != a {
                    proptest::prop_assert_eq!((b, a), (b'$', b'?'));
                    proptest::prop_assert!(before.get(i + 1).is_some_and(u8::is_ascii_digit));
                    changed = true;
                }
            }
            proptest::prop_assert_eq!(borrowed, !changed);
        }

        /// A statement made of pieces, each with a known rewrite: only the parameters change.
        #[test]
        fn statements_of_known_pieces(pieces in proptest::collection::vec((0..8_u8, 0..200_u32), 0..12)) {
            let mut sql = String::new();
            let mut expected = String::new();
            for (kind, n) in pieces {
                let piece = match kind {
                    0 => format!(" = ${n}"),
                    1 => format!(" '${n}'"),
                    2 => format!(" \"a${n}\""),
                    3 => format!(" c${n}"),
                    4 => format!(" 'it''s ${n}'"),
                    5 => " $".to_owned(),
                    6 => format!(" -- '${n}\n"),
                    _ => format!(" /* \"${n} */"),
                };
                expected.push_str(&if kind == 0 { piece.replace('$', "?") } else { piece.clone() });
                sql.push_str(&piece);
            }
            proptest::prop_assert_eq!(numbered(&sql), expected);
        }
    }

    #[test]
    fn quotes_in_comments_open_nothing() {
        assert_eq!(rewrite("SELECT 1 -- don't\nWHERE a = $1"), ("SELECT 1 -- don't\nWHERE a = ?1".into(), true));
        assert_eq!(rewrite("/* it's $1 */ $1 /**/ $2"), ("/* it's $1 */ ?1 /**/ ?2".into(), true));
        assert_eq!(rewrite("SELECT '--', $1, '/*'"), ("SELECT '--', ?1, '/*'".into(), true));
        assert_eq!(rewrite("SELECT 5 - $1, 6 / $2"), ("SELECT 5 - ?1, 6 / ?2".into(), true));
    }
}
