//! Replaying a coop's log: the ledger from `LogOpened`'s snapshot through every
//! `PaymentCreated`, the accounts the log names, the governance decisions and the key
//! announcements an audit checks.
//!
//! Entries are read into typed structs whose amounts are [`Amount`]s parsed from the numbers'
//! exact text, never through `f64`. How a transaction moves money is the ledger's rule
//! (INTERFACE.md §5): a payment (a single one, a batch item, a budget payout from the treasury)
//! moves `amount` in `currency` from `from` to `to`; a conversion moves `amount` in `currency`
//! from `from` to the coop's exchange account, and `net_target_amount` in `to_currency` from
//! the exchange account to `to` (the fee is what the exchange account keeps of the gross).

use std::collections::{BTreeMap, BTreeSet};

use gateway_core::{Amount, CoopId};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::audit::Mismatch;
use crate::governance::TallyCounts;

/// The type of entry 0.
pub(super) const LOG_OPENED: &str = "LogOpened";

/// An entry: `{"seq", "event": {"type", "coop_id", "timestamp", "data"}}`.
#[derive(Deserialize)]
struct Entry {
    seq: u64,
    event: Event,
}

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    event_type: String,
    coop_id: String,
    data: Box<RawValue>,
}

/// `LogOpened`'s data (the fields the replay needs).
#[derive(Deserialize)]
struct Opened {
    after_seq: u64,
    #[serde(default)]
    members: Vec<AccountRef>,
    #[serde(default)]
    balances: Vec<OpenedBalance>,
    #[serde(default)]
    receipt_key: Option<OpenedKey>,
}

#[derive(Deserialize)]
struct AccountRef {
    did: String,
}

#[derive(Deserialize)]
struct OpenedBalance {
    account: String,
    currency: String,
    balance: Amount,
}

#[derive(Deserialize)]
struct OpenedKey {
    public_key: String,
}

/// `PaymentCreated`'s data: the transaction as the ledger's history shows it.
#[derive(Deserialize)]
struct Payment {
    kind: String,
    from: String,
    to: String,
    amount: Amount,
    currency: String,
    #[serde(default)]
    to_currency: Option<String>,
    #[serde(default)]
    rate: Option<Amount>,
    #[serde(default)]
    gross_target_amount: Option<Amount>,
    #[serde(default)]
    fee_amount: Option<Amount>,
    #[serde(default)]
    net_target_amount: Option<Amount>,
}

/// `GovernanceProposalClosed`'s data (the fields the receipt check needs).
#[derive(Deserialize)]
struct ClosedData {
    proposal_id: String,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    tally: Option<TallyCounts>,
    #[serde(default)]
    receipt: Option<serde_json::Value>,
}

/// A closed proposal as the log tells it.
#[derive(Debug, Clone)]
pub(super) struct Closed {
    /// Its entry.
    pub(super) index: u64,
    /// The proposal.
    pub(super) proposal_id: String,
    /// The outcome the event states.
    pub(super) outcome: Option<String>,
    /// The tally the event states.
    pub(super) tally: Option<TallyCounts>,
    /// The signed receipt, when the event carries one.
    pub(super) receipt: Option<serde_json::Value>,
}

/// The replayed state of a coop after the entries applied so far.
#[derive(Debug)]
pub(super) struct Replay {
    coop: String,
    exchange: String,
    /// `LogOpened`'s `after_seq`, once entry 0 is read.
    pub(super) after_seq: Option<u64>,
    /// Account → currency → balance.
    pub(super) balances: BTreeMap<String, BTreeMap<String, Amount>>,
    /// Every account or member the log names.
    pub(super) accounts: BTreeSet<String>,
    /// Entries per event type.
    pub(super) events: BTreeMap<String, u64>,
    /// The receipt key `LogOpened` names (hex).
    pub(super) opened_key: Option<String>,
    /// Every string of every `SigningKeyRotated` entry's data (the new key, in whatever
    /// spelling the event gives it: hex public key or `vkey`).
    pub(super) announced: BTreeSet<String>,
    /// The closed proposals.
    pub(super) closed: Vec<Closed>,
    /// What does not add up.
    pub(super) mismatches: Vec<Mismatch>,
}

