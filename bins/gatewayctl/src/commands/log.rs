//! `log …`: the coop's tamper-evident log (INTERFACE.md §12). `verify` and `policy` need no login
//! (`verify` no network at all); `proof`, `entry` and `audit` need a member's login, because
//! entries hold memos.
//!
//! Everything that is checked is checked by the SDK (`gateway_client::verify_proof`,
//! `Client::audit_with`); this module reads and writes the files, prints, and turns "does not
//! verify" into exit status 3 ([`LogInvalid`]), apart from "could not check" (1).
//!
//! An audit's state directory holds, per coop, `<coop>.checkpoint` (the last signed checkpoint
//! a clean audit verified, exactly as served) and `<coop>.keys` (the log's verifier keys then,
//! one `vkey` a line). Both are replaced atomically, and only after a clean audit.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use gateway_client::{AuditOptions, AuditReport, AuditState, LogError, VerifiedProof};
use gateway_core::CoopId;

use super::{Context, LoggedIn};
use crate::cli::LogCommand;
use crate::output::short_did;
use crate::spinner::Spinner;

/// A proof that does not verify, or an audit that found a mismatch; `main` exits with
/// [`super::EXIT_INVALID_RECEIPT`] (3), as for a receipt that does not verify.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct LogInvalid(pub(crate) String);

pub(crate) async fn run(context: &Context, command: LogCommand) -> anyhow::Result<()> {
    match command {
        LogCommand::Verify { proof, entry, policy } => verify(context, &proof, &entry, &policy),
        LogCommand::Policy => policy(context).await,
        command => {
            let session = context.session().await?;
            let result = logged_in(context, &session, command).await;
            context.save(&session.client).await?;
            result
        }
    }
}

async fn logged_in(context: &Context, session: &LoggedIn, command: LogCommand) -> anyhow::Result<()> {
    let coop = session.coop()?;
    match command {
        LogCommand::Proof { seq, wait } => {
            let proof = session.client.log_proof(coop, seq, wait).await.context("fetching the proof")?;
            print!("{proof}");
            Ok(())
        }
        LogCommand::Entry { seq, wait, proof } => {
            let entry = session.client.log_entry(coop, seq, wait).await.context("fetching the entry")?;
            if let Some(path) = &proof {
                std::fs::write(path, &entry.proof).with_context(|| format!("cannot write {}", path.display()))?;
            }
            // The exact bytes the leaf hash covers: no newline.
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&entry.bytes)?;
            stdout.flush()?;
            Ok(())
        }
        LogCommand::Audit { state, policy } => audit(context, session, coop, state.as_deref(), policy.as_deref()).await,
        LogCommand::Verify { .. } | LogCommand::Policy => unreachable!("handled without a login"),
    }
}

fn read(path: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("cannot read the {what} {}", path.display()))
}

fn verify(context: &Context, proof: &Path, entry: &Path, policy: &Path) -> anyhow::Result<()> {
    let (proof, entry, policy) = (read(proof, "proof")?, read(entry, "entry")?, read(policy, "policy")?);
    let mut result = gateway_client::verify_proof(&proof, &entry, &policy);
    // An entry saved by an editor or `echo` may have gained a final newline, which no entry
    // has: the bytes without it are tried too (they are what the proof covers, or nothing is).
    if matches!(result, Err(LogError::NotIncluded { .. }))
        && let Some(trimmed) = entry.strip_suffix(b"\n")
    {
        let trimmed = trimmed.strip_suffix(b"\r").unwrap_or(trimmed);
        if let Ok(verified) = gateway_client::verify_proof(&proof, trimmed, &policy) {
            result = Ok(verified);
        }
    }
    match result {
        Ok(verified) => context.out.show(&verified, || proof_summary(&verified)),
        Err(err) if err.is_malformed() => Err(err.into()),
        Err(err) => Err(LogInvalid(format!("NOT valid: {err}")).into()),
    }
}

/// `valid: entry 5 (event 5, PaymentCreated) is in gw.example/coops/c1 of 12 entries …`.
fn proof_summary(v: &VerifiedProof) -> String {
    let what = match (v.seq, &v.event_type) {
        (Some(seq), Some(kind)) => format!(" (event {seq}, {kind})"),
        _ => String::new(),
    };
    let key = v.log_key.rsplit_once('+').map_or(v.log_key.as_str(), |(named, _)| named);
    let witnesses = match v.witnesses.len() {
        0 => "no witness cosignature".to_owned(),
        _ => format!("cosigned by {}", v.witnesses.iter().map(|w| w.name.as_str()).collect::<Vec<_>>().join(", ")),
    };
    format!(
        "valid: entry {}{what} is in {} of {} entries (root {}), signed by {key}, {witnesses}",
        v.index, v.origin, v.size, v.root
    )
}

async fn policy(context: &Context) -> anyhow::Result<()> {
    let coop = context.coop_option()?.context("which cooperative? pass --coop <id>")?;
    let keys = context.public_client()?.log_keys(&coop).await.context("fetching the log's keys")?;
    if keys.is_empty() {
        bail!("the log of {coop} publishes no key yet");
    }
    let mut text = format!(
        "# The log of cooperative {coop} at {}, keys as the gateway published them (trust on first use:\n\
         # compare them with another copy). Add `witness <name> <vkey>` lines and name them in the\n\
         # quorum to require witness cosignatures.\n",
        context.gateway
    );
    for key in &keys {
        text.push_str(&format!("log {key}\n"));
    }
    text.push_str("quorum none\n");
    print!("{text}");
    Ok(())
}

/// `<dir>/<coop>.checkpoint` and `<dir>/<coop>.keys`.
fn state_paths(dir: &Path, coop: &CoopId) -> (PathBuf, PathBuf) {
    (dir.join(format!("{coop}.checkpoint")), dir.join(format!("{coop}.keys")))
}

