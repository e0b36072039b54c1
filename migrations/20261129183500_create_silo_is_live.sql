-- The liveness rule, in one place for every query: a silo is live while it is not dead and its
-- last heartbeat is younger than the TTL. It mirrors `cluster::silo::is_fresh` in the oracle.
-- A one-line SQL function marked IMMUTABLE is inlined by the planner, so using it costs nothing.
CREATE FUNCTION silo_is_live(status text, last_heartbeat_ms bigint, ttl_ms bigint, now_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT status <> 'dead' AND last_heartbeat_ms > now_ms - ttl_ms $$;
