-- A cluster's placement policy (the oracle's `placement::policy::Policy` as JSON) and its version,
-- which writers must name (If-Match) so that two of them cannot silently overwrite each other.
-- The policy's silo TTL is also kept in `clusters.silo_ttl_ms`, where the liveness queries read it.
ALTER TABLE clusters
    ADD COLUMN policy         jsonb  NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN policy_version bigint NOT NULL DEFAULT 0;
