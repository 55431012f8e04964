//! `watch`: follows the cooperative's event stream, one line per event, through reconnects,
//! until Ctrl-C: a readable line (`#12  16:00:05  PaymentCreated  did:key:…alice → did:key:…bob
//! 2.5 EUR "bread"`), or the event as JSON with `--json`. Reconnects, gaps and truncations are
//! reported on stderr so that stdout stays one event per line.

use gateway_client::{StreamItem, SubscribeOptions};

use super::{Context, LoggedIn};
use crate::cli::WatchArgs;
use crate::output::time;

pub(crate) async fn run(context: &Context, session: &LoggedIn, args: WatchArgs) -> anyhow::Result<()> {
    let coop = session.coop()?;
    let mut events =
        session.client.subscribe(coop, SubscribeOptions { after_seq: args.after_seq, ..SubscribeOptions::default() });
    let json = context.out.json;
    loop {
        let item = tokio::select! {
            item = events.next() => item,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Some(item) = item else { return Ok(()) };
        match item {
            StreamItem::Event(event) if json => println!("{}", serde_json::to_string(&event)?),
            StreamItem::Event(event) => {
                let data: serde_json::Value = serde_json::from_str(event.data.as_str()).unwrap_or_default();
                println!(
                    "#{:<6} {}  {:<28} {}",
                    event.seq,
                    time(event.timestamp),
                    event.event_type,
                    summary(&event.event_type, &data)
                )
            }
            StreamItem::Connected { current_seq, resuming_after, .. } => match resuming_after {
                Some(after) => eprintln!("connected to {coop} (at #{current_seq}); catching up from #{after}"),
                None => eprintln!("connected to {coop} (at #{current_seq}); waiting for events, Ctrl-C to stop"),
            },
            StreamItem::BackfillComplete { .. } => {}
            StreamItem::Gap { first_missing, last_missing } => {
                eprintln!("warning: events #{first_missing}..#{last_missing} never arrived")
            }
            StreamItem::Truncated { oldest_seq } => eprintln!(
                "warning: events before #{oldest_seq} are no longer kept by the gateway; re-read state (e.g. `gatewayctl history`)"
            ),
            StreamItem::ServerError { message } => eprintln!("gateway: {message}"),
            StreamItem::Disconnected { reason, reconnect_in } => {
                eprintln!("disconnected: {reason}; reconnecting in {:.1} s", reconnect_in.as_secs_f64())
            }
            StreamItem::Failed(error) => return Err(error.into()),
        }
    }
}

/// The gist of an event's `data` in words: who paid whom how much, who voted what, which
/// proposal closed how; for any other kind, its plain fields as `name=value`.
fn summary(kind: &str, data: &serde_json::Value) -> String {
    let text = |key: &str| match &data[key] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    match kind {
        "PaymentCreated" => {
            let memo = text("memo");
            let memo = if memo.is_empty() { String::new() } else { format!(" {memo:?}") };
            format!("{} → {}  {} {}{memo}", text("from"), text("to"), text("amount"), text("currency"))
        }
        "GovernanceVoteCast" => format!("{} voted {} on {}", text("voter"), text("choice"), text("proposal_id")),
        "GovernanceProposalClosed" => format!(
            "{} {:?}: {} (for {}, against {}, abstain {})",
            text("proposal_id"),
            text("title"),
            text("outcome"),
            data["tally"]["for"],
            data["tally"]["against"],
            data["tally"]["abstain"]
        ),
        "GovernanceProposalCreated" | "GovernanceProposalOpened" => {
            format!("{} {:?} in {} by {}", text("proposal_id"), text("title"), text("domain_id"), text("author"))
        }
        _ => match data.as_object() {
            Some(fields) => fields
                .iter()
                .filter(|(_, value)| !value.is_object() && !value.is_array())
                .map(|(key, value)| match value {
                    serde_json::Value::String(s) => format!("{key}={s}"),
                    other => format!("{key}={other}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            None => data.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::summary;

    #[test]
    fn events_read_as_words() {
        let paid = json!({"id": "t1", "from": "did:key:alice", "to": "did:key:bob", "amount": 2.5, "currency": "EUR", "memo": "bread"});
        assert_eq!(summary("PaymentCreated", &paid), "did:key:alice → did:key:bob  2.5 EUR \"bread\"");
        let vote = json!({"proposal_id": "p1", "voter": "did:key:bob", "choice": "for", "replaced": false});
        assert_eq!(summary("GovernanceVoteCast", &vote), "did:key:bob voted for on p1");
        let closed = json!({"proposal_id": "p1", "title": "Sundays", "outcome": "Approved",
            "tally": {"for": 2, "against": 0, "abstain": 1}});
        assert_eq!(
            summary("GovernanceProposalClosed", &closed),
            "p1 \"Sundays\": Approved (for 2, against 0, abstain 1)"
        );
        let other = json!({"did": "did:key:carol", "role": "member", "nested": {"x": 1}});
        assert_eq!(summary("MemberAdded", &other), "did=did:key:carol role=member");
    }
}
