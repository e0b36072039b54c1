//! Connection pools and their shared round-robin counters.

use async_trait::async_trait;

use super::StoreError;
use crate::cluster::{ClusterName, PoolName};
use crate::connect::Pool;

/// Connection pools and their shared round-robin counters.
#[async_trait]
pub trait PoolStore: Send + Sync + 'static {
    /// Creates or replaces a connection pool (and the cluster, if new). The round-robin counter of
    /// an existing pool carries on.
    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError>;

    /// A pool's definition, or `None` when it does not exist.
    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError>;

    /// Advances the pool's round-robin counter, shared by every replica, and returns its value
    /// before the advance; `None` when the pool does not exist.
    async fn next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError>;
}
