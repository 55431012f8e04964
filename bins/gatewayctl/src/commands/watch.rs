//! `watch`: follows the cooperative's event stream, one line per event, through reconnects,
//! until Ctrl-C. Reconnects, gaps and truncations are reported on stderr so that stdout stays
//! one event per line.

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
                println!("#{:<6} {}  {:<28} {}", event.seq, time(event.timestamp), event.event_type, event.data)
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
