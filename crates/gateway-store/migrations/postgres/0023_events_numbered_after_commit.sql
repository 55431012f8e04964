-- A coop's events are numbered after their commit, not inside it (INTERFACE.md §9: 1, 2, …
-- without gaps, durable, per coop). Numbered inside `COMMIT` (0011), each of the coop's commits
-- held its `event_counters` row, and its `history_counts` total (0021), until its WAL flush had
-- ended, so one coop's units of work committed one flush at a time, from every replica. Now:
--
-- - a unit of work writes its events with a placeholder number (negative, from
--   `event_placeholders`; kept in `placeholder` too) and commits without touching a row another
--   unit of work of the coop needs;
-- - after its commit, the replica that ran it asks its numberer, which calls `number_events` for
--   every commit that waits on this replica, one call at a time: holding each coop's numbering
--   lock (an advisory lock, no row, no WAL), it gives every committed event of the coop still
--   waiting its number, in the order they were written, moves the counter, gives waiting keyed
--   answers their number and adds the waiting history counts to their totals: one transaction,
--   one flush, for every commit, of any coop, that ended while the previous numbering ran;
-- - each replica numbers, once a second, every coop whose events still wait (a replica that died
--   between a commit and its numbering left them).
--
-- Numbers follow the order in which events become visible to the numbering, a unit of work's
-- events together: an event written after another unit of work's commit (because it read or
-- waited for what that one changed) is numbered after that one's. Every number up to the counter
-- is committed, so readers of the outbox (by number, `seq > n`) never see a gap, and a waiting
-- event (`seq < 0`) is seen by no one.
DROP TRIGGER events_numbered_at_commit ON events;
DROP FUNCTION number_event();
DROP TRIGGER idempotent_answer_numbered_at_commit ON idempotency;
DROP FUNCTION number_idempotent_answer();

ALTER TABLE events ADD COLUMN placeholder BIGINT;
CREATE INDEX events_waiting ON events (coop_id) WHERE seq < 0;
-- A keyed answer whose last event waits for its number holds that event's placeholder.
CREATE INDEX idempotency_waiting ON idempotency (event_seq) WHERE event_seq < 0;

-- The coop-wide history totals (account '': every transaction of the coop counts for ('', '') and
-- for ('', each currency)) are every payment's rows: a transaction counts for them with a row
-- here (no row shared with another transaction), which the numbering adds to `history_counts`.
-- The reads add the waiting rows to the totals, so a total is exact at any moment. The rows
-- naming an account are counted as before, at the commit (0021's deferred trigger, which calls
-- this function).
CREATE TABLE history_count_changes (
    coop_id  TEXT NOT NULL,
    currency TEXT NOT NULL
);
CREATE INDEX history_count_changes_key ON history_count_changes (coop_id, currency);

CREATE OR REPLACE FUNCTION count_transaction() RETURNS trigger LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO history_count_changes (coop_id, currency)
    SELECT NEW.coop_id, c.currency
    FROM (SELECT '' AS currency UNION SELECT NEW.currency
          UNION SELECT NEW.to_currency WHERE NEW.to_currency IS NOT NULL) c;
    INSERT INTO history_counts (coop_id, account, currency, n)
    SELECT NEW.coop_id, a.account, c.currency, 1
    FROM (SELECT NEW.from_account AS account UNION SELECT NEW.to_account) a,
         (SELECT '' AS currency UNION SELECT NEW.currency
          UNION SELECT NEW.to_currency WHERE NEW.to_currency IS NOT NULL) c
    ORDER BY a.account, c.currency
    ON CONFLICT (coop_id, account, currency) DO UPDATE SET n = history_counts.n + 1;
    RETURN NULL;
END
$$;

