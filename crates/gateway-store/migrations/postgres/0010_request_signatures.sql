-- Request signing (INTERFACE.md §11): the coop setting that requires signatures on critical
-- operations, and the evidence a signed payment or vote keeps (the JSON of the verified
-- signature and what it covered; NULL when the request was not signed).
ALTER TABLE coops ADD COLUMN require_signed_requests BIGINT NOT NULL DEFAULT 0;
ALTER TABLE transactions ADD COLUMN request_signature TEXT;
ALTER TABLE votes ADD COLUMN request_signature TEXT;
