-- The numbering trigger of 0011 keeps the schema it was created in, whatever the search_path of
-- the session that commits: it names its tables and sequence without a schema.
--
-- (A correction to 0011's opening note: the counter row is held from the numbering to the end of
-- the commit, with no round trip to the gateway in between; and the commit of a transaction that
-- notifies also waits for PostgreSQL's one notification lock of the database, which each notifying
-- commit holds until its WAL is synced. docs/PERFORMANCE.md, "Ninth pass".)
ALTER FUNCTION number_event() SET search_path FROM CURRENT;
