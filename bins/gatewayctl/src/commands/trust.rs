//! `trust score|set|revoke|edges`. Scores are computed by the gateway from its graph; the
//! command line never derives one itself.

use gateway_client::PageRequest;

use super::{Context, LoggedIn};
use crate::cli::TrustCommand;
use crate::output::{Table, short_did, time};

pub(crate) async fn run(context: &Context, session: &LoggedIn, command: TrustCommand) -> anyhow::Result<()> {
    let client = &session.client;
    let out = context.out;
    match command {
        TrustCommand::Score { did } => {
            let score = client.trust_score(&did).await?;
            out.show(&score, || format!("{}: {:.3} ({})", score.did, score.score, score.class))
        }
        TrustCommand::Set { did, score } => {
            let update = client.set_trust(&did, score).await?;
            out.show(&update, || {
                let verb = if update.replaced { "replaced" } else { "set" };
                format!("{verb} your trust in {} to {}", update.edge.target_did, update.edge.score)
            })
        }
        TrustCommand::Revoke { did } => {
            client.revoke_trust(&did).await?;
            out.show(&serde_json::json!({ "revoked": did.as_str() }), || format!("revoked your trust in {did}"))
        }
        TrustCommand::Edges { did, page } => {
            let edges =
                client.trust_edges(&did, PageRequest { limit: Some(page.limit), offset: Some(page.offset) }).await?;
            out.show(&edges, || {
                let mut outgoing = Table::new(&["TRUSTS", "SCORE", "SINCE (UTC)"]);
                for e in edges.outgoing() {
                    outgoing.row(vec![short_did(&e.target_did), e.score.to_string(), time(e.updated_at)]);
                }
                let mut incoming = Table::new(&["TRUSTED BY", "SCORE", "SINCE (UTC)"]);
                for e in edges.incoming() {
                    incoming.row(vec![short_did(&e.source_did), e.score.to_string(), time(e.updated_at)]);
                }
                let footer = if edges.pagination.has_more {
                    format!("\n({} of {}; more with --offset)", edges.edges.len(), edges.pagination.total)
                } else {
                    String::new()
                };
                format!(
                    "{did}\n\n{}\n\n{}{footer}",
                    outgoing.render("trusts nobody"),
                    incoming.render("trusted by nobody")
                )
            })
        }
    }
}
