//! Cluster leases: which replica runs a cluster's background work, fenced by a growing token.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Serialize;
use utoipa::ToSchema;

use super::StoreError;
use crate::clock::Millis;
use crate::cluster::ClusterName;

/// A cluster's lease: who runs the cluster's background work (rebalancer sessions, repartitioner
/// rounds) until when. `token` grows on every takeover, so a write fenced by an older token (from
/// a holder that lost the lease while it worked) is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Lease {
    /// The replica holding it (`ORACLE_REPLICA_ID`).
    #[schema(example = "oracle-7c9f-4211")]
    pub holder: String,
    #[schema(example = 3)]
    pub token: i64,
    #[schema(example = 1_764_547_210_000_i64)]
    pub expires_at_ms: Millis,
}

/// What asking for a cluster's lease gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseClaim {
    /// The asker holds it now: taken (a new token) or renewed (the same token).
    Held(Lease),
    /// Another replica holds it, unexpired.
    HeldByOther(Lease),
    /// No such cluster.
    NoCluster,
}

/// Cluster leases: background work for a cluster runs on exactly one replica at a time. A lease
/// row with an expiry and a growing token (not an advisory lock), so the schema also fits
/// distributed SQL engines; time is the store's clock.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Takes the lease for `holder` when it is free or expired (a new token), or renews it when
    /// `holder` has it (same token), for `ttl_ms` from now.
    async fn claim_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError>;

    /// Claims the leases of `clusters` for `holder`, each as [`Self::claim_lease`] would, in as
    /// few statements as the list allows: a replica renews the leases of every cluster it runs at
    /// once. Returns the leases `holder` holds now, by cluster; a cluster missing from the answer
    /// is held by another replica, or unknown.
    async fn claim_leases(
        &self,
        clusters: &[ClusterName],
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<BTreeMap<ClusterName, Lease>, StoreError>;

    /// Takes the lease for `holder` whoever holds it (a new token, unless `holder` has it
    /// unexpired: then renewed), for `ttl_ms` from now: an operator's request is served by the
    /// replica it reaches. The previous holder's writes fenced by its token are refused from now
    /// on (each write is whole; a step of several may be cut between them, as when a lease runs
    /// out). Never `HeldByOther`.
    async fn take_over_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError>;

    /// The cluster's lease, expired or not; `None` when never taken.
    async fn lease(&self, cluster: &ClusterName) -> Result<Option<Lease>, StoreError>;

    /// Gives the lease up (it expires now) if `lease` is still the current one; `true` when it was.
    async fn release_lease(&self, cluster: &ClusterName, lease: &Lease)
        -> Result<bool, StoreError>;

    /// The stored state of the cluster's background work `kind` (e.g. `rebalancer`), if any.
    async fn work_state(
        &self,
        cluster: &ClusterName,
        kind: &str,
    ) -> Result<Option<serde_json::Value>, StoreError>;

    /// Stores that state if `fence` is still the cluster's current, unexpired lease; `false` (and
    /// nothing written) when it is not.
    async fn save_work_state(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        kind: &str,
        state: &serde_json::Value,
    ) -> Result<bool, StoreError>;
}
