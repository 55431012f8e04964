-- Two costs of every payment on PostgreSQL (docs/PERFORMANCE.md, "`postgres`").
--
-- 1. `coop_lock_key` was a SQL function with `SET search_path FROM CURRENT`, which PostgreSQL
--    never inlines: every statement that called it (each event's write, each coop's numbering)
--    parsed and planned its body again. It now names its schema as a constant, written when this
--    migration runs (the schema `current_schema()` gave it until now, so every key is the same
--    as before), and is inlined into its callers.
--    The body is written as one quoted literal, whatever characters the schema's name holds.
DO $migration$
BEGIN
    EXECUTE format(
        'CREATE OR REPLACE FUNCTION coop_lock_key(kind TEXT, coop TEXT) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS %L',
        format('SELECT hashtextextended(%L || chr(9) || kind || chr(9) || coop, 0)', current_schema()));
END
$migration$;

-- 2. A unit of work locked its balance rows with two statements per row (create it if missing,
--    then lock it), each a round trip from the gateway. One call now does both for every row,
--    in the same order as before (by account, then currency, byte by byte, as the gateway
--    sorted them), so two units of work that lock the same rows still cannot wait for each
--    other in a cycle. One row per element of the arrays, by its position `ord` (from 1): the
--    balance, locked until the transaction ends.
CREATE FUNCTION lock_balances(p_coop TEXT, p_accounts TEXT[], p_currencies TEXT[])
RETURNS TABLE (ord BIGINT, locked BIGINT)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    r RECORD;
BEGIN
    FOR r IN
        SELECT u.account, u.currency, u.n AS position
        FROM unnest(p_accounts, p_currencies) WITH ORDINALITY AS u(account, currency, n)
        ORDER BY u.account COLLATE "C", u.currency COLLATE "C", u.n
    LOOP
        INSERT INTO balances (coop_id, account, currency, balance) VALUES (p_coop, r.account, r.currency, 0)
            ON CONFLICT DO NOTHING;
        ord := r.position;
        SELECT b.balance INTO locked FROM balances b
            WHERE b.coop_id = p_coop AND b.account = r.account AND b.currency = r.currency FOR UPDATE;
        locked := COALESCE(locked, 0);
        RETURN NEXT;
    END LOOP;
END
$$;
