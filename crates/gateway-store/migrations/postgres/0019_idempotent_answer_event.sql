-- The number of the last event a keyed operation appended, kept with its answer, so that a
-- replay of the answer carries the same `ICN-Event-Seq` as the first one (INTERFACE.md §12). NULL
-- for an answer that appended no event (a refusal) and for answers stored before this column.
--
-- On PostgreSQL the number is given at `COMMIT` (0011): after writing the unit of work's events,
-- the store sets such an answer's `event_seq` to -1, and this deferred trigger, queued after
-- theirs and so run after them, copies the number the last of them got (0016's `icn.event_seq`).
ALTER TABLE idempotency ADD COLUMN event_seq BIGINT;

CREATE FUNCTION number_idempotent_answer() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE idempotency
        SET event_seq = split_part(current_setting('icn.event_seq'), chr(9), 2)::BIGINT
        WHERE key = NEW.key;
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER idempotent_answer_numbered_at_commit
    AFTER INSERT OR UPDATE ON idempotency
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.event_seq = -1)
    EXECUTE FUNCTION number_idempotent_answer();
