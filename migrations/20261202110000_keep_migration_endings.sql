-- How a silo's call ended a migration (completed, refused or failed), kept for an hour
-- (`store::ENDING_KEPT_MS`): a silo whose answer was lost on the way retries, and the retry gets
-- the first answer instead of 404. Written in the transaction that removes the migration; rows
-- older than an hour are pruned, per cluster, when a new one is written.
CREATE TABLE migration_endings (
    cluster text COLLATE "C" NOT NULL,
    id bigint NOT NULL,
    migration jsonb NOT NULL,
    ending jsonb NOT NULL,
    ended_ms bigint NOT NULL,
    PRIMARY KEY (cluster, id)
);
CREATE INDEX migration_endings_by_age ON migration_endings (cluster, ended_ms);
