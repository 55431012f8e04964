//! Checking a signed record offline (INTERFACE.md §11, "Evidence"): that the member's signature
//! verifies, that the body the evidence keeps is the body that was signed, and that the
//! record's own fields are that body's.
//!
//! A signature alone proves only that the member sent *some* request to that path; the record
//! (a history item, a voter's entry) is what the gateway shows, and anyone holding the database
//! could change its amount, payee or memo and keep the signature. So the check reads the
//! signed bytes (`request_signature.body`, whose `Content-Digest` is signed) and compares them
//! field by field with the record. Amounts compare as exact decimals ([`Amount`]), never as
//! floating point; vote choices compare by meaning (`for`, `approve` and `yes` are one choice).
//!
//! This module knows the gateway's routes and request bodies, as the SDK that sends them does;
//! it does not fetch anything (the key is the DID itself) and does not look at the clock:
//! evidence stays checkable for as long as the record exists.

use gateway_core::{Amount, Did, RequestSignature};
use serde::Deserialize;

use crate::governance::{EffectiveVote, VoteChoice};
use crate::ledger::Transaction;

/// Why a record and its evidence do not check out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    /// The record carries no `request_signature`: it was not made by a signed request.
    #[error("the record carries no request_signature: it was not made by a signed request")]
    Unsigned,
    /// The signature does not verify, or the kept body is not the signed one
    /// (`digest_mismatch`).
    #[error("the signature does not verify: {0} ({reason})", reason = .0.reason())]
    Signature(gateway_httpsig::Failure),
    /// The evidence keeps no body (it was kept before the gateway stored bodies), so the record's
    /// fields cannot be tied to what was signed.
    #[error("the evidence keeps no signed body, so the record's fields cannot be checked against it")]
    NoBody,
    /// The signed request is not an operation that makes this kind of record.
    #[error("the signed request ({method} {path}) is not {expected}")]
    Operation {
        /// The signed method.
        method: String,
        /// The signed path.
        path: String,
        /// What it should have been.
        expected: &'static str,
    },
    /// The signed body is not the JSON that operation takes.
    #[error("the signed body is not a valid request of its route: {0}")]
    Body(String),
    /// A field of the record differs from the signed request.
    #[error("the record's {field} is {recorded}, but the signed request says {signed}")]
    Field {
        /// The record's field (`from`, `to`, `amount`, `currency`, `memo`, `to_currency`,
        /// `proposal_id`, `voter`, `choice`).
        field: &'static str,
        /// The record's value.
        recorded: String,
        /// The signed value.
        signed: String,
    },
}

