//! The typed vocabulary of a proposal: its status, its payload (what it changes when approved)
//! and the effect recorded at close. The store keeps them as text and JSON and converts at its
//! boundary with [`ProposalStatus::parse`] and [`ProposalPayload::from_json`], so a misspelt state
//! or an unvalidated payload cannot reach the rules.

use gateway_core::{Amount, Currency, Did, Error, Role};
use serde_json::{Map, Value};

use crate::coops::SettingsPatch;

/// The one governance domain every coop has: its members are always the coop's members, and it
/// is the only domain in which proposals with effects on the coop may be made.
pub const COOP_DOMAIN: &str = "coop";

/// The longest text payload's `content`, in characters: a proposal is read by every member and
/// becomes an entry of the coop's log, so its text is bounded like its title.
pub const MAX_TEXT_CHARS: usize = 20_000;

/// The longest proposal `description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 20_000;

/// Where a proposal is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProposalStatus {
    /// Created, not yet open for votes.
    Draft,
    /// Open for votes until `closes_at`.
    Open,
    /// Tallied; the outcome is final.
    Closed,
}

impl ProposalStatus {
    /// The wire and storage spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ProposalStatus::Draft => "draft",
            ProposalStatus::Open => "open",
            ProposalStatus::Closed => "closed",
        }
    }

    /// The inverse of [`ProposalStatus::as_str`].
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "draft" => Some(ProposalStatus::Draft),
            "open" => Some(ProposalStatus::Open),
            "closed" => Some(ProposalStatus::Closed),
            _ => None,
        }
    }
}

/// Adding or removing a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipAction {
    /// Add the DID (with a role).
    Add,
    /// Remove the DID.
    Remove,
}

/// What an approved proposal changes.
#[derive(Debug, Clone, PartialEq)]
pub enum ProposalPayload {
    /// Nothing: a decision in words. `kind` is the SDK's label, kept as given.
    Text {
        /// The text.
        content: String,
        /// The SDK's label, if any.
        kind: Option<String>,
    },
    /// Adds or removes a member of the coop.
    Membership {
        /// Add or remove.
        action: MembershipAction,
        /// Whom.
        did: Did,
        /// The role of an added member (`member` when absent).
        role: Option<Role>,
    },
    /// Changes the coop's settings, with the rules of `PUT /v1/coops/{id}/settings`.
    Settings(SettingsPatch),
    /// Pays `amount` from the coop's treasury to a member.
    Budget {
        /// The recipient.
        to: Did,
        /// How much.
        amount: Amount,
        /// In which currency (the coop's default when absent).
        currency: Option<Currency>,
    },
    /// Moves the coop to its next receipt-signing key.
    SigningKeyRotation,
}

/// The `kind`s of the SDK that name an effect on the coop.
const EFFECT_KINDS: [&str; 4] = ["membership", "settings", "budget", "signing_key_rotation"];

