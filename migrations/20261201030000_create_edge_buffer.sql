-- Edge reports (grain-to-grain call counts) between their arrival on any replica and the lease
-- holder's counting into the repartitioner's sketch. One row per report (its edges as arrays, so
-- a flood of reports costs one tuple per report, not one per edge), numbered per cluster through
-- `edge_intake`: a report of n edges takes the numbers first_seq..last_seq. Bounded per cluster:
-- an append drops the oldest edges beyond the policy's max_unprocessed_edges, counting them.
CREATE TABLE edge_intake (
    cluster  text   COLLATE "C" PRIMARY KEY REFERENCES clusters (name) ON DELETE CASCADE,
    last_seq bigint NOT NULL DEFAULT 0,
    dropped  bigint NOT NULL DEFAULT 0
);

CREATE TABLE edge_buffer (
    cluster     text     COLLATE "C" NOT NULL,
    first_seq   bigint   NOT NULL,
    last_seq    bigint   NOT NULL,
    from_grains text[]   NOT NULL,
    to_grains   text[]   NOT NULL,
    counts      bigint[] NOT NULL,
    PRIMARY KEY (cluster, last_seq)
);
