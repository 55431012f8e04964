//! The treasurer's export (INTERFACE.md §13): a coop's books as a Beancount file, an hledger journal
//! or a CSV table, written from the coop's log (INTERFACE.md §12) in one streaming pass.
//!
//! The log is the source: entry 0 (`LogOpened`) gives the members and the non-zero balances when
//! the log began, and every `PaymentCreated` entry a transaction (a payment, a batch item, a
//! budget payout from the treasury, or a conversion). The export reads it in chunks from entry 0
//! to its end and keeps only running balances per (account, currency), the accounts and the
//! currencies in memory: its memory does not grow with the number of transactions. Output goes
//! out in chunks of about 64 KiB as it is written.
//!
//! - The period is `[from, to)` in UTC days, by each transaction's timestamp. Balances at `from`
//!   are the snapshot plus every transaction before it; balances at `to` are those plus every
//!   transaction of the period, and without `to` they are the balances of the whole log as the
//!   export read it (the log follows the commits within a second). Entries written after the
//!   export began (a timestamp after its start) end it, so that it always covers one prefix of
//!   the log.
//! - A conversion is four postings: `amount` in `currency` from the payer to the coop's exchange
//!   account, and `net_target_amount` in `to_currency` from the exchange account to the payee,
//!   so that each currency balances on its own.
//! - Because the export is one pass, the accounts' and commodities' declarations, the opening
//!   balances (dated `from`) and the closing `balance` assertions (dated `to`) come after the
//!   transactions; both checkers order by date, not by position.
//!
//! Names (documented in docs/API.md, "Treasurer export"):
//! - a member (a DID) is `Assets:Members:M<the first 16 hex digits of SHA-256(DID)>`, the DID
//!   in the declaration's metadata; the coop's treasury and exchange accounts are
//!   `Assets:Coop:Treasury` and `Assets:Coop:Exchange`; any other account id
//!   `Assets:Other:A<16 hex digits>`; balances without a counterpart in a member's export go to
//!   `Equity:Opening-Balances`. Should two ids share a 16-digit name, the one the log names later
//!   gets all 64 digits.
//! - Beancount commodities are the currency in upper case when that is a valid commodity
//!   (`[A-Z][A-Z0-9'._-]{0,22}[A-Z0-9]`) and not taken by a currency the log named earlier
//!   (`hours` and `HOURS` in one coop); otherwise `C` followed by the first 10 (or, when taken,
//!   more) upper-case hex digits of SHA-256(currency). hledger commodities are the currency as it
//!   is, in double quotes unless it is letters only.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::sync::Arc;

use async_trait::async_trait;
use gateway_core::{Amount, CoopId, Error};
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::ledger::{exchange_account, treasury_account};
use crate::log::LOG_OPENED;
use crate::ports::LogReads;

/// Entries read from the store at a time.
pub const CHUNK_ENTRIES: u64 = 1_024;
/// Output is handed on in chunks of about this many bytes.
const FLUSH_BYTES: usize = 64 * 1024;
/// Chunks waiting for a slow reader before the export waits too.
const CHANNEL_CHUNKS: usize = 4;

/// The CSV header row (INTERFACE.md §13).
pub const CSV_HEADER: &str = "id,seq,log_index,timestamp,kind,from,to,amount,currency,memo,batch_id";

/// The opening-balance account of a member's export.
const EQUITY: &str = "Equity:Opening-Balances";

/// An export format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A Beancount 3 file (`bean-check` passes).
    Beancount,
    /// An hledger journal (`hledger check` passes).
    Hledger,
    /// RFC 4180 CSV with the header [`CSV_HEADER`].
    Csv,
}

impl Format {
    /// `beancount`, `hledger` or `csv`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "beancount" => Some(Format::Beancount),
            "hledger" => Some(Format::Hledger),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }

    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Format::Beancount => "beancount",
            Format::Hledger => "hledger",
            Format::Csv => "csv",
        }
    }

    /// The file name extension.
    pub const fn extension(self) -> &'static str {
        match self {
            Format::Beancount => "beancount",
            Format::Hledger => "journal",
            Format::Csv => "csv",
        }
    }

    /// The `Content-Type` of the answer.
    pub const fn content_type(self) -> &'static str {
        match self {
            Format::Csv => "text/csv; charset=utf-8",
            Format::Beancount | Format::Hledger => "text/plain; charset=utf-8",
        }
    }
}

/// A UTC calendar day (days since 1970-01-01).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Day(i64);

impl Day {
    /// A strict `YYYY-MM-DD` between 1970-01-01 and 9999-12-31.
    pub fn parse(text: &str) -> Option<Day> {
        let bytes = text.as_bytes();
        if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
            return None;
        }
        let number = |range: std::ops::Range<usize>| -> Option<i64> {
            let part = &text[range];
            part.bytes().all(|b| b.is_ascii_digit()).then(|| part.parse().ok())?
        };
        let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
        if year < 1970 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        Some(Day(days_from_civil(year, month, day)))
    }

    /// The day a Unix time falls on.
    pub fn of_unix(secs: u64) -> Day {
        Day(i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2))
    }

    /// Its first second, Unix time.
    pub fn start(self) -> u64 {
        u64::try_from(self.0).unwrap_or(0).saturating_mul(86_400)
    }

    /// The day after.
    pub fn next(self) -> Day {
        Day(self.0 + 1)
    }
}

