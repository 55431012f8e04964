//! `notifications [--unread]` and `notifications read <id>|--all`. Only the caller's own
//! notifications exist for it; there is no way to read anyone else's.

use gateway_client::PageRequest;

use super::{Context, LoggedIn};
use crate::cli::{NotificationsArgs, NotificationsCommand};
use crate::output::{Table, time};

pub(crate) async fn run(context: &Context, session: &LoggedIn, args: NotificationsArgs) -> anyhow::Result<()> {
    let client = &session.client;
    match args.action {
        Some(NotificationsCommand::Read { all: true, .. }) => {
            let marked = client.mark_all_notifications_read().await?;
            context.out.show(&serde_json::json!({ "marked": marked }), || format!("marked {marked} read"))
        }
        Some(NotificationsCommand::Read { id, .. }) => {
            let id = id.unwrap_or_default();
            let notification = client.mark_notification_read(&id).await?;
            context.out.show(&notification, || format!("marked {} read", notification.id))
        }
        None => {
            let page = client.notifications(args.unread, PageRequest::first(args.limit)).await?;
            context.out.show(&page, || {
                let mut table = Table::new(&["ID", "TIME (UTC)", "", "KIND", "TITLE"]);
                for n in &page.notifications {
                    let mark = if n.read { " " } else { "*" };
                    table.row(vec![n.id.clone(), time(n.created_at), mark.into(), n.kind.clone(), n.title.clone()]);
                }
                let empty = if args.unread { "no unread notifications" } else { "no notifications" };
                format!("{}\n({} unread)", table.render(empty), page.unread_count)
            })
        }
    }
}
