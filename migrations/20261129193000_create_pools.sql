-- Connection pools (SmartConnect-style): which silos a pool has, its rule, and the answer's TTL, as
-- the oracle's `connect::pool::Pool` JSON; plus the round-robin counter that every replica shares,
-- advanced atomically by each round-robin answer.
CREATE TABLE pools (
    cluster     text   COLLATE "C" NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    pool        text   COLLATE "C" NOT NULL,
    definition  jsonb  NOT NULL,
    round_robin bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster, pool)
);
