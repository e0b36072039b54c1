//! Edge reports in the embedded store: the same bounded buffer as Postgres', under its one lock.

use async_trait::async_trait;

use super::MemoryStore;
use crate::cluster::ClusterName;
use crate::store::{EdgeIntake, EdgeReport, EdgeStore, PendingEdge, StoreError};

#[async_trait]
impl EdgeStore for MemoryStore {
    async fn append_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
        max_unprocessed: u32,
    ) -> Result<Option<u64>, StoreError> {
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(None);
        };
        for edge in edges {
            state.edge_last_seq += 1;
            state.edges.push_back(PendingEdge {
                seq: state.edge_last_seq,
                from: edge.from.to_string(),
                to: edge.to.to_string(),
                count: edge.count,
            });
        }
        let oldest_kept = state.edge_last_seq - i64::from(max_unprocessed);
        let mut dropped = 0;
        while state.edges.front().is_some_and(|e| e.seq <= oldest_kept) {
            state.edges.pop_front();
            dropped += 1;
        }
        state.edges_dropped += dropped;
        Ok(Some(dropped))
    }

    async fn pending_edges(
        &self,
        cluster: &ClusterName,
        after: i64,
        limit: u32,
    ) -> Result<Vec<PendingEdge>, StoreError> {
        let clusters = self.clusters();
        Ok(clusters.get(cluster).map_or_else(Vec::new, |state| {
            state
                .edges
                .iter()
                .filter(|e| e.seq > after)
                .take(limit as usize)
                .cloned()
                .collect()
        }))
    }

    async fn forget_edges(&self, cluster: &ClusterName, through: i64) -> Result<(), StoreError> {
        if let Some(state) = self.clusters().get_mut(cluster) {
            while state.edges.front().is_some_and(|e| e.seq <= through) {
                state.edges.pop_front();
            }
        }
        Ok(())
    }

    async fn edge_intake(&self, cluster: &ClusterName) -> Result<EdgeIntake, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .map_or_else(EdgeIntake::default, |state| EdgeIntake {
                last_seq: state.edge_last_seq,
                pending: state.edges.len() as u64,
                dropped: state.edges_dropped,
            }))
    }
}
