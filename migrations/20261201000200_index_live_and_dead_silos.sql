-- Indexes that scale with what each query reads, and heartbeats that stay HOT.
--
-- `silos_by_liveness (status, last_heartbeat_ms)` indexed the column every heartbeat writes, so
-- every heartbeat was a non-HOT update writing three index entries. The sweep does not need it:
-- it reads the live silos through `silos_live`, whose key never changes and whose predicate only
-- changes when a silo dies. Membership reads load the live silos only (the dead of the last hour
-- are not read on every placement), and the release of a dead silo's entries reads the dead that
-- still have some.

DROP INDEX silos_by_liveness;

-- Live membership, in silo order (also what a placement decision reads).
CREATE INDEX silos_live ON silos (cluster, silo) WHERE status <> 'dead';

-- Whether a dead silo's directory entries are all gone. Entries are released in bounded chunks in
-- the background after the silo is marked dead (a graceful leave of a silo with 100,000 grains
-- must not be one statement inside a request's timeout); placements never see them as live.
ALTER TABLE silos ADD COLUMN released boolean NOT NULL DEFAULT false;
CREATE INDEX silos_dead_unreleased ON silos (cluster, silo) WHERE status = 'dead' AND NOT released;
-- Tombstone expiry.
CREATE INDEX silos_dead_since ON silos (dead_since_ms) WHERE status = 'dead';

-- Room in each page for the new version of a heartbeat's row, so the update stays on its page
-- (a HOT update needs both: no indexed column changed, and space on the same page).
ALTER TABLE silos SET (fillfactor = 50);
