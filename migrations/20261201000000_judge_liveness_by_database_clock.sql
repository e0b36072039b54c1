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

-- The liveness rule, forgiving the asking replica's last store outage: a silo is live while it is
-- not dead and its silence, less the part of it during which that replica could not reach the store
-- (no heartbeat could be stored then), is shorter than the TTL. The outage is passed as how long
-- ago it began and ended (NULL: none), so that it lands on the database's clock. It mirrors
-- `cluster::silo::Liveness::is_fresh`.
CREATE FUNCTION silo_is_live(status text, last_heartbeat_ms bigint, ttl_ms bigint, now_ms bigint,
                             outage_began_ago_ms bigint, outage_ended_ago_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT status <> 'dead' AND
           now_ms - last_heartbeat_ms
           - CASE WHEN outage_began_ago_ms IS NULL THEN 0
                  ELSE GREATEST(0, LEAST(now_ms, now_ms - outage_ended_ago_ms)
                                   - GREATEST(last_heartbeat_ms, now_ms - outage_began_ago_ms))
             END
           < ttl_ms
$$;

-- The four-argument `silo_is_live` stays for one release: replicas of the previous version still
-- call it while a rolling upgrade replaces them.

-- Every cluster carries its TTL. `PostgresStore::migrate` first gives clusters that had none the
-- replica's configured default (what they were judged by until now); this catches any left. The
-- column default serves replicas of the previous version, which create clusters without a TTL.
UPDATE clusters SET silo_ttl_ms = 10000 WHERE silo_ttl_ms IS NULL;
ALTER TABLE clusters ALTER COLUMN silo_ttl_ms SET DEFAULT 10000;
ALTER TABLE clusters ALTER COLUMN silo_ttl_ms SET NOT NULL;
