-- A maintained member count, so reading a coop (on every payment) does not count its members.
ALTER TABLE coops ADD COLUMN member_count INTEGER NOT NULL DEFAULT 0;
UPDATE coops SET member_count = (SELECT COUNT(*) FROM members WHERE members.coop_id = coops.id);
