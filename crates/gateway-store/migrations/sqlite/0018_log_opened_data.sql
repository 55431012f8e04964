-- `LogOpened`'s data whole, when entry 0 of a coop's log holds digests of its largest fields
-- instead (an entry is at most 65,535 bytes; a coop with hundreds of members or balances when
-- its log began has a bigger snapshot). Written with the log head, never updated; served by
-- `GET /v1/coops/{id}/log/opened`, and checked by an auditor against the entry's digests.
ALTER TABLE coop_logs ADD COLUMN opened_data TEXT;
