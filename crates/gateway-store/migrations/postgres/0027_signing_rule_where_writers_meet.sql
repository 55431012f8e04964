-- The signing rule (INTERFACE.md §11) decided where a coop's writers meet.
--
-- A critical operation that arrived unsigned reads the coop's `require_signed_requests` in its
-- unit of work; on PostgreSQL another transaction could turn the setting on after that read and
-- commit before it, and the operation was then recorded after the change. Now:
--
-- - `writer_enters` takes the coop's writers lock shared, as each unit of work's events did
--   (migration 0023), and then, for an unsigned critical operation (`p_unsigned` <> 0), reads
--   the setting again in a statement of its own: a VOLATILE function's statements each see every
--   commit before them, those the lock waited for too. With the setting on, it raises SQLSTATE
--   `GW401`, which the gateway answers 401 `signature_required`.
-- - A settings change takes the coop's writers lock alone before it commits (the gateway's
--   `update_settings`), so it waits for every unit of work of the coop that already passed
--   `writer_enters`, and every later one waits for its commit and then sees it.
--
-- The names it calls carry their schema, written when this migration runs (as 0025 does for
-- `coop_lock_key`): no `SET search_path` on a function every event's write calls.
DO $migration$
BEGIN
    -- The body is written as one quoted literal, whatever characters the schema's name holds.
    EXECUTE format(
        'CREATE FUNCTION writer_enters(p_coop TEXT, p_unsigned BIGINT) RETURNS VOID LANGUAGE plpgsql VOLATILE AS %L',
        format($body$
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(%1$I.coop_lock_key('writers', p_coop));
            IF p_unsigned <> 0 AND EXISTS (
                SELECT 1 FROM %1$I.coops c WHERE c.id = p_coop AND c.require_signed_requests <> 0
            ) THEN
                RAISE EXCEPTION 'cooperative %% requires a request signature on this operation', p_coop
                    USING ERRCODE = 'GW401';
            END IF;
        END
        $body$, current_schema()));
END
$migration$;
