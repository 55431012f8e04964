//! `gatewayctl verify-request`: checks a signed request's evidence offline (INTERFACE.md §11).
//!
//! The evidence is what a payment or a vote made by a signed request keeps: the verified
//! `Signature-Input` and `Signature` members, the method, authority, path, query and
//! `Content-Digest` they covered, and the exact signed body. The signer's key is its DID itself
//! (`did:key`, `did:icn`), so nothing is fetched: the check holds as long as the record exists.
//! Given a record (a history item, a voter's entry), the record's own fields must be the signed
//! body's ([`gateway_client::verify_payment`], [`gateway_client::verify_vote`]): a record
//! whose amount, payee or memo was changed after the fact is refused, naming the field.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use gateway_core::{Amount, RequestSignature};
use serde::Deserialize;
use serde_json::Value;

/// A payment record's fields, read from the record's text so amounts stay exact.
#[derive(Debug, Deserialize)]
struct PaymentRecord {
    from: String,
    to: String,
    amount: Amount,
    currency: String,
    #[serde(default)]
    memo: Option<String>,
    #[serde(default)]
    to_currency: Option<String>,
}

/// A vote record's fields: a voter's entry of `votes` (no `proposal_id`) or a vote as cast.
#[derive(Debug, Deserialize)]
struct VoteRecord {
    voter: String,
    choice: String,
    #[serde(default)]
    proposal_id: Option<String>,
}

/// Reads the evidence (or a record carrying it) from `file` or standard input, verifies it and
/// prints the signer; fails when the signature does not verify, the kept body is not the
/// signed one, or a field of the record is not what was signed.
pub(crate) fn run(file: Option<&Path>) -> anyhow::Result<()> {
    let text = match file {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?,
        None => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("cannot read standard input")?;
            text
        }
    };
    let value: Value = serde_json::from_str(&text).context("the input is not JSON")?;
    let (evidence, record) = match value.get("request_signature") {
        Some(Value::Null) | None if value.get("signature_input").is_none() => {
            bail!("no request_signature here: the record was not made by a signed request")
        }
        Some(evidence) => (evidence.clone(), Some(&value)),
        None => (value.clone(), None),
    };
    let evidence: RequestSignature =
        serde_json::from_value(evidence).context("request_signature does not have the evidence's fields")?;
    let not_valid = |e: gateway_client::EvidenceError| anyhow::anyhow!("NOT valid: {e}");
    let signer = match record {
        Some(record) if record.get("voter").is_some() => {
            let vote: VoteRecord = serde_json::from_str(&text).context("the vote record lacks voter or choice")?;
            let fields = gateway_client::VoteFields {
                proposal_id: vote.proposal_id.as_deref(),
                voter: &vote.voter,
                choice: &vote.choice,
            };
            let signer = gateway_client::verify_vote(&evidence, &fields).map_err(not_valid)?;
            println!("record matches the signed vote: {} on {}", vote.choice, evidence.path);
            signer
        }
        Some(record) if record.get("amount").is_some() => {
            let payment: PaymentRecord =
                serde_json::from_str(&text).context("the payment record lacks from, to, amount or currency")?;
            let fields = gateway_client::PaymentFields {
                from: &payment.from,
                to: &payment.to,
                amount: payment.amount,
                currency: &payment.currency,
                memo: payment.memo.as_deref(),
                to_currency: payment.to_currency.as_deref(),
            };
            let signer = gateway_client::verify_payment(&evidence, &fields).map_err(not_valid)?;
            println!(
                "record matches the signed body: {} {} from {} to {}",
                payment.amount, payment.currency, payment.from, payment.to
            );
            signer
        }
        Some(_) => bail!("the record is neither a payment (amount) nor a vote (voter): its fields cannot be checked"),
        None => {
            let signer = gateway_httpsig::verify_evidence(&evidence)
                .map_err(|failure| anyhow::anyhow!("NOT valid: {failure} ({})", failure.reason()))?;
            if evidence.body.is_some() {
                println!("the kept body matches its digest (no record given: fields not compared)");
            } else {
                println!("no body kept: only the signature was checked");
            }
            signer
        }
    };
    println!("valid: {} {} signed by {signer}", evidence.method, evidence.path);
    Ok(())
}
