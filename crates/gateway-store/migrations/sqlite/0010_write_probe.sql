-- Readiness follows writes: the gateway commits a one-row update here every second or so, and
-- is ready only while such commits succeed (a full or stalled disk, a database that refuses
-- writes).
CREATE TABLE write_probe (
    id INTEGER PRIMARY KEY,
    probed_at BIGINT NOT NULL
);
INSERT INTO write_probe (id, probed_at) VALUES (1, 0);
