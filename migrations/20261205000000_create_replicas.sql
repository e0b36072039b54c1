-- The oracle's replicas, each stamping its row every second (at the database's clock) while it
-- runs: the replicas seen within a few seconds share the clusters' background work out between
-- them (rendezvous hashing of the cluster's name, `cluster::ownership`), each cluster's lease
-- still deciding who acts. Not a cluster table: a few rows, one per replica (on a distributed
-- engine, a reference table or a table on the coordinator).
CREATE TABLE replicas (
    replica       text   COLLATE "C" PRIMARY KEY,
    last_seen_ms  bigint NOT NULL
);