impl ProposalPayload {
    /// Parses and validates the tagged form `{"type": …, …}` (400 naming `payload` otherwise).
    /// Used on creation and when the store reads a proposal back.
    pub fn from_json(payload: &Value) -> Result<Self, Error> {
        let bad = |m: String| Error::bad_request_field("payload", m);
        let text = |key: &str| payload.get(key).and_then(Value::as_str);
        let did = |key: &str, what: &str| -> Result<Did, Error> {
            let raw = text(key).ok_or_else(|| bad(format!("a {what} payload needs \"{key}\"")))?;
            Did::parse(raw).map_err(|e| bad(format!("invalid DID in \"{key}\": {e}")))
        };
        let kind = text("type").ok_or_else(|| bad("payload needs a \"type\"".into()))?;
        Ok(match kind {
            "text" => {
                let content = text("content").ok_or_else(|| bad("a text payload needs \"content\"".into()))?;
                if content.chars().count() > MAX_TEXT_CHARS {
                    return Err(Error::bad_request_field(
                        "payload.content",
                        format!("a text payload's content is at most {MAX_TEXT_CHARS} characters"),
                    ));
                }
                let kind = text("kind");
                if kind.is_some_and(|k| k.chars().count() > 64) {
                    return Err(Error::bad_request_field(
                        "payload.kind",
                        "a text payload's kind is at most 64 characters",
                    ));
                }
                ProposalPayload::Text { content: content.to_owned(), kind: kind.map(str::to_owned) }
            }
            "membership" => {
                let action = match text("action") {
                    Some("add") => MembershipAction::Add,
                    Some("remove") => MembershipAction::Remove,
                    _ => return Err(bad("a membership payload needs \"action\": \"add\" or \"remove\"".into())),
                };
                let role = match payload.get("role") {
                    None | Some(Value::Null) => None,
                    Some(value) => Some(
                        value
                            .as_str()
                            .and_then(Role::parse)
                            .ok_or_else(|| bad("role must be \"admin\" or \"member\"".into()))?,
                    ),
                };
                ProposalPayload::Membership { action, did: did("did", "membership")?, role }
            }
            "settings" => {
                let settings = payload
                    .get("settings")
                    .and_then(Value::as_object)
                    .ok_or_else(|| bad("a settings payload needs \"settings\"".into()))?;
                if let Some(unknown) = settings.keys().find(|k| !SettingsPatch::KEYS.contains(&k.as_str())) {
                    return Err(bad(format!("unknown setting '{unknown}'")));
                }
                let patch = SettingsPatch::from_wire(settings).map_err(|err| match err {
                    // Each field named where it stands in the request: `payload.quorum_percent`.
                    Error::BadRequest { message, fields } if !fields.is_empty() => Error::BadRequest {
                        message: format!("settings: {message}"),
                        fields: fields
                            .into_iter()
                            .map(|(field, messages)| (format!("payload.{field}"), messages))
                            .collect(),
                    },
                    Error::BadRequest { message, .. } => bad(format!("settings: {message}")),
                    other => other,
                })?;
                if patch.is_empty() {
                    return Err(bad("a settings payload changes at least one setting".into()));
                }
                ProposalPayload::Settings(patch)
            }
            "budget" => {
                let amount = payload.get("amount").ok_or_else(|| bad("a budget payload needs \"amount\"".into()))?;
                let amount = Amount::parse_payment(&amount.to_string()).map_err(|e| bad(format!("amount {e}")))?;
                let currency = match text("currency") {
                    Some(c) => Some(Currency::parse(c).map_err(|e| bad(e.to_string()))?),
                    None => None,
                };
                ProposalPayload::Budget { to: did("to", "budget")?, amount, currency }
            }
            "signing_key_rotation" => ProposalPayload::SigningKeyRotation,
            other => return Err(bad(format!("unknown payload type '{other}'"))),
        })
    }

    /// The tagged form, as stored and as answered.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        map.insert("type".into(), Value::from(self.type_name()));
        match self {
            ProposalPayload::Text { content, kind } => {
                map.insert("content".into(), Value::from(content.as_str()));
                if let Some(kind) = kind {
                    map.insert("kind".into(), Value::from(kind.as_str()));
                }
            }
            ProposalPayload::Membership { action, did, role } => {
                let action = match action {
                    MembershipAction::Add => "add",
                    MembershipAction::Remove => "remove",
                };
                map.insert("action".into(), Value::from(action));
                map.insert("did".into(), Value::from(did.as_str()));
                if let Some(role) = role {
                    map.insert("role".into(), Value::from(role.as_str()));
                }
            }
            ProposalPayload::Settings(patch) => {
                map.insert("settings".into(), Value::Object(patch.to_wire()));
            }
            ProposalPayload::Budget { to, amount, currency } => {
                map.insert("to".into(), Value::from(to.as_str()));
                map.insert("amount".into(), serde_json::to_value(amount).unwrap_or(Value::Null));
                if let Some(currency) = currency {
                    map.insert("currency".into(), Value::from(currency.as_str()));
                }
            }
            ProposalPayload::SigningKeyRotation => {}
        }
        Value::Object(map)
    }

    /// The payload's `type`.
    pub const fn type_name(&self) -> &'static str {
        match self {
            ProposalPayload::Text { .. } => "text",
            ProposalPayload::Membership { .. } => "membership",
            ProposalPayload::Settings(_) => "settings",
            ProposalPayload::Budget { .. } => "budget",
            ProposalPayload::SigningKeyRotation => "signing_key_rotation",
        }
    }

    /// Whether the proposal acts on the coop when approved: a payload other than text, or a
    /// text labelled with an effect's `kind`. Such proposals belong in the [`COOP_DOMAIN`].
    pub fn acts_on_coop(&self) -> bool {
        match self {
            ProposalPayload::Text { kind, .. } => kind.as_deref().is_some_and(|k| EFFECT_KINDS.contains(&k)),
            _ => true,
        }
    }

    /// Whether closing an approved proposal has something to apply.
    pub const fn has_effect(&self) -> bool {
        !matches!(self, ProposalPayload::Text { .. })
    }
}

