//! Cluster leases in the embedded store: the same rules as Postgres', under its one lock.

use async_trait::async_trait;

use super::MemoryStore;
use crate::clock::Millis;
use crate::cluster::ClusterName;
use crate::store::{Lease, LeaseClaim, LeaseStore, StoreError};

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn claim_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(LeaseClaim::NoCluster);
        };
        let expires_at_ms = now.saturating_add(ttl_ms);
        let claim = match &state.lease {
            Some(current) if current.holder != holder && current.expires_at_ms > now => {
                return Ok(LeaseClaim::HeldByOther(current.clone()));
            }
            Some(current) if current.holder == holder && current.expires_at_ms > now => Lease {
                holder: holder.to_owned(),
                token: current.token,
                expires_at_ms,
            },
            Some(current) => Lease {
                holder: holder.to_owned(),
                token: current.token + 1,
                expires_at_ms,
            },
            None => Lease {
                holder: holder.to_owned(),
                token: 1,
                expires_at_ms,
            },
        };
        state.lease = Some(claim.clone());
        Ok(LeaseClaim::Held(claim))
    }

    async fn lease(&self, cluster: &ClusterName) -> Result<Option<Lease>, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .and_then(|state| state.lease.clone()))
    }

    async fn release_lease(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let current = clusters
            .get_mut(cluster)
            .and_then(|state| state.lease.as_mut())
            .filter(|current| current.holder == lease.holder && current.token == lease.token);
        Ok(match current {
            Some(current) => {
                current.expires_at_ms = current.expires_at_ms.min(now);
                true
            }
            None => false,
        })
    }
}
