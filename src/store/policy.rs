//! The cluster policy, versioned.

use async_trait::async_trait;

use super::StoreError;
use crate::cluster::ClusterName;
use crate::policy::Policy;

/// The cluster policy, versioned (it is read with the membership).
#[async_trait]
pub trait PolicyStore: Send + Sync + 'static {
    /// Replaces the cluster's policy if its version is `expected` (`None`: whatever it is),
    /// creating the cluster if needed (a cluster never written has version 0). `Ok(new version)`,
    /// or `Err(current version)` when another writer got there first.
    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError>;
}
