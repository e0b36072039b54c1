//! The rebalancer as a use case: on the replica holding the cluster's lease, run its sessions
//! (on their timers, or when asked), turn a cycle's moves into migrations of concrete grains, and
//! keep its state in the store under the lease, so another replica carries on after a takeover.

use super::{Movers, OracleError};
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId, SiloStatus};
use crate::policy::Immovable;
use crate::rebalancer::plan::apply_moves;
use crate::rebalancer::{CycleReport, Move, Rebalancer, RebalancerOptions, SiloLoad};
use crate::store::{Lease, Membership, Migration, MigrationReason, NewMigration};
use crate::telemetry::metric;

/// The work-state kind the rebalancer is stored under.
pub(super) const KIND: &str = "rebalancer";
/// Most activations looked at per move (a move of more takes several cycles).
const MAX_MOVE: u64 = 10_000;

/// A cycle and the migrations it issued.
#[derive(Debug, Clone)]
pub struct RebalancerCycle {
    pub report: CycleReport,
    pub migrations: Vec<Migration>,
}

/// An operator's request in progress; the gate is held until it is dropped.
struct Request {
    _gate: tokio::sync::OwnedMutexGuard<()>,
    lease: Lease,
    membership: Membership,
    rebalancer: Rebalancer,
}

/// The rebalancer of a cluster, as `GET …/rebalancer` shows it.
#[derive(Debug, Clone)]
pub struct RebalancerStatus {
    pub rebalancer: Rebalancer,
    pub now: Millis,
    pub lease: Option<Lease>,
    pub options: RebalancerOptions,
}

impl Movers {
    /// The rebalancer's state (a fresh one if it never ran) and the cluster's lease.
    pub async fn rebalancer_status(
        &self,
        cluster: &ClusterName,
    ) -> Result<RebalancerStatus, OracleError> {
        let membership = self.views.read(cluster).await?;
        let now = membership.liveness.now;
        let options = membership.policy.rebalancer;
        let rebalancer = self.stored_rebalancer(cluster, now, &options).await?;
        let lease = self.store.lease(cluster).await?;
        Ok(RebalancerStatus {
            rebalancer,
            now,
            lease,
            options,
        })
    }

    /// Runs one cycle now (starting a session if none runs), as the lease holder.
    pub async fn run_rebalancer_cycle(
        &self,
        cluster: &ClusterName,
    ) -> Result<RebalancerCycle, OracleError> {
        let Request {
            _gate,
            lease,
            membership,
            mut rebalancer,
        } = self.for_request(cluster).await?;
        let (now, options) = (membership.liveness.now, membership.policy.rebalancer);
        let (loads, active) = self.loads(cluster, &membership).await?;
        let report = rebalancer.run_cycle(now, &options, &loads, active);
        self.carry_out(cluster, &lease, &membership, rebalancer, report)
            .await
    }

    /// Starts a session now (ending any suspension), as the lease holder.
    pub async fn start_rebalancer_session(
        &self,
        cluster: &ClusterName,
    ) -> Result<RebalancerStatus, OracleError> {
        self.change_rebalancer(cluster, |rebalancer, now| rebalancer.start_session(now))
            .await
    }

    /// Suspends the rebalancer for `duration_ms` (until resumed with `None`); the latest wins.
    pub async fn suspend_rebalancer(
        &self,
        cluster: &ClusterName,
        duration_ms: Option<Millis>,
    ) -> Result<RebalancerStatus, OracleError> {
        self.change_rebalancer(cluster, |rebalancer, now| {
            rebalancer.suspend(now, duration_ms)
        })
        .await
    }