impl fmt::Display for Day {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = civil_from_days(self.0);
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (H. Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// A Unix time as RFC 3339 UTC, `2026-11-27T16:00:00Z`.
pub fn rfc3339(secs: u64) -> String {
    let rest = secs % 86_400;
    format!("{}T{:02}:{:02}:{:02}Z", Day::of_unix(secs), rest / 3600, rest / 60 % 60, rest % 60)
}

/// What to export.
#[derive(Debug, Clone)]
pub struct ExportRequest {
    /// The coop.
    pub coop: CoopId,
    /// The format.
    pub format: Format,
    /// First day of the period (inclusive); from the log's beginning when absent.
    pub from: Option<Day>,
    /// The day after the period (exclusive); up to the export's start when absent.
    pub to: Option<Day>,
    /// Only the transactions of this account (a member's DID or a system account), with
    /// closing balances of it alone.
    pub member: Option<String>,
    /// When the export began, Unix seconds: entries after it end the export, and without `to`
    /// the closing balances are dated the day after.
    pub now: u64,
}

impl ExportRequest {
    /// `from < to` when both are given (400 naming `to`).
    pub fn validate(&self) -> Result<(), Error> {
        if let (Some(from), Some(to)) = (self.from, self.to)
            && from >= to
        {
            return Err(Error::bad_request_field(
                "to",
                format!("to ({to}) must be after from ({from}): to is exclusive"),
            ));
        }
        Ok(())
    }
}

/// Where the entries of a coop's log come from.
#[async_trait]
pub trait EntrySource: Send + Sync + fmt::Debug {
    /// Entries from index `first` on, in order: at least one while the log has entry `first`,
    /// none past its end.
    async fn entries_from(&self, first: u64) -> Result<Vec<String>, Error>;
}

/// The log as the store holds it, up to its size when opened.
#[derive(Debug)]
pub struct StoredLog {
    reads: Arc<dyn LogReads>,
    coop: CoopId,
    size: u64,
}

impl StoredLog {
    /// The coop's log (404 when it has none).
    pub async fn open(reads: Arc<dyn LogReads>, coop: &CoopId) -> Result<Self, Error> {
        let head = reads.log_head(coop).await?.ok_or_else(|| Error::not_found("log", coop.as_str()))?;
        Ok(Self { reads, coop: coop.clone(), size: head.size })
    }
}

#[async_trait]
impl EntrySource for StoredLog {
    async fn entries_from(&self, first: u64) -> Result<Vec<String>, Error> {
        if first >= self.size {
            return Ok(Vec::new());
        }
        self.reads.log_entries(&self.coop, first, CHUNK_ENTRIES.min(self.size - first)).await
    }
}

/// Where export output goes, chunk by chunk.
#[async_trait]
pub trait ChunkSink: Send {
    /// Takes the next chunk; an error stops the export.
    async fn send(&mut self, chunk: Vec<u8>) -> Result<(), Error>;
}

#[async_trait]
impl ChunkSink for Vec<u8> {
    async fn send(&mut self, chunk: Vec<u8>) -> Result<(), Error> {
        self.extend_from_slice(&chunk);
        Ok(())
    }
}

struct ChannelSink(mpsc::Sender<Result<Vec<u8>, Error>>);

#[async_trait]
impl ChunkSink for ChannelSink {
    async fn send(&mut self, chunk: Vec<u8>) -> Result<(), Error> {
        self.0.send(Ok(chunk)).await.map_err(|_| Error::ServiceUnavailable("the export's reader went away".into()))
    }
}

/// What an export wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Transactions written (rows of a CSV).
    pub transactions: u64,
    /// Log entries read.
    pub entries: u64,
}

/// An export whose log has been found: ready to write.
#[derive(Debug)]
pub struct Export {
    source: Arc<dyn EntrySource>,
    request: ExportRequest,
    first: Vec<String>,
    opened_at: u64,
}

impl Export {
    /// Checks the request and reads the start of the log (404 when the coop has no log, 503 when
    /// its entries cannot be read yet), before anything is written.
    pub async fn open(source: Arc<dyn EntrySource>, request: ExportRequest) -> Result<Self, Error> {
        request.validate()?;
        let first = source.entries_from(0).await?;
        let entry = first.first().ok_or_else(|| Error::not_found("log", request.coop.as_str()))?;
        let parsed: EntryIn<'_> =
            serde_json::from_str(entry).map_err(|e| Error::Internal(format!("export: entry 0: {e}")))?;
        if parsed.event.event_type != LOG_OPENED || parsed.event.coop_id != request.coop.as_str() {
            return Err(Error::Internal(format!("export: entry 0 of {} is not its LogOpened", request.coop)));
        }
        Ok(Self { opened_at: parsed.event.timestamp, source, request, first })
    }

    /// When the coop's log began.
    pub fn opened_at(&self) -> u64 {
        self.opened_at
    }

    /// `<coop>-<from>-<to>.<ext>`: the period's days, the log's first day and the day after
    /// the export's start standing in for absent ones.
    pub fn filename(&self) -> String {
        let from = self.request.from.unwrap_or_else(|| Day::of_unix(self.opened_at));
        let to = self.request.to.unwrap_or_else(|| Day::of_unix(self.request.now).next());
        format!("{}-{from}-{to}.{}", self.request.coop, self.request.format.extension())
    }

    /// Writes the export into `sink`, chunk by chunk.
    pub async fn write_to(self, sink: &mut dyn ChunkSink) -> Result<Summary, Error> {
        let Export { source, request, first, .. } = self;
        let mut books = Books::new(request);
        books.header();
        let mut index = 0u64;
        let mut chunk = first;
        'read: while !chunk.is_empty() {
            // The next chunk is read while this one is written.
            let next = index + chunk.len() as u64;
            let reading = {
                let source = source.clone();
                tokio::spawn(async move { source.entries_from(next).await })
            };
            for entry in &chunk {
                if !books.apply(index, entry)? {
                    reading.abort();
                    break 'read;
                }
                index += 1;
                if books.out.len() >= FLUSH_BYTES {
                    let full = std::mem::replace(&mut books.out, Vec::with_capacity(FLUSH_BYTES + 4096));
                    sink.send(full).await?;
                }
            }
            chunk = reading.await.map_err(|e| Error::Internal(format!("export: reading the log: {e}")))??;
        }
        books.finish(index);
        if !books.out.is_empty() {
            sink.send(std::mem::take(&mut books.out)).await?;
        }
        Ok(Summary { transactions: books.transactions, entries: index })
    }

    /// The export as a stream of chunks, written by a task of its own; an error mid-way is the
    /// last item (the answer is then cut short).
    pub fn stream(self) -> mpsc::Receiver<Result<Vec<u8>, Error>> {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        let coop = self.request.coop.clone();
        tokio::spawn(async move {
            let mut sink = ChannelSink(tx.clone());
            if let Err(err) = self.write_to(&mut sink).await {
                if tx.is_closed() {
                    tracing::debug!(coop = %coop, "the export's reader went away");
                } else {
                    tracing::warn!(coop = %coop, "the export stopped: {err}");
                    let _ = tx.send(Err(err)).await;
                }
            }
        });
        rx
    }
}

// ---------------------------------------------------------------------------------------------
// Reading entries.

#[derive(Deserialize)]
struct EntryIn<'a> {
    seq: u64,
    #[serde(borrow)]
    event: EventIn<'a>,
}

#[derive(Deserialize)]
struct EventIn<'a> {
    #[serde(rename = "type", borrow)]
    event_type: Cow<'a, str>,
    #[serde(borrow)]
    coop_id: Cow<'a, str>,
    timestamp: u64,
    #[serde(borrow)]
    data: &'a RawValue,
}

#[derive(Deserialize)]
struct OpenedIn {
    #[serde(default)]
    members: Vec<DidIn>,
    #[serde(default)]
    balances: Vec<BalanceIn>,
}

#[derive(Deserialize)]
struct DidIn {
    did: String,
}

