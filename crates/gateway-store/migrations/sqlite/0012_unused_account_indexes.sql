-- No statement reads transactions through these two indexes: the history filter
-- `($2 IS NULL OR from_account = $2 OR to_account = $2)` cannot use them, and SQLite's
-- planner scans `transactions_coop` newest first instead (docs/PERFORMANCE.md). Yet every
-- payment inserted a key into each, on a leaf page picked by the account, so a commit group
-- of n payments dirtied up to 2n pages more than its rows, each written to the WAL and
-- copied back by the checkpointer: about half of the writer's page writes.
DROP INDEX transactions_from;
DROP INDEX transactions_to;
