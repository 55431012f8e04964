-- Committed events are announced to the other replicas after the commit, by each replica's
-- announcer (one `pg_notify` statement per batch of commits), no longer by the commit itself:
-- a commit that notifies holds PostgreSQL's one notification lock of the database until its WAL
-- is flushed, so every replica's writing commits queued on it. The numbering trigger keeps the
-- rest of its work (0011, 0016).
CREATE OR REPLACE FUNCTION number_event() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    next_seq BIGINT;
BEGIN
    INSERT INTO event_counters (coop_id, seq) VALUES (NEW.coop_id, 1)
        ON CONFLICT (coop_id) DO UPDATE SET seq = event_counters.seq + 1
        RETURNING seq INTO next_seq;
    UPDATE events SET seq = next_seq WHERE coop_id = NEW.coop_id AND seq = NEW.seq;
    PERFORM set_config('icn.event_seq', NEW.coop_id || chr(9) || next_seq, false);
    RETURN NULL;
END
$$;
