//! The background work's reads in the embedded store: replicas by their last stamp (one process
//! has one, but the same rules hold), and what is due in each cluster, read under the one lock.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{ClusterState, MemoryStore};
use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloStatus};
use crate::store::{
    BackgroundStore, Due, DueQuery, SilenceLook, StoreError, DEAD_SILO_RETENTION_MS,
};

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

    async fn due(&self, clusters: &[DueQuery]) -> Result<BTreeMap<ClusterName, Due>, StoreError> {
        let now = self.clock.now_ms();
        let states = self.clusters();
        Ok(clusters
            .iter()
            .filter_map(|(cluster, look)| {
                let due = due_in(states.get(cluster)?, look.as_ref(), now);
                (due.any() || due.looked.is_some()).then(|| (cluster.clone(), due))
            })
            .collect())
    }
}

/// What is due in one cluster's state at `now`, its silos looked at for silence only when `look`
/// is over.
fn due_in(state: &ClusterState, look: Option<&SilenceLook>, now: Millis) -> Due {
    let silos = || state.silos.values();
    let alive = || silos().filter(|s| s.status != SiloStatus::Dead);
    let looked = SilenceLook::is_due(look, now, state.silo_ttl_ms).then(|| {
        let earliest = alive().map(|s| s.silent_from(state.silo_ttl_ms)).min();
        SilenceLook::at(now, state.silo_ttl_ms, earliest)
    });
    let liveness = state.liveness(now);
    Due {
        silent: looked.is_some() && alive().any(|s| s.status_at(&liveness) == SiloStatus::Dead),
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
        looked,
    }
}
