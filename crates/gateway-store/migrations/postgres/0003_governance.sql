-- Governance: domains, proposals, votes, delegations, receipts, signing keys.
CREATE TABLE gov_domains (
    coop_id        TEXT NOT NULL,
    domain_id      TEXT NOT NULL,
    name           TEXT NOT NULL,
    members        TEXT NOT NULL,          -- JSON array of DIDs
    quorum_percent BIGINT,
    rule           TEXT,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (coop_id, domain_id)
);

CREATE TABLE proposals (
    pos                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id                   TEXT NOT NULL UNIQUE,
    coop_id              TEXT NOT NULL,
    domain_id            TEXT NOT NULL,
    title                TEXT NOT NULL,
    description          TEXT NOT NULL,
    payload              TEXT NOT NULL,
    rule                 TEXT NOT NULL,
    author               TEXT NOT NULL,
    status               TEXT NOT NULL CHECK (status IN ('draft', 'open', 'closed')),
    voting_duration_secs BIGINT NOT NULL,
    created_at           BIGINT NOT NULL,
    opened_at            BIGINT,
    closes_at            BIGINT,
    closed_at            BIGINT,
    outcome              TEXT,
    tally_for            BIGINT,
    tally_against        BIGINT,
    tally_abstain        BIGINT,
    receipt_unavailable  TEXT
);
CREATE INDEX proposals_coop ON proposals (coop_id, pos);
CREATE INDEX proposals_due ON proposals (status, closes_at);

CREATE TABLE votes (
    proposal_id TEXT NOT NULL,
    voter       TEXT NOT NULL,
    choice      TEXT NOT NULL,
    cast_at     BIGINT NOT NULL,
    PRIMARY KEY (proposal_id, voter)
);

CREATE TABLE delegations (
    id         TEXT PRIMARY KEY NOT NULL,
    coop_id    TEXT NOT NULL,
    delegator  TEXT NOT NULL,
    delegate   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    expires_at BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX delegations_coop ON delegations (coop_id);

CREATE TABLE receipts (
    proposal_id TEXT PRIMARY KEY NOT NULL,
    coop_id     TEXT NOT NULL,
    timestamp   BIGINT NOT NULL,
    body        TEXT NOT NULL,
    UNIQUE (timestamp, proposal_id)
);

CREATE TABLE signing_keys (
    public_key  TEXT PRIMARY KEY NOT NULL,
    did         TEXT NOT NULL,
    valid_from  BIGINT NOT NULL,
    valid_until BIGINT
);
