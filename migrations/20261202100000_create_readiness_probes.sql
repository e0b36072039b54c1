-- Readiness proves the store takes writes: each replica upserts its row here at most every few
-- hundred milliseconds while `/readyz` is asked (`store::postgres::readiness`). A read-only
-- database refuses the write (25006), and a primary whose commits wait for a synchronous standby
-- that is gone does not commit it in time; either way the replica is not ready. A replica's id is
-- random per process, so rows of replicas long gone are pruned by the same statement.
CREATE TABLE readiness_probes (
    replica text COLLATE "C" PRIMARY KEY,
    probed_ms bigint NOT NULL
);
