-- Membership and the grain directory.
--
-- Text keys use the "C" collation: byte order, the same order the oracle sorts by in memory, and
-- what paging through a silo's activations relies on.
-- Every table is keyed by cluster first, so one database serves many clusters and the schema
-- partitions cleanly on a distributed Postgres-compatible engine. Times are milliseconds since the
-- Unix epoch on the oracle's clock (never the caller's).

-- A cluster exists from its first heartbeat.
CREATE TABLE clusters (
    name        text   COLLATE "C" PRIMARY KEY,
    -- Silence after which a silo is dead; NULL means the oracle's configured default.
    silo_ttl_ms bigint CHECK (silo_ttl_ms > 0),
    created_ms  bigint NOT NULL
);

-- One row per silo incarnation. `status` is what the silo last reported, or 'dead' once a sweep
-- found it silent past the TTL (dead is final for that id). `heartbeat_count` doubles as the row
-- version for optimistic concurrency. `profile` holds the rest of the last report, the smoothed load
-- and the Kalman filter state that carries over between heartbeats.
CREATE TABLE silos (
    cluster           text   COLLATE "C" NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    silo              text   COLLATE "C" NOT NULL,
    address           text   NOT NULL,
    status            text   NOT NULL CHECK (status IN ('joining', 'active', 'shutting_down', 'dead')),
    last_heartbeat_ms bigint NOT NULL,
    heartbeat_count   bigint NOT NULL,
    dead_since_ms     bigint,
    profile           jsonb  NOT NULL,
    PRIMARY KEY (cluster, silo)
);

-- The sweep looks for live silos whose heartbeat is older than the TTL.
CREATE INDEX silos_by_liveness ON silos (status, last_heartbeat_ms);

-- Activation epochs: every registration takes a larger number than any before it, on any replica.
CREATE SEQUENCE activation_epochs;

-- The grain directory. The primary key is the single-activation guarantee: concurrent
-- registrations of one grain, from any number of replicas, leave exactly one row. Entries go with
-- their silo (graceful leave, or the tombstone expiring), and a sweep releases a dead silo's entries.
CREATE TABLE activations (
    cluster    text   COLLATE "C" NOT NULL,
    grain      text   COLLATE "C" NOT NULL,
    silo       text   COLLATE "C" NOT NULL,
    strategy   text   NOT NULL,
    epoch      bigint NOT NULL,
    created_ms bigint NOT NULL,
    PRIMARY KEY (cluster, grain),
    FOREIGN KEY (cluster, silo) REFERENCES silos (cluster, silo) ON DELETE CASCADE
);

-- Listing and releasing a silo's activations, in grain order for paging.
CREATE INDEX activations_by_silo ON activations (cluster, silo, grain);
