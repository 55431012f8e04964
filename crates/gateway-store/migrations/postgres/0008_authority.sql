-- Authority: the effect recorded when an approved proposal closes, and the built-in `coop`
-- domain of every coop, whose members are the coop's own (not stored: '[]').
ALTER TABLE proposals ADD COLUMN effect TEXT;

INSERT INTO gov_domains (coop_id, domain_id, name, members, quorum_percent, rule, created_at)
SELECT id, 'coop', 'All members', '[]', NULL, NULL, created_at FROM coops WHERE true
ON CONFLICT (coop_id, domain_id) DO UPDATE SET members = '[]';
