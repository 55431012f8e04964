//! Notifications: [`NotificationTx`] (single rows, fan-outs and their expansion, read marks) and
//! the `notifications` row.

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, JsonText};
use gateway_domain::ports::{NotificationFanout, NotificationRecord, NotificationTx};

use super::{Conn, parse_coop, parse_did, to_i64, to_u64};

/// Columns of `notifications`, in the order of [`NotificationRow`].
pub(crate) const NOTIFICATION_COLUMNS: &str = "id, recipient, coop_id, kind, title, body, data, created_at, read_at";

/// A `notifications` row: [`NOTIFICATION_COLUMNS`].
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct NotificationRow {
    id: String,
    recipient: String,
    coop_id: String,
    kind: String,
    title: String,
    body: String,
    data: String,
    created_at: i64,
    read_at: Option<i64>,
}

named_row!(NotificationRow { id, recipient, coop_id, kind, title, body, data, created_at, read_at });

pub(crate) fn notification_from_row(row: NotificationRow) -> Result<NotificationRecord, Error> {
    Ok(NotificationRecord {
        id: row.id,
        recipient: parse_did(&row.recipient)?,
        coop_id: parse_coop(&row.coop_id)?,
        kind: row.kind,
        title: row.title,
        body: row.body,
        data: JsonText::parse(row.data)
            .map_err(|e| Error::Internal(format!("stored data of a notification is not JSON: {e}")))?,
        created_at: to_u64(row.created_at),
        read_at: row.read_at.map(to_u64),
    })
}

#[async_trait]
impl NotificationTx for Conn<'_> {
    async fn insert_notification(&mut self, n: &NotificationRecord) -> Result<(), Error> {
        let sql = super::shaped("insert_notification", 0, || {
            format!(
                "INSERT INTO notifications ({NOTIFICATION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
            )
        });
        let data = n.data.to_string();
        self.defer(
            "notifications",
            sql,
            args![
                &n.id,
                n.recipient.as_str(),
                n.coop_id.as_str(),
                &n.kind,
                &n.title,
                &n.body,
                &data,
                to_i64(n.created_at)?,
                n.read_at.map(to_i64).transpose()?
            ],
        )
        .await
    }

    async fn insert_notification_fanout(&mut self, f: &NotificationFanout) -> Result<(), Error> {
        let recipients = serde_json::Value::from(f.recipients.iter().map(Did::as_str).collect::<Vec<_>>()).to_string();
        let data = f.data.to_string();
        self.execute(
            "INSERT INTO notification_fanouts (recipients, coop_id, kind, title, body, data, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            args![&recipients, f.coop_id.as_str(), &f.kind, &f.title, &f.body, &data, to_i64(f.created_at)?],
        )
        .await
        .map(|_| ())
    }

    async fn expand_notification_fanouts(&mut self) -> Result<u64, Error> {
        // Each recipient's notification gets a fresh id of the same form as `new_id`'s (32 hex
        // digits: the time in milliseconds, then 80 random bits), made by the database as it
        // unpacks the recipients. (The first 12 digits of a version-4 UUID are all random.)
        if self.is_sqlite() {
            // One writer at a time: what is pending now is claimed by this transaction.
            let last: Option<i64> = self.fetch_one("SELECT MAX(pos) FROM notification_fanouts", args![]).await?;
            let Some(last) = last else { return Ok(0) };
            let created = self
                .execute(
                    &format!(
                        "INSERT INTO notifications ({NOTIFICATION_COLUMNS}) \
                         SELECT printf('%012x', CAST(unixepoch('subsec') * 1000 AS INTEGER)) \
                             || lower(hex(randomblob(10))), \
                             r.value, f.coop_id, f.kind, f.title, f.body, f.data, f.created_at, NULL \
                         FROM notification_fanouts f, json_each(f.recipients) r \
                         WHERE f.pos <= $1 \
                         ORDER BY f.pos, r.key"
                    ),
                    args![last],
                )
                .await?;
            self.execute("DELETE FROM notification_fanouts WHERE pos <= $1", args![last]).await?;
            return Ok(created);
        }
        // Replicas may expand at the same time: deleting claims the rows (a concurrent
        // expansion waits for the lock and then finds them gone).
        let created = self
            .execute(
                &format!(
                    "WITH claimed AS (DELETE FROM notification_fanouts RETURNING *) \
                     INSERT INTO notifications ({NOTIFICATION_COLUMNS}) \
                     SELECT lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0') \
                         || left(replace(gen_random_uuid()::text, '-', ''), 12) \
                         || left(gen_random_uuid()::text, 8), \
                         r.value, f.coop_id, f.kind, f.title, f.body, f.data, f.created_at, NULL \
                     FROM claimed f, \
                         json_array_elements_text(f.recipients::json) WITH ORDINALITY AS r(value, n) \
                     ORDER BY f.pos, r.n"
                ),
                args![],
            )
            .await?;
        Ok(created)
    }

    async fn mark_notification_read(
        &mut self,
        recipient: &Did,
        coop: &CoopId,
        id: &str,
        at: u64,
    ) -> Result<Option<NotificationRecord>, Error> {
        self.execute(
            "UPDATE notifications SET read_at = $4 \
             WHERE recipient = $1 AND coop_id = $2 AND id = $3 AND read_at IS NULL",
            args![recipient.as_str(), coop.as_str(), id, to_i64(at)?],
        )
        .await
        .map(|_| ())?;
        let sql = format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications \
             WHERE recipient = $1 AND coop_id = $2 AND id = $3"
        );
        let row: Option<NotificationRow> =
            self.fetch_optional(&sql, args![recipient.as_str(), coop.as_str(), id]).await?;
        row.map(notification_from_row).transpose()
    }

    async fn mark_all_notifications_read(&mut self, recipient: &Did, coop: &CoopId, at: u64) -> Result<u64, Error> {
        let done = self
            .execute(
                "UPDATE notifications SET read_at = $3 \
                 WHERE recipient = $1 AND coop_id = $2 AND read_at IS NULL",
                args![recipient.as_str(), coop.as_str(), to_i64(at)?],
            )
            .await?;
        Ok(done)
    }

    async fn prune_notifications(&mut self, read_before: u64, created_before: u64) -> Result<u64, Error> {
        self.execute(
            "DELETE FROM notifications WHERE read_at < $1 OR created_at < $2",
            args![to_i64(read_before)?, to_i64(created_before)?],
        )
        .await
    }
}
