//! Rendering for people and for scripts: aligned tables, UTC timestamps, shortened DIDs, and
//! the `--json` switch.
//!
//! Human output goes to stdout; warnings and progress go to stderr so that piping stdout stays
//! clean. JSON output is the gateway's own record shape, so scripts can rely on the interface's
//! field names. Nothing here talks to the gateway.

use serde::Serialize;

/// Where command results go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    /// Prints `value` as JSON with `--json`, else the human text `human` builds.
    pub(crate) fn show<T: Serialize + ?Sized>(&self, value: &T, human: impl FnOnce() -> String) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(value)?);
        } else {
            let text = human();
            if !text.is_empty() {
                println!("{}", text.trim_end());
            }
        }
        Ok(())
    }
}

/// A table whose columns are as wide as their widest cell.
#[derive(Debug)]
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Self {
        Self { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table, or `empty` when it has no rows.
    pub(crate) fn render(&self, empty: &str) -> String {
        if self.rows.is_empty() {
            return empty.to_owned();
        }
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(cell.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    out.push_str(cell);
                } else {
                    let pad = widths[i].saturating_sub(cell.chars().count());
                    out.push_str(cell);
                    out.push_str(&" ".repeat(pad + 2));
                }
            }
            out.trim_end().to_owned()
        };
        let mut out = line(&self.header);
        for row in &self.rows {
            out.push('\n');
            out.push_str(&line(row));
        }
        out
    }
}

/// `did:key:z6MkhaXg…Wz2uVK`: long enough to tell members apart, short enough for a table.
/// Anything else (system accounts, short ids) is shown whole.
pub(crate) fn short_did(did: &str) -> String {
    let chars: Vec<char> = did.chars().collect();
    if !did.starts_with("did:") || chars.len() <= 28 {
        return did.to_owned();
    }
    let head: String = chars[..16].iter().collect();
    let tail: String = chars[chars.len() - 6..].iter().collect();
    format!("{head}…{tail}")
}

/// An amount and its currency, the one form payments and balances are shown in: `2.5 in hours`.
/// Currencies are names such as `hours` or `eur`, so `1 hours` or `2.5 eur` would not read right.
pub(crate) fn money(amount: impl std::fmt::Display, currency: &str) -> String {
    format!("{amount} in {currency}")
}

/// Unix seconds as `YYYY-MM-DD HH:MM:SS` UTC.
pub(crate) fn time(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    // Civil-from-days (H. Hinnant's algorithm), valid for every date after 1970.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60)
}

/// An optional timestamp, `-` when absent.
pub(crate) fn maybe_time(unix: Option<u64>) -> String {
    unix.map(time).unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_say_when_empty() {
        let mut table = Table::new(&["DID", "ROLE"]);
        table.row(vec!["did:key:a".into(), "admin".into()]);
        table.row(vec!["did:key:longer".into(), "member".into()]);
        assert_eq!(table.render("none"), "DID             ROLE\ndid:key:a       admin\ndid:key:longer  member");
        assert_eq!(Table::new(&["X"]).render("no rows"), "no rows");
    }

    #[test]
    fn long_dids_are_shortened_and_the_rest_kept() {
        let did = "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX";
        assert_eq!(short_did(did), "did:key:z6Mkon3N…FbLfLX");
        assert_eq!(short_did("coop:bakery:treasury"), "coop:bakery:treasury");
        assert_eq!(short_did("did:web:a.b"), "did:web:a.b");
    }

    #[test]
    fn money_names_its_currency() {
        assert_eq!(money(gateway_core::Amount::from_micros(1_000_000), "hours"), "1 in hours");
        assert_eq!(money("-2.5", "eur"), "-2.5 in eur");
    }

    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(1_735_689_600), "2025-01-01 00:00:00");
        assert_eq!(time(951_782_400 + 3_661), "2000-02-29 01:01:01");
        assert_eq!(maybe_time(None), "-");
    }
}
