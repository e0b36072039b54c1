//! The background work's reads in the embedded store: replicas by their last stamp (one process
//! has one, but the same rules hold), and what is due in a cluster, read under the one lock.

use async_trait::async_trait;

use super::MemoryStore;
use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloStatus};
use crate::store::{BackgroundStore, Due, StoreError, DEAD_SILO_RETENTION_MS};

#[async_trait]
impl BackgroundStore for MemoryStore {
    async fn announce_replica(
        &self,
        replica: &str,
        ttl_ms: Millis,
    ) -> Result<Vec<String>, StoreError> {
        let now = self.clock.now_ms();
        let mut replicas = self.replicas();
        replicas.insert(replica.to_owned(), now);
        Ok(replicas
            .iter()
            .filter(|(_, seen)| **seen > now - ttl_ms)
            .map(|(replica, _)| replica.clone())
            .collect())
    }

    async fn retire_replica(&self, replica: &str) -> Result<(), StoreError> {
        self.replicas().remove(replica);
        Ok(())
    }

    async fn due(&self, cluster: &ClusterName) -> Result<Due, StoreError> {
        let now = self.clock.now_ms();
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(Due::default());
        };
        let liveness = state.liveness(now);
        let silos = || state.silos.values();
        Ok(Due {
            silent: silos().any(|s| {
                s.status != SiloStatus::Dead && s.status_at(&liveness) == SiloStatus::Dead
            }),
            // Every death releases its entries at once here.
            unreleased: false,
            expired: state
                .dead_since
                .values()
                .any(|since| now - *since > DEAD_SILO_RETENTION_MS),
            moving: state.policy.rebalancer.enabled
                || state.policy.repartitioner.enabled
                || !state.migrations.is_empty()
                || !state.migration_endings.is_empty()
                || !state.edges.is_empty()
                || silos().any(|s| s.drained_at_ms.is_some() && s.status != SiloStatus::Dead),
        })
    }
}
