//! Connection pools on Postgres: one row per pool, its definition as JSON and its round-robin
//! counter, advanced by one statement that every replica shares.

use async_trait::async_trait;
use sqlx::types::Json;

use super::{decode_stored, PostgresStore};
use crate::cluster::{ClusterName, PoolName};
use crate::connect::Pool;
use crate::store::{PoolStore, StoreError};

impl PostgresStore {
    async fn try_put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError> {
        self.ensure_cluster(cluster).await?;
        sqlx::query(
            "INSERT INTO pools (cluster, pool, definition) VALUES ($1, $2, $3)
             ON CONFLICT (cluster, pool) DO UPDATE SET definition = EXCLUDED.definition",
        )
        .bind(cluster.as_str())
        .bind(name.as_str())
        .bind(Json(pool))
        .execute(&self.db)
        .await?;
        Ok(())
    }

    async fn try_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        let definition: Option<serde_json::Value> =
            sqlx::query_scalar("SELECT definition FROM pools WHERE cluster = $1 AND pool = $2")
                .bind(cluster.as_str())
                .bind(name.as_str())
                .fetch_optional(&self.db)
                .await?;
        definition.map(decode_stored).transpose()
    }

    async fn try_next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError> {
        let before: Option<i64> = sqlx::query_scalar(
            "UPDATE pools SET round_robin = round_robin + 1 WHERE cluster = $1 AND pool = $2
             RETURNING round_robin - 1",
        )
        .bind(cluster.as_str())
        .bind(name.as_str())
        .fetch_optional(&self.db)
        .await?;
        Ok(before.map(|n| u64::try_from(n).unwrap_or(0)))
    }
}

#[async_trait]
impl PoolStore for PostgresStore {
    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError> {
        self.guard(self.try_put_pool(cluster, name, pool)).await
    }

    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        self.guard(self.try_pool(cluster, name)).await
    }

    async fn next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError> {
        self.guard(self.try_next_round_robin(cluster, name)).await
    }
}
