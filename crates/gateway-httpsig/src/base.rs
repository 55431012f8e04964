//! The signature base of RFC 9421 section 2.5, for the components this profile knows.

use sfv::{FieldType, InnerList, ListEntry};

use crate::profile::Failure;

/// The parts of a request a signature can cover, as the receiver (or the signer) sees them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Message<'a> {
    /// The method, as sent (`POST`).
    pub method: &'a str,
    /// The `Host` as received (`gateway.example:8443`); compared lowercased.
    pub authority: &'a str,
    /// The absolute path (`/v1/ledger/bakery/payment`); empty means `/`.
    pub path: &'a str,
    /// The query without its `?`, when the target has one.
    pub query: Option<&'a str>,
    /// Header fields by lowercase name; a name may appear more than once.
    pub headers: &'a [(&'a str, &'a str)],
}

impl Message<'_> {
    /// The value of `component` (a derived component, or a header field's combined value), or
    /// `None` when the message has no such component.
    fn component(&self, component: &str) -> Result<Option<String>, Failure> {
        Ok(match component {
            "@method" => Some(self.method.to_owned()),
            "@authority" => Some(self.authority.to_ascii_lowercase()),
            "@path" => Some(if self.path.is_empty() { "/".to_owned() } else { self.path.to_owned() }),
            "@query" => Some(format!("?{}", self.query.unwrap_or(""))),
            name if name.starts_with('@') => return Err(Failure::SignatureInvalid),
            name if name.bytes().any(|b| b.is_ascii_uppercase()) => return Err(Failure::SignatureInvalid),
            name => {
                let values: Vec<&str> =
                    self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim()).collect();
                (!values.is_empty()).then(|| values.join(", "))
            }
        })
    }
}

/// The signature base of `message` for the covered components and parameters of `signature`
/// (an inner list as received in `Signature-Input`): one line `"<component>": <value>` per
/// covered component, then `"@signature-params": <the inner list as serialised>`, joined with
/// LF and without a final LF.
///
/// Fails with [`Failure::SignatureInvalid`] for a component this profile cannot compute (one
/// with parameters, an unknown derived component, a name that is not lowercase, a duplicate)
/// and [`Failure::ComponentsMissing`] for a covered header the message does not have.
pub fn signature_base(message: &Message<'_>, signature: &InnerList) -> Result<String, Failure> {
    let mut base = String::with_capacity(256);
    let mut seen: Vec<&str> = Vec::with_capacity(signature.items.len());
    for item in &signature.items {
        let name = item.bare_item.as_string().ok_or(Failure::SignatureInvalid)?.as_str();
        if !item.params.is_empty() || seen.contains(&name) {
            return Err(Failure::SignatureInvalid);
        }
        seen.push(name);
        let value = message.component(name)?.ok_or(Failure::ComponentsMissing)?;
        if value.contains(['\n', '\r']) {
            return Err(Failure::SignatureInvalid);
        }
        base.push('"');
        base.push_str(name);
        base.push_str("\": ");
        base.push_str(&value);
        base.push('\n');
    }
    base.push_str("\"@signature-params\": ");
    base.push_str(&serialize_inner_list(signature)?);
    Ok(base)
}

/// An inner list with its parameters, as Structured Fields serialise it (the value of
/// `@signature-params`, and of a `Signature-Input` member).
pub(crate) fn serialize_inner_list(list: &InnerList) -> Result<String, Failure> {
    vec![ListEntry::InnerList(list.clone())].serialize().ok_or(Failure::SignatureInvalid)
}
