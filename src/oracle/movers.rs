//! The movers' driver step for one cluster, on the replica holding its lease: cancel migrations
//! that can no longer apply, plan the drains under way, run the rebalancer's cycle when one is
//! due, and count edge reports and run the repartitioner's round when one is due. `background::run_movers` calls it for every cluster whose grains may have to move.

use super::draining::DrainIssued;
use super::{Oracle, OracleError, RebalancerCycle, RepartitionerRound};
use crate::cluster::ClusterName;
use crate::policy::Policy;
use crate::store::LeaseClaim;
use crate::telemetry::metric;

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

impl Oracle {
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
        let membership = self.read_membership(cluster).await?;
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
