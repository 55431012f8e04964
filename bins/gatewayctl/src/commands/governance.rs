//! `domain …`, `proposal …` and `receipt …`: governance through the gateway, and receipt
//! verification that needs the gateway at most for its public signing-key list.

use std::path::Path;

use anyhow::Context as _;
use gateway_client::{NewDomain, NewProposal, PageRequest, ProposalQuery, SigningKeys};

use super::{Context, LoggedIn};
use crate::cli::{DomainCommand, ProposalCommand, ReceiptCommand};
use crate::output::{Table, maybe_time, short_did, time};
use crate::receipt;
use crate::spinner::Spinner;

/// Exit status of a receipt that does not verify (distinct from 1, "could not check").
pub(crate) const EXIT_INVALID_RECEIPT: u8 = 3;

/// A receipt that failed verification; `main` exits with [`EXIT_INVALID_RECEIPT`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct InvalidReceipt(pub(crate) receipt::Invalid);

pub(crate) async fn domain(context: &Context, session: &LoggedIn, command: DomainCommand) -> anyhow::Result<()> {
    let client = &session.client;
    match command {
        DomainCommand::Create { id, name, members, quorum, rule } => {
            let domain = client
                .create_domain(&NewDomain {
                    name: name.unwrap_or_else(|| id.clone()),
                    domain_id: id,
                    members: members.iter().map(ToString::to_string).collect(),
                    quorum_percent: quorum,
                    rule,
                })
                .await?;
            context.out.show(&domain, || {
                format!("created domain {} with {} voting members", domain.domain_id, domain.members.len())
            })
        }
        DomainCommand::List => {
            let domains = client.domains().await?;
            context.out.show(&domains, || {
                let mut table = Table::new(&["DOMAIN", "NAME", "MEMBERS", "RULE", "QUORUM %"]);
                for d in &domains.domains {
                    table.row(vec![
                        d.domain_id.clone(),
                        d.name.clone(),
                        d.members.len().to_string(),
                        d.rule.clone().unwrap_or_else(|| "majority".into()),
                        d.quorum_percent.map(|q| q.to_string()).unwrap_or_else(|| "coop default".into()),
                    ]);
                }
                table.render("no domains: create one with `gatewayctl domain create <id> --member <did> …`")
            })
        }
    }
}

/// When a proposal's voting ends: `closed <time>` once it has closed (it may close before its
/// scheduled end, which then no longer matters), else `closes <time>` while open, `-` for a draft.
fn voting_end(p: &gateway_client::Proposal) -> String {
    match (p.closed_at, p.closes_at) {
        (Some(at), _) => format!("closed {}", time(at)),
        (None, _) if p.status == "closed" => "closed".into(),
        (None, Some(at)) => format!("closes {}", time(at)),
        (None, None) => "-".into(),
    }
}

fn proposal_text(p: &gateway_client::Proposal) -> String {
    let (label, at) = match (p.closed_at, p.status.as_str()) {
        (Some(at), _) => ("closed ", Some(at)),
        (None, "closed") => ("closed ", None),
        (None, _) => ("closes ", p.closes_at),
    };
    let mut text = format!(
        "{} [{}] {}\ndomain   {}\nauthor   {}\nrule     {}\ncreated  {} UTC\nopened   {}\n{label}  {}",
        p.id,
        p.status,
        p.title,
        p.domain_id,
        p.author,
        p.rule,
        time(p.created_at),
        maybe_time(p.opened_at),
        maybe_time(at)
    );
    if !p.description.is_empty() {
        text.push_str(&format!("\n\n{}", p.description));
    }
    if let (Some(outcome), Some(t)) = (&p.outcome, &p.tally) {
        text.push_str(&format!(
            "\n\noutcome  {outcome} (for {}, against {}, abstain {})",
            t.for_, t.against, t.abstain
        ));
    }
    text
}