    /// The movers' driver's rebalancer step, under the lease and the gate: runs whatever cycle
    /// is due (when the rebalancer is enabled).
    pub(super) async fn rebalancer_step(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
    ) -> Result<Option<RebalancerCycle>, OracleError> {
        let (now, options) = (membership.liveness.now, membership.policy.rebalancer);
        if !options.enabled {
            return Ok(None);
        }
        let (mut rebalancer, stored) = self.read_rebalancer(cluster, now, &options).await?;
        let before = rebalancer.clone();
        // Loads are read only when a cycle is due (a tick mostly finds none). The membership
        // shows the load figures this replica holds back, not yet written.
        let due = rebalancer.cycle_due(now);
        let (loads, active) = if due {
            self.loads(cluster, membership).await?
        } else {
            (Vec::new(), 0)
        };
        let report = rebalancer.tick(now, &options, || (loads, active));
        match report {
            Some(report) => self
                .carry_out(cluster, lease, membership, rebalancer, report)
                .await
                .map(Some),
            // Written when the tick changed something (the trigger's next look), or to keep a
            // fresh state's due time from moving with every tick; otherwise nothing is written.
            None if stored && rebalancer == before => Ok(None),
            None => {
                self.save(cluster, lease, membership, &mut rebalancer)
                    .await?;
                Ok(None)
            }
        }
    }

    async fn change_rebalancer(
        &self,
        cluster: &ClusterName,
        change: impl FnOnce(&mut Rebalancer, Millis),
    ) -> Result<RebalancerStatus, OracleError> {
        let Request {
            _gate,
            lease,
            membership,
            mut rebalancer,
        } = self.for_request(cluster).await?;
        let (now, options) = (membership.liveness.now, membership.policy.rebalancer);
        change(&mut rebalancer, now);
        self.save(cluster, &lease, &membership, &mut rebalancer)
            .await?;
        Ok(RebalancerStatus {
            rebalancer,
            now,
            lease: Some(lease),
            options,
        })
    }

    /// What an operator's request works on: this replica's gate for the cluster, the lease, a
    /// fresh membership (showing the load figures this replica holds back) and the stored
    /// rebalancer.
    async fn for_request(&self, cluster: &ClusterName) -> Result<Request, OracleError> {
        // The lease first: an unknown cluster is refused before it gets a gate.
        let lease = self.lease_for_request(cluster).await?;
        let gate = self.mover_gate(cluster).await;
        let membership = self.views.read(cluster).await?;
        let (now, options) = (membership.liveness.now, membership.policy.rebalancer);
        let rebalancer = self.stored_rebalancer(cluster, now, &options).await?;
        Ok(Request {
            _gate: gate,
            lease,
            membership,
            rebalancer,
        })
    }

    async fn stored_rebalancer(
        &self,
        cluster: &ClusterName,
        now: Millis,
        options: &RebalancerOptions,
    ) -> Result<Rebalancer, OracleError> {
        Ok(self.read_rebalancer(cluster, now, options).await?.0)
    }

    /// The stored rebalancer (a fresh one when none is stored or it cannot be read), and whether
    /// one was stored.
    async fn read_rebalancer(
        &self,
        cluster: &ClusterName,
        now: Millis,
        options: &RebalancerOptions,
    ) -> Result<(Rebalancer, bool), OracleError> {
        let (stored, found) = self.load_work(cluster, KIND).await?;
        let rebalancer = stored.unwrap_or_else(|| Rebalancer::new(now, options));
        Ok((rebalancer, found))
    }

    /// Stores the state under the lease, keeping only the tallies of silos still in the
    /// membership (silo ids change with every restart; Orleans drops dead silos' statistics too).
    async fn save(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
        rebalancer: &mut Rebalancer,
    ) -> Result<(), OracleError> {
        rebalancer.retain_silos(|silo| membership.silos.iter().any(|s| s.id.as_str() == silo));
        self.store_work(cluster, lease, KIND, rebalancer).await
    }

