-- Silo leases, and silence counted only while the judging replica reached the store.
--
-- Until now a replica forgave only its last store outage (its overlap with a silo's silence), and
-- a real server stop, seen through many kinds of errors, was forgiven in part or not at all: when
-- Postgres came back every silo looked silent and all were declared dead. Now:
--
-- * Every acknowledged heartbeat grants the silo a lease (the TTL less a margin; see
--   `cluster::lease`) during which it may run its grains. `protected_until_ms` is the latest end of
--   any lease it was granted, plus the margin: the silo is never declared dead before it, so a
--   shorter TTL set by a policy cannot cut a lease short. 0 for rows written before leases (and
--   by replicas of the previous version during a rolling upgrade): no protection beyond the TTL.
ALTER TABLE silos ADD COLUMN protected_until_ms bigint NOT NULL DEFAULT 0;

-- * The death rule, mirroring `cluster::silo::Liveness::is_alive`: a silo not marked dead is alive
--   while its protection lasts, or while less than the TTL has passed since the later of its last
--   stamp and the moment the judging replica last began reaching the store without a break
--   (`now_ms - reachable_for_ms`). A replica that could not reach the store could not see the
--   heartbeats that failed meanwhile, so no silence from before then is counted: every outage is
--   forgiven, and a silo gets a whole TTL after the store answers again. `reachable_for_ms` NULL
--   means "reachable all along" (what a silo's silence alone would say).
CREATE FUNCTION silo_is_alive(status text, last_heartbeat_ms bigint, protected_until_ms bigint,
                              ttl_ms bigint, now_ms bigint, reachable_for_ms bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT status <> 'dead' AND (
           now_ms < COALESCE(protected_until_ms, 0)
           -- GREATEST ignores a NULL: without `reachable_for_ms`, silence counts from the stamp.
           OR now_ms - GREATEST(last_heartbeat_ms, now_ms - reachable_for_ms) < ttl_ms)
$$;

-- The six-argument `silo_is_live` (the last-outage rule) stays for one release: replicas of the
-- previous version still call it while a rolling upgrade replaces them. The four-argument one it
-- replaced has had its release.
DROP FUNCTION silo_is_live(text, bigint, bigint, bigint);