fn strings(value: &serde_json::Value, out: &mut BTreeSet<String>) {
    match value {
        serde_json::Value::String(text) => {
            out.insert(text.clone());
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// A JSON object's fields with their exact text, in order.
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = map.next_entry::<String, Box<RawValue>>()? {
                    fields.push(field);
                }
                Ok(Fields(fields))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// A field of `LogOpened` replaced in its entry by the digest of its exact JSON text.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FieldDigest {
    sha256: String,
    bytes: usize,
}

/// Entry 0 with the `LogOpened` data served apart (`GET /log/opened`) in place of its own, when
/// its own holds digests of fields (an entry is at most 65,535 bytes): `Ok(None)` when it holds
/// none, `Ok(Some((entry, digested)))` when every digested field of the entry is the SHA-256 and
/// length of that field's exact text in `whole` and every other field is the same text, else
/// `Err` saying which field does not match.
pub(super) fn with_whole_data(entry: &[u8], whole: Option<&str>) -> Result<Option<(Vec<u8>, usize)>, String> {
    use sha2::Digest as _;
    #[derive(Deserialize)]
    struct Outer<'a> {
        seq: u64,
        #[serde(borrow)]
        event: Inner<'a>,
    }
    #[derive(Deserialize)]
    struct Inner<'a> {
        #[serde(rename = "type")]
        event_type: &'a str,
        coop_id: &'a str,
        timestamp: u64,
        #[serde(borrow)]
        data: &'a RawValue,
    }
    let Ok(outer) = serde_json::from_slice::<Outer<'_>>(entry) else { return Ok(None) };
    let Ok(Fields(own)) = serde_json::from_str::<Fields>(outer.event.data.get()) else { return Ok(None) };
    let digested: Vec<(&str, FieldDigest)> = own
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), serde_json::from_str::<FieldDigest>(value.get()).ok()?)))
        .collect();
    if digested.is_empty() {
        return Ok(None);
    }
    let Some(whole) = whole else {
        return Err(format!("{} of its fields are digests, and the gateway served no data for them", digested.len()));
    };
    let Fields(full) = serde_json::from_str::<Fields>(whole).map_err(|e| format!("the data served apart: {e}"))?;
    let names = |fields: &[(String, Box<RawValue>)]| fields.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    if names(&own) != names(&full) {
        return Err(format!("the data served apart has the fields {:?}, the entry {:?}", names(&full), names(&own)));
    }
    for ((name, mine), (_, theirs)) in own.iter().zip(&full) {
        match digested.iter().find(|(n, _)| n == name) {
            Some((_, digest)) => {
                let text = theirs.get();
                let sha = hex::encode(sha2::Sha256::digest(text.as_bytes()));
                if sha != digest.sha256 || text.len() != digest.bytes {
                    return Err(format!("{name:?} served apart is not the one whose digest the entry holds"));
                }
            }
            None if mine.get() != theirs.get() => {
                return Err(format!("{name:?} served apart differs from the entry's"));
            }
            None => {}
        }
    }
    #[derive(serde::Serialize)]
    struct Rebuilt<'a> {
        seq: u64,
        event: RebuiltEvent<'a>,
    }
    #[derive(serde::Serialize)]
    struct RebuiltEvent<'a> {
        #[serde(rename = "type")]
        event_type: &'a str,
        coop_id: &'a str,
        timestamp: u64,
        data: &'a RawValue,
    }
    let data: &RawValue = serde_json::from_str(whole).map_err(|e| format!("the data served apart: {e}"))?;
    let event = RebuiltEvent {
        event_type: outer.event.event_type,
        coop_id: outer.event.coop_id,
        timestamp: outer.event.timestamp,
        data,
    };
    let rebuilt = serde_json::to_vec(&Rebuilt { seq: outer.seq, event }).map_err(|e| e.to_string())?;
    Ok(Some((rebuilt, digested.len())))
}

impl Replay {
    pub(super) fn new(coop: &CoopId) -> Self {
        Self {
            coop: coop.to_string(),
            exchange: format!("coop:{coop}:exchange"),
            after_seq: None,
            balances: BTreeMap::new(),
            accounts: BTreeSet::new(),
            events: BTreeMap::new(),
            opened_key: None,
            announced: BTreeSet::new(),
            closed: Vec::new(),
            mismatches: Vec::new(),
        }
    }

    fn entry_mismatch(&mut self, index: u64, detail: impl Into<String>) {
        self.mismatches.push(Mismatch::Entry { index, detail: detail.into() });
    }

    /// The balance of an account in a currency (zero when it never moved).
    pub(super) fn balance(&self, account: &str, currency: &str) -> Amount {
        self.balances.get(account).and_then(|b| b.get(currency)).copied().unwrap_or(Amount::ZERO)
    }

    /// Adds `delta` to an account's balance; false on overflow.
    fn add(&mut self, account: &str, currency: &str, delta: Amount) -> bool {
        self.accounts.insert(account.to_owned());
        let slot = self.balances.entry(account.to_owned()).or_default().entry(currency.to_owned()).or_default();
        match slot.checked_add(delta) {
            Some(sum) => {
                *slot = sum;
                true
            }
            None => false,
        }
    }

    /// Moves `amount` from one account to another.
    fn transfer(&mut self, index: u64, from: &str, to: &str, amount: Amount, currency: &str) {
        let Some(negative) = amount.checked_neg() else {
            return self.entry_mismatch(index, "an amount out of range");
        };
        if !self.add(from, currency, negative) || !self.add(to, currency, amount) {
            self.entry_mismatch(index, format!("a balance in {currency} leaves the representable range"));
        }
    }

