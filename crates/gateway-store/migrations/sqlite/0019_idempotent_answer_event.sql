-- The number of the last event a keyed operation appended, kept with its answer, so that a
-- replay of the answer carries the same `ICN-Event-Seq` as the first one (INTERFACE.md §12). NULL
-- for an answer that appended no event (a refusal) and for answers stored before this column.
ALTER TABLE idempotency ADD COLUMN event_seq BIGINT;
