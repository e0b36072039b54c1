//! The background work's reads on Postgres: the replicas table (each replica stamps its row every
//! tick, at the database's clock), and what is due in one cluster, in one statement.

use async_trait::async_trait;
use sqlx::Row;

use super::PostgresStore;
use crate::clock::Millis;
use crate::cluster::ClusterName;
use crate::store::{BackgroundStore, Due, StoreError, DEAD_SILO_RETENTION_MS};

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

    async fn try_due(&self, cluster: &ClusterName) -> Result<Due, StoreError> {
        let row = sqlx::query(
            "WITH t AS (SELECT COALESCE($2::int8, oracle_now_ms()) AS now)
             SELECT
               EXISTS (SELECT 1 FROM silos s JOIN clusters c ON c.name = s.cluster CROSS JOIN t
                       WHERE s.cluster = $1 AND c.name = $1 AND s.status <> 'dead'
                         AND NOT silo_is_alive(s.status, s.last_heartbeat_ms,
                                               s.protected_until_ms, c.silo_ttl_ms, t.now, NULL))
                 AS silent,
               EXISTS (SELECT 1 FROM silos
                       WHERE cluster = $1 AND status = 'dead' AND NOT released) AS unreleased,
               EXISTS (SELECT 1 FROM silos CROSS JOIN t
                       WHERE cluster = $1 AND status = 'dead' AND released
                         AND dead_since_ms < t.now - $3) AS expired,
               COALESCE((SELECT policy -> 'rebalancer' ->> 'enabled' = 'true'
                                OR policy -> 'repartitioner' ->> 'enabled' = 'true'
                         FROM clusters WHERE name = $1), false)
               OR EXISTS (SELECT 1 FROM silos WHERE cluster = $1
                          AND drained_at_ms IS NOT NULL AND status <> 'dead')
               OR EXISTS (SELECT 1 FROM migrations WHERE cluster = $1)
               OR EXISTS (SELECT 1 FROM migration_endings WHERE cluster = $1)
               OR EXISTS (SELECT 1 FROM edge_buffer WHERE cluster = $1) AS moving",
        )
        .bind(cluster.as_str())
        .bind(self.now())
        .bind(DEAD_SILO_RETENTION_MS)
        .fetch_one(&self.db)
        .await?;
        Ok(Due {
            silent: row.try_get("silent")?,
            unreleased: row.try_get("unreleased")?,
            expired: row.try_get("expired")?,
            moving: row.try_get("moving")?,
        })
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

    async fn due(&self, cluster: &ClusterName) -> Result<Due, StoreError> {
        self.guard(self.try_due(cluster)).await
    }
}
