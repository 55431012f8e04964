-- Ledger, outbox, notifications, trust, idempotency, oracle rates and quotes.
CREATE TABLE balances (
    coop_id  TEXT NOT NULL,
    account  TEXT NOT NULL,
    currency TEXT NOT NULL,
    balance  BIGINT NOT NULL,            -- micro-units
    PRIMARY KEY (coop_id, account, currency)
);

CREATE TABLE transactions (
    pos                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,   -- insertion order, for "newest first"
    id                  TEXT NOT NULL UNIQUE,
    coop_id             TEXT NOT NULL,
    kind                TEXT NOT NULL,
    from_account        TEXT NOT NULL,
    to_account          TEXT NOT NULL,
    amount              BIGINT NOT NULL,
    currency            TEXT NOT NULL,
    memo                TEXT,
    timestamp           BIGINT NOT NULL,
    to_currency         TEXT,
    rate                BIGINT,
    gross_target_amount BIGINT,
    fee_amount          BIGINT,
    net_target_amount   BIGINT
);
CREATE INDEX transactions_coop ON transactions (coop_id, pos);
CREATE INDEX transactions_from ON transactions (coop_id, from_account, pos);
CREATE INDEX transactions_to ON transactions (coop_id, to_account, pos);

CREATE TABLE event_counters (
    coop_id TEXT PRIMARY KEY NOT NULL,
    seq     BIGINT NOT NULL
);

CREATE TABLE events (
    coop_id    TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    event_type TEXT NOT NULL,
    timestamp  BIGINT NOT NULL,
    data       TEXT NOT NULL,
    PRIMARY KEY (coop_id, seq)
);

CREATE TABLE notifications (
    pos        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id         TEXT NOT NULL UNIQUE,
    recipient  TEXT NOT NULL,
    coop_id    TEXT NOT NULL,
    kind       TEXT NOT NULL,
    title      TEXT NOT NULL,
    body       TEXT NOT NULL,
    data       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    read_at    BIGINT
);
CREATE INDEX notifications_recipient ON notifications (recipient, pos);

CREATE TABLE trust_edges (
    source     TEXT NOT NULL,
    target     TEXT NOT NULL,
    score      DOUBLE PRECISION NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (source, target)
);

CREATE TABLE idempotency (
    key          TEXT PRIMARY KEY NOT NULL,
    request_hash TEXT NOT NULL,
    status       BIGINT NOT NULL,
    body         TEXT NOT NULL,
    created_at   BIGINT NOT NULL
);

CREATE TABLE rates (
    coop_id       TEXT NOT NULL,
    from_currency TEXT NOT NULL,
    to_currency   TEXT NOT NULL,
    rate          BIGINT NOT NULL,
    set_by        TEXT NOT NULL,
    set_at        BIGINT NOT NULL,
    PRIMARY KEY (coop_id, from_currency, to_currency)
);

CREATE TABLE quotes (
    id                  TEXT PRIMARY KEY NOT NULL,
    coop_id             TEXT NOT NULL,
    amount              BIGINT NOT NULL,
    from_currency       TEXT NOT NULL,
    to_currency         TEXT NOT NULL,
    rate                BIGINT NOT NULL,
    fee_ppm             BIGINT NOT NULL,
    gross_target_amount BIGINT NOT NULL,
    fee_amount          BIGINT NOT NULL,
    net_target_amount   BIGINT NOT NULL,
    valid_until         BIGINT NOT NULL
);
