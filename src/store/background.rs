//! What the background work of a cluster asks the store: which replicas are alive (so that they
//! share the clusters out, `cluster::ownership`), and what is due in one cluster now.

use async_trait::async_trait;

use super::StoreError;
use crate::clock::Millis;
use crate::cluster::ClusterName;

/// What is due in one cluster, read in one statement, so that a cluster with nothing to do costs
/// its owner one round trip a tick.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Due {
    /// A silo is past its TTL and its protection (it may have to be declared dead).
    pub silent: bool,
    /// A dead silo still has directory entries to release.
    pub unreleased: bool,
    /// A dead silo's record is older than [`super::DEAD_SILO_RETENTION_MS`] and released.
    pub expired: bool,
    /// Grains may have to move: the rebalancer or the repartitioner is enabled, a silo is being
    /// drained, or migrations, endings or edge reports are waiting.
    pub moving: bool,
}

/// The replicas and the per-cluster view the background work runs on.
#[async_trait]
pub trait BackgroundStore: Send + Sync + 'static {
    /// Says `replica` is alive now and returns every replica seen alive within `ttl_ms` (itself
    /// included), sorted.
    async fn announce_replica(
        &self,
        replica: &str,
        ttl_ms: Millis,
    ) -> Result<Vec<String>, StoreError>;

    /// `replica` stops: the others take its clusters over at once.
    async fn retire_replica(&self, replica: &str) -> Result<(), StoreError>;

    /// What is due in `cluster` now (nothing, for an unknown cluster).
    async fn due(&self, cluster: &ClusterName) -> Result<Due, StoreError>;
}
