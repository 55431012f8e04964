-- The exact bodies of signed requests (INTERFACE.md §11's evidence), each kept once: a signed batch's
-- payments all keep evidence of the same request, and its body (up to 1 MiB) was stored once per
-- payment. A record's evidence JSON now holds `body_key` instead of `body`: the key of its row
-- here, the hex SHA-256 of the request's `Content-Digest` field (whose `sha-256` the gateway
-- checked against the body, so one key names one body). Written with ON CONFLICT DO NOTHING in
-- the unit of work of the record; never updated. Evidence stored before keeps its body inline
-- (or `null`) and has no `body_key`.
CREATE TABLE signed_bodies (
    digest TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
