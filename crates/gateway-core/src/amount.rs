//! Fixed-point money: amounts and balances as signed integers of micro-units (10⁻⁶).
//!
//! The gateway never does floating-point arithmetic on money. Amounts arrive as JSON numbers and
//! are parsed from their exact decimal text (never through `f64`), and are written back as exact
//! decimal text. This module does not know about currencies or ledgers.

use std::fmt;

use serde::de::Error as _;
use serde_json::value::RawValue;

/// Micro-units per unit: amounts carry at most six fractional digits.
pub const MICROS_PER_UNIT: i64 = 1_000_000;

/// The largest amount one payment may carry, in units (`1e12`).
pub const MAX_PAYMENT_UNITS: i64 = 1_000_000_000_000;

/// A signed quantity of money in micro-units. Used for payment amounts (always positive, see
/// [`Amount::parse_payment`]), balances and credit limits (which may be negative).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Amount(i64);

/// Why a decimal text is not an acceptable amount.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// The text is not a JSON-style decimal number.
    #[error("must be a decimal number")]
    NotANumber,
    /// More than six digits after the decimal point.
    #[error("must have at most 6 fractional digits")]
    TooPrecise,
    /// Outside the representable or allowed range.
    #[error("is out of range")]
    OutOfRange,
    /// Zero or negative where a positive payment amount is required.
    #[error("must be greater than 0")]
    NotPositive,
    /// Above the per-payment maximum of 1e12.
    #[error("must be at most 1e12")]
    TooLarge,
}

impl Amount {
    /// Zero.
    pub const ZERO: Amount = Amount(0);

    /// An amount of `micros` micro-units.
    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// A whole number of units. Panics on overflow, so only for constants and tests.
    pub const fn from_units(units: i64) -> Self {
        match units.checked_mul(MICROS_PER_UNIT) {
            Some(m) => Self(m),
            None => panic!("amount overflow"),
        }
    }

    /// The amount in micro-units.
    pub const fn micros(self) -> i64 {
        self.0
    }

    /// Sum, or `None` on overflow.
    pub fn checked_add(self, other: Amount) -> Option<Amount> {
        self.0.checked_add(other.0).map(Amount)
    }

    /// Difference, or `None` on overflow.
    pub fn checked_sub(self, other: Amount) -> Option<Amount> {
        self.0.checked_sub(other.0).map(Amount)
    }

    /// Negation, or `None` for the one value without a negative.
    pub fn checked_neg(self) -> Option<Amount> {
        self.0.checked_neg().map(Amount)
    }

    /// Whether the amount is below zero.
    pub const fn is_negative(self) -> bool {
        self.0 < 0
    }

    /// Parses a payment amount: a decimal with at most six fractional digits, `0 < x <= 1e12`.
    pub fn parse_payment(text: &str) -> Result<Self, AmountError> {
        Self::parse_decimal(text)?.check_payment()
    }

    /// Checks the payment rule on an already parsed amount: `0 < x <= 1e12`.
    pub fn check_payment(self) -> Result<Self, AmountError> {
        if self.0 <= 0 {
            return Err(AmountError::NotPositive);
        }
        if self.0 > MAX_PAYMENT_UNITS * MICROS_PER_UNIT {
            return Err(AmountError::TooLarge);
        }
        Ok(self)
    }

    /// Parses any decimal in JSON number syntax (sign, digits, fraction, exponent) exactly.
    pub fn parse_decimal(text: &str) -> Result<Self, AmountError> {
        let bytes = text.trim().as_bytes();
        let (negative, rest) = match bytes.first() {
            Some(b'-') => (true, &bytes[1..]),
            _ => (false, bytes),
        };
        let int_len = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        if int_len == 0 {
            return Err(AmountError::NotANumber);
        }
        let (int_digits, rest) = rest.split_at(int_len);
        let (frac_digits, rest) = match rest.first() {
            Some(b'.') => {
                let n = rest[1..].iter().take_while(|b| b.is_ascii_digit()).count();
                if n == 0 {
                    return Err(AmountError::NotANumber);
                }
                (&rest[1..=n], &rest[n + 1..])
            }
            _ => (&rest[..0], rest),
        };
        let exponent: i64 = match rest.first() {
            Some(b'e' | b'E') => {
                let exp = std::str::from_utf8(&rest[1..]).map_err(|_| AmountError::NotANumber)?;
                let exp = exp.strip_prefix('+').unwrap_or(exp);
                if exp.is_empty() || !exp.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
                    return Err(AmountError::NotANumber);
                }
                exp.parse().map_err(|_| AmountError::OutOfRange)?
            }
            None => 0,
            Some(_) => return Err(AmountError::NotANumber),
        };
        // value = digits × 10^(exponent - frac_len); we want value × 10^6 as an integer.
        let mut digits: Vec<u8> = int_digits.iter().chain(frac_digits).map(|b| b - b'0').collect();
        let scale = exponent
            .checked_sub(frac_digits.len() as i64)
            .and_then(|s| s.checked_add(6))
            .ok_or(AmountError::OutOfRange)?;
        if scale < 0 {
            // Dropping digits: only trailing zeros may go.
            let drop = usize::try_from(-scale).map_err(|_| AmountError::OutOfRange)?;
            if drop > digits.len() {
                if digits.iter().any(|&d| d != 0) {
                    return Err(AmountError::TooPrecise);
                }
                digits.clear();
            } else {
                let kept = digits.len() - drop;
                if digits[kept..].iter().any(|&d| d != 0) {
                    return Err(AmountError::TooPrecise);
                }
                digits.truncate(kept);
            }
        }
        let mut value: i64 = 0;
        for d in digits {
            value = value.checked_mul(10).and_then(|v| v.checked_add(i64::from(d))).ok_or(AmountError::OutOfRange)?;
        }
        if scale > 0 && value != 0 {
            let exponent = u32::try_from(scale).map_err(|_| AmountError::OutOfRange)?;
            value = 10i64
                .checked_pow(exponent)
                .and_then(|factor| value.checked_mul(factor))
                .ok_or(AmountError::OutOfRange)?;
        }
        Ok(Self(if negative { -value } else { value }))
    }
}

