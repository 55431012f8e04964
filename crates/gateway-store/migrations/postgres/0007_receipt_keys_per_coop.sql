-- Receipt keys per coop. Each coop signs its receipts with its own key, derived from the
-- keystore's master secret, the coop id and the coop's key generation; an approved
-- signing_key_rotation proposal moves that coop, and only it, to its next generation.
CREATE TABLE receipt_key_generations (
    coop_id    TEXT PRIMARY KEY NOT NULL,
    generation BIGINT NOT NULL               -- 0 until the coop's first rotation (no row: 0)
);

-- Each signing key names its coop, master number and generation. Rows of before (one key for
-- the whole gateway) keep NULL there and are listed to every coop, since they signed every
-- coop's receipts; that key signs no more from this upgrade on, so it is retired now (valid
-- through this second).
ALTER TABLE signing_keys ADD COLUMN coop_id TEXT, ADD COLUMN master BIGINT, ADD COLUMN generation BIGINT;
UPDATE signing_keys SET valid_until = EXTRACT(EPOCH FROM now())::BIGINT + 1 WHERE valid_until IS NULL;
CREATE INDEX signing_keys_coop ON signing_keys (coop_id, valid_from);
