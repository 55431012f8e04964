//! `gatewayctl verify-request`: checks a signed request's evidence offline (contract 11).
//!
//! The evidence is what a payment or a vote made by a signed request keeps: the verified
//! `Signature-Input` and `Signature` members and the method, authority, path, query and
//! `Content-Digest` they covered. The signer's key is its DID itself (`did:key`, `did:icn`), so
//! nothing is fetched: the check holds as long as the record exists.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, bail};
use gateway_core::RequestSignature;
use serde_json::Value;

/// Reads the evidence (or a record carrying it) from `file` or standard input, verifies it and
/// prints the signer; fails when the signature does not verify, or does not match the record's
/// payer or voter.
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
    let signer = gateway_httpsig::verify_evidence(&evidence)
        .map_err(|failure| anyhow::anyhow!("NOT valid: {failure} ({})", failure.reason()))?;
    // A payment's payer, or a voter, is who signed.
    for field in ["from", "voter"] {
        if let Some(who) = record.and_then(|r| r.get(field)).and_then(Value::as_str)
            && who != signer.as_str()
        {
            bail!("NOT valid: signed by {signer}, but the record's {field} is {who}");
        }
    }
    println!("valid: {} {} signed by {signer}", evidence.method, evidence.path);
    if let Some(digest) = &evidence.content_digest {
        println!("body digest {digest} (the body itself is not part of the evidence)");
    }
    Ok(())
}