    /// Issues the report's moves as migrations (fenced by the lease), then stores the state.
    async fn carry_out(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
        mut rebalancer: Rebalancer,
        report: CycleReport,
    ) -> Result<RebalancerCycle, OracleError> {
        let options = membership.policy.rebalancer;
        let immovable = membership
            .policy
            .immovable_types(Immovable::keeps_from_rebalancer);
        let view = membership.view();
        // Never a grain a migration brought in the last cycle period.
        let moved_since =
            report.at_ms - Millis::try_from(options.session_cycle_period_ms).unwrap_or(Millis::MAX);
        // Each source's grains are read once for all its moves, then dealt out to the targets in
        // order, so two moves from one silo never name the same grain.
        let mut by_source: Vec<(&str, Vec<(&str, u64)>)> = Vec::new();
        for Move { from, to, count } in &report.moves {
            match by_source.iter_mut().find(|(source, _)| source == from) {
                Some((_, targets)) => targets.push((to, *count)),
                None => by_source.push((from, vec![(to, *count)])),
            }
        }
        let mut wanted = Vec::new();
        for (from, targets) in by_source {
            let Ok(from_id) = SiloId::parse("from", from) else {
                continue;
            };
            let total: u64 = targets.iter().map(|(_, n)| n).sum();
            let limit = u32::try_from(total.min(MAX_MOVE)).unwrap_or(u32::MAX);
            let grains = self
                .store
                .movable_activations(cluster, &from_id, &immovable, moved_since, limit)
                .await?
                .into_iter();
            let mut pool: Vec<_> = grains.collect();
            for (to, count) in targets {
                let Ok(to_id) = SiloId::parse("to", to) else {
                    continue;
                };
                // Only grains whose type the target hosts.
                let Some(target) = view.find(&to_id) else {
                    continue;
                };
                let mut dealt = 0;
                let mut kept = Vec::with_capacity(pool.len());
                for activation in pool {
                    let grain = GrainId::parse("grain", &activation.grain).ok();
                    let fits = grain.as_ref().is_some_and(|g| target.hosts(g.grain_type()));
                    if dealt == count || !fits {
                        kept.push(activation);
                        continue;
                    }
                    let grain = grain.expect("checked by fits");
                    dealt += 1;
                    wanted.push(NewMigration {
                        grain,
                        from: from_id.clone(),
                        to: to_id.clone(),
                        epoch: activation.epoch,
                        reason: MigrationReason::Rebalancer,
                    });
                }
                pool = kept;
            }
        }
        let migrations = if wanted.is_empty() {
            Vec::new()
        } else {
            match self.store.issue_migrations(cluster, lease, &wanted).await? {
                Some(issued) => issued,
                None => return Err(self.lost_lease(cluster).await),
            }
        };
        metric::migrations(
            MigrationReason::Rebalancer.as_str(),
            "issued",
            migrations.len() as u64,
        );
        let outcome = serde_json::to_value(report.outcome)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let measured = (report.outcome != crate::rebalancer::CycleOutcome::Skipped)
            .then_some((report.deviation, report.entropy));
        metric::rebalancer_cycle(cluster.as_str(), outcome, measured);
        self.save(cluster, lease, membership, &mut rebalancer)
            .await?;
        Ok(RebalancerCycle { report, migrations })
    }
}

impl Movers {
    /// What a cycle sees: the active silos that report an activation count, with their smoothed
    /// memory, and how many silos are active. Open migrations count as done (a source's count
    /// less what it is still to send, a target's plus what it is to receive), so a cycle that
    /// comes before the silos finished the last one's moves does not plan them again.
    async fn loads(
        &self,
        cluster: &ClusterName,
        membership: &Membership,
    ) -> Result<(Vec<SiloLoad>, usize), OracleError> {
        let view = membership.view();
        let active: Vec<_> = view
            .silos
            .iter()
            .filter(|silo| view.status(silo) == SiloStatus::Active)
            .collect();
        let mut loads: Vec<SiloLoad> = active
            .iter()
            .filter_map(|silo| {
                Some(SiloLoad {
                    silo: silo.id.to_string(),
                    activations: silo.profile.load.activation_count?,
                    memory: silo
                        .profile
                        .smoothing
                        .memory_usage_bytes
                        .map(|bytes| bytes as f64),
                })
            })
            .collect();
        let pending: Vec<Move> = self
            .store
            .open_migration_counts(cluster)
            .await?
            .into_iter()
            .map(|(from, to, count)| Move { from, to, count })
            .collect();
        apply_moves(&mut loads, &pending);
        Ok((loads, active.len()))
    }
}
