//! Edge reports on Postgres. An append takes the cluster's intake row (so appends of one cluster
//! number their edges in order, one after the other), stores the report as one row (its edges as
//! arrays) and drops the oldest edges beyond the bound — whole reports, and the front of the one
//! the bound cuts through — in one transaction.

use async_trait::async_trait;

use super::error::{conflict_as_contention, PgError};
use super::PostgresStore;
use crate::cluster::ClusterName;
use crate::store::{EdgeIntake, EdgeReport, EdgeStore, PendingEdge, StoreError};

impl PostgresStore {
    async fn try_append_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
        max_unprocessed: u32,
    ) -> Result<Option<u64>, PgError> {
        let mut tx = self.db.begin().await?;
        sqlx::query(
            "INSERT INTO edge_intake (cluster) SELECT name FROM clusters WHERE name = $1
             ON CONFLICT (cluster) DO NOTHING",
        )
        .bind(cluster.as_str())
        .execute(&mut tx)
        .await?;
        let n = i64::try_from(edges.len()).unwrap_or(i64::MAX);
        let last: Option<i64> = sqlx::query_scalar(
            "UPDATE edge_intake SET last_seq = last_seq + $2 WHERE cluster = $1 RETURNING last_seq",
        )
        .bind(cluster.as_str())
        .bind(n)
        .fetch_optional(&mut tx)
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
            "INSERT INTO edge_buffer (cluster, first_seq, last_seq, from_grains, to_grains, counts)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(cluster.as_str())
        .bind(first)
        .bind(last)
        .bind(&from)
        .bind(&to)
        .bind(&counts)
        .execute(&mut tx)
        .await?;
        // Edges numbered up to `bound` are beyond the limit.
        let bound = last - i64::from(max_unprocessed);
        let whole: i64 = sqlx::query_scalar(
            "WITH gone AS (DELETE FROM edge_buffer WHERE cluster = $1 AND last_seq <= $2
                           RETURNING last_seq - first_seq + 1 AS n)
             SELECT coalesce(sum(n), 0)::int8 FROM gone",
        )
        .bind(cluster.as_str())
        .bind(bound)
        .fetch_one(&mut tx)
        .await?;
        let cut: i64 = sqlx::query_scalar(
            "WITH cut AS (
                 SELECT last_seq, $2 - first_seq + 1 AS n FROM edge_buffer
                 WHERE cluster = $1 AND first_seq <= $2 AND last_seq > $2
             ), trimmed AS (
                 UPDATE edge_buffer b
                 SET from_grains = b.from_grains[c.n + 1:], to_grains = b.to_grains[c.n + 1:],
                     counts = b.counts[c.n + 1:], first_seq = $2 + 1
                 FROM cut c WHERE b.cluster = $1 AND b.last_seq = c.last_seq
                 RETURNING c.n
             )
             SELECT coalesce(sum(n), 0)::int8 FROM trimmed",
        )
        .bind(cluster.as_str())
        .bind(bound)
        .fetch_one(&mut tx)
        .await?;
        let dropped = whole + cut;
        if dropped > 0 {
            sqlx::query("UPDATE edge_intake SET dropped = dropped + $2 WHERE cluster = $1")
                .bind(cluster.as_str())
                .bind(dropped)
                .execute(&mut tx)
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
        self.guard(async {
            conflict_as_contention(self.try_append_edges(cluster, edges, max_unprocessed).await)
        })
        .await
    }

    async fn pending_edges(
        &self,
        cluster: &ClusterName,
        after: i64,
        limit: u32,
    ) -> Result<Vec<PendingEdge>, StoreError> {
        self.guard(async {
            // The window starts at the first edge still waiting after `after` (older ones may
            // have been dropped by the bound, leaving a gap) and spans `limit` numbers.
            let rows: Vec<(i64, i64, Vec<String>, Vec<String>, Vec<i64>)> = sqlx::query_as(
                "WITH start AS (
                     SELECT greatest($2, first_seq - 1) AS s FROM edge_buffer
                     WHERE cluster = $1 AND last_seq > $2 ORDER BY last_seq LIMIT 1
                 )
                 SELECT start.s, first_seq, from_grains, to_grains, counts
                 FROM edge_buffer, start
                 WHERE cluster = $1 AND last_seq > start.s AND first_seq <= start.s + $3
                 ORDER BY last_seq",
            )
            .bind(cluster.as_str())
            .bind(after)
            .bind(i64::from(limit))
            .fetch_all(&self.db)
            .await?;
            let mut pending = Vec::new();
            for (start, first, from, to, counts) in rows {
                let upto = start.saturating_add(i64::from(limit));
                for (i, ((from, to), count)) in from.into_iter().zip(to).zip(counts).enumerate() {
                    let seq = first + i as i64;
                    if seq > start && seq <= upto {
                        pending.push(PendingEdge {
                            seq,
                            from,
                            to,
                            count: u64::try_from(count).unwrap_or(0),
                        });
                    }
                }
            }
            Ok(pending)
        })
        .await
    }

    async fn forget_edges(&self, cluster: &ClusterName, through: i64) -> Result<(), StoreError> {
        self.guard(async {
            sqlx::query("DELETE FROM edge_buffer WHERE cluster = $1 AND last_seq <= $2")
                .bind(cluster.as_str())
                .bind(through)
                .execute(&self.db)
                .await?;
            Ok(())
        })
        .await
    }

    async fn edge_intake(&self, cluster: &ClusterName) -> Result<EdgeIntake, StoreError> {
        self.guard(async {
            let row: Option<(i64, i64, i64)> = sqlx::query_as(
                "SELECT i.last_seq, i.dropped,
                        (SELECT coalesce(sum(b.last_seq - b.first_seq + 1), 0)::int8
                         FROM edge_buffer b WHERE b.cluster = i.cluster)
                 FROM edge_intake i WHERE i.cluster = $1",
            )
            .bind(cluster.as_str())
            .fetch_optional(&self.db)
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
