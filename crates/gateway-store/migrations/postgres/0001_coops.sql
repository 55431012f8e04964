-- Cooperatives and their members.
CREATE TABLE coops (
    id                   TEXT PRIMARY KEY NOT NULL,
    name                 TEXT NOT NULL,
    coop_type            TEXT NOT NULL,
    description          TEXT NOT NULL,
    created_at           BIGINT NOT NULL,
    created_by           TEXT NOT NULL,
    default_currency     TEXT NOT NULL,
    credit_limit         BIGINT NOT NULL,   -- micro-units, <= 0
    high_value_threshold BIGINT NOT NULL,   -- micro-units
    conversion_fee_ppm   BIGINT NOT NULL,   -- fee percent × 10^4 (parts per million)
    quorum_percent       BIGINT NOT NULL
);

CREATE TABLE members (
    coop_id      TEXT NOT NULL REFERENCES coops(id),
    did          TEXT NOT NULL,
    role         TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    joined_at    BIGINT NOT NULL,
    credit_limit BIGINT,                    -- per-member override, micro-units
    PRIMARY KEY (coop_id, did)
);
