-- Readiness follows writes: each replica commits a one-row update here every second or so, and
-- is ready only while such commits succeed (a full or stalled disk, a database that refuses
-- writes, a read-only standby).
CREATE TABLE write_probe (
    id INTEGER PRIMARY KEY,
    probed_at BIGINT NOT NULL
);
INSERT INTO write_probe (id, probed_at) VALUES (1, 0);
