//! What a log entry is: the bytes members, auditors and the WebSocket stream agree on.
//!
//! Entry `i ≥ 1` is the UTF-8 JSON text `{"seq":S,"event":E}`, where `E` is the event object
//! exactly as the WebSocket `Event` frame carries it (`type`, `coop_id`, `timestamp`, `data`, in
//! that order; [`EventObject`] writes both). Entry 0 has the same shape with the `LogOpened`
//! event and `seq` = the event it follows. An entry over 65,535 bytes (an entry bundle's limit)
//! has the largest fields of its `data` replaced, largest first, by `{"sha256":"<hex>","bytes":n}`
//! of their exact JSON text, until it fits.

use gateway_core::{Amount, Currency, Error, JsonText};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::ports::{CoopRecord, EventRecord, MemberRecord, SigningKeyRecord};

/// The largest entry an entry bundle holds.
pub const MAX_ENTRY_BYTES: usize = 65_535;

/// The type of entry 0.
pub const LOG_OPENED: &str = "LogOpened";

/// An event object as the WebSocket stream and the log both write it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct EventObject<'a> {
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: &'a str,
    /// The coop.
    pub coop_id: &'a str,
    /// Unix seconds.
    pub timestamp: u64,
    /// The event's data, as stored.
    pub data: &'a JsonText,
}

impl<'a> EventObject<'a> {
    /// The event object of an outbox record.
    pub fn of(record: &'a EventRecord) -> Self {
        Self {
            event_type: &record.event_type,
            coop_id: record.coop_id.as_str(),
            timestamp: record.timestamp,
            data: &record.data,
        }
    }
}

#[derive(Serialize)]
struct Entry<'a> {
    seq: u64,
    event: EventObject<'a>,
}

/// The log entry of an event (or of `LogOpened`, with `seq` = the event it follows).
pub fn entry_text(seq: u64, event: EventObject<'_>) -> Result<String, Error> {
    let text = serde_json::to_string(&Entry { seq, event }).map_err(|e| Error::Internal(format!("log entry: {e}")))?;
    if text.len() <= MAX_ENTRY_BYTES {
        return Ok(text);
    }
    shrink(seq, &event)
}

/// The entry with its `data`'s largest fields replaced by their digests until it fits.
fn shrink(seq: u64, event: &EventObject<'_>) -> Result<String, Error> {
    let internal = |e: serde_json::Error| Error::Internal(format!("log entry: {e}"));
    let render = |data: &JsonText| serde_json::to_string(&Entry { seq, event: EventObject { data, ..*event } });
    let Ok(OrderedFields(fields)) = serde_json::from_str::<OrderedFields>(event.data.as_str()) else {
        // Not an object: the whole data is the field.
        let digest = JsonText::of(&digest_of(event.data.as_str())).map_err(internal)?;
        return render(&digest).map_err(internal);
    };
    let mut fields: Vec<(String, String)> = fields.into_iter().map(|(k, v)| (k, v.get().to_owned())).collect();
    // Largest first; ties by name, so that the result is deterministic.
    let mut order: Vec<(usize, String)> = fields.iter().map(|(k, v)| (v.len(), k.clone())).collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    for (_, key) in order {
        if let Some(field) = fields.iter_mut().find(|(k, _)| *k == key) {
            field.1 = serde_json::to_string(&digest_of(&field.1)).map_err(internal)?;
        }
        let text = render(&object_text(&fields)?).map_err(internal)?;
        if text.len() <= MAX_ENTRY_BYTES {
            return Ok(text);
        }
    }
    Err(Error::Internal(format!("the log entry of event {seq} does not fit in {MAX_ENTRY_BYTES} bytes")))
}

/// A JSON object's fields with their exact text, in the object's order.
struct OrderedFields(Vec<(String, Box<serde_json::value::RawValue>)>);

impl<'de> serde::Deserialize<'de> for OrderedFields {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = OrderedFields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<OrderedFields, A::Error> {
                let mut fields = Vec::new();
                while let Some(field) = map.next_entry()? {
                    fields.push(field);
                }
                Ok(OrderedFields(fields))
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

fn object_text(fields: &[(String, String)]) -> Result<JsonText, Error> {
    let mut text = String::from("{");
    for (i, (key, value)) in fields.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&serde_json::to_string(key).map_err(|e| Error::Internal(e.to_string()))?);
        text.push(':');
        text.push_str(value);
    }
    text.push('}');
    JsonText::parse(text).map_err(|e| Error::Internal(format!("log entry: {e}")))
}

/// What replaces a field too large for an entry.
#[derive(Debug, Serialize)]
pub struct FieldDigest {
    /// SHA-256 of the field's JSON text as the event carries it, lowercase hex.
    pub sha256: String,
    /// Its length in bytes.
    pub bytes: usize,
}

fn digest_of(text: &str) -> FieldDigest {
    FieldDigest { sha256: hex::encode(Sha256::digest(text.as_bytes())), bytes: text.len() }
}