#[derive(Deserialize)]
struct BalanceIn {
    account: String,
    currency: String,
    balance: Amount,
}

#[derive(Deserialize)]
struct PaymentIn<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    from: Cow<'a, str>,
    #[serde(borrow)]
    to: Cow<'a, str>,
    amount: Amount,
    #[serde(borrow)]
    currency: Cow<'a, str>,
    #[serde(default, borrow)]
    memo: Option<&'a RawValue>,
    #[serde(default, borrow)]
    batch_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    to_currency: Option<Cow<'a, str>>,
    #[serde(default)]
    rate: Option<Amount>,
    #[serde(default)]
    gross_target_amount: Option<Amount>,
    #[serde(default)]
    fee_amount: Option<Amount>,
    #[serde(default)]
    net_target_amount: Option<Amount>,
}

/// A memo as the log holds it: text, `null`, or (for an oversized one) its digest.
fn memo_text(raw: Option<&RawValue>) -> Cow<'static, str> {
    let Some(raw) = raw else { return Cow::Borrowed("") };
    match serde_json::from_str::<Option<String>>(raw.get()) {
        Ok(Some(text)) => Cow::Owned(text),
        Ok(None) => Cow::Borrowed(""),
        Err(_) => Cow::Owned(format!("(memo replaced in the log by its digest: {})", raw.get())),
    }
}

// ---------------------------------------------------------------------------------------------
// The books: accounts, currencies, balances, and the writers.

#[derive(Debug)]
struct Account {
    /// The account id (a DID or a system account).
    raw: String,
    /// Its name in the ledger formats.
    name: String,
    /// The first day it is used on, once it is.
    first_day: Option<Day>,
    /// Closing balances are asserted for it.
    asserted: bool,
}

#[derive(Debug)]
struct Currency {
    code: String,
    beancount: String,
    hledger: String,
    /// The first day it is used on in the output, once it is.
    first_day: Option<Day>,
    /// Used by a transaction before `to` (it gets closing balances).
    before_to: bool,
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    account: usize,
    currency: usize,
    micros: i128,
}

/// The state of one export and its output buffer.
#[derive(Debug)]
struct Books {
    request: ExportRequest,
    from: Option<u64>,
    to: Option<u64>,
    treasury: String,
    exchange: String,
    accounts: Vec<Account>,
    by_raw: HashMap<String, usize>,
    names: HashSet<String>,
    currencies: Vec<Currency>,
    by_code: HashMap<String, usize>,
    commodity_names: HashSet<String>,
    /// Balances of the period's end so far: snapshot, transactions before `from`, and the
    /// period's.
    balances: HashMap<(usize, usize), i128>,
    /// Balances at `from` (with `from` only).
    opening: HashMap<(usize, usize), i128>,
    /// The member of a member's export.
    member: Option<usize>,
    equity: Option<usize>,
    postings: Vec<Posting>,
    last_day: Option<Day>,
    transactions: u64,
    out: Vec<u8>,
}

impl Books {
    fn new(request: ExportRequest) -> Self {
        let mut books = Books {
            from: request.from.map(Day::start),
            to: request.to.map(Day::start),
            treasury: treasury_account(&request.coop),
            exchange: exchange_account(&request.coop),
            accounts: Vec::new(),
            by_raw: HashMap::new(),
            names: HashSet::new(),
            currencies: Vec::new(),
            by_code: HashMap::new(),
            commodity_names: HashSet::new(),
            balances: HashMap::new(),
            opening: HashMap::new(),
            member: None,
            equity: None,
            postings: Vec::with_capacity(4),
            last_day: None,
            transactions: 0,
            out: Vec::with_capacity(FLUSH_BYTES + 4096),
            request,
        };
        if let Some(member) = books.request.member.clone() {
            let id = books.account(&member);
            books.accounts[id].asserted = true;
            books.member = Some(id);
        }
        books
    }

    /// The account of an id, named on first sight.
    fn account(&mut self, raw: &str) -> usize {
        if let Some(id) = self.by_raw.get(raw) {
            return *id;
        }
        let name = if raw == self.treasury {
            "Assets:Coop:Treasury".to_owned()
        } else if raw == self.exchange {
            "Assets:Coop:Exchange".to_owned()
        } else if raw == EQUITY {
            // Not an account id the ledger can hold (it is not a DID): the equity account.
            EQUITY.to_owned()
        } else {
            let digest = hex::encode(Sha256::digest(raw.as_bytes()));
            let prefix = if raw.starts_with("did:") { "Assets:Members:M" } else { "Assets:Other:A" };
            let short = format!("{prefix}{}", &digest[..16]);
            if self.names.contains(&short) { format!("{prefix}{digest}") } else { short }
        };
        self.names.insert(name.clone());
        let id = self.accounts.len();
        self.accounts.push(Account { raw: raw.to_owned(), name, first_day: None, asserted: false });
        self.by_raw.insert(raw.to_owned(), id);
        id
    }

    /// A member the log names: asserted in a whole-coop export.
    fn member_seen(&mut self, did: &str) {
        let id = self.account(did);
        if self.request.member.is_none() {
            self.accounts[id].asserted = true;
        }
    }

    /// The currency of a code, named on first sight in the log's order.
    fn currency(&mut self, code: &str) -> usize {
        if let Some(id) = self.by_code.get(code) {
            return *id;
        }
        let beancount = beancount_commodity(code, &self.commodity_names);
        self.commodity_names.insert(beancount.clone());
        let id = self.currencies.len();
        self.currencies.push(Currency {
            code: code.to_owned(),
            beancount,
            hledger: hledger_commodity(code),
            first_day: None,
            before_to: false,
        });
        self.by_code.insert(code.to_owned(), id);
        id
    }

    fn equity(&mut self) -> usize {
        match self.equity {
            Some(id) => id,
            None => {
                let id = self.account(EQUITY);
                self.equity = Some(id);
                id
            }
        }
    }

    fn use_day(&mut self, account: usize, currency: usize, day: Day) {
        let a = &mut self.accounts[account].first_day;
        *a = Some(a.map_or(day, |d| d.min(day)));
        let c = &mut self.currencies[currency].first_day;
        *c = Some(c.map_or(day, |d| d.min(day)));
    }