impl EvidenceError {
    /// The record field that differs, for a [`EvidenceError::Field`].
    pub fn field(&self) -> Option<&'static str> {
        match self {
            EvidenceError::Field { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// The fields of a payment record that its signed request fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentFields<'a> {
    /// The payer.
    pub from: &'a str,
    /// The payee.
    pub to: &'a str,
    /// The debited amount.
    pub amount: Amount,
    /// The currency of `amount`.
    pub currency: &'a str,
    /// The memo.
    pub memo: Option<&'a str>,
    /// Conversions: the target currency.
    pub to_currency: Option<&'a str>,
}

/// The fields of a vote record that its signed request fixes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteFields<'a> {
    /// The proposal, when the record names it (a voter's entry of `votes` does not; the caller
    /// knows which proposal it asked for).
    pub proposal_id: Option<&'a str>,
    /// The voter.
    pub voter: &'a str,
    /// The choice, any accepted spelling.
    pub choice: &'a str,
}

impl Transaction {
    /// Checks this history item against its evidence: the signature, the kept body, and that
    /// `from`, `to`, `amount`, `currency`, `memo` (and a conversion's `to_currency`) are the signed
    /// body's. Returns the signer.
    pub fn verify_evidence(&self) -> Result<Did, EvidenceError> {
        let evidence = self.request_signature.as_ref().ok_or(EvidenceError::Unsigned)?;
        let fields = PaymentFields {
            from: &self.from,
            to: &self.to,
            amount: self.amount,
            currency: &self.currency,
            memo: self.memo.as_deref(),
            to_currency: self.to_currency.as_deref(),
        };
        verify_payment(evidence, &fields)
    }
}

impl EffectiveVote {
    /// Checks this voter's entry of proposal `proposal_id` against its evidence: the signature,
    /// the kept body, the proposal of the signed path, the voter (the signer) and the choice.
    /// Returns the signer.
    pub fn verify_evidence(&self, proposal_id: &str) -> Result<Did, EvidenceError> {
        let evidence = self.request_signature.as_ref().ok_or(EvidenceError::Unsigned)?;
        let fields = VoteFields { proposal_id: Some(proposal_id), voter: &self.voter, choice: &self.choice };
        verify_vote(evidence, &fields)
    }
}

/// A payment as a signed body states it (the gateway's `PaymentBody`).
#[derive(Debug, Deserialize)]
struct SignedPayment {
    from: Option<String>,
    to: String,
    amount: Amount,
    currency: Option<String>,
    memo: Option<String>,
    description: Option<String>,
}

/// A batch as a signed body states it, when it is an object.
#[derive(Debug, Deserialize)]
struct SignedBatch {
    payments: Vec<SignedPayment>,
}

/// A conversion as a signed body states it.
#[derive(Debug, Deserialize)]
struct SignedConversion {
    from: String,
    to: String,
    amount: Amount,
    from_currency: String,
    to_currency: String,
}

/// A vote as a signed body states it.
#[derive(Debug, Deserialize)]
struct SignedVote {
    choice: String,
}

/// What a signed payment-creating request fixes of one payment; `None` where the request left
/// a field to the gateway (a currency left to the coop's default).
struct Expected {
    from: String,
    to: String,
    amount: Amount,
    currency: Option<String>,
    memo: Option<String>,
    to_currency: Option<String>,
}

/// Checks a payment record against the evidence of the request that made it: the signature
/// and kept body ([`gateway_httpsig::verify_evidence`]), then each field, in the order `from`,
/// `to`, `amount`, `currency`, `memo`, `to_currency`. A batch's record must be one of the
/// batch's payments. A currency the request left to the coop's default cannot be checked and
/// is not. Returns the signer.
pub fn verify_payment(evidence: &RequestSignature, record: &PaymentFields<'_>) -> Result<Did, EvidenceError> {
    let (signer, body) = signed_body(evidence)?;
    let segments: Vec<&str> = evidence.path.split('/').filter(|s| !s.is_empty()).collect();
    let parse = |e: serde_json::Error| EvidenceError::Body(e.to_string());
    let single = |p: SignedPayment| Expected {
        from: p.from.unwrap_or_else(|| signer.to_string()),
        to: p.to,
        amount: p.amount,
        currency: p.currency,
        memo: p.memo.or(p.description),
        to_currency: None,
    };
    let candidates: Vec<Expected> = match (evidence.method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "ledger", _, "payment"] | ["ledger", "transaction"]) => {
            vec![single(serde_json::from_slice(&body).map_err(parse)?)]
        }
        ("POST", ["v1", "ledger", _, "payments", "batch"]) => {
            let payments = if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
                serde_json::from_slice::<Vec<SignedPayment>>(&body).map_err(parse)?
            } else {
                serde_json::from_slice::<SignedBatch>(&body).map_err(parse)?.payments
            };
            payments.into_iter().map(single).collect()
        }
        ("POST", ["v1", "ledger", _, "payment", "convert"]) => {
            let c: SignedConversion = serde_json::from_slice(&body).map_err(parse)?;
            vec![Expected {
                from: c.from,
                to: c.to,
                amount: c.amount,
                currency: Some(c.from_currency),
                memo: None,
                to_currency: Some(c.to_currency),
            }]
        }
        _ => {
            return Err(EvidenceError::Operation {
                method: evidence.method.clone(),
                path: evidence.path.clone(),
                expected: "a payment, batch, short transaction or conversion",
            });
        }
    };
    if record.from != signer.as_str() {
        return Err(mismatch("from", record.from, signer.as_str()));
    }
    // The batch item closest to the record names the differing field.
    let mut nearest: Option<Vec<EvidenceError>> = None;
    for expected in &candidates {
        let differences = payment_differences(record, expected);
        if differences.is_empty() {
            return Ok(signer);
        }
        if nearest.as_ref().is_none_or(|n| differences.len() < n.len()) {
            nearest = Some(differences);
        }
    }
    Err(nearest.and_then(|n| n.into_iter().next()).unwrap_or_else(|| EvidenceError::Body("no payment".into())))
}