pub(crate) async fn proposal(context: &Context, session: &LoggedIn, command: ProposalCommand) -> anyhow::Result<()> {
    let client = &session.client;
    let out = context.out;
    match command {
        ProposalCommand::Create { domain, title, description, payload, rule, duration, open } => {
            let payload =
                payload.map(|text| serde_json::from_str(&text).context("--payload is not JSON")).transpose()?;
            let request = NewProposal {
                domain_id: domain,
                title,
                description,
                payload,
                kind: None,
                rule_ccl: rule,
                voting_duration_secs: duration,
            };
            let proposal = if open {
                client.create_and_open_proposal(&request).await?
            } else {
                client.create_proposal(&request).await?
            };
            out.show(&proposal, || {
                let next = if proposal.status == "draft" {
                    format!("\nopen it for voting with `gatewayctl proposal open {}`", proposal.id)
                } else {
                    String::new()
                };
                format!("created proposal {} ({}){next}", proposal.id, proposal.status)
            })
        }
        ProposalCommand::Open { id } => {
            let proposal = client.open_proposal(&id).await?;
            out.show(&proposal, || {
                format!("opened {}; voting closes {} UTC", proposal.id, maybe_time(proposal.closes_at))
            })
        }
        ProposalCommand::Vote { id, choice } => {
            let vote = client.vote(&id, choice).await?;
            out.show(&vote, || {
                let replaced = if vote.replaced { " (replacing your earlier vote)" } else { "" };
                format!("voted {} on {}{replaced}", vote.choice, vote.proposal_id)
            })
        }
        ProposalCommand::Close { id } => {
            let proposal = client.close_proposal(&id).await?;
            out.show(&proposal, || proposal_text(&proposal))
        }
        ProposalCommand::List { status, domain, page } => {
            let query = ProposalQuery {
                domain,
                status,
                page: PageRequest { limit: Some(page.limit), offset: Some(page.offset) },
            };
            let proposals = client.proposals(&query).await?;
            out.show(&proposals, || {
                let mut table = Table::new(&["ID", "STATUS", "DOMAIN", "AUTHOR", "VOTING (UTC)", "OUTCOME", "TITLE"]);
                for p in &proposals.proposals {
                    table.row(vec![
                        p.id.clone(),
                        p.status.clone(),
                        p.domain_id.clone(),
                        short_did(&p.author),
                        voting_end(p),
                        p.outcome.clone().unwrap_or_else(|| "-".into()),
                        p.title.clone(),
                    ]);
                }
                table.render("no proposals")
            })
        }
        ProposalCommand::Show { id } => {
            let proposal = client.proposal(&id).await?;
            let votes = client.votes(&id).await?;
            let value = serde_json::json!({ "proposal": proposal, "votes": votes });
            out.show(&value, || {
                let mut table = Table::new(&["VOTER", "CHOICE", "WEIGHT"]);
                for v in &votes.voters {
                    table.row(vec![v.voter.clone(), v.choice.clone(), v.weight.to_string()]);
                }
                format!(
                    "{}\n\ncurrent tally: for {}, against {}, abstain {}\n{}",
                    proposal_text(&proposal),
                    votes.votes_for,
                    votes.votes_against,
                    votes.votes_abstain,
                    table.render("no votes yet")
                )
            })
        }
        ProposalCommand::Verify { id, keys, save } => {
            let spinner = Spinner::start("fetching the receipt");
            let fetched = client.proof(&id).await;
            spinner.stop();
            let text = serde_json::to_string_pretty(&fetched.context("fetching the receipt")?)?;
            if let Some(path) = &save {
                std::fs::write(path, format!("{text}\n"))
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            verify_text(context, &text, keys.as_deref(), save.as_deref()).await
        }
    }
}

pub(crate) async fn receipt(context: &Context, command: ReceiptCommand) -> anyhow::Result<()> {
    match command {
        ReceiptCommand::Verify { file, keys } => verify_file(context, &file, keys.as_deref(), None).await,
        ReceiptCommand::Keys => {
            let keys = context.session().await?.client.signing_keys().await?;
            // The list is the file format of `--keys`, so JSON either way.
            println!("{}", serde_json::to_string_pretty(&keys)?);
            Ok(())
        }
    }
}

/// Verifies a receipt file (offline when `keys` names a file).
pub(crate) async fn verify_file(
    context: &Context,
    file: &Path,
    keys: Option<&Path>,
    saved: Option<&Path>,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    verify_text(context, &text, keys, saved).await
}

async fn verify_text(context: &Context, text: &str, keys: Option<&Path>, saved: Option<&Path>) -> anyhow::Result<()> {
    let parsed = receipt::parse_receipt(text)?;
    let keys: SigningKeys = match keys {
        Some(path) => receipt::parse_keys(
            &std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?,
        )?,
        None => {
            let spinner = Spinner::start("fetching the gateway's signing keys");
            let keys = match context.session().await {
                Ok(session) => session.client.signing_keys().await.map_err(anyhow::Error::from),
                Err(err) => Err(err),
            };
            spinner.stop();
            keys.context("fetching the gateway's signing keys (pass --keys <file> to verify offline)")?
        }
    };
    let verified = receipt::verify(&parsed, &keys).map_err(InvalidReceipt)?;
    context.out.show(&verified, || {
        let t = &verified.tally;
        let until = verified.key.valid_until.map(|u| format!("until {} UTC", time(u))).unwrap_or_else(|| "current".into());
        let saved = saved.map(|p| format!("\nsaved to {}", p.display())).unwrap_or_default();
        format!(
            "receipt valid: proposal {} (domain {}) {} — for {}, against {}, abstain {}\ndecided  {} UTC\nhash     {}\nsigned   {}\nkey      valid from {} UTC, {until}{saved}",
            verified.proposal_id,
            verified.domain_id,
            verified.outcome,
            t.for_,
            t.against,
            t.abstain,
            time(verified.timestamp),
            verified.decision_hash,
            verified.signer,
            time(verified.key.valid_from),
        )
    })
}
