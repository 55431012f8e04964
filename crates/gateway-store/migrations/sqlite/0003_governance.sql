-- Governance: domains, proposals, votes, delegations, receipts, signing keys.
CREATE TABLE gov_domains (
    coop_id        TEXT NOT NULL,
    domain_id      TEXT NOT NULL,
    name           TEXT NOT NULL,
    members        TEXT NOT NULL,          -- JSON array of DIDs
    quorum_percent INTEGER,
    rule           TEXT,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (coop_id, domain_id)
);

CREATE TABLE proposals (
    pos                  INTEGER PRIMARY KEY AUTOINCREMENT,
    id                   TEXT NOT NULL UNIQUE,
    coop_id              TEXT NOT NULL,
    domain_id            TEXT NOT NULL,
    title                TEXT NOT NULL,
    description          TEXT NOT NULL,
    payload              TEXT NOT NULL,
    rule                 TEXT NOT NULL,
    author               TEXT NOT NULL,
    status               TEXT NOT NULL CHECK (status IN ('draft', 'open', 'closed')),
    voting_duration_secs INTEGER NOT NULL,
    created_at           INTEGER NOT NULL,
    opened_at            INTEGER,
    closes_at            INTEGER,
    closed_at            INTEGER,
    outcome              TEXT,
    tally_for            INTEGER,
    tally_against        INTEGER,
    tally_abstain        INTEGER,
    receipt_unavailable  TEXT
);
CREATE INDEX proposals_coop ON proposals (coop_id, pos);
CREATE INDEX proposals_due ON proposals (status, closes_at);

CREATE TABLE votes (
    proposal_id TEXT NOT NULL,
    voter       TEXT NOT NULL,
    choice      TEXT NOT NULL,
    cast_at     INTEGER NOT NULL,
    PRIMARY KEY (proposal_id, voter)
);

CREATE TABLE delegations (
    id         TEXT PRIMARY KEY NOT NULL,
    coop_id    TEXT NOT NULL,
    delegator  TEXT NOT NULL,
    delegate   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    expires_at INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX delegations_coop ON delegations (coop_id);

CREATE TABLE receipts (
    proposal_id TEXT PRIMARY KEY NOT NULL,
    coop_id     TEXT NOT NULL,
    timestamp   INTEGER NOT NULL,
    body        TEXT NOT NULL,
    UNIQUE (timestamp, proposal_id)
);

CREATE TABLE signing_keys (
    public_key  TEXT PRIMARY KEY NOT NULL,
    did         TEXT NOT NULL,
    valid_from  INTEGER NOT NULL,
    valid_until INTEGER
);
