//! Run-time values of CCL and the operations on them: checked integer arithmetic, finite
//! floating-point arithmetic, exact comparisons between the two, string concatenation under a
//! size cap, and the conversions from inputs and JSON and back to JSON.
//!
//! It deliberately knows nothing of fuel, variables, statements or error locations: every
//! operation returns either a value or a plain message, and the interpreter decides what that
//! costs and where it happened.

use std::cmp::Ordering;
use std::io;
use std::sync::Arc;

use super::MAX_STRING_BYTES;

/// A CCL value.
///
/// Strings and JSON documents sit behind `Arc` so that reading a variable is O(1) whatever its
/// size: fuel charges one unit for a read, and a copy proportional to the length would make that
/// charge dishonest.
#[derive(Debug, Clone)]
pub(super) enum Value {
    /// A whole number. Arithmetic on two of these is checked: overflow is an error, never a wrap.
    Int(i64),
    /// A floating-point number, always finite: operations whose result would be NaN or infinite
    /// fail instead, so no platform-dependent NaN payload can ever reach an output.
    Float(f64),
    /// A UTF-8 string of at most [`MAX_STRING_BYTES`] bytes.
    Str(Arc<str>),
    /// A boolean.
    Bool(bool),
    /// A state variable's initial value that is not a scalar (`null`, an array or an object),
    /// or the `null` a body without `Return` returns. Such a value can be read, assigned to a
    /// state variable and returned, but no operator accepts it.
    Json(Arc<Document>),
}

/// A JSON document kept whole, with the length of its serialisation measured once, so that the
/// size of an output can be known before it is built (see [`Value::output_size`]).
#[derive(Debug)]
pub(super) struct Document {
    json: serde_json::Value,
    size: usize,
}

impl Document {
    fn new(json: serde_json::Value) -> Document {
        let mut counter = ByteCounter(0);
        // Serialising a `Value` cannot fail; if it somehow did, the document counts as
        // unboundedly large, which only ever makes an output fail the size check.
        let size = match serde_json::to_writer(&mut counter, &json) {
            Ok(()) => counter.0,
            Err(_) => usize::MAX,
        };
        Document { json, size }
    }
}

/// An `io::Write` that only counts, to measure a serialisation without allocating it.
struct ByteCounter(usize);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The binary operators, in the order the contract lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
}

