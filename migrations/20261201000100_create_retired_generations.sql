-- Dead is final for a silo id, for ever, in bounded space.
--
-- A dead silo's row stays an hour (so operators see it listed as dead); after that only this
-- compact record remains: per cluster and silo address, the newest generation that died there. A
-- heartbeat from an id that is not newer than it (`address@generation` with a generation not
-- greater) is refused, as Orleans refuses a silo that is not newer than a dead one at its address.
-- Ids without a numeric generation are keyed by the whole id with generation 0, so they can never
-- come back. See `cluster::names::SiloId::incarnation`.
CREATE TABLE retired_generations (
    cluster    text   COLLATE "C" NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    address    text   COLLATE "C" NOT NULL,
    generation bigint NOT NULL,
    PRIMARY KEY (cluster, address)
);
