-- The coop's log (INTERFACE.md §12): one append-only Merkle log per coop. Entry 0 is `LogOpened` (a
-- snapshot of the coop when its log began, after event `after_seq`); entry i >= 1 is event
-- `after_seq + i`, as `{"seq":…,"event":…}` text. Entries and tiles are only ever added (a
-- partial tile is replaced by a wider one); the outbox's retention never reaches them.
CREATE TABLE coop_logs (
    coop_id     TEXT PRIMARY KEY NOT NULL,
    after_seq   INTEGER NOT NULL,
    size        INTEGER NOT NULL,   -- entries stored and hashed
    signed_size INTEGER NOT NULL,   -- tree size of the latest signed checkpoint (0: none)
    checkpoint  TEXT                -- that checkpoint, as the signed note published
);

CREATE TABLE log_entries (
    coop_id TEXT NOT NULL,
    idx     INTEGER NOT NULL,
    entry   TEXT NOT NULL,
    PRIMARY KEY (coop_id, idx)
) WITHOUT ROWID;

-- C2SP tlog-tiles hash tiles: at level L, tile N holds the hashes of the complete subtrees of
-- height 8L numbered 256N.., 32 bytes each, as many as the tree has so far (at most 256).
CREATE TABLE log_tiles (
    coop_id TEXT NOT NULL,
    level   INTEGER NOT NULL,
    idx     INTEGER NOT NULL,
    hashes  BLOB NOT NULL,
    PRIMARY KEY (coop_id, level, idx)
) WITHOUT ROWID;
