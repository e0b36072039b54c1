-- Open migrations: a grain that should move from one silo to another, issued by the holder of the
-- cluster's lease (fenced by its token), polled by the source silo, and removed when completed
-- (the directory entry moves in the same transaction), failed or cancelled. `epoch` is the
-- activation's when issued: a migration applies to that activation only.
CREATE TABLE migrations (
    cluster       text   COLLATE "C" NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    id            bigint GENERATED ALWAYS AS IDENTITY,
    grain         text   COLLATE "C" NOT NULL,
    from_silo     text   COLLATE "C" NOT NULL,
    to_silo       text   COLLATE "C" NOT NULL,
    reason        text   NOT NULL CHECK (reason IN ('rebalancer', 'drain', 'repartitioner')),
    epoch         bigint NOT NULL,
    lease_token   bigint NOT NULL,
    created_at_ms bigint NOT NULL,
    PRIMARY KEY (cluster, id)
);

-- At most one open migration per grain.
CREATE UNIQUE INDEX migrations_one_per_grain ON migrations (cluster, grain);
-- A source silo polls its migrations in id order.
CREATE INDEX migrations_by_source ON migrations (cluster, from_silo, id);
