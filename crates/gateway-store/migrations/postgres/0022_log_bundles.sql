-- A coop's log entries, 256 at a time (INTERFACE.md §12): once a bundle of entries 256N..256N+255
-- is complete, the checkpointer hashes its stored entries again against their leaves, writes them
-- here as the C2SP tlog-tiles entry bundle they are served as (each entry's length as a
-- big-endian u16, then its bytes) and deletes their rows from log_entries, in one unit of work.
-- log_entries then holds only the entries of the partial bundle at the log's end (and, for a log
-- written before this table, the full bundles not yet moved, a few each round).
CREATE TABLE log_bundles (
    coop_id TEXT NOT NULL,
    idx     BIGINT NOT NULL,
    bundle  BYTEA NOT NULL,
    PRIMARY KEY (coop_id, idx)
);