impl BinOp {
    /// Every operator, for the parser's name lookup and the tests.
    pub(super) const ALL: [BinOp; 13] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Mod,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::And,
        BinOp::Or,
    ];

    /// The operator's key in the JSON structure, which is also how error messages name it.
    pub(super) fn name(self) -> &'static str {
        match self {
            BinOp::Add => "Add",
            BinOp::Sub => "Sub",
            BinOp::Mul => "Mul",
            BinOp::Div => "Div",
            BinOp::Mod => "Mod",
            BinOp::Eq => "Eq",
            BinOp::Ne => "Ne",
            BinOp::Lt => "Lt",
            BinOp::Le => "Le",
            BinOp::Gt => "Gt",
            BinOp::Ge => "Ge",
            BinOp::And => "And",
            BinOp::Or => "Or",
        }
    }

    /// The operator named `name`, if any.
    pub(super) fn from_name(name: &str) -> Option<BinOp> {
        BinOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl Value {
    /// The value's kind with its article, as error messages print it ("got a string").
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Value::Int(_) | Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Bool(_) => "a boolean",
            Value::Json(document) => match document.json {
                serde_json::Value::Null => "null",
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::Object(_) => "an object",
                // Scalars never end up here (`from_json` maps them to the variants above), but
                // the match must be total.
                serde_json::Value::Bool(_) => "a boolean",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::String(_) => "a string",
            },
        }
    }

    /// Converts a JSON number: an integer that fits in `i64` stays an integer, every other
    /// number (a fraction, an exponent, an integer beyond `i64`) becomes a float.
    pub(super) fn from_number(number: &serde_json::Number) -> Option<Value> {
        if let Some(int) = number.as_i64() {
            return Some(Value::Int(int));
        }
        number.as_f64().filter(|float| float.is_finite()).map(Value::Float)
    }

    /// Converts a JSON value found in `state_vars`. Scalars become the matching variant; `null`,
    /// arrays and objects are kept whole as [`Value::Json`]. Fails only for a string above the
    /// size cap or a number that is not finite, with a message saying which.
    pub(super) fn from_json(json: &serde_json::Value) -> Result<Value, String> {
        match json {
            serde_json::Value::Bool(b) => Ok(Value::Bool(*b)),
            serde_json::Value::Number(n) => {
                Value::from_number(n).ok_or_else(|| format!("the number {n} is not finite"))
            }
            serde_json::Value::String(s) => Value::string(s),
            other => Ok(Value::Json(Arc::new(Document::new(other.clone())))),
        }
    }

    /// A string value, or an error if it is longer than [`MAX_STRING_BYTES`].
    pub(super) fn string(text: &str) -> Result<Value, String> {
        if text.len() > MAX_STRING_BYTES {
            return Err(format!("a string is at most {MAX_STRING_BYTES} bytes; this one has {}", text.len()));
        }
        Ok(Value::Str(Arc::from(text)))
    }

    /// Binds an input string to a parameter: the strings Rust's `str::parse::<i64>` accepts
    /// become integers, otherwise those `str::parse::<f64>` accepts with a finite result become
    /// floats, and everything else stays a string.
    pub(super) fn from_input(text: &str) -> Result<Value, String> {
        if let Ok(int) = text.parse::<i64>() {
            return Ok(Value::Int(int));
        }
        if let Ok(float) = text.parse::<f64>()
            && float.is_finite()
        {
            return Ok(Value::Float(float));
        }
        Value::string(text)
    }

    /// The value as JSON, for the output.
    pub(super) fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(int) => serde_json::Value::from(*int),
            // `from_f64` refuses only NaN and infinities, which a `Float` never holds.
            Value::Float(float) => {
                serde_json::Number::from_f64(*float).map_or(serde_json::Value::Null, serde_json::Value::Number)
            }
            Value::Str(text) => serde_json::Value::String(text.to_string()),
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Json(document) => document.json.clone(),
        }
    }

    /// JSON `null`.
    pub(super) fn null() -> Value {
        Value::Json(Arc::new(Document::new(serde_json::Value::Null)))
    }

    /// An upper bound of the value's size in an output, in bytes, without building it: the
    /// serialised length of a document, a string's length plus its quotes (escapes not
    /// counted), and the longest spelling of a number or boolean. It is O(1), so checking a
    /// whole output costs one step per state variable however often a large value was copied.
    pub(super) fn output_size(&self) -> usize {
        match self {
            // "-9223372036854775808" and "-1.7976931348623157e308" are the longest numbers.
            Value::Int(_) | Value::Float(_) => 24,
            Value::Str(text) => text.len().saturating_add(2),
            Value::Bool(_) => 5,
            Value::Json(document) => document.size,
        }
    }
}

/// A number operand, so that mixed integer/float operations are written once.
#[derive(Debug, Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

fn as_num(value: &Value) -> Option<Num> {
    match value {
        Value::Int(int) => Some(Num::Int(*int)),
        Value::Float(float) => Some(Num::Float(*float)),
        _ => None,
    }
}

/// Applies `Add`, `Sub`, `Mul`, `Div` or `Mod` to two numbers. (`Add` on two strings is
/// [`concat`], which the interpreter calls itself because it charges fuel by length.)
///
/// Two integers use checked `i64` arithmetic: `Div` truncates toward zero and `Mod` takes the
/// sign of the dividend, as Rust's `/` and `%` do. If either operand is a float, the integer is
/// converted to the nearest `f64` and the IEEE 754 operation is used (`Mod` is `fmod`, which is
/// exact); a zero divisor or a result that is not finite is an error.
pub(super) fn arithmetic(op: BinOp, left: &Value, right: &Value) -> Result<Value, String> {
    let (Some(a), Some(b)) = (as_num(left), as_num(right)) else {
        let wanted = if op == BinOp::Add { "two numbers or two strings" } else { "two numbers" };
        return Err(format!("{} needs {wanted}, got {} and {}", op.name(), left.kind(), right.kind()));
    };
    match (a, b) {
        (Num::Int(a), Num::Int(b)) => int_arithmetic(op, a, b).map(Value::Int),
        (a, b) => float_arithmetic(op, to_f64(a), to_f64(b)).map(Value::Float),
    }
}

