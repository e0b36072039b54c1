//! Cluster leases in the embedded store: the same rules as Postgres', under its one lock.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::MemoryStore;
use crate::clock::Millis;
use crate::cluster::ClusterName;
use crate::store::{Lease, LeaseClaim, LeaseStore, StoreError};

impl super::ClusterState {
    /// Whether `fence` is the cluster's current, unexpired lease.
    pub(super) fn holds(&self, fence: &Lease, now: Millis) -> bool {
        self.lease.as_ref().is_some_and(|lease| {
            lease.holder == fence.holder && lease.token == fence.token && lease.expires_at_ms > now
        })
    }
}

impl MemoryStore {
    /// Claims the lease for `holder`: when free, expired or already `holder`'s, or — with
    /// `take_over` — whoever holds it.
    fn lease_for(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
        take_over: bool,
    ) -> Result<LeaseClaim, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(LeaseClaim::NoCluster);
        };
        let expires_at_ms = now.saturating_add(ttl_ms);
        let claim = match &state.lease {
            Some(current)
                if !take_over && current.holder != holder && current.expires_at_ms > now =>
            {
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
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn claim_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError> {
        self.lease_for(cluster, holder, ttl_ms, false)
    }

    async fn claim_leases(
        &self,
        clusters: &[ClusterName],
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<BTreeMap<ClusterName, Lease>, StoreError> {
        let mut held = BTreeMap::new();
        for cluster in clusters {
            if let LeaseClaim::Held(lease) = self.lease_for(cluster, holder, ttl_ms, false)? {
                held.insert(cluster.clone(), lease);
            }
        }
        Ok(held)
    }

    async fn take_over_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError> {
        self.lease_for(cluster, holder, ttl_ms, true)
    }

    async fn lease(&self, cluster: &ClusterName) -> Result<Option<Lease>, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .and_then(|state| state.lease.clone()))
    }

    async fn work_state(
        &self,
        cluster: &ClusterName,
        kind: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .and_then(|state| state.work_state.get(kind).cloned()))
    }

    async fn save_work_state(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        kind: &str,
        value: &serde_json::Value,
    ) -> Result<bool, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(false);
        };
        if !state.holds(fence, now) {
            return Ok(false);
        }
        state.work_state.insert(kind.to_owned(), value.clone());
        Ok(true)
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
