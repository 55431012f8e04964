-- Balances and event counters are only ever read and written by their key: stored as the key's
-- own b-tree (WITHOUT ROWID), a payment's balance updates touch one b-tree instead of a rowid
-- table plus the key's index, so each commit writes fewer pages to the WAL.
CREATE TABLE balances_keyed (
    coop_id  TEXT NOT NULL,
    account  TEXT NOT NULL,
    currency TEXT NOT NULL,
    balance  INTEGER NOT NULL,            -- micro-units
    PRIMARY KEY (coop_id, account, currency)
) WITHOUT ROWID;
INSERT INTO balances_keyed (coop_id, account, currency, balance)
    SELECT coop_id, account, currency, balance FROM balances;
DROP TABLE balances;
ALTER TABLE balances_keyed RENAME TO balances;

CREATE TABLE event_counters_keyed (
    coop_id TEXT PRIMARY KEY NOT NULL,
    seq     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO event_counters_keyed (coop_id, seq) SELECT coop_id, seq FROM event_counters;
DROP TABLE event_counters;
ALTER TABLE event_counters_keyed RENAME TO event_counters;
