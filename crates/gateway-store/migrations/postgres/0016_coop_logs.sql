-- The coop's log (INTERFACE.md §12): one append-only Merkle log per coop. Entry 0 is `LogOpened` (a
-- snapshot of the coop when its log began, after event `after_seq`); entry i >= 1 is event
-- `after_seq + i`, as `{"seq":…,"event":…}` text. Entries and tiles are only ever added (a
-- partial tile is replaced by a wider one); the outbox's retention never reaches them.
CREATE TABLE coop_logs (
    coop_id     TEXT PRIMARY KEY NOT NULL,
    after_seq   BIGINT NOT NULL,
    size        BIGINT NOT NULL,   -- entries stored and hashed
    signed_size BIGINT NOT NULL,   -- tree size of the latest signed checkpoint (0: none)
    checkpoint  TEXT               -- that checkpoint, as the signed note published
);

CREATE TABLE log_entries (
    coop_id TEXT NOT NULL,
    idx     BIGINT NOT NULL,
    entry   TEXT NOT NULL,
    PRIMARY KEY (coop_id, idx)
);

-- C2SP tlog-tiles hash tiles: at level L, tile N holds the hashes of the complete subtrees of
-- height 8L numbered 256N.., 32 bytes each, as many as the tree has so far (at most 256).
CREATE TABLE log_tiles (
    coop_id TEXT NOT NULL,
    level   INTEGER NOT NULL,
    idx     BIGINT NOT NULL,
    hashes  BYTEA NOT NULL,
    PRIMARY KEY (coop_id, level, idx)
);

-- The numbering trigger of 0011 also leaves the last number it gave in the session's
-- `icn.event_seq` (`<coop>\t<seq>`), which the store reads on the same connection after the
-- commit: the answer of the operation that appended the event carries it (`ICN-Event-Seq`).
-- Set with is_local = false, it outlives the transaction only if the transaction commits.
CREATE OR REPLACE FUNCTION number_event() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    next_seq BIGINT;
BEGIN
    INSERT INTO event_counters (coop_id, seq) VALUES (NEW.coop_id, 1)
        ON CONFLICT (coop_id) DO UPDATE SET seq = event_counters.seq + 1
        RETURNING seq INTO next_seq;
    UPDATE events SET seq = next_seq WHERE coop_id = NEW.coop_id AND seq = NEW.seq;
    PERFORM pg_notify('icn_events', NEW.coop_id || chr(9) || next_seq);
    PERFORM set_config('icn.event_seq', NEW.coop_id || chr(9) || next_seq, false);
    RETURN NULL;
END
$$;
