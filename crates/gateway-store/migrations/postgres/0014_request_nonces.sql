-- Request-signature nonces (INTERFACE.md §11) shared by every replica when there is no Redis: a
-- nonce is accepted once, by whichever replica sees it first, and the database never forgets
-- it while its signature is valid. A row holds fixed-size digests only, never the client's
-- text: the SHA-256 of (signer, nonce), the SHA-256 of the signer (for the per-signer bound),
-- and when the row may go (Unix ms). Rows past that are pruned, or reused by the same nonce.
CREATE TABLE request_nonces (
    digest BYTEA PRIMARY KEY CHECK (octet_length(digest) = 32),
    signer BYTEA NOT NULL CHECK (octet_length(signer) = 32),
    expires_at_ms BIGINT NOT NULL
);
-- A signer's unexpired nonces are counted (the bound), and expired rows are pruned.
CREATE INDEX request_nonces_signer ON request_nonces (signer, expires_at_ms);
CREATE INDEX request_nonces_expiry ON request_nonces (expires_at_ms);