    /// Applies entry `index`; false when it is past the export's start (the export ends).
    fn apply(&mut self, index: u64, text: &str) -> Result<bool, Error> {
        let bad = |e: serde_json::Error| Error::Internal(format!("export: log entry {index}: {e}"));
        let entry: EntryIn<'_> = serde_json::from_str(text).map_err(bad)?;
        let event = &entry.event;
        if event.coop_id != self.request.coop.as_str() {
            return Err(Error::Internal(format!("export: log entry {index} is of coop {:?}", event.coop_id)));
        }
        if event.timestamp > self.request.now {
            return Ok(false);
        }
        match (index, &*event.event_type) {
            (0, LOG_OPENED) => {
                let opened: OpenedIn = serde_json::from_str(event.data.get()).map_err(bad)?;
                for member in &opened.members {
                    self.member_seen(&member.did);
                }
                self.postings.clear();
                for balance in &opened.balances {
                    let account = self.account(&balance.account);
                    let currency = self.currency(&balance.currency);
                    self.postings.push(Posting { account, currency, micros: i128::from(balance.balance.micros()) });
                }
                self.record(index, entry.seq, event.timestamp, None)?;
            }
            (0, other) => return Err(Error::Internal(format!("export: entry 0 is {other}, not {LOG_OPENED}"))),
            (_, "MemberAdded" | "RoleUpdated") => {
                let member: DidIn = serde_json::from_str(event.data.get()).map_err(bad)?;
                self.member_seen(&member.did);
            }
            (_, "PaymentCreated") => {
                let payment: PaymentIn<'_> = serde_json::from_str(event.data.get()).map_err(bad)?;
                self.postings.clear();
                let from = self.account(&payment.from);
                let to = self.account(&payment.to);
                let currency = self.currency(&payment.currency);
                let amount = i128::from(payment.amount.micros());
                match &*payment.kind {
                    "payment" => {
                        self.postings.push(Posting { account: from, currency, micros: -amount });
                        self.postings.push(Posting { account: to, currency, micros: amount });
                    }
                    "conversion" => {
                        let (Some(target), Some(net)) = (&payment.to_currency, payment.net_target_amount) else {
                            return Err(Error::Internal(format!(
                                "export: log entry {index}: a conversion without to_currency or net_target_amount"
                            )));
                        };
                        let exchange = self.account(&self.exchange.clone());
                        let target = self.currency(target);
                        let net = i128::from(net.micros());
                        self.postings.push(Posting { account: from, currency, micros: -amount });
                        self.postings.push(Posting { account: exchange, currency, micros: amount });
                        self.postings.push(Posting { account: exchange, currency: target, micros: -net });
                        self.postings.push(Posting { account: to, currency: target, micros: net });
                    }
                    other => {
                        return Err(Error::Internal(format!(
                            "export: log entry {index}: a transaction of unknown kind {other:?}"
                        )));
                    }
                }
                self.record(index, entry.seq, event.timestamp, Some(&payment))?;
            }
            _ => {}
        }
        Ok(true)
    }

    /// Books the postings in `self.postings` of the transaction (or, without `payment`, of
    /// `LogOpened`'s snapshot) at `timestamp`, and writes it when it is in the period.
    fn record(&mut self, index: u64, seq: u64, timestamp: u64, payment: Option<&PaymentIn<'_>>) -> Result<(), Error> {
        let before = self.from.is_some_and(|from| timestamp < from);
        let after = self.to.is_some_and(|to| timestamp >= to);
        if after {
            return Ok(());
        }
        let postings = std::mem::take(&mut self.postings);
        for p in &postings {
            *self.balances.entry((p.account, p.currency)).or_default() += p.micros;
            self.currencies[p.currency].before_to = true;
            if self.member.is_none() {
                self.accounts[p.account].asserted = true;
            }
            if before {
                *self.opening.entry((p.account, p.currency)).or_default() += p.micros;
            }
        }
        let touches = self.member.is_none_or(|m| postings.iter().any(|p| p.account == m));
        if !before && touches && !postings.is_empty() {
            let day = Day::of_unix(timestamp);
            self.last_day = Some(self.last_day.map_or(day, |d| d.max(day)));
            match payment {
                Some(payment) => {
                    self.transactions += 1;
                    self.write_transaction(index, seq, timestamp, payment, &postings)?;
                }
                None => self.write_snapshot(index, seq, timestamp, &postings),
            }
        }
        self.postings = postings;
        Ok(())
    }

    // -----------------------------------------------------------------------------------------
    // Writing.

    fn header(&mut self) {
        let request = &self.request;
        let period = format!(
            "{} to {}",
            request.from.map_or_else(|| "the log's beginning".to_owned(), |d| format!("{d} (inclusive)")),
            request.to.map_or_else(
                || format!("{} (the export's start)", rfc3339(request.now)),
                |d| format!("{d} (exclusive)")
            ),
        );
        let whose = match &request.member {
            Some(member) => format!("the transactions of {}", comment_text(member)),
            None => "every transaction".to_owned(),
        };
        let mut text = String::new();
        match request.format {
            Format::Csv => {
                text.push_str(CSV_HEADER);
                text.push_str("\r\n");
            }
            Format::Beancount | Format::Hledger => {
                let _ = write!(
                    text,
                    "; The books of cooperative {coop}: {whose} from {period}, UTC,\n\
                     ; from the coop's log (names: docs/API.md, \"Treasurer export\").\n\
                     ; Exported at {at}. One pass over the log: the declarations, the opening\n\
                     ; balances and the closing balance assertions follow the transactions.\n",
                    coop = request.coop,
                    at = rfc3339(request.now),
                );
                if request.format == Format::Beancount {
                    let title = beancount_string(&format!("Cooperative {}", request.coop));
                    let _ = writeln!(text, "option \"title\" {title}\n");
                } else {
                    text.push_str("decimal-mark .\n\n");
                }
            }
        }
        self.out.extend_from_slice(text.as_bytes());
    }