fn to_f64(num: Num) -> f64 {
    match num {
        // `as` rounds to the nearest representable value, ties to even: the same everywhere.
        Num::Int(int) => int as f64,
        Num::Float(float) => float,
    }
}

fn int_arithmetic(op: BinOp, a: i64, b: i64) -> Result<i64, String> {
    if b == 0 && op == BinOp::Div {
        return Err("division by zero".to_owned());
    }
    if b == 0 && op == BinOp::Mod {
        return Err("modulo by zero".to_owned());
    }
    let result = match op {
        BinOp::Add => a.checked_add(b),
        BinOp::Sub => a.checked_sub(b),
        BinOp::Mul => a.checked_mul(b),
        BinOp::Div => a.checked_div(b),
        BinOp::Mod => a.checked_rem(b),
        _ => return Err(format!("{} is not an arithmetic operator", op.name())),
    };
    result.ok_or_else(|| format!("integer overflow in {} of {a} and {b}", op.name()))
}

fn float_arithmetic(op: BinOp, a: f64, b: f64) -> Result<f64, String> {
    if b == 0.0 && op == BinOp::Div {
        return Err("division by zero".to_owned());
    }
    if b == 0.0 && op == BinOp::Mod {
        return Err("modulo by zero".to_owned());
    }
    let result = match op {
        BinOp::Add => a + b,
        BinOp::Sub => a - b,
        BinOp::Mul => a * b,
        BinOp::Div => a / b,
        BinOp::Mod => a % b,
        _ => return Err(format!("{} is not an arithmetic operator", op.name())),
    };
    if result.is_finite() {
        Ok(result)
    } else {
        Err(format!("{} of {a} and {b} overflows the floating-point range", op.name()))
    }
}

/// Concatenates two strings, failing if the result would exceed [`MAX_STRING_BYTES`].
pub(super) fn concat(left: &str, right: &str) -> Result<Value, String> {
    let len = left.len().saturating_add(right.len());
    if len > MAX_STRING_BYTES {
        return Err(format!("Add would make a string of {len} bytes; a string is at most {MAX_STRING_BYTES}"));
    }
    let mut joined = String::with_capacity(len);
    joined.push_str(left);
    joined.push_str(right);
    Ok(Value::Str(Arc::from(joined)))
}

