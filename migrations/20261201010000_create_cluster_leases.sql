-- One lease per cluster: which replica runs the cluster's background work (rebalancer sessions,
-- repartitioner rounds), until when, and under which token. The token grows on every takeover;
-- writes made for the background work check it in the same transaction (fencing), so a holder
-- that lost the lease while it worked writes nothing. A plain row, not an advisory lock, so the
-- schema fits distributed SQL engines too. Times are the database clock's (oracle_now_ms()).
CREATE TABLE cluster_leases (
    cluster       text COLLATE "C" PRIMARY KEY REFERENCES clusters (name) ON DELETE CASCADE,
    holder        text   NOT NULL,
    token         bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);
