-- Conversion quotes are single-use and bound to the member who asked for them (docs/API.md,
-- "Conversion quotes"): the requester's DID, and when the quote was used (NULL: not yet). A
-- quote stored before this migration has no requester and can no longer be used.
ALTER TABLE quotes ADD COLUMN requester TEXT;
ALTER TABLE quotes ADD COLUMN used_at INTEGER;