/// Applies a comparison operator (`Eq`, `Ne`, `Lt`, `Le`, `Gt`, `Ge`).
///
/// Numbers compare by exact mathematical value, also between an integer and a float (no
/// rounding through `f64`, so `9007199254740993` is not equal to `9007199254740992.0`). Strings
/// compare byte-wise, which for UTF-8 is Unicode code-point order. `Eq` and `Ne` also accept two
/// booleans. Any other pair, including two values of different types, is an error rather than
/// `false`: a contract comparing a number with a string almost certainly has a bug, and failing
/// says so.
pub(super) fn compare(op: BinOp, left: &Value, right: &Value) -> Result<bool, String> {
    let equality = matches!(op, BinOp::Eq | BinOp::Ne);
    let ordering = match (left, right) {
        (Value::Str(a), Value::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
        (Value::Bool(a), Value::Bool(b)) if equality => a.cmp(b),
        _ => match (as_num(left), as_num(right)) {
            (Some(a), Some(b)) => compare_numbers(a, b),
            _ => {
                let wanted =
                    if equality { "two numbers, two strings or two booleans" } else { "two numbers or two strings" };
                return Err(format!("{} needs {wanted}, got {} and {}", op.name(), left.kind(), right.kind()));
            }
        },
    };
    Ok(match op {
        BinOp::Eq => ordering == Ordering::Equal,
        BinOp::Ne => ordering != Ordering::Equal,
        BinOp::Lt => ordering == Ordering::Less,
        BinOp::Le => ordering != Ordering::Greater,
        BinOp::Gt => ordering == Ordering::Greater,
        BinOp::Ge => ordering != Ordering::Less,
        _ => return Err(format!("{} is not a comparison", op.name())),
    })
}

fn compare_numbers(a: Num, b: Num) -> Ordering {
    match (a, b) {
        (Num::Int(a), Num::Int(b)) => a.cmp(&b),
        (Num::Int(a), Num::Float(b)) => compare_int_float(a, b),
        (Num::Float(a), Num::Int(b)) => compare_int_float(b, a).reverse(),
        // Both are finite, so `partial_cmp` always answers; -0.0 and 0.0 are equal.
        (Num::Float(a), Num::Float(b)) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Compares an integer with a finite float exactly.
fn compare_int_float(int: i64, float: f64) -> Ordering {
    // 2^63: every finite float at or above it exceeds every i64; every one below -2^63 is
    // smaller than every i64.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    if float >= TWO_POW_63 {
        return Ordering::Less;
    }
    if float < -TWO_POW_63 {
        return Ordering::Greater;
    }
    let whole = float.trunc();
    // In [-2^63, 2^63) and integral, so the conversion is exact.
    let whole_int = whole as i64;
    match int.cmp(&whole_int) {
        Ordering::Equal if float > whole => Ordering::Less,
        Ordering::Equal if float < whole => Ordering::Greater,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(i: i64) -> Value {
        Value::Int(i)
    }

    fn float(f: f64) -> Value {
        Value::Float(f)
    }

    fn text(s: &str) -> Value {
        Value::Str(Arc::from(s))
    }

    #[test]
    fn integer_arithmetic_is_checked_and_truncating() {
        assert!(matches!(arithmetic(BinOp::Add, &int(2), &int(3)), Ok(Value::Int(5))));
        assert!(matches!(arithmetic(BinOp::Sub, &int(2), &int(3)), Ok(Value::Int(-1))));
        assert!(matches!(arithmetic(BinOp::Mul, &int(-4), &int(3)), Ok(Value::Int(-12))));
        assert!(matches!(arithmetic(BinOp::Div, &int(7), &int(2)), Ok(Value::Int(3))));
        assert!(matches!(arithmetic(BinOp::Div, &int(-7), &int(2)), Ok(Value::Int(-3))));
        assert!(matches!(arithmetic(BinOp::Mod, &int(-7), &int(2)), Ok(Value::Int(-1))));
        assert!(matches!(arithmetic(BinOp::Mod, &int(7), &int(-2)), Ok(Value::Int(1))));
    }

    #[test]
    fn integer_overflow_and_zero_divisors_are_errors() {
        let overflow = arithmetic(BinOp::Add, &int(i64::MAX), &int(1)).unwrap_err();
        assert!(overflow.contains("integer overflow"), "{overflow}");
        assert!(arithmetic(BinOp::Sub, &int(i64::MIN), &int(1)).is_err());
        assert!(arithmetic(BinOp::Mul, &int(i64::MAX), &int(2)).is_err());
        assert!(arithmetic(BinOp::Div, &int(i64::MIN), &int(-1)).is_err());
        assert!(arithmetic(BinOp::Mod, &int(i64::MIN), &int(-1)).is_err());
        assert_eq!(arithmetic(BinOp::Div, &int(1), &int(0)).unwrap_err(), "division by zero");
        assert_eq!(arithmetic(BinOp::Mod, &int(1), &int(0)).unwrap_err(), "modulo by zero");
    }

    #[test]
    fn mixed_arithmetic_uses_floats_and_rejects_non_finite_results() {
        assert!(matches!(arithmetic(BinOp::Div, &int(7), &float(2.0)), Ok(Value::Float(f)) if f == 3.5));
        assert!(matches!(arithmetic(BinOp::Mod, &float(7.5), &int(2)), Ok(Value::Float(f)) if f == 1.5));
        assert!(matches!(arithmetic(BinOp::Add, &float(0.1), &float(0.2)), Ok(Value::Float(f)) if f == 0.1 + 0.2));
        assert_eq!(arithmetic(BinOp::Div, &float(1.0), &float(-0.0)).unwrap_err(), "division by zero");
        assert_eq!(arithmetic(BinOp::Mod, &float(1.0), &int(0)).unwrap_err(), "modulo by zero");
        let huge = arithmetic(BinOp::Mul, &float(1e300), &float(1e300)).unwrap_err();
        assert!(huge.contains("overflows"), "{huge}");
    }

    #[test]
    fn arithmetic_on_other_types_is_a_type_error() {
        assert_eq!(
            arithmetic(BinOp::Add, &text("a"), &Value::Bool(true)).unwrap_err(),
            "Add needs two numbers or two strings, got a string and a boolean"
        );
        assert_eq!(
            arithmetic(BinOp::Mul, &text("a"), &int(2)).unwrap_err(),
            "Mul needs two numbers, got a string and a number"
        );
        let null = Value::null();
        assert_eq!(arithmetic(BinOp::Sub, &null, &int(2)).unwrap_err(), "Sub needs two numbers, got null and a number");
    }

    #[test]
    fn concatenation_is_capped() {
        assert!(matches!(concat("ab", "cd"), Ok(Value::Str(s)) if &*s == "abcd"));
        let half = "x".repeat(MAX_STRING_BYTES / 2);
        assert!(concat(&half, &half).is_ok());
        assert!(concat(&half, &format!("{half}y")).is_err());
    }

    #[test]
    fn integer_and_float_compare_exactly() {
        assert_eq!(compare_int_float(2, 2.5), Ordering::Less);
        assert_eq!(compare_int_float(3, 2.5), Ordering::Greater);
        assert_eq!(compare_int_float(-2, -2.5), Ordering::Greater);
        assert_eq!(compare_int_float(-3, -2.5), Ordering::Less);
        assert_eq!(compare_int_float(0, -0.0), Ordering::Equal);
        assert_eq!(compare_int_float(i64::MAX, 9.3e18), Ordering::Less);
        assert_eq!(compare_int_float(i64::MIN, -9.3e18), Ordering::Greater);
        // 2^63 as a float is above i64::MAX, although `i64::MAX as f64` rounds to it.
        assert_eq!(compare_int_float(i64::MAX, 9_223_372_036_854_775_808.0), Ordering::Less);
        assert_eq!(compare_int_float(i64::MIN, -9_223_372_036_854_775_808.0), Ordering::Equal);
        // 2^53 + 1 differs from 2^53 although both round to the same float.
        assert!(!compare(BinOp::Eq, &int(9_007_199_254_740_993), &float(9_007_199_254_740_992.0)).unwrap());
        assert!(compare(BinOp::Eq, &int(3), &float(3.0)).unwrap());
    }

    #[test]
    fn comparisons_cover_strings_and_booleans_and_reject_mixed_types() {
        assert!(compare(BinOp::Lt, &text("apple"), &text("banana")).unwrap());
        assert!(compare(BinOp::Ge, &text("b"), &text("b")).unwrap());
        assert!(compare(BinOp::Ne, &Value::Bool(true), &Value::Bool(false)).unwrap());
        assert!(compare(BinOp::Eq, &Value::Bool(true), &Value::Bool(true)).unwrap());
        assert_eq!(
            compare(BinOp::Lt, &Value::Bool(true), &Value::Bool(false)).unwrap_err(),
            "Lt needs two numbers or two strings, got a boolean and a boolean"
        );
        assert_eq!(
            compare(BinOp::Eq, &int(1), &text("1")).unwrap_err(),
            "Eq needs two numbers, two strings or two booleans, got a number and a string"
        );
        assert!(compare(BinOp::Le, &float(1.5), &int(2)).unwrap());
        assert!(compare(BinOp::Gt, &float(2.5), &int(2)).unwrap());
    }

    #[test]
    fn inputs_become_integers_then_finite_floats_then_strings() {
        assert!(matches!(Value::from_input("42"), Ok(Value::Int(42))));
        assert!(matches!(Value::from_input("-7"), Ok(Value::Int(-7))));
        assert!(matches!(Value::from_input("+7"), Ok(Value::Int(7))));
        assert!(matches!(Value::from_input("2.5"), Ok(Value::Float(f)) if f == 2.5));
        assert!(matches!(Value::from_input("1e3"), Ok(Value::Float(f)) if f == 1000.0));
        assert!(matches!(Value::from_input("99999999999999999999"), Ok(Value::Float(f)) if f == 1e20));
        for stays_text in ["abc", " 42", "0x10", "1_000", "NaN", "inf", "-infinity", "1e400", ""] {
            assert!(
                matches!(Value::from_input(stays_text), Ok(Value::Str(ref s)) if &**s == stays_text),
                "{stays_text:?}"
            );
        }
        assert!(Value::from_input(&"x".repeat(MAX_STRING_BYTES + 1)).is_err());
    }

    #[test]
    fn json_numbers_keep_integers_and_turn_the_rest_into_floats() {
        let parse = |text: &str| Value::from_json(&serde_json::from_str(text).unwrap()).unwrap();
        assert!(matches!(parse("5"), Value::Int(5)));
        assert!(matches!(parse("5.0"), Value::Float(f) if f == 5.0));
        assert!(matches!(parse("18446744073709551615"), Value::Float(_)));
        assert!(matches!(parse("null"), Value::Json(_)));
        assert!(matches!(parse("[1]"), Value::Json(_)));
        assert_eq!(parse("2.5").to_json(), serde_json::json!(2.5));
        assert_eq!(parse("{\"a\":1}").to_json(), serde_json::json!({"a": 1}));
    }

    proptest::proptest! {
        /// A float written in the code and the same text given as an input are the same number.
        /// This holds because serde_json is built with `float_roundtrip` in this workspace;
        /// should that feature disappear, this test says so.
        #[test]
        fn float_literals_read_like_inputs(float in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL, digits in 1usize..20) {
            let text = format!("{float:.digits$e}");
            let literal = serde_json::from_str::<serde_json::Number>(&text).unwrap();
            let from_code = Value::from_number(&literal);
            let from_input = Value::from_input(&text).unwrap();
            match (from_code, from_input) {
                (Some(Value::Float(a)), Value::Float(b)) => proptest::prop_assert_eq!(a.to_bits(), b.to_bits(), "{}", text),
                other => proptest::prop_assert!(false, "{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn output_sizes_bound_the_serialised_length() {
        let parse = |text: &str| Value::from_json(&serde_json::from_str(text).unwrap()).unwrap();
        // Documents and plain strings are measured exactly.
        for text in ["[1,2,{\"a\":null}]", "{\"k\":\"v\"}", "null", "\"text\""] {
            assert_eq!(parse(text).output_size(), text.len(), "{text}");
        }
        // Scalars count as their longest spelling.
        for scalar in [
            Value::Bool(true),
            Value::Bool(false),
            Value::Int(i64::MIN),
            Value::Float(-f64::MAX),
            Value::Float(-f64::MIN_POSITIVE),
        ] {
            assert!(scalar.output_size() >= scalar.to_json().to_string().len(), "{scalar:?}");
        }
    }

    #[test]
    fn operator_names_round_trip() {
        for op in BinOp::ALL {
            assert_eq!(BinOp::from_name(op.name()), Some(op));
        }
        assert_eq!(BinOp::from_name("Pow"), None);
    }
}
