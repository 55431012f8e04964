-- Compute tasks.
CREATE TABLE compute_tasks (
    pos          INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id      TEXT NOT NULL UNIQUE,
    coop_id      TEXT NOT NULL,
    task_hash    TEXT NOT NULL,
    status       TEXT NOT NULL,
    submitter    TEXT NOT NULL,
    executor     TEXT,
    code_type    TEXT NOT NULL,
    code         TEXT NOT NULL,
    inputs       TEXT NOT NULL,
    fuel_limit   INTEGER NOT NULL,
    priority     TEXT NOT NULL,
    submitted_at INTEGER NOT NULL,
    claimed_at   INTEGER,
    deadline     INTEGER,
    attempts     INTEGER NOT NULL,
    finished_at  INTEGER,
    result       TEXT
);
CREATE INDEX compute_tasks_coop ON compute_tasks (coop_id, pos);
CREATE INDEX compute_tasks_status ON compute_tasks (status, pos);
