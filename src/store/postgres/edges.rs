//! Edge reports on Postgres. An append takes the cluster's intake row (so appends of one cluster
//! number their reports in order, one after the other), inserts the reports in one statement and
//! drops the oldest beyond the bound, in one transaction.

use async_trait::async_trait;

use super::PostgresStore;
use crate::cluster::ClusterName;
use crate::store::{EdgeIntake, EdgeReport, EdgeStore, PendingEdge, StoreError};

impl PostgresStore {
    async fn try_append_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
        max_unprocessed: u32,
    ) -> Result<Option<u64>, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO edge_intake (cluster) SELECT name FROM clusters WHERE name = $1
             ON CONFLICT (cluster) DO NOTHING",
        )
        .bind(cluster.as_str())
        .execute(&mut *tx)
        .await?;
        let n = i64::try_from(edges.len()).unwrap_or(i64::MAX);
        let last: Option<i64> = sqlx::query_scalar(
            "UPDATE edge_intake SET last_seq = last_seq + $2 WHERE cluster = $1 RETURNING last_seq",
        )
        .bind(cluster.as_str())
        .bind(n)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(last) = last else {
            return Ok(None);
        };
        let first = last - n + 1;
        let from: Vec<&str> = edges.iter().map(|e| e.from.as_str()).collect();
        let to: Vec<&str> = edges.iter().map(|e| e.to.as_str()).collect();
        let counts: Vec<i64> = edges
            .iter()
            .map(|e| i64::try_from(e.count).unwrap_or(i64::MAX))
            .collect();
        sqlx::query(
            "INSERT INTO edge_buffer (cluster, seq, from_grain, to_grain, count)
             SELECT $1, $2 + n - 1, f, t, c
             FROM unnest($3::text[], $4::text[], $5::int8[]) WITH ORDINALITY AS e(f, t, c, n)",
        )
        .bind(cluster.as_str())
        .bind(first)
        .bind(&from)
        .bind(&to)
        .bind(&counts)
        .execute(&mut *tx)
        .await?;
        let dropped: i64 = sqlx::query_scalar(
            "WITH gone AS (DELETE FROM edge_buffer WHERE cluster = $1 AND seq <= $2 RETURNING 1)
             SELECT count(*) FROM gone",
        )
        .bind(cluster.as_str())
        .bind(last - i64::from(max_unprocessed))
        .fetch_one(&mut *tx)
        .await?;
        if dropped > 0 {
            sqlx::query("UPDATE edge_intake SET dropped = dropped + $2 WHERE cluster = $1")
                .bind(cluster.as_str())
                .bind(dropped)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Some(u64::try_from(dropped).unwrap_or(0)))
    }
}

#[async_trait]
impl EdgeStore for PostgresStore {
    async fn append_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
        max_unprocessed: u32,
    ) -> Result<Option<u64>, StoreError> {
        let outcome = self
            .guard(self.try_append_edges(cluster, edges, max_unprocessed))
            .await;
        super::deadlock_as_contention(outcome)
    }

    async fn pending_edges(
        &self,
        cluster: &ClusterName,
        after: i64,
        limit: u32,
    ) -> Result<Vec<PendingEdge>, StoreError> {
        self.guard(async {
            let rows: Vec<(i64, String, String, i64)> = sqlx::query_as(
                "SELECT seq, from_grain, to_grain, count FROM edge_buffer
                 WHERE cluster = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .bind(cluster.as_str())
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(seq, from, to, count)| PendingEdge {
                    seq,
                    from,
                    to,
                    count: u64::try_from(count).unwrap_or(0),
                })
                .collect())
        })
        .await
    }

    async fn forget_edges(&self, cluster: &ClusterName, through: i64) -> Result<(), StoreError> {
        self.guard(async {
            sqlx::query("DELETE FROM edge_buffer WHERE cluster = $1 AND seq <= $2")
                .bind(cluster.as_str())
                .bind(through)
                .execute(&self.pool)
                .await?;
            Ok(())
        })
        .await
    }

    async fn edge_intake(&self, cluster: &ClusterName) -> Result<EdgeIntake, StoreError> {
        self.guard(async {
            let row: Option<(i64, i64, i64)> = sqlx::query_as(
                "SELECT i.last_seq, i.dropped,
                        (SELECT count(*) FROM edge_buffer b WHERE b.cluster = i.cluster)
                 FROM edge_intake i WHERE i.cluster = $1",
            )
            .bind(cluster.as_str())
            .fetch_optional(&self.pool)
            .await?;
            Ok(
                row.map_or_else(EdgeIntake::default, |(last_seq, dropped, pending)| {
                    EdgeIntake {
                        last_seq,
                        pending: u64::try_from(pending).unwrap_or(0),
                        dropped: u64::try_from(dropped).unwrap_or(0),
                    }
                }),
            )
        })
        .await
    }
}
