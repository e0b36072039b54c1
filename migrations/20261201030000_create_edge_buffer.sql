-- Edge reports (grain-to-grain call counts) between their arrival on any replica and the lease
-- holder's counting into the repartitioner's sketch. Bounded per cluster: an append drops the
-- oldest beyond the policy's max_unprocessed_edges, counting them in `dropped`.
CREATE TABLE edge_intake (
    cluster  text   COLLATE "C" PRIMARY KEY REFERENCES clusters (name) ON DELETE CASCADE,
    last_seq bigint NOT NULL DEFAULT 0,
    dropped  bigint NOT NULL DEFAULT 0
);

CREATE TABLE edge_buffer (
    cluster    text   COLLATE "C" NOT NULL,
    seq        bigint NOT NULL,
    from_grain text   NOT NULL,
    to_grain   text   NOT NULL,
    count      bigint NOT NULL,
    PRIMARY KEY (cluster, seq)
);
