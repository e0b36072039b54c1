//! Movers: which grains should move, under each cluster's lease — the silos' migrations
//! ([`migrations`]), drains ([`draining`]), the rebalancer ([`rebalancing`]) and the
//! repartitioner ([`repartitioning`]), the leases themselves ([`leases`]), and the driver's step
//! for one cluster, on the replica holding its lease: cancel migrations that can no longer apply,
//! plan the drains under way, run the rebalancer's cycle when one is due, and count edge reports
//! and run the repartitioner's round when one is due. `background::run_clusters` calls it for
//! every cluster this replica owns whose grains may have to move.

mod draining;
mod leases;
mod migrations;
mod rebalancing;
mod repartitioning;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand_chacha::ChaCha8Rng;

pub use draining::{DrainIssued, Drained};
pub use migrations::{MigrationListing, Moved};
pub use rebalancing::{RebalancerCycle, RebalancerStatus};
pub use repartitioning::{EdgesTaken, RepartitionerRound, RepartitionerStatus};

use super::directory::DirectoryCache;
use super::views::ClusterViews;
use super::{lock_rng, OracleError, Replica, SharedRng, SiloSnapshot};
use crate::cluster::ClusterName;
use crate::policy::Policy;
use crate::store::{LeaseClaim, Store};
use crate::telemetry::metric;

/// Everything that moves grains, on the lease of each cluster.
pub struct Movers {
    store: Arc<dyn Store>,
    views: Arc<ClusterViews>,
    rng: SharedRng,
    /// The directory's recent answers: a completed migration forgets the grain's.
    cache: Arc<DirectoryCache>,
    /// This replica's name and lease length in cluster leases.
    replica: Replica,
    /// The token of each cluster lease this replica last held, to count takeovers.
    lease_tokens: Mutex<HashMap<ClusterName, i64>>,
    /// The repartitioner state this replica last stored for each cluster, with the lease token
    /// it was stored under: while that token is still the lease's, no one else has written it,
    /// so the driver's every tick need not read and parse it again.
    repartitioner_states: Mutex<HashMap<ClusterName, (i64, crate::repartitioner::Repartitioner)>>,
    /// One mover of a cluster at a time on this replica (see `mover_gate`).
    mover_gates: Mutex<HashMap<ClusterName, Arc<tokio::sync::Mutex<()>>>>,
}

/// What one step of the driver did for a cluster.
#[derive(Debug, Clone, Default)]
pub struct DriverStep {
    /// Drain migrations issued, per drained silo that got any.
    pub drains: Vec<DrainIssued>,
    /// The rebalancer's cycle, when one was due.
    pub cycle: Option<RebalancerCycle>,
    /// The repartitioner's round, when one was due.
    pub round: Option<RepartitionerRound>,
}

impl Movers {
    pub(super) fn new(
        store: Arc<dyn Store>,
        views: Arc<ClusterViews>,
        rng: SharedRng,
        cache: Arc<DirectoryCache>,
        replica: Replica,
    ) -> Self {
        Self {
            store,
            views,
            rng,
            cache,
            replica,
            lease_tokens: Mutex::default(),
            repartitioner_states: Mutex::default(),
            mover_gates: Mutex::default(),
        }
    }

    /// Who this replica is to cluster leases.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// Runs `f` with the shared RNG.
    fn with_rng<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        f(&mut lock_rng(&self.rng))
    }

    /// One step of the movers for `cluster`: takes or renews the lease, then does whatever is due.
    /// `None` when another replica holds the lease (it does the work).
    pub async fn drive(&self, cluster: &ClusterName) -> Result<Option<DriverStep>, OracleError> {
        let claim = self
            .store
            .claim_lease(cluster, &self.replica.id, self.replica.lease_ttl_ms)
            .await?;
        let LeaseClaim::Held(lease) = claim else {
            return Ok(None);
        };
        self.note_lease(cluster, &lease);
        let _gate = self.mover_gate(cluster).await;
        let membership = self.views.read(cluster).await?;
        self.cancel_stale(cluster, &membership.policy).await?;
        let drains = self.drain_step(cluster, &lease, &membership).await?;
        let cycle = self.rebalancer_step(cluster, &lease, &membership).await?;
        let round = self
            .repartitioner_step(cluster, &lease, &membership)
            .await?;
        Ok(Some(DriverStep {
            drains,
            cycle,
            round,
        }))
    }

    async fn cancel_stale(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
    ) -> Result<(), OracleError> {
        let cancelled = self
            .store
            .cancel_stale_migrations(cluster, policy.migration_ttl_ms())
            .await?;
        for migration in &cancelled {
            metric::migrations(migration.reason.as_str(), "cancelled", 1);
        }
        Ok(())
    }
}
