//! Connection pools in the embedded store: each with its round-robin counter, under its one lock.

use async_trait::async_trait;

use super::MemoryStore;
use crate::cluster::{ClusterName, PoolName};
use crate::connect::Pool;
use crate::store::{PoolStore, StoreError};

#[async_trait]
impl PoolStore for MemoryStore {
    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError> {
        let mut clusters = self.clusters();
        let state = self.cluster_state(&mut clusters, cluster)?;
        let counter = state
            .pools
            .get(name.as_str())
            .map_or(0, |(_, counter)| *counter);
        state
            .pools
            .insert(name.to_string(), (pool.clone(), counter));
        Ok(())
    }

    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .and_then(|state| state.pools.get(name.as_str()))
            .map(|(pool, _)| pool.clone()))
    }

    async fn next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError> {
        let mut clusters = self.clusters();
        Ok(clusters
            .get_mut(cluster)
            .and_then(|state| state.pools.get_mut(name.as_str()))
            .map(|(_, counter)| {
                *counter += 1;
                *counter - 1
            }))
    }
}