    fn write_transaction(
        &mut self,
        index: u64,
        seq: u64,
        timestamp: u64,
        payment: &PaymentIn<'_>,
        postings: &[Posting],
    ) -> Result<(), Error> {
        let day = Day::of_unix(timestamp);
        let memo = memo_text(payment.memo);
        let batch = payment.batch_id.as_deref().unwrap_or("");
        match self.request.format {
            Format::Csv => {
                let seq_text = seq.to_string();
                let index_text = index.to_string();
                let time = rfc3339(timestamp);
                let amount = payment.amount.to_string();
                let fields: [&str; 11] = [
                    &payment.id,
                    &seq_text,
                    &index_text,
                    &time,
                    &payment.kind,
                    &payment.from,
                    &payment.to,
                    &amount,
                    &payment.currency,
                    &memo,
                    batch,
                ];
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        self.out.push(b',');
                    }
                    csv_field(&mut self.out, field);
                }
                self.out.extend_from_slice(b"\r\n");
            }
            Format::Beancount => {
                let mut text = String::with_capacity(512);
                let _ = writeln!(text, "{day} * {}", beancount_string(&memo));
                let _ = writeln!(text, "  id: {}", beancount_string(&payment.id));
                let _ = writeln!(text, "  seq: {seq}");
                let _ = writeln!(text, "  log_index: {index}");
                let _ = writeln!(text, "  kind: {}", beancount_string(&payment.kind));
                let _ = writeln!(text, "  timestamp: {}", beancount_string(&rfc3339(timestamp)));
                if !batch.is_empty() {
                    let _ = writeln!(text, "  batch_id: {}", beancount_string(batch));
                }
                for (key, value) in conversion_fields(payment) {
                    let _ = writeln!(text, "  {key}: {}", beancount_string(&value));
                }
                self.postings_text(&mut text, postings, day);
                text.push('\n');
                self.out.extend_from_slice(text.as_bytes());
            }
            Format::Hledger => {
                let mut text = String::with_capacity(512);
                let code = hledger_text(&payment.id).replace(')', "\\u{29}");
                let description = hledger_text(&memo);
                let _ =
                    writeln!(text, "{day} * ({code}){}{description}", if description.is_empty() { "" } else { " " });
                let _ = write!(
                    text,
                    "    ; id:{}, seq:{seq}, log_index:{index}, kind:{}, timestamp:{}",
                    hledger_value(&payment.id),
                    hledger_value(&payment.kind),
                    rfc3339(timestamp)
                );
                if !batch.is_empty() {
                    let _ = write!(text, ", batch_id:{}", hledger_value(batch));
                }
                for (key, value) in conversion_fields(payment) {
                    let _ = write!(text, ", {key}:{}", hledger_value(&value));
                }
                text.push('\n');
                self.postings_text(&mut text, postings, day);
                text.push('\n');
                self.out.extend_from_slice(text.as_bytes());
            }
        }
        Ok(())
    }

    /// `LogOpened`'s balances, in the period: one transaction (not a CSV row: not a transaction
    /// of the ledger).
    fn write_snapshot(&mut self, index: u64, seq: u64, timestamp: u64, postings: &[Posting]) {
        if self.request.format == Format::Csv {
            return;
        }
        let day = Day::of_unix(timestamp);
        let postings = self.with_equity(postings.iter().copied());
        if postings.is_empty() {
            return;
        }
        let narration = "Balances when the coop's log began (LogOpened)";
        let mut text = String::new();
        match self.request.format {
            Format::Beancount => {
                let _ = writeln!(text, "{day} * {}", beancount_string(narration));
                let _ = writeln!(text, "  seq: {seq}\n  log_index: {index}");
            }
            _ => {
                let _ = writeln!(text, "{day} * {narration}\n    ; seq:{seq}, log_index:{index}");
            }
        }
        self.postings_text(&mut text, &postings, day);
        text.push('\n');
        self.out.extend_from_slice(text.as_bytes());
    }

    /// The postings that matter to this export (in a member's export, the member's) and, when
    /// they do not balance per currency, a posting to the equity account for the rest.
    fn with_equity(&mut self, postings: impl Iterator<Item = Posting>) -> Vec<Posting> {
        let member = self.member;
        let mut kept: Vec<Posting> =
            postings.filter(|p| p.micros != 0 && member.is_none_or(|m| p.account == m)).collect();
        kept.sort_by_key(|p| (self.accounts[p.account].name.clone(), p.currency));
        let mut rest: Vec<(usize, i128)> = Vec::new();
        for p in &kept {
            match rest.iter_mut().find(|(c, _)| *c == p.currency) {
                Some((_, sum)) => *sum += p.micros,
                None => rest.push((p.currency, p.micros)),
            }
        }
        let unbalanced: Vec<(usize, i128)> = rest.into_iter().filter(|(_, sum)| *sum != 0).collect();
        if !unbalanced.is_empty() {
            let equity = self.equity();
            kept.extend(unbalanced.into_iter().map(|(currency, sum)| Posting {
                account: equity,
                currency,
                micros: -sum,
            }));
        }
        kept
    }

    fn postings_text(&mut self, text: &mut String, postings: &[Posting], day: Day) {
        for p in postings {
            self.use_day(p.account, p.currency, day);
            let account = &self.accounts[p.account].name;
            let currency = &self.currencies[p.currency];
            let commodity =
                if self.request.format == Format::Beancount { &currency.beancount } else { &currency.hledger };
            let indent = if self.request.format == Format::Beancount { "  " } else { "    " };
            let _ = writeln!(text, "{indent}{account}  {} {commodity}", fixed6(p.micros));
        }
    }

    /// Declarations, opening balances and closing balances.
    fn finish(&mut self, entries: u64) {
        let format = self.request.format;
        if format == Format::Csv {
            return;
        }
        let close_day = match self.request.to {
            Some(to) => to,
            None => {
                let today = Day::of_unix(self.request.now).next();
                self.last_day.map_or(today, |d| d.next().max(today))
            }
        };
        // The opening balances, dated `from`.
        let mut opening_text = String::new();
        if let Some(from) = self.request.from {
            let mut opening: Vec<Posting> = self
                .opening
                .iter()
                .map(|(&(account, currency), &micros)| Posting { account, currency, micros })
                .collect();
            opening.sort_by_key(|p| (p.account, p.currency));
            let postings = self.with_equity(opening.into_iter());
            if !postings.is_empty() {
                opening_text.push_str("\n; Balances at the period's start\n");
                match format {
                    Format::Beancount => {
                        let _ = writeln!(
                            opening_text,
                            "{from} * {}",
                            beancount_string(&format!("Opening balances at {from}"))
                        );
                    }
                    _ => {
                        let _ = writeln!(opening_text, "{from} * Opening balances at {from}");
                    }
                }
                self.postings_text(&mut opening_text, &postings, from);
            }
        }
        // The closing balances: every asserted account in every currency used before `to`.
        let mut asserted: Vec<usize> = (0..self.accounts.len()).filter(|a| self.accounts[*a].asserted).collect();
        asserted.sort_by(|a, b| self.accounts[*a].name.cmp(&self.accounts[*b].name));
        let used: Vec<usize> = (0..self.currencies.len()).filter(|c| self.currencies[*c].before_to).collect();
        let mut closing_text =
            format!("\n; Balances at the period's end ({close_day}, before its first transaction)\n");
        if format == Format::Hledger && !asserted.is_empty() && !used.is_empty() {
            let _ = writeln!(closing_text, "{close_day} * Closing balance assertions");
        }
        for &account in &asserted {
            for &currency in &used {
                let balance = self.balances.get(&(account, currency)).copied().unwrap_or(0);
                self.use_day(account, currency, close_day);
                let name = &self.accounts[account].name;
                let c = &self.currencies[currency];
                match format {
                    Format::Beancount => {
                        let _ =
                            writeln!(closing_text, "{close_day} balance {name}  {} {}", fixed6(balance), c.beancount);
                    }
                    _ => {
                        let _ =
                            writeln!(closing_text, "    {name}  0 {} = {} {}", c.hledger, fixed6(balance), c.hledger);
                    }
                }
            }
        }
        // Declarations, dated the first day each is used on.
        let mut text = String::from("; Commodities and accounts\n");
        for currency in self.currencies.iter().filter(|c| c.first_day.is_some()) {
            let day = currency.first_day.unwrap_or(close_day);
            match format {
                Format::Beancount => {
                    let _ = writeln!(
                        text,
                        "{day} commodity {}\n  code: {}",
                        currency.beancount,
                        beancount_string(&currency.code)
                    );
                }
                _ => {
                    let _ = writeln!(text, "commodity 1.000000 {}", currency.hledger);
                }
            }
        }
        let mut declared: Vec<&Account> = self.accounts.iter().filter(|a| a.first_day.is_some()).collect();
        declared.sort_by(|a, b| a.name.cmp(&b.name));
        for account in declared {
            let day = account.first_day.unwrap_or(close_day);
            let key = if account.raw.starts_with("did:") { "did" } else { "account" };
            match format {
                Format::Beancount => {
                    let _ = writeln!(text, "{day} open {}", account.name);
                    if account.name != EQUITY {
                        let _ = writeln!(text, "  {key}: {}", beancount_string(&account.raw));
                    }
                }
                _ => {
                    if account.name == EQUITY {
                        let _ = writeln!(text, "account {}", account.name);
                    } else {
                        let _ = writeln!(text, "account {}  ; {key}:{}", account.name, hledger_value(&account.raw));
                    }
                }
            }
        }
        text.push_str(&opening_text);
        text.push_str(&closing_text);
        let _ = writeln!(
            text,
            "\n; End of the export: {} transactions, log entries 0 to {}.",
            self.transactions,
            entries.saturating_sub(1)
        );
        self.out.extend_from_slice(text.as_bytes());
    }
}