-- The advisory lock keys of a coop: its numbering (held by `number_events`), and its writers
-- (taken shared by every unit of work as it writes the coop's events, exclusive by the log's
-- opening of a coop from before the log, which must read the coop's state as of its counter).
-- Advisory locks are the database's, whatever the schema: the key names the schema too.
CREATE FUNCTION coop_lock_key(kind TEXT, coop TEXT) RETURNS BIGINT LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$ SELECT hashtextextended(current_schema() || chr(9) || kind || chr(9) || coop, 0) $$;

-- Numbers the coop's committed events still waiting, in the order they were written; the
-- caller holds the coop's numbering lock. Returns the coop's counter.
CREATE FUNCTION number_waiting(p_coop TEXT) RETURNS BIGINT LANGUAGE plpgsql
SET search_path FROM CURRENT AS $$
DECLARE
    last_seq BIGINT;
    added BIGINT;
BEGIN
    -- Each statement sees every commit before it (READ COMMITTED): those the lock waited for too.
    SELECT c.seq INTO last_seq FROM event_counters c WHERE c.coop_id = p_coop;
    last_seq := COALESCE(last_seq, 0);
    -- A unit of work's events stay together: units of work in the order of their first event,
    -- each one's events in the order it wrote them (placeholders count down).
    WITH waiting AS (
        SELECT w.placeholder, last_seq + row_number() OVER (ORDER BY w.first_of_its_work DESC, w.placeholder DESC) AS given
        FROM (SELECT e.seq AS placeholder, max(e.seq) OVER (PARTITION BY e.xmin::text) AS first_of_its_work
              FROM events e WHERE e.coop_id = p_coop AND e.seq < 0) w
    ), numbered AS (
        UPDATE events e SET seq = w.given FROM waiting w
        WHERE e.coop_id = p_coop AND e.seq = w.placeholder
        RETURNING w.placeholder, w.given
    ), answered AS (
        UPDATE idempotency i SET event_seq = n.given FROM numbered n
        WHERE i.event_seq < 0 AND i.event_seq = n.placeholder
    )
    SELECT COUNT(*) INTO added FROM numbered;
    IF added = 0 THEN
        RETURN last_seq;
    END IF;
    INSERT INTO event_counters (coop_id, seq) VALUES (p_coop, last_seq + added)
        ON CONFLICT (coop_id) DO UPDATE SET seq = excluded.seq;
    WITH moved AS (
        DELETE FROM history_count_changes h WHERE h.coop_id = p_coop RETURNING h.currency
    )
    INSERT INTO history_counts (coop_id, account, currency, n)
    SELECT p_coop, '', m.currency, COUNT(*) FROM moved m GROUP BY m.currency ORDER BY m.currency
    ON CONFLICT (coop_id, account, currency) DO UPDATE SET n = history_counts.n + excluded.n;
    RETURN last_seq + added;
END
$$;

-- Numbers the waiting events of each coop named in `p_coops`, taking their numbering locks in
-- the order of their ids (so that two calls never wait for each other in a cycle), one
-- transaction for them all. One row per element of the arrays, by its position `ord`: the
-- coop's counter, and the number the event of `p_coops[ord]` written with `p_placeholders[ord]`
-- got (NULL where none was asked or it is not found).
CREATE FUNCTION number_events(p_coops TEXT[], p_placeholders BIGINT[])
RETURNS TABLE (ord BIGINT, counter BIGINT, given BIGINT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    c TEXT;
    n BIGINT;
BEGIN
    -- A replica gives up on an answer after 5 s (the store's deadline); a call it gave up on
    -- stops waiting for locks then too, rather than queue behind the numbering that follows.
    PERFORM set_config('lock_timeout', '5s', true);
    FOR c IN SELECT DISTINCT x FROM unnest(p_coops) AS x ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(coop_lock_key('numbering', c));
        n := number_waiting(c);
        -- Each looked for from the counter down: a waiting event is numbered among the latest.
        RETURN QUERY
        SELECT u.ord, n, f.seq
        FROM unnest(p_coops, p_placeholders) WITH ORDINALITY AS u(coop, placeholder, ord)
        LEFT JOIN LATERAL (
            SELECT e.seq FROM events e
            WHERE u.placeholder IS NOT NULL
              AND e.coop_id = c AND e.seq > 0 AND e.seq <= n AND e.placeholder = u.placeholder
            ORDER BY e.seq DESC LIMIT 1
        ) f ON true
        WHERE u.coop = c;
    END LOOP;
END
$$;

-- The sweep's numbering of one coop: nothing (NULL) when the coop's numbering lock is taken (a
-- numbering that runs numbers every waiting event of the coop anyway), else its counter after.
CREATE FUNCTION sweep_waiting(p_coop TEXT) RETURNS BIGINT
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(coop_lock_key('numbering', p_coop)) THEN
        RETURN NULL;
    END IF;
    RETURN number_waiting(p_coop);
END
$$;

-- The log's opening of a coop from before the log (its `LogOpened` snapshot): takes the coop's
-- writers lock, so that no unit of work of the coop writes events until this transaction ends
-- (each waits at its first event, before its commit), waits for those writing now to commit,
-- and numbers every committed event: the coop's state read afterwards is its state after event
-- `counter`.
CREATE FUNCTION hold_coop_events(p_coop TEXT, OUT counter BIGINT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(coop_lock_key('writers', p_coop));
    PERFORM pg_advisory_xact_lock(coop_lock_key('numbering', p_coop));
    counter := number_waiting(p_coop);
END
$$;

-- Events committed before this migration are numbered already. Every replica of the previous
-- version is stopped before a new one writes (README, "Upgrading"): they number at the commit.
