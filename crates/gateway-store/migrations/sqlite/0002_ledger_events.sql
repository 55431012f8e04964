-- Ledger, outbox, notifications, trust, idempotency, oracle rates and quotes.
CREATE TABLE balances (
    coop_id  TEXT NOT NULL,
    account  TEXT NOT NULL,
    currency TEXT NOT NULL,
    balance  INTEGER NOT NULL,            -- micro-units
    PRIMARY KEY (coop_id, account, currency)
);

CREATE TABLE transactions (
    pos                 INTEGER PRIMARY KEY AUTOINCREMENT,   -- insertion order, for "newest first"
    id                  TEXT NOT NULL UNIQUE,
    coop_id             TEXT NOT NULL,
    kind                TEXT NOT NULL,
    from_account        TEXT NOT NULL,
    to_account          TEXT NOT NULL,
    amount              INTEGER NOT NULL,
    currency            TEXT NOT NULL,
    memo                TEXT,
    timestamp           INTEGER NOT NULL,
    to_currency         TEXT,
    rate                INTEGER,
    gross_target_amount INTEGER,
    fee_amount          INTEGER,
    net_target_amount   INTEGER
);
CREATE INDEX transactions_coop ON transactions (coop_id, pos);
CREATE INDEX transactions_from ON transactions (coop_id, from_account, pos);
CREATE INDEX transactions_to ON transactions (coop_id, to_account, pos);

CREATE TABLE event_counters (
    coop_id TEXT PRIMARY KEY NOT NULL,
    seq     INTEGER NOT NULL
);

CREATE TABLE events (
    coop_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    timestamp  INTEGER NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (coop_id, seq)
);

CREATE TABLE notifications (
    pos        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    recipient  TEXT NOT NULL,
    coop_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    read_at    INTEGER
);
CREATE INDEX notifications_recipient ON notifications (recipient, pos);

CREATE TABLE trust_edges (
    source     TEXT NOT NULL,
    target     TEXT NOT NULL,
    score      REAL NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (source, target)
);

CREATE TABLE idempotency (
    key          TEXT PRIMARY KEY NOT NULL,
    request_hash TEXT NOT NULL,
    status       INTEGER NOT NULL,
    body         TEXT NOT NULL,
    created_at   INTEGER NOT NULL
);

CREATE TABLE rates (
    coop_id       TEXT NOT NULL,
    from_currency TEXT NOT NULL,
    to_currency   TEXT NOT NULL,
    rate          INTEGER NOT NULL,
    set_by        TEXT NOT NULL,
    set_at        INTEGER NOT NULL,
    PRIMARY KEY (coop_id, from_currency, to_currency)
);

CREATE TABLE quotes (
    id                  TEXT PRIMARY KEY NOT NULL,
    coop_id             TEXT NOT NULL,
    amount              INTEGER NOT NULL,
    from_currency       TEXT NOT NULL,
    to_currency         TEXT NOT NULL,
    rate                INTEGER NOT NULL,
    fee_ppm             INTEGER NOT NULL,
    gross_target_amount INTEGER NOT NULL,
    fee_amount          INTEGER NOT NULL,
    net_target_amount   INTEGER NOT NULL,
    valid_until         INTEGER NOT NULL
);