/// What closing an approved proposal did to the coop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The change was made.
    pub applied: bool,
    /// Why it was not.
    pub error: Option<String>,
}

impl Effect {
    /// Applied.
    pub const fn applied() -> Self {
        Effect { applied: true, error: None }
    }

    /// Not applied, for this reason.
    pub fn failed(error: impl Into<String>) -> Self {
        Effect { applied: false, error: Some(error.into()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const DID: &str = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";

    #[test]
    fn every_payload_round_trips_through_its_stored_form() {
        for payload in [
            json!({"type": "text", "content": "hello"}),
            json!({"type": "text", "content": "x", "kind": "note"}),
            json!({"type": "membership", "action": "add", "did": DID, "role": "admin"}),
            json!({"type": "membership", "action": "remove", "did": DID}),
            json!({"type": "settings", "settings": {"credit_limit": -50, "quorum_percent": 60}}),
            json!({"type": "budget", "to": DID, "amount": 12.5, "currency": "hours"}),
            json!({"type": "signing_key_rotation"}),
        ] {
            let parsed = ProposalPayload::from_json(&payload).unwrap();
            assert_eq!(parsed.to_json(), payload);
            assert_eq!(ProposalPayload::from_json(&parsed.to_json()).unwrap(), parsed);
        }
    }

    #[test]
    fn settings_payloads_follow_the_settings_route_rules() {
        // A setting's error names it where it stands in the request (`payload.<setting>`);
        // an unknown or missing setting names the payload.
        for (settings, field, named) in [
            (json!({"credit_limit": 5}), "credit_limit", "payload.credit_limit"),
            (json!({"quorum_percent": 101}), "quorum_percent", "payload.quorum_percent"),
            (json!({"high_value_threshold": 0}), "high_value_threshold", "payload.high_value_threshold"),
            (json!({"default_currency": "not a currency!"}), "default_currency", "payload.default_currency"),
            (json!({"conversion_fee_percent": 101}), "conversion_fee_percent", "payload.conversion_fee_percent"),
            (json!({"nonsense": 1}), "nonsense", "payload"),
            (json!({}), "at least one", "payload"),
        ] {
            let err = ProposalPayload::from_json(&json!({"type": "settings", "settings": settings})).unwrap_err();
            let Error::BadRequest { message, fields } = err else { panic!("{settings}: not a 400") };
            assert_eq!(fields.keys().collect::<Vec<_>>(), [named], "{settings}: {fields:?}");
            assert!(message.contains(field), "{settings}: {message}");
        }
    }

    #[test]
    fn effect_kinds_act_on_the_coop() {
        let text = |kind: Option<&str>| ProposalPayload::Text { content: String::new(), kind: kind.map(Into::into) };
        assert!(!text(None).acts_on_coop());
        assert!(!text(Some("note")).acts_on_coop());
        assert!(text(Some("budget")).acts_on_coop());
        assert!(ProposalPayload::SigningKeyRotation.acts_on_coop());
        assert!(ProposalPayload::from_json(&json!({"type": "bogus"})).is_err());
        assert!(ProposalStatus::parse("Open").is_none());
        assert_eq!(ProposalStatus::parse("open"), Some(ProposalStatus::Open));
    }
}
