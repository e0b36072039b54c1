//! Cluster leases on Postgres: one row per cluster, claimed and renewed by one statement (for one
//! cluster or a page of them).

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::error::{lost_a_race, PgError};
use super::PostgresStore;
use crate::clock::Millis;
use crate::cluster::ClusterName;
use crate::store::{Lease, LeaseClaim, LeaseStore, StoreError};

type LeaseRow = (String, i64, i64);

fn lease((holder, token, expires_at_ms): LeaseRow) -> Lease {
    Lease {
        holder,
        token,
        expires_at_ms,
    }
}

/// Clusters per lease-claiming statement (a replica renews the leases of every cluster it runs at
/// once).
const CLAIM_PAGE: usize = 1_000;

impl PostgresStore {
    /// Claims the lease for `holder`: taken when absent or expired (a new token), renewed when
    /// `holder` has it (same token); a lease another holder keeps unexpired is left alone and
    /// read back instead — unless `take_over`, which takes it whoever holds it (a new token).
    async fn try_claim_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
        take_over: bool,
    ) -> Result<LeaseClaim, StoreError> {
        let claimed = self
            .claim_racing(std::slice::from_ref(cluster), holder, ttl_ms, take_over)
            .await?;
        if let Some((_, row)) = claimed.into_iter().next() {
            return Ok(LeaseClaim::Held(lease(row)));
        }
        Ok(match self.try_lease(cluster).await? {
            Some(current) => LeaseClaim::HeldByOther(current),
            None => LeaseClaim::NoCluster,
        })
    }

    /// The leases of `clusters` claimed for `holder`, a page of them a statement.
    async fn try_claim_leases(
        &self,
        clusters: &[ClusterName],
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<BTreeMap<ClusterName, Lease>, StoreError> {
        let mut held = BTreeMap::new();
        for page in clusters.chunks(CLAIM_PAGE) {
            for (cluster, row) in self.claim_racing(page, holder, ttl_ms, false).await? {
                let cluster =
                    ClusterName::parse(&cluster).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                held.insert(cluster, lease(row));
            }
        }
        Ok(held)
    }

    /// [`Self::claim_once`], made again when it lost a race the database broke (racing claims
    /// under serializable transactions): it then reads the winner's lease.
    async fn claim_racing(
        &self,
        clusters: &[ClusterName],
        holder: &str,
        ttl_ms: Millis,
        take_over: bool,
    ) -> Result<Vec<(String, LeaseRow)>, StoreError> {
        let mut attempts = 0;
        loop {
            match self.claim_once(clusters, holder, ttl_ms, take_over).await {
                Err(PgError::Sqlx(error)) if lost_a_race(&error) && attempts < 3 => attempts += 1,
                outcome => return Ok(outcome?),
            }
        }
    }

    /// One statement claiming the leases of `clusters` (locked in name order, so that two
    /// replicas claiming overlapping lists never wait on each other in a cycle); returns the
    /// leases `holder` holds after it.
    async fn claim_once(
        &self,
        clusters: &[ClusterName],
        holder: &str,
        ttl_ms: Millis,
        take_over: bool,
    ) -> Result<Vec<(String, LeaseRow)>, PgError> {
        let names: Vec<&str> = clusters.iter().map(ClusterName::as_str).collect();
        let rows: Vec<(String, String, i64, i64)> = sqlx::query_as(
            "WITH now AS (SELECT COALESCE($4::int8, oracle_now_ms()) AS ms)
             INSERT INTO cluster_leases AS l (cluster, holder, token, expires_at_ms)
             SELECT k.cluster, $2, 1, now.ms + $3
             FROM UNNEST($1::text[]) AS k(cluster) JOIN clusters c ON c.name = k.cluster, now
             ORDER BY k.cluster
             ON CONFLICT (cluster) DO UPDATE
                SET holder = EXCLUDED.holder,
                    token = CASE WHEN l.holder = EXCLUDED.holder
                                  AND l.expires_at_ms > (SELECT ms FROM now)
                                 THEN l.token ELSE l.token + 1 END,
                    expires_at_ms = EXCLUDED.expires_at_ms
              WHERE $5 OR l.holder = EXCLUDED.holder OR l.expires_at_ms <= (SELECT ms FROM now)
             RETURNING cluster, holder, token, expires_at_ms",
        )
        .bind(&names)
        .bind(holder)
        .bind(ttl_ms)
        .bind(self.now())
        .bind(take_over)
        .fetch_all(&self.db)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(cluster, holder, token, expires)| (cluster, (holder, token, expires)))
            .collect())
    }

    async fn try_lease(&self, cluster: &ClusterName) -> Result<Option<Lease>, StoreError> {
        let row: Option<LeaseRow> = sqlx::query_as(
            "SELECT holder, token, expires_at_ms FROM cluster_leases WHERE cluster = $1",
        )
        .bind(cluster.as_str())
        .fetch_optional(&self.db)
        .await?;
        Ok(row.map(lease))
    }

    async fn try_release_lease(
        &self,
        cluster: &ClusterName,
        current: &Lease,
    ) -> Result<bool, StoreError> {
        let released = sqlx::query(
            "UPDATE cluster_leases SET expires_at_ms = LEAST(expires_at_ms, COALESCE($4::int8, oracle_now_ms()))
             WHERE cluster = $1 AND holder = $2 AND token = $3",
        )
        .bind(cluster.as_str())
        .bind(&current.holder)
        .bind(current.token)
        .bind(self.now())
        .execute(&self.db)
        .await?;
        Ok(released.rows_affected() == 1)
    }
}

