//! `coop create|show|members|add-member|remove-member|set-role`. Role and ownership rules
//! (admins only, never the last admin) are the gateway's; nothing is pre-checked here.

use anyhow::Context as _;
use gateway_client::{NewCoop, PageRequest};
use gateway_core::{CoopId, Role};

use super::{Context, LoggedIn};
use crate::cli::CoopCommand;
use crate::output::{Table, time};

fn role(text: &str) -> Role {
    Role::parse(text).unwrap_or(Role::Member)
}

fn coop_or_login(session: &LoggedIn, id: Option<String>) -> anyhow::Result<CoopId> {
    match id {
        Some(id) => CoopId::parse(&id).map_err(|why| anyhow::anyhow!("invalid cooperative id '{id}': {why}")),
        None => session.coop().cloned(),
    }
}

pub(crate) async fn run(context: &Context, session: &LoggedIn, command: CoopCommand) -> anyhow::Result<()> {
    let client = &session.client;
    let out = context.out;
    match command {
        CoopCommand::Create { id, name, coop_type, description } => {
            let id = coop_or_login(session, id)?;
            let coop = client
                .create_coop(&NewCoop { id: Some(id.to_string()), name, coop_type, description })
                .await
                .context("creating the cooperative")?;
            out.show(&coop, || {
                format!(
                    "created cooperative {} ({}); you are its admin\nlog in again with all scopes: `gatewayctl --coop {} login --scopes all`",
                    coop.id, coop.name, coop.id
                )
            })
        }
        CoopCommand::Show { id } => {
            let coop = client.coop(&coop_or_login(session, id)?).await?;
            out.show(&coop, || {
                let s = &coop.settings;
                format!(
                    "{} ({}, {})\n{}\ncreated     {} UTC by {}\nmembers     {}\ncurrency    {}\ncredit      {}\nhigh value  {}\nfee         {} %\nquorum      {} %",
                    coop.id,
                    coop.name,
                    coop.coop_type,
                    coop.description,
                    time(coop.created_at),
                    coop.created_by,
                    coop.member_count,
                    s.default_currency,
                    s.credit_limit,
                    s.high_value_threshold,
                    s.conversion_fee_percent,
                    s.quorum_percent
                )
            })
        }
        CoopCommand::Members(page) => {
            let coop = session.coop()?;
            let members =
                client.members(coop, PageRequest { limit: Some(page.limit), offset: Some(page.offset) }).await?;
            out.show(&members, || {
                let mut table = Table::new(&["DID", "ROLE", "JOINED (UTC)", "CREDIT LIMIT"]);
                for m in &members.members {
                    let limit = m.credit_limit.map(|l| l.to_string()).unwrap_or_else(|| "coop default".into());
                    table.row(vec![m.did.clone(), m.role.clone(), time(m.joined_at), limit]);
                }
                let footer = if members.pagination.has_more {
                    format!("\n({} of {}; more with --offset)", members.members.len(), members.pagination.total)
                } else {
                    String::new()
                };
                format!("{}{footer}", table.render("no members"))
            })
        }
        CoopCommand::AddMember { did, role: name } => {
            let member = client.add_member(session.coop()?, &did, Some(role(&name))).await?;
            out.show(&member, || format!("added {} as {}", member.did, member.role))
        }
        CoopCommand::RemoveMember { did } => {
            client.remove_member(session.coop()?, &did).await?;
            out.show(&serde_json::json!({ "removed": did.as_str() }), || format!("removed {did}"))
        }
        CoopCommand::SetRole { did, role: name } => {
            let member = client.set_role(session.coop()?, &did, role(&name)).await?;
            out.show(&member, || format!("{} is now {}", member.did, member.role))
        }
    }
}
