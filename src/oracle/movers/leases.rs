//! Cluster leases as this replica sees them: taking one for an operator's request, counting
//! takeovers, explaining a lost one, the per-cluster gate of the movers, the movers' state stored
//! under the lease, and giving every lease up at shutdown.

use super::{Movers, OracleError};
use crate::cluster::ClusterName;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::store::{Lease, LeaseClaim};
use crate::telemetry::metric;

impl Movers {
    /// The lease for an operator's request, taken over here whoever held it: an operator
    /// behind a Service reaches any replica, and each serves the request itself. The previous
    /// holder's fenced writes are refused from now on (a step of several writes may be cut
    /// between them, as when a lease runs out); its driver finds the lease held here and leaves
    /// the cluster alone.
    pub(super) async fn lease_for_request(
        &self,
        cluster: &ClusterName,
    ) -> Result<Lease, OracleError> {
        match self
            .store
            .take_over_lease(cluster, &self.replica.id, self.replica.lease_ttl_ms)
            .await?
        {
            LeaseClaim::Held(lease) => {
                self.note_lease(cluster, &lease);
                Ok(lease)
            }
            LeaseClaim::HeldByOther(lease) => Err(OracleError::LeaseHeldElsewhere {
                holder: lease.holder,
                expires_at_ms: lease.expires_at_ms,
            }),
            LeaseClaim::NoCluster => Err(OracleError::ClusterNotFound(cluster.to_string())),
        }
    }

    /// Gives up every cluster lease this replica holds, so that another replica carries on at
    /// once instead of after the lease runs out (called when the replica shuts down).
    pub async fn release_leases(&self) {
        let held: Vec<(ClusterName, i64)> = {
            let tokens = self.lease_tokens.lock().unwrap_or_else(|e| e.into_inner());
            tokens.iter().map(|(c, t)| (c.clone(), *t)).collect()
        };
        for (cluster, token) in held {
            let lease = Lease {
                holder: self.replica.id.clone(),
                token,
                expires_at_ms: 0,
            };
            match self.store.release_lease(&cluster, &lease).await {
                Ok(true) => tracing::info!(%cluster, "cluster lease released"),
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%cluster, %error, "cannot release the cluster lease; it runs out by itself")
                }
            }
        }
    }

    /// Gives up `lease` of a cluster this replica no longer owns, once no mover of this replica
    /// is working on it (its gate), so that the new owner carries on at once.
    pub async fn hand_back(&self, cluster: &ClusterName, lease: &Lease) {
        let _gate = self.mover_gate(cluster).await;
        if let Err(error) = self.store.release_lease(cluster, lease).await {
            tracing::warn!(%cluster, %error, "cannot give the cluster's lease up; it runs out by itself");
        }
    }

    /// Holds the cluster's movers' gate: on this replica, one mover at a time reads, plans and
    /// writes a cluster's migrations and work state (the driver and operators' requests share
    /// the lease's token, so the fence alone cannot order them).
    pub(super) async fn mover_gate(
        &self,
        cluster: &ClusterName,
    ) -> tokio::sync::OwnedMutexGuard<()> {
        let gate = {
            let mut gates = self.mover_gates.lock().unwrap_or_else(|e| e.into_inner());
            gates.entry(cluster.clone()).or_default().clone()
        };
        gate.lock_owned().await
    }

    /// Counts a lease this replica took with a new token (a takeover, or its first).
    pub(super) fn note_lease(&self, cluster: &ClusterName, lease: &Lease) {
        let mut tokens = self.lease_tokens.lock().unwrap_or_else(|e| e.into_inner());
        if tokens.insert(cluster.clone(), lease.token) != Some(lease.token) {
            metric::lease_taken();
        }
    }

    /// Why a write fenced by this replica's lease was refused: the lease ran out (retry), or
    /// another replica holds it now.
    pub(super) async fn lost_lease(&self, cluster: &ClusterName) -> OracleError {
        match self.store.lease(cluster).await {
            // Still ours, but it ran out while the work was under way: retrying takes it again.
            Ok(Some(lease)) if lease.holder == self.replica.id => OracleError::LeaseExpired,
            Ok(Some(lease)) => OracleError::LeaseHeldElsewhere {
                holder: lease.holder,
                expires_at_ms: lease.expires_at_ms,
            },
            Ok(None) => OracleError::ClusterNotFound(cluster.to_string()),
            Err(error) => error.into(),
        }
    }

    /// A mover's stored state of `kind`, if one is stored and readable (an unreadable one is
    /// logged: the mover starts afresh), and whether any was stored.
    pub(super) async fn load_work<T: DeserializeOwned>(
        &self,
        cluster: &ClusterName,
        kind: &str,
    ) -> Result<(Option<T>, bool), OracleError> {
        let stored = self.store.work_state(cluster, kind).await?;
        let found = stored.is_some();
        let state = match stored.map(crate::validation::from_stored_json::<T>) {
            Some(Ok(state)) => Some(state),
            Some(Err(error)) => {
                tracing::error!(%cluster, %error, kind, "a stored mover state cannot be read; starting afresh");
                None
            }
            None => None,
        };
        Ok((state, found))
    }

    /// Stores a mover's state of `kind` under `lease`; a refused write (the lease ran out or moved)
    /// is the error that says which.
    pub(super) async fn store_work<T: Serialize>(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        kind: &str,
        state: &T,
    ) -> Result<(), OracleError> {
        let value = serde_json::to_value(state).expect("a mover's state serialises");
        if self
            .store
            .save_work_state(cluster, lease, kind, &value)
            .await?
        {
            Ok(())
        } else {
            Err(self.lost_lease(cluster).await)
        }
    }
}
