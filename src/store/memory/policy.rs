//! The cluster policy in the embedded store: replaced only at the version the writer read.

use async_trait::async_trait;

use super::MemoryStore;
use crate::clock::Millis;
use crate::cluster::ClusterName;
use crate::policy::Policy;
use crate::store::{PolicyStore, StoreError};

#[async_trait]
impl PolicyStore for MemoryStore {
    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError> {
        let mut clusters = self.clusters();
        let default_ttl = self.settings.default_silo_ttl_ms;
        let state = self.cluster_state(&mut clusters, cluster)?;
        if expected.is_some_and(|expected| expected != state.policy_version) {
            return Ok(Err(state.policy_version));
        }
        state.policy = policy.clone();
        state.policy_version += 1;
        state.silo_ttl_ms = policy.silo_ttl_ms.map_or(default_ttl, |ttl| {
            Millis::try_from(ttl).unwrap_or(Millis::MAX)
        });
        Ok(Ok(state.policy_version))
    }
}
