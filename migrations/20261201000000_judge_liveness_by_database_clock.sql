-- One clock for liveness: the database's.
--
-- Before this, each replica stamped heartbeats and judged silence with its own clock, so two
-- replicas whose clocks differed by a TTL disagreed about who was alive. Now every statement that
-- stamps or judges reads `oracle_now_ms()` (unless a test injects a time), and the TTL lives in the
-- cluster's row, written once when the cluster is created, instead of each replica's config.

-- Milliseconds since the Unix epoch on the database's clock, the same for every replica. STABLE:
-- one value per statement, so a statement judges all of its rows at one instant.
CREATE FUNCTION oracle_now_ms() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint $$;

-- The liveness rule with the replica's store-outage grace: a silo is live while it is not dead and
-- either its last heartbeat is younger than the TTL, or the replica asking has not yet been able to
-- reach the store for a whole TTL (while the store was unreachable no heartbeat could be stored, so
-- that time is not silence). It mirrors `cluster::silo::Liveness::is_fresh`.
CREATE FUNCTION silo_is_live(status text, last_heartbeat_ms bigint, ttl_ms bigint, now_ms bigint,
                             store_reachable_for_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status <> 'dead' AND (last_heartbeat_ms > now_ms - ttl_ms OR store_reachable_for_ms < ttl_ms) $$;

DROP FUNCTION silo_is_live(text, bigint, bigint, bigint);

-- Every cluster carries its TTL. `PostgresStore::migrate` first gives clusters that had none the
-- replica's configured default (what they were judged by until now); this catches any left.
UPDATE clusters SET silo_ttl_ms = 10000 WHERE silo_ttl_ms IS NULL;
ALTER TABLE clusters ALTER COLUMN silo_ttl_ms SET NOT NULL;
