-- The state of a cluster's background work (the rebalancer's sessions, later the repartitioner's
-- rounds), written only under the cluster's lease (fenced by its token, like migrations), so the
-- replica that takes the lease over carries on from where the last holder stopped.
CREATE TABLE cluster_work_state (
    cluster text COLLATE "C" NOT NULL REFERENCES clusters (name) ON DELETE CASCADE,
    kind    text NOT NULL,
    state   jsonb NOT NULL,
    PRIMARY KEY (cluster, kind)
);
