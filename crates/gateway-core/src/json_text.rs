//! JSON kept as its exact text.
//!
//! Event and notification data carry amounts. Through `serde_json::Value` a number becomes an
//! `f64`, which cannot hold every amount (18 significant digits at the largest payment), so data
//! that is written once and shown many times is kept as the text it was serialised to.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A JSON value as its exact text; equal when the texts are equal.
#[derive(Clone)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// Serialises a value to its text (straight to text, never through `Value`).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// Takes stored text, checking that it is one JSON value.
    pub fn parse(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// The text parsed as a `Value`, to inspect (numbers become `f64`s on the way).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(self.0.get()).unwrap_or(serde_json::Value::Null)
    }

    /// Reads the text as a type (e.g. one field of the data).
    pub fn read<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.0.get())
    }
}

impl Default for JsonText {
    /// `null`.
    fn default() -> Self {
        Self(RawValue::from_string("null".to_owned()).expect("null is JSON"))
    }
}

impl From<serde_json::Value> for JsonText {
    fn from(value: serde_json::Value) -> Self {
        // A `Value`'s text is always one JSON value.
        Self(RawValue::from_string(value.to_string()).expect("a JSON value's text is JSON"))
    }
}

impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for JsonText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <Box<RawValue>>::deserialize(deserializer).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Amount;

    #[test]
    fn the_largest_payment_keeps_every_digit() {
        let amount = Amount::parse_payment("999999999999.999999").unwrap();
        let text = JsonText::of(&("amount", amount)).unwrap();
        assert_eq!(text.as_str(), r#"["amount",999999999999.999999]"#);
        // The same number through `Value` loses digits: the reason this type exists.
        assert_ne!(serde_json::to_value(amount).unwrap().to_string(), "999999999999.999999");
        // Embedded in a larger document (an event frame), verbatim.
        let frame = serde_json::to_string(&("Event", &text)).unwrap();
        assert_eq!(frame, r#"["Event",["amount",999999999999.999999]]"#);
    }

    #[test]
    fn stored_text_must_be_json_and_reads_back() {
        assert!(JsonText::parse("{\"did\":\"x\"}".into()).is_ok());
        assert!(JsonText::parse("{not json".into()).is_err());
        let text = JsonText::parse("{\"did\":\"x\",\"n\":1}".into()).unwrap();
        #[derive(Deserialize)]
        struct Did<'a> {
            did: &'a str,
        }
        assert_eq!(text.read::<Did<'_>>().unwrap().did, "x");
        assert_eq!(text, JsonText::parse("{\"did\":\"x\",\"n\":1}".into()).unwrap());
    }
}