/// Every field of `record` that differs from `expected`, in the documented order.
fn payment_differences(record: &PaymentFields<'_>, expected: &Expected) -> Vec<EvidenceError> {
    let mut out = Vec::new();
    if record.from != expected.from {
        out.push(mismatch("from", record.from, &expected.from));
    }
    if record.to != expected.to {
        out.push(mismatch("to", record.to, &expected.to));
    }
    if record.amount != expected.amount {
        out.push(mismatch("amount", &record.amount.to_string(), &expected.amount.to_string()));
    }
    if let Some(currency) = &expected.currency
        && record.currency != currency
    {
        out.push(mismatch("currency", record.currency, currency));
    }
    if record.memo != expected.memo.as_deref() {
        out.push(mismatch("memo", &shown(record.memo), &shown(expected.memo.as_deref())));
    }
    if record.to_currency != expected.to_currency.as_deref() {
        out.push(mismatch("to_currency", &shown(record.to_currency), &shown(expected.to_currency.as_deref())));
    }
    out
}

/// Checks a vote record against the evidence of the request that cast it: the signature and
/// kept body, then `proposal_id` (the signed path's), `voter` (the signer: the route takes the
/// voter from the token, whose DID is the `keyid`) and `choice` (the body's, by meaning).
/// Returns the signer.
pub fn verify_vote(evidence: &RequestSignature, record: &VoteFields<'_>) -> Result<Did, EvidenceError> {
    let (signer, body) = signed_body(evidence)?;
    let segments: Vec<&str> = evidence.path.split('/').filter(|s| !s.is_empty()).collect();
    let proposal = match (evidence.method.as_str(), segments.as_slice()) {
        ("POST", ["v1", "gov", "proposals", id, "vote"] | ["governance", "proposals", id, "vote"]) => *id,
        _ => {
            return Err(EvidenceError::Operation {
                method: evidence.method.clone(),
                path: evidence.path.clone(),
                expected: "a vote",
            });
        }
    };
    let signed: SignedVote = serde_json::from_slice(&body).map_err(|e| EvidenceError::Body(e.to_string()))?;
    if let Some(id) = record.proposal_id
        && id != proposal
    {
        return Err(mismatch("proposal_id", id, proposal));
    }
    if record.voter != signer.as_str() {
        return Err(mismatch("voter", record.voter, signer.as_str()));
    }
    match (VoteChoice::parse(record.choice), VoteChoice::parse(&signed.choice)) {
        (Some(a), Some(b)) if a == b => Ok(signer),
        _ => Err(mismatch("choice", record.choice, &signed.choice)),
    }
}

/// The signer and the kept body, once the signature and the body's digest verify.
fn signed_body(evidence: &RequestSignature) -> Result<(Did, Vec<u8>), EvidenceError> {
    let signer = gateway_httpsig::verify_evidence(evidence).map_err(EvidenceError::Signature)?;
    let body =
        gateway_httpsig::evidence_body(evidence).map_err(EvidenceError::Signature)?.ok_or(EvidenceError::NoBody)?;
    Ok((signer, body))
}

fn mismatch(field: &'static str, recorded: &str, signed: &str) -> EvidenceError {
    EvidenceError::Field { field, recorded: recorded.to_owned(), signed: signed.to_owned() }
}

/// An optional text as a message shows it.
fn shown(value: Option<&str>) -> String {
    value.map_or_else(|| "null".to_owned(), |v| format!("{v:?}"))
}

#[cfg(test)]
mod tests;
