-- An operator's drain request (`POST …/silos/{silo}/drain`): from then on the silo stays
-- `shutting_down` whatever its heartbeats report, and the cluster's lease holder moves its grains
-- away.
ALTER TABLE silos ADD COLUMN drained_at_ms bigint;

-- The movers' driver looks for clusters with a silo being drained, every half second.
CREATE INDEX silos_draining ON silos (cluster) WHERE drained_at_ms IS NOT NULL AND status <> 'dead';
