//! Edge reports: calls between grains, buffered until the lease holder counts them.

use async_trait::async_trait;

use super::StoreError;
use crate::cluster::{ClusterName, GrainId};

/// One report of calls between two grains, as silos send them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeReport {
    pub from: GrainId,
    pub to: GrainId,
    pub count: u64,
}

/// An edge report waiting to be counted, numbered in order of arrival within its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEdge {
    pub seq: i64,
    pub from: String,
    pub to: String,
    pub count: u64,
}

/// The cluster's edge reports waiting to be counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeIntake {
    /// The number of the last report stored.
    pub last_seq: i64,
    /// Reports waiting (not yet forgotten after counting).
    pub pending: u64,
    /// Reports dropped unread, ever, because the buffer was full.
    pub dropped: u64,
}

/// Edge reports between their arrival on any replica and the lease holder's counting: a bounded
/// buffer per cluster (the oldest dropped, and counted, beyond the bound).
#[async_trait]
pub trait EdgeStore: Send + Sync + 'static {
    /// Appends reports (numbered on from the last), then drops the oldest beyond
    /// `max_unprocessed`; returns how many it dropped, or `None` when the cluster is unknown.
    async fn append_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
        max_unprocessed: u32,
    ) -> Result<Option<u64>, StoreError>;

    /// Up to `limit` waiting reports numbered after `after`, in order.
    async fn pending_edges(
        &self,
        cluster: &ClusterName,
        after: i64,
        limit: u32,
    ) -> Result<Vec<PendingEdge>, StoreError>;

    /// Forgets the reports numbered up to `through` (they were counted).
    async fn forget_edges(&self, cluster: &ClusterName, through: i64) -> Result<(), StoreError>;

    /// The buffer's state.
    async fn edge_intake(&self, cluster: &ClusterName) -> Result<EdgeIntake, StoreError>;
}