/// A member in `LogOpened`.
#[derive(Debug, Serialize)]
struct SnapshotMember<'a> {
    did: &'a str,
    role: &'a str,
    credit_limit: Option<Amount>,
}

/// A balance in `LogOpened`.
#[derive(Debug, Serialize)]
struct SnapshotBalance<'a> {
    account: &'a str,
    currency: &'a str,
    balance: Amount,
}

/// The coop's receipt verifier key in `LogOpened`.
#[derive(Debug, Serialize)]
struct SnapshotKey<'a> {
    public_key: &'a str,
    generation: Option<u32>,
}

#[derive(Debug, Serialize)]
struct Opened<'a> {
    after_seq: u64,
    members: Vec<SnapshotMember<'a>>,
    balances: Vec<SnapshotBalance<'a>>,
    settings: crate::events::SettingsData<'a>,
    receipt_key: Option<SnapshotKey<'a>>,
}

/// The state of a coop when its log began, for `LogOpened`.
#[derive(Debug)]
pub struct Snapshot<'a> {
    /// The coop (its settings).
    pub coop: &'a CoopRecord,
    /// The event it follows.
    pub after_seq: u64,
    /// Its members.
    pub members: &'a [MemberRecord],
    /// Its non-zero balances.
    pub balances: &'a [(String, Currency, Amount)],
    /// Its receipt key then, if one was in use.
    pub receipt_key: Option<&'a SigningKeyRecord>,
}

/// Entry 0 of a coop's log, and its data in full.
#[derive(Debug)]
pub struct OpenedEntry {
    /// The entry.
    pub entry: String,
    /// The `LogOpened` data whole, when the entry holds digests of some of its fields instead
    /// (a coop with hundreds of members or balances when its log began): the gateway keeps it
    /// and serves it (`GET /log/opened`), and an auditor checks it against the digests.
    pub data: Option<String>,
}

/// Entry 0 of a coop's log.
pub fn opened_entry(snapshot: &Snapshot<'_>, timestamp: u64) -> Result<OpenedEntry, Error> {
    let data = Opened {
        after_seq: snapshot.after_seq,
        members: snapshot
            .members
            .iter()
            .map(|m| SnapshotMember { did: m.did.as_str(), role: m.role.as_str(), credit_limit: m.credit_limit })
            .collect(),
        balances: snapshot
            .balances
            .iter()
            .map(|(account, currency, balance)| SnapshotBalance {
                account,
                currency: currency.as_str(),
                balance: *balance,
            })
            .collect(),
        settings: crate::events::SettingsData::from(&snapshot.coop.settings),
        receipt_key: snapshot
            .receipt_key
            .map(|key| SnapshotKey { public_key: &key.public_key, generation: key.generation }),
    };
    let data = JsonText::of(&data).map_err(|e| Error::Internal(format!("LogOpened: {e}")))?;
    let event = EventObject { event_type: LOG_OPENED, coop_id: snapshot.coop.id.as_str(), timestamp, data: &data };
    let whole = serde_json::to_string(&Entry { seq: snapshot.after_seq, event })
        .map_err(|e| Error::Internal(format!("log entry: {e}")))?;
    if whole.len() <= MAX_ENTRY_BYTES {
        return Ok(OpenedEntry { entry: whole, data: None });
    }
    Ok(OpenedEntry { entry: shrink(snapshot.after_seq, &event)?, data: Some(data.as_str().to_owned()) })
}

#[cfg(test)]
mod tests {
    use gateway_core::CoopId;

    use super::*;

    fn record(data: &str) -> EventRecord {
        EventRecord {
            coop_id: CoopId::parse("c1").unwrap(),
            seq: 7,
            event_type: "PaymentCreated".into(),
            timestamp: 1_700_000_000,
            data: JsonText::parse(data.to_owned()).unwrap(),
        }
    }

    #[test]
    fn an_entry_is_the_seq_and_the_event_object() {
        let event = record(r#"{"id":"t1","amount":1.5}"#);
        assert_eq!(
            entry_text(7, EventObject::of(&event)).unwrap(),
            r#"{"seq":7,"event":{"type":"PaymentCreated","coop_id":"c1","timestamp":1700000000,"data":{"id":"t1","amount":1.5}}}"#
        );
    }

    #[test]
    fn an_oversized_field_is_replaced_by_its_digest_and_the_rest_kept() {
        let memo = "x".repeat(70_000);
        let event = record(&format!(r#"{{"id":"t1","memo":"{memo}","amount":2}}"#));
        let text = entry_text(7, EventObject::of(&event)).unwrap();
        assert!(text.len() <= MAX_ENTRY_BYTES);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let data = &value["event"]["data"];
        assert_eq!(data["id"], "t1");
        assert_eq!(data["amount"], 2);
        let quoted = format!("\"{memo}\"");
        assert_eq!(data["memo"]["bytes"], quoted.len());
        assert_eq!(data["memo"]["sha256"], hex::encode(Sha256::digest(quoted.as_bytes())));
        // Key order is the event's.
        assert!(text.find("\"id\"").unwrap() < text.find("\"memo\"").unwrap());
    }
}
