-- The NOTIFY channels a deployment's replicas announce on and listen to. A channel is the
-- database's, whatever the schema (as advisory locks are: see `coop_lock_key`), so two
-- deployments in two schemas of one database heard each other's announcements: each replica
-- woke its hubs and ran its log's checkpointing rounds for the other deployment's coops (a
-- transaction each, holding that coop id's writers lock in its own schema), and reloaded its
-- trust graph on the other's trust changes. The channels now name the schema: `icn_events` and
-- `icn_trust` in the schema `public` (as before), `icn_events.<schema>` elsewhere, or
-- `icn_events.<md5 of the schema>` where that name would pass PostgreSQL's 63 bytes.
CREATE FUNCTION notify_channel(kind TEXT) RETURNS TEXT LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT CASE
        WHEN current_schema() = 'public' THEN 'icn_' || kind
        WHEN octet_length('icn_' || kind || '.' || current_schema()) <= 63 THEN 'icn_' || kind || '.' || current_schema()
        ELSE 'icn_' || kind || '.' || md5(current_schema())
    END
$$;
