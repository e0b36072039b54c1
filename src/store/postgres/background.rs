//! The background work's reads on Postgres: the replicas table (each replica stamps its row every
//! tick, at the database's clock), and what is due in the clusters a replica runs, a page of them
//! a statement.

use std::collections::BTreeMap;

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use crate::clock::Millis;
use crate::cluster::ClusterName;
use crate::store::{
    BackgroundStore, Due, DueQuery, SilenceLook, StoreError, DEAD_SILO_RETENTION_MS,
};

/// Clusters per `due` statement: a replica running 5,000 idle clusters asks in five statements a
/// second.
const DUE_PAGE: usize = 1_000;

impl PostgresStore {
    async fn try_announce_replica(
        &self,
        replica: &str,
        ttl_ms: Millis,
    ) -> Result<Vec<String>, StoreError> {
        let now = self.now();
        sqlx::query(
            "INSERT INTO replicas (replica, last_seen_ms)
             VALUES ($1, COALESCE($2::int8, oracle_now_ms()))
             ON CONFLICT (replica) DO UPDATE SET last_seen_ms = EXCLUDED.last_seen_ms",
        )
        .bind(replica)
        .bind(now)
        .execute(&self.db)
        .await?;
        Ok(sqlx::query_scalar(
            "SELECT replica FROM replicas
             WHERE last_seen_ms > COALESCE($1::int8, oracle_now_ms()) - $2
             ORDER BY replica",
        )
        .bind(now)
        .bind(ttl_ms)
        .fetch_all(&self.db)
        .await?)
    }