impl PostgresStore {
    async fn try_work_state(
        &self,
        cluster: &ClusterName,
        kind: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT state FROM cluster_work_state WHERE cluster = $1 AND kind = $2",
        )
        .bind(cluster.as_str())
        .bind(kind)
        .fetch_optional(&self.db)
        .await?)
    }

    async fn try_save_work_state(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        kind: &str,
        state: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        // Written only while the fence is the current lease: the lease row is read FOR SHARE in
        // the same statement, so a takeover waits for this write or this write sees it.
        let written = sqlx::query(
            "WITH fence AS (
                SELECT 1 FROM cluster_leases
                WHERE cluster = $1 AND holder = $2 AND token = $3
                  AND expires_at_ms > COALESCE($6::int8, oracle_now_ms())
                FOR SHARE
             )
             INSERT INTO cluster_work_state (cluster, kind, state)
             SELECT $1, $4, $5 FROM fence
             ON CONFLICT (cluster, kind) DO UPDATE SET state = EXCLUDED.state",
        )
        .bind(cluster.as_str())
        .bind(&fence.holder)
        .bind(fence.token)
        .bind(kind)
        .bind(state)
        .bind(self.now())
        .execute(&self.db)
        .await?;
        Ok(written.rows_affected() == 1)
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn work_state(
        &self,
        cluster: &ClusterName,
        kind: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        self.guard(self.try_work_state(cluster, kind)).await
    }

    async fn save_work_state(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        kind: &str,
        state: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        self.guard(self.try_save_work_state(cluster, fence, kind, state))
            .await
    }

    async fn claim_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError> {
        self.guard(self.try_claim_lease(cluster, holder, ttl_ms, false))
            .await
    }

    async fn claim_leases(
        &self,
        clusters: &[ClusterName],
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<BTreeMap<ClusterName, Lease>, StoreError> {
        self.guard(self.try_claim_leases(clusters, holder, ttl_ms))
            .await
    }

    async fn take_over_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError> {
        self.guard(self.try_claim_lease(cluster, holder, ttl_ms, true))
            .await
    }

    async fn lease(&self, cluster: &ClusterName) -> Result<Option<Lease>, StoreError> {
        self.guard(self.try_lease(cluster)).await
    }

    async fn release_lease(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
    ) -> Result<bool, StoreError> {
        self.guard(self.try_release_lease(cluster, lease)).await
    }
}
