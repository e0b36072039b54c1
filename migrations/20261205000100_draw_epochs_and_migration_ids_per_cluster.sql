-- No global counter on a hot path: epochs and migration ids are drawn per grain and per cluster,
-- so that a distributed engine sharding by cluster needs no coordination across shards for them.
--
-- Epochs. An epoch names one activation of one grain, and a grain placed again must get a larger
-- one; nothing needs epochs unique across grains. So an epoch is the database clock in
-- microseconds since 2020-01-01, above the grain's previous epoch when the statement has it (a
-- completed migration) and above every epoch the old sequence handed out. A grain's next
-- activation is drawn in a later transaction than its last one, so at a later microsecond of the
-- same clock; across a failover, the promoted primary's clock must not be behind the old one's by
-- more than the failover took (the assumption the sequence's per-timeline floor made before).
-- Epochs stay below 2^53 (exact in JavaScript) for 285 years.
DO $$
DECLARE
    legacy bigint := (SELECT last_value FROM activation_epochs);
BEGIN
    DROP FUNCTION oracle_next_epoch();
    EXECUTE format(
        'CREATE FUNCTION oracle_next_epoch(previous bigint DEFAULT NULL) RETURNS bigint
         LANGUAGE sql VOLATILE
         AS %L',
        format('SELECT GREATEST(
                    floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint
                        - 1577836800000000,
                    COALESCE(previous, 0) + 1,
                    %s::bigint + 1)', legacy));
END
$$;
DROP FUNCTION oracle_wal_timeline();
DROP TABLE epoch_timelines;
DROP SEQUENCE activation_epochs;

-- Migration ids: per cluster, from a counter on the cluster's row that only the holder of the
-- cluster's lease moves (it issues the cluster's migrations). Every cluster starts past every id
-- the global identity handed out, so that no id of a migration still open, or ended within the
-- hour (its ending is kept for retries), is handed out again.
ALTER TABLE clusters ADD COLUMN next_migration_id bigint NOT NULL DEFAULT 1;
DO $$
DECLARE
    issued bigint := COALESCE(
        (SELECT last_value FROM pg_sequences
          WHERE sequencename = replace(pg_get_serial_sequence('migrations', 'id'), 'public.', '')),
        0);
BEGIN
    UPDATE clusters SET next_migration_id = issued + 1;
END
$$;
ALTER TABLE migrations ALTER COLUMN id DROP IDENTITY;
