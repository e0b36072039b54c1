-- Epochs stay unique and keep growing across a failover that loses the tail of the log.
--
-- A promoted standby's `activation_epochs` stands where its copy of the log ended: behind every
-- epoch the old primary handed out in the tail the standby never received. Drawing on from there
-- handed those epochs out again, to other grains (measured: 1,808 of 1,824 lost epochs reused).
-- Every promotion starts a new WAL timeline, so the first draw on a timeline first moves the
-- sequence up to the database clock's floor: milliseconds since 2020-01-01 times 1,000. The old
-- primary's draws all lie below the floor of the moment it was promoted from, plus one per draw
-- since; the new floor is later by at least the failover's duration, so it passes them all as
-- long as a primary draws fewer than 1,000 epochs per millisecond on average. Epochs stay below
-- 2^53 (exact in JavaScript) for the next 285 years. Within a timeline the sequence alone
-- decides, as before.

-- Timelines whose first draw has moved the sequence to the floor.
CREATE TABLE epoch_timelines (
    timeline bigint PRIMARY KEY,
    floor_epoch bigint NOT NULL,
    floored_ms bigint NOT NULL
);

-- The WAL timeline this primary writes on (the first eight hex digits of its WAL file's name).
CREATE FUNCTION oracle_wal_timeline() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint $$;

-- The next epoch. The sequence moves forward only (`setval` only to a floor above where it stands),
-- under a transaction lock, and no draw on a new timeline happens before it moved (every draw
-- checks first, and waits for the lock). `ON CONFLICT`: under repeatable read the re-check cannot
-- see a row committed after the transaction's snapshot.
CREATE FUNCTION oracle_next_epoch() RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    current_timeline bigint := oracle_wal_timeline();
    floor_epoch bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM epoch_timelines WHERE timeline = current_timeline) THEN
        PERFORM pg_advisory_xact_lock(hashtext('oracle_next_epoch'));
        IF NOT EXISTS (SELECT 1 FROM epoch_timelines WHERE timeline = current_timeline) THEN
            floor_epoch := (floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint
                            - 1577836800000) * 1000;
            IF floor_epoch > (SELECT last_value FROM activation_epochs) THEN
                PERFORM setval('activation_epochs', floor_epoch);
            END IF;
            INSERT INTO epoch_timelines (timeline, floor_epoch, floored_ms)
            VALUES (current_timeline, floor_epoch,
                    floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
            ON CONFLICT (timeline) DO NOTHING;
        END IF;
    END IF;
    RETURN nextval('activation_epochs');
END
$$;