    /// What is due in each of `clusters`, a page of them a statement. The silos of a cluster are
    /// read for silence only when its last look is over; dead and draining silos are found by
    /// their partial indexes and queued moves in their tables, each with one scan for the whole
    /// list (`= ANY` of it), so a page of idle clusters costs about a row of `clusters` each. Only
    /// the clusters with something due or looked at come back.
    async fn try_due(
        &self,
        clusters: &[DueQuery],
    ) -> Result<BTreeMap<ClusterName, Due>, StoreError> {
        let mut due = BTreeMap::new();
        for page in clusters.chunks(DUE_PAGE) {
            let names: Vec<&str> = page.iter().map(|(c, _)| c.as_str()).collect();
            let until: Vec<Option<Millis>> =
                page.iter().map(|(_, l)| l.map(|l| l.until_ms)).collect();
            let ttls: Vec<Option<Millis>> = page.iter().map(|(_, l)| l.map(|l| l.ttl_ms)).collect();
            let rows = sqlx::query(
                "WITH t AS MATERIALIZED (SELECT COALESCE($4::int8, oracle_now_ms()) AS now),
                 listed AS MATERIALIZED (
                   SELECT c.name, c.silo_ttl_ms,
                          c.policy -> 'rebalancer' ->> 'enabled' = 'true'
                            OR c.policy -> 'repartitioner' ->> 'enabled' = 'true' AS enabled
                   FROM clusters c WHERE c.name = ANY($1::text[])),
                 k AS MATERIALIZED (
                   SELECT k.cluster, c.silo_ttl_ms, c.enabled,
                          k.until IS NULL OR t.now >= k.until OR c.silo_ttl_ms < k.looked_ttl
                            AS look
                   FROM UNNEST($1::text[], $2::int8[], $3::int8[]) AS k(cluster, until, looked_ttl)
                   JOIN listed c ON c.name = k.cluster CROSS JOIN t),
                 silence AS MATERIALIZED (
                   SELECT k.cluster,
                          COALESCE(bool_or(NOT silo_is_alive(s.status, s.last_heartbeat_ms,
                                                             s.protected_until_ms, k.silo_ttl_ms,
                                                             t.now, NULL)),
                                   false) AS silent,
                          LEAST(min(GREATEST(s.protected_until_ms,
                                             s.last_heartbeat_ms + k.silo_ttl_ms)),
                                t.now + k.silo_ttl_ms) AS until
                   FROM k CROSS JOIN t
                   LEFT JOIN silos s ON s.cluster = k.cluster AND s.status <> 'dead'
                   WHERE k.look
                   GROUP BY k.cluster, k.silo_ttl_ms, t.now),
                 unreleased AS MATERIALIZED (
                   SELECT DISTINCT s.cluster FROM silos s
                   WHERE s.cluster = ANY($1::text[]) AND s.status = 'dead' AND NOT s.released),
                 expired AS MATERIALIZED (
                   SELECT DISTINCT s.cluster FROM silos s
                   WHERE s.cluster = ANY($1::text[]) AND s.status = 'dead' AND s.released
                     AND s.dead_since_ms < (SELECT now FROM t) - $5),
                 draining AS MATERIALIZED (
                   SELECT DISTINCT s.cluster FROM silos s
                   WHERE s.cluster = ANY($1::text[])
                     AND s.drained_at_ms IS NOT NULL AND s.status <> 'dead'),
                 queued AS MATERIALIZED (
                   SELECT x.cluster FROM migrations x WHERE x.cluster = ANY($1::text[])
                   UNION SELECT x.cluster FROM migration_endings x
                         WHERE x.cluster = ANY($1::text[])
                   UNION SELECT x.cluster FROM edge_buffer x WHERE x.cluster = ANY($1::text[]))
                 SELECT k.cluster, k.silo_ttl_ms, si.until,
                        COALESCE(si.silent, false) AS silent,
                        u.cluster IS NOT NULL AS unreleased,
                        e.cluster IS NOT NULL AS expired,
                        COALESCE(k.enabled, false) OR d.cluster IS NOT NULL
                          OR q.cluster IS NOT NULL AS moving
                 FROM k
                 LEFT JOIN silence si ON si.cluster = k.cluster
                 LEFT JOIN unreleased u ON u.cluster = k.cluster
                 LEFT JOIN expired e ON e.cluster = k.cluster
                 LEFT JOIN draining d ON d.cluster = k.cluster
                 LEFT JOIN queued q ON q.cluster = k.cluster
                 WHERE k.look OR k.enabled OR u.cluster IS NOT NULL OR e.cluster IS NOT NULL
                    OR d.cluster IS NOT NULL OR q.cluster IS NOT NULL",
            )
            .bind(&names)
            .bind(&until)
            .bind(&ttls)
            .bind(self.now())
            .bind(DEAD_SILO_RETENTION_MS)
            .fetch_all(&self.db)
            .await?;
            for row in rows {
                let cluster: String = row.try_get("cluster")?;
                let until: Option<Millis> = row.try_get("until")?;
                let ttl_ms: Millis = row.try_get("silo_ttl_ms")?;
                let found = Due {
                    silent: row.try_get("silent")?,
                    unreleased: row.try_get("unreleased")?,
                    expired: row.try_get("expired")?,
                    moving: row.try_get("moving")?,
                    looked: until.map(|until_ms| SilenceLook { until_ms, ttl_ms }),
                };
                let cluster =
                    ClusterName::parse(&cluster).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                due.insert(cluster, found);
            }
        }
        Ok(due)
    }
}

#[async_trait]
impl BackgroundStore for PostgresStore {
    async fn announce_replica(
        &self,
        replica: &str,
        ttl_ms: Millis,
    ) -> Result<Vec<String>, StoreError> {
        self.guard(self.try_announce_replica(replica, ttl_ms)).await
    }

    async fn retire_replica(&self, replica: &str) -> Result<(), StoreError> {
        self.guard(async {
            sqlx::query("DELETE FROM replicas WHERE replica = $1")
                .bind(replica)
                .execute(&self.db)
                .await?;
            Ok(())
        })
        .await
    }

    async fn due(&self, clusters: &[DueQuery]) -> Result<BTreeMap<ClusterName, Due>, StoreError> {
        self.guard(self.try_due(clusters)).await
    }
}
