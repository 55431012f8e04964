-- A coop's events are numbered 1, 2, … without gaps in commit order: the number comes from the
-- coop's `event_counters` row, which stays locked until the commit, so every unit of work of the
-- coop that appends an event waits for the previous one's commit. Numbered by the store's
-- statements, the row was also held across the round trips to the gateway that ended the unit of
-- work (the last statement's answer, then `COMMIT`). Numbered here instead, by a deferred trigger
-- that runs inside `COMMIT`, it is held only for the numbering and the commit's own WAL write.
--
-- The store inserts each event with a placeholder number (negative, from this sequence, unique
-- and never seen outside the unit of work); at `COMMIT` the trigger takes the coop's next number
-- for each such row, in the order the rows were inserted, and announces it to every replica.
CREATE SEQUENCE event_placeholders;

CREATE FUNCTION number_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    next_seq BIGINT;
BEGIN
    INSERT INTO event_counters (coop_id, seq) VALUES (NEW.coop_id, 1)
        ON CONFLICT (coop_id) DO UPDATE SET seq = event_counters.seq + 1
        RETURNING seq INTO next_seq;
    UPDATE events SET seq = next_seq WHERE coop_id = NEW.coop_id AND seq = NEW.seq;
    PERFORM pg_notify('icn_events', NEW.coop_id || chr(9) || next_seq);
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER events_numbered_at_commit
    AFTER INSERT ON events
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.seq < 0)
    EXECUTE FUNCTION number_event();
