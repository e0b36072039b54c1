//! The cluster policy on Postgres: a column of the cluster's row, replaced only at the version the
//! writer read (optimistic concurrency), with the TTL it names stored beside it.

use async_trait::async_trait;
use sqlx::types::Json;

use super::PostgresStore;
use crate::cluster::ClusterName;
use crate::policy::Policy;
use crate::store::{PolicyStore, StoreError};

impl PostgresStore {
    async fn try_put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError> {
        let ttl = policy
            .silo_ttl_ms
            .map_or(self.settings.default_silo_ttl_ms, |ttl| {
                i64::try_from(ttl).unwrap_or(i64::MAX)
            });
        // The cluster may not exist yet (a policy written before any silo joins); create it at
        // version 0 so the conditional update below has a row to compare against.
        self.ensure_cluster(cluster).await?;
        // What this replica holds back is written under the TTL it was folded under, before
        // the TTL changes (then the copies go, below).
        self.try_flush_held_heartbeats(Some(cluster)).await?;
        let updated: Option<i64> = sqlx::query_scalar(
            "UPDATE clusters SET policy = $2, silo_ttl_ms = $3, policy_version = policy_version + 1
             WHERE name = $1 AND ($4::int8 IS NULL OR policy_version = $4)
             RETURNING policy_version",
        )
        .bind(cluster.as_str())
        .bind(Json(policy))
        .bind(ttl)
        .bind(expected)
        .fetch_optional(&self.db)
        .await?;
        if let Some(version) = updated {
            // Heartbeats this replica holds back are answered under the TTL their copies were
            // judged under: the copies go, and the next heartbeats read the new TTL.
            self.written_silos.forget_cluster(cluster);
            return Ok(Ok(version));
        }
        let current: i64 =
            sqlx::query_scalar("SELECT policy_version FROM clusters WHERE name = $1")
                .bind(cluster.as_str())
                .fetch_one(&self.db)
                .await?;
        Ok(Err(current))
    }
}

#[async_trait]
impl PolicyStore for PostgresStore {
    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError> {
        self.guard(self.try_put_policy(cluster, policy, expected))
            .await
    }
}