/// The conversion fields a transaction carries, as exact decimal text.
fn conversion_fields(payment: &PaymentIn<'_>) -> Vec<(&'static str, String)> {
    let mut fields = Vec::new();
    if let Some(to) = &payment.to_currency {
        fields.push(("to_currency", to.to_string()));
    }
    for (key, value) in [
        ("rate", payment.rate),
        ("gross_target_amount", payment.gross_target_amount),
        ("fee_amount", payment.fee_amount),
        ("net_target_amount", payment.net_target_amount),
    ] {
        if let Some(value) = value {
            fields.push((key, value.to_string()));
        }
    }
    fields
}

// ---------------------------------------------------------------------------------------------
// Names, amounts and escaping.

/// Micro-units as a decimal with exactly six fractional digits.
fn fixed6(micros: i128) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    format!("{sign}{}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// Whether `name` is a Beancount commodity: `[A-Z][A-Z0-9'._-]{0,22}[A-Z0-9]`.
fn is_beancount_commodity(name: &str) -> bool {
    let bytes = name.as_bytes();
    (2..=24).contains(&bytes.len())
        && bytes[0].is_ascii_uppercase()
        && bytes.last().is_some_and(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        && bytes.iter().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b"'._-".contains(b))
}

/// The Beancount commodity of a currency, given the names taken by currencies the log named
/// earlier.
fn beancount_commodity(code: &str, taken: &HashSet<String>) -> String {
    let upper = code.to_ascii_uppercase();
    if is_beancount_commodity(&upper) && !taken.contains(&upper) {
        return upper;
    }
    let digest = hex::encode_upper(Sha256::digest(code.as_bytes()));
    (10..=23)
        .map(|len| format!("C{}", &digest[..len]))
        .find(|name| !taken.contains(name))
        .unwrap_or_else(|| format!("C{}", &digest[..23]))
}

/// The hledger commodity of a currency: as it is, quoted unless letters only.
fn hledger_commodity(code: &str) -> String {
    if !code.is_empty() && code.bytes().all(|b| b.is_ascii_alphabetic()) {
        code.to_owned()
    } else {
        format!("\"{}\"", code.replace(['"', '\n', '\r', ';'], "_"))
    }
}

/// A Beancount string literal: `\` and `"` escaped, newlines, tabs and the like as the escapes
/// Beancount reads back (`\n`, `\r`, `\t`, `\f`, `\b`), any other control character as U+FFFD.
pub fn beancount_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{c}' => out.push_str("\\f"),
            '\u{8}' => out.push_str("\\b"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text for the rest of an hledger line (a description): nothing in it ends the line or starts
/// a comment. `\` becomes `\\`, a newline `\n`, a carriage return `\r`, a tab `\t`, and `;`,
/// other control characters and Unicode line separators `\u{<hex>}`.
pub fn hledger_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            ';' | '\u{85}' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.trim().to_owned()
}

/// A tag value in an hledger comment: [`hledger_text`] with `,` (which ends a value) and
/// spaces escaped too.
pub fn hledger_value(text: &str) -> String {
    hledger_text(text).replace(',', "\\u{2c}").replace(' ', "\\u{20}")
}

/// Text for a comment line: control characters as U+FFFD.
fn comment_text(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect()
}

/// Appends one RFC 4180 field: quoted (quotes doubled) when it holds a quote, a comma, a CR or
/// an LF. A field that a spreadsheet would take for a formula (it starts with `=`, `+`, `-`,
/// `@`, a tab or a CR) is written with a leading `'`, as OWASP advises.
pub fn csv_field(out: &mut Vec<u8>, field: &str) {
    let formula = field.starts_with(['=', '+', '-', '@', '\t', '\r']);
    let quote = field.contains(['"', ',', '\r', '\n']);
    if quote {
        out.push(b'"');
    }
    if formula {
        out.push(b'\'');
    }
    if quote {
        for b in field.bytes() {
            if b == b'"' {
                out.push(b'"');
            }
            out.push(b);
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(field.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
    const BOB: &str = "did:key:z6MkrJVnaZkeFzdQyMZu1cgjg7k1pZZ6pvBQ7XJPt4swbTQ2";
    const HOSTILE: &str = "rent \"May\"\n2020-01-01 open Assets:Evil\r\n; x, y \\ \t=1+1";
    /// 2026-11-27T16:00:00Z.
    const AT: u64 = 1_795_737_600 + 16 * 3600;

    #[derive(Debug)]
    struct Entries(Vec<String>);

    #[async_trait]
    impl EntrySource for Entries {
        async fn entries_from(&self, first: u64) -> Result<Vec<String>, Error> {
            // Three at a time, to cross chunk boundaries.
            Ok(self.0.iter().skip(first as usize).take(3).cloned().collect())
        }
    }

    /// An entry with `data`'s exact text (a `serde_json::Value` would round amounts through
    /// `f64`).
    fn entry(seq: u64, event_type: &str, timestamp: u64, data: &str) -> String {
        format!(
            r#"{{"seq":{seq},"event":{{"type":"{event_type}","coop_id":"bakery","timestamp":{timestamp},"data":{data}}}}}"#
        )
    }

    fn payment(seq: u64, id: &str, from: &str, to: &str, amount: &str, memo: Option<&str>, at: u64) -> String {
        let data = format!(
            r#"{{"id":"{id}","kind":"payment","from":"{from}","to":"{to}","amount":{amount},"currency":"hours","memo":{},"timestamp":{at}}}"#,
            serde_json::to_string(&memo).unwrap()
        );
        entry(seq, "PaymentCreated", at, &data)
    }

    /// A log: two members with an old balance in the snapshot, payments on three days (one of
    /// each extreme amount, one with a hostile memo), and a conversion.
    fn log() -> Vec<String> {
        let day = 86_400;
        let opened = format!(
            r#"{{"after_seq":4,"members":[{{"did":"{ALICE}","role":"admin","credit_limit":null}}],
                "balances":[{{"account":"{ALICE}","currency":"hours","balance":-5.5}},{{"account":"{BOB}","currency":"hours","balance":5.5}}],
                "settings":{{}},"receipt_key":null}}"#
        );
        let conversion = format!(
            r#"{{"id":"t5","kind":"conversion","from":"{BOB}","to":"{ALICE}","amount":10,"currency":"hours",
                "memo":null,"timestamp":{},"to_currency":"EUR_2","rate":1.5,"gross_target_amount":15,
                "fee_amount":0.15,"net_target_amount":14.85}}"#,
            AT + 2 * day
        );
        vec![
            entry(4, LOG_OPENED, AT - day, &opened),
            entry(
                5,
                "MemberAdded",
                AT,
                &serde_json::json!({"did": BOB, "role": "member", "joined_at": AT, "credit_limit": null}).to_string(),
            ),
            payment(6, "t1", ALICE, BOB, "999999999999.999999", Some("huge"), AT),
            payment(7, "t2", BOB, ALICE, "0.000001", None, AT + day),
            payment(8, "t3", ALICE, BOB, "2", Some(HOSTILE), AT + day),
            entry(9, "GovernanceVoteCast", AT + day, r#"{"proposal_id":"p"}"#),
            entry(10, "PaymentCreated", AT + 2 * day, &conversion),
            payment(11, "t6", "coop:bakery:treasury", ALICE, "1", Some("budget: proposal p"), AT + 2 * day),
        ]
    }

    fn request(format: Format, from: Option<&str>, to: Option<&str>, member: Option<&str>) -> ExportRequest {
        ExportRequest {
            coop: CoopId::parse("bakery").unwrap(),
            format,
            from: from.map(|d| Day::parse(d).unwrap()),
            to: to.map(|d| Day::parse(d).unwrap()),
            member: member.map(str::to_owned),
            now: AT + 3 * 86_400,
        }
    }

    async fn export(request: ExportRequest) -> String {
        let export = Export::open(Arc::new(Entries(log())), request).await.unwrap();
        let mut out = Vec::new();
        export.write_to(&mut out).await.unwrap();
        String::from_utf8(out).unwrap()
    }

    /// Micro-units per (account, commodity).
    type Sums = HashMap<(String, String), i128>;

    /// Sums of the postings per (account, commodity), and the asserted balances, of a Beancount
    /// or hledger text this module wrote.
    fn sums(text: &str) -> (Sums, Sums) {
        let micros = |t: &str| -> i128 {
            let negative = t.starts_with('-');
            let (units, frac) = t.trim_start_matches('-').split_once('.').unwrap();
            let v = units.parse::<i128>().unwrap() * 1_000_000 + frac.parse::<i128>().unwrap();
            if negative { -v } else { v }
        };
        let (mut postings, mut asserted) = (HashMap::new(), HashMap::new());
        for line in text.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if line.starts_with("  ") && words.len() == 3 && words[0].starts_with("Assets:")
                || words.first() == Some(&"Equity:Opening-Balances")
            {
                *postings.entry((words[0].to_owned(), words[2].to_owned())).or_default() += micros(words[1]);
            } else if words.len() == 5 && words[1] == "balance" {
                asserted.insert((words[2].to_owned(), words[4].to_owned()), micros(words[3]));
            } else if words.len() == 6 && words[3] == "=" {
                asserted.insert((words[0].to_owned(), words[5].to_owned()), micros(words[4]));
            }
        }
        (postings, asserted)
    }

    #[test]
    fn strings_keep_memos_inside_their_field() {
        assert_eq!(beancount_string(HOSTILE), r#""rent \"May\"\n2020-01-01 open Assets:Evil\r\n; x, y \\ \t=1+1""#);
        assert_eq!(beancount_string("a\u{0}b\u{7f}"), "\"a\u{fffd}b\u{fffd}\"");
        assert_eq!(hledger_text(HOSTILE), r#"rent "May"\n2020-01-01 open Assets:Evil\r\n\u{3b} x, y \\ \t=1+1"#);
        assert_eq!(hledger_text("a\u{2028}b\u{0}"), r"a\u{2028}b\u{0}");
        assert_eq!(hledger_value("did:key:z6Mk, x"), r"did:key:z6Mk\u{2c}\u{20}x");
        let mut out = Vec::new();
        csv_field(&mut out, HOSTILE);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"rent \"\"May\"\"\n2020-01-01 open Assets:Evil\r\n; x, y \\ \t=1+1\""
        );
        for (field, written) in [("plain", "plain"), ("=1+1", "'=1+1"), ("-3", "'-3"), ("@x,y", "\"'@x,y\""), ("", "")]
        {
            let mut out = Vec::new();
            csv_field(&mut out, field);
            assert_eq!(String::from_utf8(out).unwrap(), written);
        }
    }

    #[test]
    fn days_and_times_are_utc_calendar_days() {
        assert_eq!(Day::parse("1970-01-01").unwrap().start(), 0);
        assert_eq!(Day::parse("2026-11-27").unwrap().start(), 1_795_737_600);
        assert_eq!(Day::parse("2024-02-29").unwrap().to_string(), "2024-02-29");
        assert_eq!(Day::parse("2024-12-31").unwrap().next().to_string(), "2025-01-01");
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-00-10",
            "2026-1-01",
            "26-01-01",
            "1969-12-31",
            "2026-01-01T00",
            "２０２６-01-01",
        ] {
            assert_eq!(Day::parse(bad), None, "{bad}");
        }
        assert_eq!(rfc3339(AT), "2026-11-27T16:00:00Z");
        assert_eq!(rfc3339(AT + 3599 + 86_400 * 400), "2028-01-01T16:59:59Z");
        for days in [0i64, 59, 365, 11_016, 20_000, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn commodities_follow_each_formats_rules_and_never_collide() {
        let mut taken = HashSet::new();
        let mut name = |code: &str| {
            let name = beancount_commodity(code, &taken);
            assert!(is_beancount_commodity(&name), "{code} → {name}");
            assert!(taken.insert(name.clone()), "{code} → {name} collides");
            name
        };
        assert_eq!(name("hours"), "HOURS");
        assert_eq!(name("EUR_2"), "EUR_2");
        let twin = name("HOURS");
        assert!(twin.starts_with('C') && twin.len() == 11, "{twin}");
        for awkward in ["x", "_a", "a_", "1st", &"y".repeat(25), "a__b"] {
            name(awkward);
        }
        assert_eq!(hledger_commodity("hours"), "hours");
        assert_eq!(hledger_commodity("EUR_2"), "\"EUR_2\"");
        assert_eq!(hledger_commodity("h2"), "\"h2\"");
        assert_eq!(fixed6(-1), "-0.000001");
        assert_eq!(fixed6(999_999_999_999_999_999), "999999999999.999999");
    }

    #[tokio::test]
    async fn the_books_balance_and_close_on_the_ledgers_balances() {
        for format in [Format::Beancount, Format::Hledger] {
            let text = export(request(format, None, None, None)).await;
            let (postings, asserted) = sums(&text);
            assert!(!asserted.is_empty(), "{text}");
            for (key, balance) in &asserted {
                assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{format:?} {key:?}\n{text}");
            }
            // Alice: -5.5 (snapshot) - 999999999999.999999 + 0.000001 - 2 + 1 hours, 14.85 EUR_2.
            let alice = format!("Assets:Members:M{}", &hex::encode(Sha256::digest(ALICE.as_bytes()))[..16]);
            let hours = if format == Format::Beancount { "HOURS" } else { "hours" };
            assert_eq!(asserted[&(alice.clone(), hours.to_owned())], -1_000_000_000_006_499_998, "{text}");
            let eur = if format == Format::Beancount { "EUR_2" } else { "\"EUR_2\"" };
            assert_eq!(asserted[&(alice, eur.to_owned())], 14_850_000);
            assert!(asserted.contains_key(&("Assets:Coop:Exchange".to_owned(), hours.to_owned())));
            assert!(asserted.contains_key(&("Assets:Coop:Treasury".to_owned(), hours.to_owned())));
            // The hostile memo is one line, inside its field.
            assert!(!text.lines().any(|l| l.starts_with("2020-01-01")), "{text}");
            assert!(!text.contains("open Assets:Evil\n"), "{text}");
        }
    }

    #[tokio::test]
    async fn a_period_opens_on_its_start_balances_and_keeps_only_its_transactions() {
        let text = export(request(Format::Beancount, Some("2026-11-28"), Some("2026-11-29"), None)).await;
        assert!(text.contains("2026-11-28 * \"Opening balances at 2026-11-28\""), "{text}");
        assert!(text.contains("id: \"t2\"") && text.contains("id: \"t3\""), "{text}");
        assert!(!text.contains("id: \"t1\"") && !text.contains("id: \"t5\""), "{text}");
        let (postings, asserted) = sums(&text);
        for (key, balance) in &asserted {
            assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{key:?}\n{text}");
            assert!(text.contains(&format!("2026-11-29 balance {}", key.0)), "{text}");
        }
        // A member's export: the member's transactions, balanced against the counterparties
        // and the equity account, and the member's closing balance only.
        let text = export(request(Format::Beancount, Some("2026-11-29"), None, Some(BOB))).await;
        let (postings, asserted) = sums(&text);
        assert!(text.contains("id: \"t5\"") && !text.contains("id: \"t6\""), "{text}");
        assert!(text.contains("Equity:Opening-Balances"), "{text}");
        assert_eq!(asserted.len(), 2, "{text}");
        for (key, balance) in &asserted {
            assert_eq!(postings.get(key).copied().unwrap_or(0), *balance, "{key:?}\n{text}");
        }
    }

    #[tokio::test]
    async fn csv_rows_are_the_periods_transactions_with_exact_amounts() {
        let text = export(request(Format::Csv, None, None, None)).await;
        let lines: Vec<&str> = text.split("\r\n").collect();
        assert_eq!(lines[0], CSV_HEADER);
        assert_eq!(
            lines[1],
            format!("t1,6,2,2026-11-27T16:00:00Z,payment,{ALICE},{BOB},999999999999.999999,hours,huge,")
        );
        assert_eq!(lines[2], format!("t2,7,3,2026-11-28T16:00:00Z,payment,{BOB},{ALICE},0.000001,hours,,"));
        assert!(
            text.contains(",2,hours,\"rent \"\"May\"\"\n2020-01-01 open Assets:Evil\r\n; x, y \\ \t=1+1\",\r\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!("t5,10,6,2026-11-29T16:00:00Z,conversion,{BOB},{ALICE},10,hours,,\r\n")),
            "{text}"
        );
        assert!(text.ends_with("\r\n"));
        // Overlapping periods name the same transactions by the same ids.
        let early = export(request(Format::Csv, Some("2026-11-27"), Some("2026-11-29"), None)).await;
        let late = export(request(Format::Csv, Some("2026-11-28"), None, None)).await;
        let ids = |text: &str| -> HashSet<String> {
            text.split("\r\n")
                .skip(1)
                .filter(|l| l.starts_with('t'))
                .map(|l| l.split(',').next().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            ids(&early).intersection(&ids(&late)).cloned().collect::<HashSet<_>>(),
            HashSet::from(["t2".into(), "t3".into()])
        );
    }

    #[tokio::test]
    async fn entries_after_the_exports_start_end_it() {
        let mut late = request(Format::Csv, None, None, None);
        late.now = AT + 86_400 - 1;
        let export = Export::open(Arc::new(Entries(log())), late).await.unwrap();
        let mut out = Vec::new();
        let summary = export.write_to(&mut out).await.unwrap();
        assert_eq!(summary, Summary { transactions: 1, entries: 3 });
        let refused =
            Export::open(Arc::new(Entries(log())), request(Format::Csv, Some("2026-11-28"), Some("2026-11-28"), None))
                .await;
        assert!(matches!(refused, Err(Error::BadRequest { fields, .. }) if fields.contains_key("to")));
    }
}