impl fmt::Display for Amount {
    /// Exact decimal text: integer part, and the fraction without trailing zeros.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let abs = self.0.unsigned_abs();
        let units = abs / MICROS_PER_UNIT as u64;
        let frac = abs % MICROS_PER_UNIT as u64;
        if frac == 0 {
            write!(f, "{sign}{units}")
        } else {
            let frac = format!("{frac:06}");
            write!(f, "{sign}{units}.{}", frac.trim_end_matches('0'))
        }
    }
}

impl fmt::Debug for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Amount({self})")
    }
}

impl serde::Serialize for Amount {
    /// Written as a JSON number with its exact decimal text.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.0 % MICROS_PER_UNIT == 0 {
            // A whole number: the same text as an integer, written without building a string.
            return serializer.serialize_i64(self.0 / MICROS_PER_UNIT);
        }
        let raw = RawValue::from_string(self.to_string()).map_err(serde::ser::Error::custom)?;
        raw.serialize(serializer)
    }
}

impl<'de> serde::Deserialize<'de> for Amount {
    /// Read from the exact text of a JSON number (any sign; range and positivity are the
    /// caller's rule, see [`Amount::parse_payment`]). Works with `serde_json` deserializers only,
    /// which is the point: the number's text never passes through `f64`.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = <Box<RawValue>>::deserialize(deserializer)?;
        let text = raw.get();
        if text.starts_with('"') || !text.bytes().next().is_some_and(|b| b == b'-' || b.is_ascii_digit()) {
            return Err(D::Error::custom("must be a JSON number"));
        }
        Amount::parse_decimal(text).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_exact_decimals() {
        assert_eq!(Amount::parse_decimal("1").unwrap().micros(), 1_000_000);
        assert_eq!(Amount::parse_decimal("0.000001").unwrap().micros(), 1);
        assert_eq!(Amount::parse_decimal("12.5").unwrap().micros(), 12_500_000);
        assert_eq!(Amount::parse_decimal("1.5e2").unwrap().micros(), 150_000_000);
        assert_eq!(Amount::parse_decimal("1E-6").unwrap().micros(), 1);
        assert_eq!(Amount::parse_decimal("-3.25").unwrap().micros(), -3_250_000);
        assert_eq!(Amount::parse_decimal("1.100000000").unwrap().micros(), 1_100_000);
        assert_eq!(Amount::parse_decimal("999999999999.999999").unwrap().micros(), 999_999_999_999_999_999);
    }

    #[test]
    fn rejects_what_the_contract_rejects() {
        assert_eq!(Amount::parse_payment("0"), Err(AmountError::NotPositive));
        assert_eq!(Amount::parse_payment("-1"), Err(AmountError::NotPositive));
        assert_eq!(Amount::parse_payment("0.0000001"), Err(AmountError::TooPrecise));
        assert_eq!(Amount::parse_payment("1e-7"), Err(AmountError::TooPrecise));
        assert_eq!(Amount::parse_payment("1000000000000.000001"), Err(AmountError::TooLarge));
        assert!(Amount::parse_payment("1e12").is_ok());
        assert_eq!(Amount::parse_payment("1e400"), Err(AmountError::OutOfRange));
        assert_eq!(Amount::parse_payment("abc"), Err(AmountError::NotANumber));
        assert_eq!(Amount::parse_payment("1."), Err(AmountError::NotANumber));
        assert_eq!(Amount::parse_payment(".5"), Err(AmountError::NotANumber));
        assert_eq!(Amount::parse_payment("NaN"), Err(AmountError::NotANumber));
    }

    #[test]
    fn json_round_trip_is_exact() {
        let a: Amount = serde_json::from_str("123456789012.123456").unwrap();
        assert_eq!(a.micros(), 123_456_789_012_123_456);
        assert_eq!(serde_json::to_string(&a).unwrap(), "123456789012.123456");
        assert!(serde_json::from_str::<Amount>("\"5\"").is_err());
        assert!(serde_json::from_str::<Amount>("true").is_err());
    }

    proptest! {
        #[test]
        fn display_then_parse_is_identity(micros in any::<i64>().prop_filter("neg", |m| *m != i64::MIN)) {
            let a = Amount::from_micros(micros);
            prop_assert_eq!(Amount::parse_decimal(&a.to_string()).unwrap(), a);
        }

        /// JSON carries the exact decimal text, whole numbers (written as integers) included.
        #[test]
        fn json_is_the_display_text(micros in any::<i64>(), units in -1_000_000_000_000i64..1_000_000_000_000) {
            for a in [Amount::from_micros(micros), Amount::from_micros(units * MICROS_PER_UNIT)] {
                prop_assert_eq!(serde_json::to_string(&a).unwrap(), a.to_string());
                prop_assert_eq!(serde_json::to_value(a).unwrap(), serde_json::from_str::<serde_json::Value>(&a.to_string()).unwrap());
            }
        }
    }
}