    /// Applies entry `index` (its exact bytes).
    pub(super) fn apply(&mut self, index: u64, bytes: &[u8]) {
        let entry: Entry = match serde_json::from_slice(bytes) {
            Ok(entry) => entry,
            Err(e) => return self.entry_mismatch(index, format!("not a log entry: {e}")),
        };
        let event_type = entry.event.event_type.clone();
        *self.events.entry(event_type.clone()).or_default() += 1;
        if entry.event.coop_id != self.coop {
            self.entry_mismatch(index, format!("an event of coop {:?}", entry.event.coop_id));
        }
        let data = entry.event.data.get();
        if index == 0 {
            return self.opened(entry.seq, &event_type, data);
        }
        if let Some(after) = self.after_seq
            && after.checked_add(index) != Some(entry.seq)
        {
            self.entry_mismatch(
                index,
                format!("carries event {}, but entry {index} follows event {after} by {index}", entry.seq),
            );
        }
        match event_type.as_str() {
            LOG_OPENED => self.entry_mismatch(index, "a second LogOpened"),
            "PaymentCreated" => match serde_json::from_str::<Payment>(data) {
                Ok(payment) => self.payment(index, &payment),
                Err(e) => self.entry_mismatch(index, format!("a PaymentCreated that cannot be replayed: {e}")),
            },
            "MemberAdded" | "RoleUpdated" | "MemberRemoved" => match serde_json::from_str::<AccountRef>(data) {
                Ok(member) => {
                    self.accounts.insert(member.did);
                }
                Err(e) => self.entry_mismatch(index, format!("a {event_type} without a DID: {e}")),
            },
            "GovernanceProposalClosed" => match serde_json::from_str::<ClosedData>(data) {
                Ok(closed) => self.closed.push(Closed {
                    index,
                    proposal_id: closed.proposal_id,
                    outcome: closed.outcome,
                    tally: closed.tally,
                    receipt: closed.receipt.filter(|r| !r.is_null()),
                }),
                Err(e) => self.entry_mismatch(index, format!("a GovernanceProposalClosed that cannot be read: {e}")),
            },
            "SigningKeyRotated" => match serde_json::from_str::<serde_json::Value>(data) {
                Ok(value) => strings(&value, &mut self.announced),
                Err(e) => self.entry_mismatch(index, format!("a SigningKeyRotated that cannot be read: {e}")),
            },
            _ => {}
        }
    }

    fn opened(&mut self, seq: u64, event_type: &str, data: &str) {
        if event_type != LOG_OPENED {
            return self.entry_mismatch(0, format!("entry 0 is {event_type}, not {LOG_OPENED}"));
        }
        let opened: Opened = match serde_json::from_str(data) {
            Ok(opened) => opened,
            Err(e) => return self.entry_mismatch(0, format!("a {LOG_OPENED} that cannot be read: {e}")),
        };
        if opened.after_seq != seq {
            self.entry_mismatch(0, format!("seq {seq}, but its data says after_seq {}", opened.after_seq));
        }
        self.after_seq = Some(opened.after_seq);
        self.accounts.extend(opened.members.into_iter().map(|m| m.did));
        self.opened_key = opened.receipt_key.map(|k| k.public_key);
        let mut sums: BTreeMap<String, i128> = BTreeMap::new();
        for balance in opened.balances {
            *sums.entry(balance.currency.clone()).or_default() += i128::from(balance.balance.micros());
            if !self.add(&balance.account, &balance.currency, balance.balance) {
                self.entry_mismatch(0, "a snapshot balance out of range");
            }
        }
        for (currency, sum) in sums.into_iter().filter(|(_, sum)| *sum != 0) {
            let sum =
                i64::try_from(sum).map(Amount::from_micros).map(|a| a.to_string()).unwrap_or_else(|_| "huge".into());
            self.entry_mismatch(0, format!("the snapshot's balances in {currency} sum to {sum}, not 0"));
        }
    }

    fn payment(&mut self, index: u64, p: &Payment) {
        if p.amount <= Amount::ZERO {
            self.entry_mismatch(index, format!("a payment of {}", p.amount));
        }
        if p.from == p.to {
            self.entry_mismatch(index, format!("a payment from {} to itself", p.from));
        }
        match p.kind.as_str() {
            "payment" => self.transfer(index, &p.from, &p.to, p.amount, &p.currency),
            "conversion" => {
                let (Some(to_currency), Some(net)) = (&p.to_currency, p.net_target_amount) else {
                    return self.entry_mismatch(index, "a conversion without to_currency or net_target_amount");
                };
                if let (Some(rate), Some(gross)) = (p.rate, p.gross_target_amount) {
                    let expected = i128::from(p.amount.micros()) * i128::from(rate.micros()) / 1_000_000;
                    if i128::from(gross.micros()) != expected {
                        self.entry_mismatch(index, format!("{} at rate {rate} is not a gross of {gross}", p.amount));
                    }
                    if let Some(fee) = p.fee_amount
                        && gross.checked_sub(fee) != Some(net)
                    {
                        self.entry_mismatch(index, format!("gross {gross} less fee {fee} is not the net {net}"));
                    }
                }
                let exchange = self.exchange.clone();
                self.transfer(index, &p.from, &exchange, p.amount, &p.currency);
                self.transfer(index, &exchange, &p.to, net, to_currency);
            }
            other => self.entry_mismatch(index, format!("a transaction of unknown kind {other:?}")),
        }
    }
}
