-- One notification for many recipients, stored once with the change that causes it and expanded
-- into one `notifications` row per recipient after the commit.
CREATE TABLE notification_fanouts (
    pos        INTEGER PRIMARY KEY AUTOINCREMENT,
    recipients TEXT NOT NULL,             -- JSON array of DIDs, in order
    coop_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
