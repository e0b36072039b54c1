-- Cluster keys: only a keyed hash (HMAC-SHA-256) of each key is kept; the id is the public part
-- of the key (`pok_<id>_<secret>`). A key names its cluster by name and needs no clusters row: a
-- cluster comes into being with its first heartbeat, policy or pool, as it did before keys.
CREATE TABLE cluster_keys (
    id            text COLLATE "C" PRIMARY KEY,
    cluster       text COLLATE "C" NOT NULL,
    scopes        text[] NOT NULL,
    label         text   NOT NULL,
    hash          bytea  NOT NULL,
    created_at_ms bigint NOT NULL
);
CREATE INDEX cluster_keys_by_cluster ON cluster_keys (cluster, created_at_ms);
