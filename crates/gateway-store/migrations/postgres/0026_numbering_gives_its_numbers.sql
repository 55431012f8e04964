-- The numbering (0023) told each waiting answer its event's number by looking for it afterwards:
-- for every placeholder asked, a walk down the coop's events from the counter until the event
-- written with it. Most commits of a busy coop are numbered by the numbering that runs when they
-- commit, and ask the next one, which walked for each of them (measured at one coop, one
-- replica: 14 events a numbering, 351 of its 854 buffer reads on those walks; docs/PERFORMANCE.md,
-- "`postgres`"). Now:
--
-- - `number_waiting` returns the numbers it gave with their placeholders;
-- - `number_events` answers each asked placeholder from them, walking the events only for one
--   another numbering (the sweep, another replica's) numbered first, and returns every number it
--   gave as well (rows without `ord`), so that the replica answers the commits that asked while
--   it ran, and were numbered by it, without another call.
--
-- The numbering's update finds each waiting event by its row's address (`ctid`), read in the
-- same statement, rather than by joining on the coop's primary key: with the table's statistics
-- still those of a small table, PostgreSQL joined the waiting events with every event of the
-- coop (a hash join over the whole history, each numbering).

DROP FUNCTION number_waiting(TEXT);

-- Numbers the coop's committed events still waiting, in the order they were written; the
-- caller holds the coop's numbering lock. Returns the coop's counter and, position by position,
-- the placeholders it numbered and the numbers they got.
CREATE FUNCTION number_waiting(p_coop TEXT, OUT counter BIGINT, OUT placeholders BIGINT[], OUT givens BIGINT[])
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    last_seq BIGINT;
    added BIGINT;
BEGIN
    -- Each statement sees every commit before it (READ COMMITTED): those the lock waited for too.
    SELECT c.seq INTO last_seq FROM event_counters c WHERE c.coop_id = p_coop;
    last_seq := COALESCE(last_seq, 0);
    -- A unit of work's events stay together: units of work in the order of their first event,
    -- each one's events in the order it wrote them (placeholders count down). Only a numbering
    -- changes a waiting event, under the lock the caller holds: the address read here is still
    -- the event's when the update runs.
    WITH waiting AS (
        SELECT w.tid, w.placeholder,
               last_seq + row_number() OVER (ORDER BY w.first_of_its_work DESC, w.placeholder DESC) AS given
        FROM (SELECT e.ctid AS tid, e.seq AS placeholder,
                     max(e.seq) OVER (PARTITION BY e.xmin::text) AS first_of_its_work
              FROM events e WHERE e.coop_id = p_coop AND e.seq < 0) w
    ), numbered AS (
        UPDATE events e SET seq = w.given FROM waiting w
        WHERE e.ctid = w.tid
        RETURNING w.placeholder, w.given
    ), answered AS (
        UPDATE idempotency i SET event_seq = n.given FROM numbered n
        WHERE i.event_seq < 0 AND i.event_seq = n.placeholder
    )
    SELECT COUNT(*), array_agg(n.placeholder), array_agg(n.given)
    INTO added, placeholders, givens FROM numbered n;
    IF added = 0 THEN
        counter := last_seq;
        RETURN;
    END IF;
    INSERT INTO event_counters (coop_id, seq) VALUES (p_coop, last_seq + added)
        ON CONFLICT (coop_id) DO UPDATE SET seq = excluded.seq;
    WITH moved AS (
        DELETE FROM history_count_changes h WHERE h.coop_id = p_coop RETURNING h.currency
    )
    INSERT INTO history_counts (coop_id, account, currency, n)
    SELECT p_coop, '', m.currency, COUNT(*) FROM moved m GROUP BY m.currency ORDER BY m.currency
    ON CONFLICT (coop_id, account, currency) DO UPDATE SET n = history_counts.n + excluded.n;
    counter := last_seq + added;
END
$$;

DROP FUNCTION number_events(TEXT[], BIGINT[]);

-- Numbers the waiting events of each coop named in `p_coops`, taking their numbering locks in
-- the order of their ids (so that two calls never wait for each other in a cycle), one
-- transaction for them all. One row per element of the arrays, by its position `ord`: the
-- coop's counter, and the number the event of `p_coops[ord]` written with `p_placeholders[ord]`
-- got (NULL where none was asked or it is not found); then one row per event this call numbered
-- (`ord` NULL): its coop's counter, its placeholder and its number.
CREATE FUNCTION number_events(p_coops TEXT[], p_placeholders BIGINT[])
RETURNS TABLE (ord BIGINT, counter BIGINT, placeholder BIGINT, given BIGINT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    c TEXT;
    numbered RECORD;
BEGIN
    -- A replica gives up on an answer after 5 s (the store's deadline); a call it gave up on
    -- stops waiting for locks then too, rather than queue behind the numbering that follows.
    PERFORM set_config('lock_timeout', '5s', true);
    FOR c IN SELECT DISTINCT x FROM unnest(p_coops) AS x ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(coop_lock_key('numbering', c));
        numbered := number_waiting(c);
        RETURN QUERY
        SELECT u.ord, numbered.counter, u.placeholder, COALESCE(g.given, f.seq)
        FROM unnest(p_coops, p_placeholders) WITH ORDINALITY AS u(coop, placeholder, ord)
        LEFT JOIN unnest(numbered.placeholders, numbered.givens) AS g(placeholder, given)
            ON g.placeholder = u.placeholder
        -- Numbered before this call: looked for from the counter down, among the latest.
        LEFT JOIN LATERAL (
            SELECT e.seq FROM events e
            WHERE u.placeholder IS NOT NULL AND g.given IS NULL
              AND e.coop_id = c AND e.seq > 0 AND e.seq <= numbered.counter AND e.placeholder = u.placeholder
            ORDER BY e.seq DESC LIMIT 1
        ) f ON true
        WHERE u.coop = c;
        RETURN QUERY
        SELECT NULL::BIGINT, numbered.counter, g.placeholder, g.given
        FROM unnest(numbered.placeholders, numbered.givens) AS g(placeholder, given);
    END LOOP;
END
$$;

-- As in 0023, with the counter from the numbering's result.
CREATE OR REPLACE FUNCTION sweep_waiting(p_coop TEXT) RETURNS BIGINT
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(coop_lock_key('numbering', p_coop)) THEN
        RETURN NULL;
    END IF;
    RETURN (number_waiting(p_coop)).counter;
END
$$;

-- As in 0023, with the counter from the numbering's result.
CREATE OR REPLACE FUNCTION hold_coop_events(p_coop TEXT, OUT counter BIGINT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(coop_lock_key('writers', p_coop));
    PERFORM pg_advisory_xact_lock(coop_lock_key('numbering', p_coop));
    counter := (number_waiting(p_coop)).counter;
END
$$;