/// The saved state of `coop`, `None` before its first clean audit.
pub(crate) fn load_state(dir: &Path, coop: &CoopId) -> anyhow::Result<Option<AuditState>> {
    let (checkpoint, keys) = state_paths(dir, coop);
    let checkpoint_text = match std::fs::read_to_string(&checkpoint) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", checkpoint.display())),
    };
    let keys_text = std::fs::read_to_string(&keys).with_context(|| {
        format!(
            "{} exists but {} cannot be read: restore it, or remove both to start over",
            checkpoint.display(),
            keys.display()
        )
    })?;
    AuditState::new(&checkpoint_text, &keys_text)
        .map(Some)
        .with_context(|| format!("the saved state in {} is damaged", dir.display()))
}

/// Replaces a file atomically (a temporary file in the same directory, then a rename).
fn replace(path: &Path, text: &str) -> anyhow::Result<()> {
    let temporary = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut file =
            std::fs::File::create(&temporary).with_context(|| format!("cannot write {}", temporary.display()))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
    }
    std::fs::rename(&temporary, path).with_context(|| format!("cannot write {}", path.display()))
}

pub(crate) fn save_state(dir: &Path, coop: &CoopId, state: &AuditState) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let (checkpoint, keys) = state_paths(dir, coop);
    // Keys first: a crash between the two leaves keys that still sign the older checkpoint
    // (the keys route never drops a key), so the pair stays loadable.
    replace(&keys, &state.keys_text())?;
    replace(&checkpoint, state.checkpoint_text())
}

async fn audit(
    context: &Context,
    session: &LoggedIn,
    coop: &CoopId,
    state: Option<&Path>,
    policy: Option<&Path>,
) -> anyhow::Result<()> {
    let saved = state.map(|dir| load_state(dir, coop)).transpose()?.flatten();
    let mut options = AuditOptions::default();
    if let Some(path) = policy {
        options.policy = Some(gateway_client::parse_policy(&read(path, "policy")?)?);
    }
    let spinner = Spinner::start("auditing the log");
    let report = session.client.audit_with(coop, saved.as_ref(), &options).await;
    spinner.stop();
    let report = report.context("auditing")?;
    let saved_to = match (state, &report.new_state) {
        (Some(dir), Some(new_state)) => {
            save_state(dir, coop, new_state)?;
            Some(state_paths(dir, coop).0)
        }
        _ => None,
    };
    let mut value = serde_json::to_value(&report)?;
    value["passed"] = report.passed().into();
    value["saved"] = saved_to.as_ref().map(|p| p.display().to_string()).into();
    context.out.show(&value, || audit_text(&report, saved_to.as_deref(), state.is_some()))?;
    if report.passed() {
        Ok(())
    } else {
        let n = report.mismatches.len();
        Err(LogInvalid(format!(
            "the audit of {coop} found {n} mismatch{}{}",
            if n == 1 { "" } else { "es" },
            if context.out.json { "" } else { " (listed above)" }
        ))
        .into())
    }
}

fn audit_text(report: &AuditReport, saved_to: Option<&Path>, keeps_state: bool) -> String {
    let mut text = format!(
        "{} log of {} ({}): {} entries, root {}\n",
        if report.passed() { "audit passed:" } else { "audit FAILED:" },
        report.coop,
        report.origin,
        report.size,
        report.root
    );
    if let Some(key) = &report.signed_by {
        text.push_str(&format!("signed by  {}\n", short_did(key)));
    }
    if !report.witnessed_by.is_empty() {
        text.push_str(&format!("witnesses  {}\n", report.witnessed_by.join(", ")));
    }
    match &report.previous {
        Some(previous) => {
            text.push_str(&format!("extends    the checkpoint of {} entries saved last time\n", previous.size));
        }
        None if keeps_state => text.push_str("extends    nothing saved yet (first audit with this state)\n"),
        None => {}
    }
    let events: Vec<String> = report.events.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
    if !events.is_empty() {
        text.push_str(&format!("entries    {}\n", events.join(", ")));
    }
    text.push_str(&format!(
        "ledger     {} balances of {} accounts compared with the live ones\n",
        report.balances_checked, report.accounts_checked
    ));
    text.push_str(&format!(
        "receipts   {} verified, {} closed proposals without one in the log\n",
        report.receipts_verified, report.receipts_absent
    ));
    for note in &report.notes {
        text.push_str(&format!("note: {note}\n"));
    }
    for mismatch in &report.mismatches {
        text.push_str(&format!("MISMATCH {mismatch}\n"));
    }
    if let Some(path) = saved_to {
        text.push_str(&format!("saved      {}\n", path.display()));
    } else if keeps_state && !report.passed() {
        text.push_str("saved      nothing: the saved state is kept as it was\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_client::WitnessCosignature;

    #[test]
    fn a_verified_proof_is_one_line() {
        let verified = VerifiedProof {
            valid: true,
            origin: "gw.example/coops/c1".into(),
            size: 12,
            root: "AAAA".into(),
            index: 5,
            log_key: "gw.example/coops/c1+01234567+AQID".into(),
            witnesses: vec![WitnessCosignature { name: "w1".into(), timestamp: 1 }],
            seq: Some(5),
            event_type: Some("PaymentCreated".into()),
        };
        assert_eq!(
            proof_summary(&verified),
            "valid: entry 5 (event 5, PaymentCreated) is in gw.example/coops/c1 of 12 entries (root AAAA), \
             signed by gw.example/coops/c1+01234567, cosigned by w1"
        );
        assert!(!proof_summary(&verified).contains('\n'));
    }
}
