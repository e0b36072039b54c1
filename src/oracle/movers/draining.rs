//! Drains: an operator asks for a silo's grains to leave it before it stops (a rolling upgrade, a
//! planned restart). The silo is marked drained at once — `shutting_down` from then on, so nothing
//! new is placed there — and the replica holding the cluster's lease issues a `drain` migration for
//! each of its movable grains, to where the grain type's placement strategy puts it among the
//! other silos ([`crate::drain`]). Issuing goes on in steps of the movers' driver until every
//! movable grain has left, so migrations that fail or expire are issued again, to another target if
//! need be.

use super::{Movers, OracleError, SiloSnapshot};
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId, SiloRecord, SiloStatus};
use crate::drain::{self, Arriving, Departing, Stuck};
use crate::policy::Immovable;
use crate::store::{Lease, LeaseClaim, Membership, Migration, MigrationReason, NewMigration};
use crate::telemetry::metric;

/// Most open drain migrations per drained silo. The rest are issued as these complete, so a silo
/// with a million activations is not handed them all at once, nor do they expire unread.
const DRAIN_WINDOW: u64 = 10_000;
/// Most activations one step plans per drained silo.
const DRAIN_BATCH: u64 = 2_000;
/// Rounds of one step per silo: after each, grain types with activations no silo can take are set
/// aside, so they do not hide the movable ones behind them (they are tried again next step).
const DRAIN_ROUNDS: usize = 3;

/// What one drain step issued for one silo.
#[derive(Debug, Clone)]
pub struct DrainIssued {
    pub silo: SiloId,
    pub migrations: Vec<Migration>,
    /// Grain types with activations no other silo can take now, and why.
    pub stuck: Vec<Stuck>,
}

/// What `POST …/silos/{silo}/drain` did.
#[derive(Debug, Clone)]
pub struct Drained {
    /// The silo now, with its drain's progress.
    pub silo: SiloSnapshot,
    /// What this request issued; `None` when another replica holds the lease (it issues them).
    pub issued: Option<DrainIssued>,
    /// The replica that issues the drain's migrations: the holder of the cluster's lease.
    pub planner: String,
}

impl Movers {
    /// Drains a silo: marks it (once; asking again re-plans), then, when this replica holds or can
    /// take the cluster's lease, issues the first migrations at once.
    pub async fn drain(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Drained, OracleError> {
        let (record, liveness) = self
            .store
            .drain_silo(cluster, silo)
            .await
            .inspect_err(|_| metric::store_error("drain_silo"))?
            .ok_or_else(|| OracleError::SiloNotFound {
                cluster: cluster.to_string(),
                silo: silo.to_string(),
            })?;
        let marked = SiloSnapshot {
            record,
            liveness,
            drain: None,
        };
        if marked.status() == SiloStatus::Dead {
            return Err(OracleError::SiloDead(silo.to_string()));
        }
        self.views.forget(cluster);
        let (issued, planner) = match self
            .store
            .claim_lease(cluster, &self.replica.id, self.replica.lease_ttl_ms)
            .await?
        {
            LeaseClaim::Held(lease) => {
                self.note_lease(cluster, &lease);
                let _gate = self.mover_gate(cluster).await;
                let membership = self.views.read(cluster).await?;
                let open = self.store.open_migration_counts(cluster).await?;
                let issued = self
                    .drain_one(cluster, &lease, &membership, &marked.record, &open)
                    .await?;
                (Some(issued), lease.holder)
            }
            LeaseClaim::HeldByOther(lease) => (None, lease.holder),
            LeaseClaim::NoCluster => return Err(OracleError::ClusterNotFound(cluster.to_string())),
        };
        tracing::info!(
            %cluster, %silo, %planner,
            issued = issued.as_ref().map(|i| i.migrations.len()),
            "silo drained"
        );
        let silo =
            super::super::snapshot::with_drain_progress(self.store.as_ref(), cluster, marked)
                .await?;
        Ok(Drained {
            silo,
            issued,
            planner,
        })
    }

    /// The driver's drain step: issues more migrations for every drained silo still alive.
    pub(super) async fn drain_step(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
    ) -> Result<Vec<DrainIssued>, OracleError> {
        let view = membership.view();
        let drained: Vec<&SiloRecord> = view
            .silos
            .iter()
            .filter(|s| s.drained_at_ms.is_some() && view.status(s) != SiloStatus::Dead)
            .collect();
        if drained.is_empty() {
            return Ok(Vec::new());
        }
        let open = self.store.open_migration_counts(cluster).await?;
        let mut issued = Vec::new();
        for silo in drained {
            let step = self
                .drain_one(cluster, lease, membership, silo, &open)
                .await?;
            if !step.migrations.is_empty() {
                issued.push(step);
            }
        }
        Ok(issued)
    }

    /// Plans and issues migrations for up to [`DRAIN_BATCH`] of `silo`'s movable activations,
    /// keeping its open ones within [`DRAIN_WINDOW`]. `open` is every open migration, by source
    /// and target, before this step.
    async fn drain_one(
        &self,
        cluster: &ClusterName,
        lease: &Lease,
        membership: &Membership,
        silo: &SiloRecord,
        open: &[(String, String, u64)],
    ) -> Result<DrainIssued, OracleError> {
        let mut arriving: Vec<Arriving> = open
            .iter()
            .map(|(from, to, count)| Arriving {
                from: from.clone(),
                to: to.clone(),
                count: *count,
            })
            .collect();
        let sending: u64 = arriving
            .iter()
            .filter(|a| a.from == silo.id.as_str())
            .map(|a| a.count)
            .sum();
        let mut room = DRAIN_WINDOW.saturating_sub(sending).min(DRAIN_BATCH);
        let mut set_aside = membership
            .policy
            .immovable_types(Immovable::keeps_from_drain);
        let view = membership.view();
        let mut issued = DrainIssued {
            silo: silo.id.clone(),
            migrations: Vec::new(),
            stuck: Vec::new(),
        };
        for _ in 0..DRAIN_ROUNDS {
            if room == 0 {
                break;
            }
            let limit = u32::try_from(room).unwrap_or(u32::MAX);
            // A drained silo is never a target, so no grain there arrived by a recent migration.
            let activations = self
                .store
                .movable_activations(cluster, &silo.id, &set_aside, Millis::MAX, limit)
                .await?;
            let departing: Vec<Departing> = activations
                .iter()
                .filter_map(|a| {
                    let grain = GrainId::parse("grain", &a.grain).ok()?;
                    Some(Departing {
                        grain,
                        epoch: a.epoch,
                    })
                })
                .collect();
            if departing.is_empty() {
                break;
            }
            let plan = self.with_rng(|rng| {
                drain::plan(
                    &view,
                    &membership.policy,
                    &silo.id,
                    &departing,
                    &arriving,
                    rng,
                )
            });
            let wanted: Vec<NewMigration> = plan
                .moves
                .iter()
                .map(|m| NewMigration {
                    grain: m.grain.clone(),
                    from: silo.id.clone(),
                    to: m.to.clone(),
                    epoch: m.epoch,
                    reason: MigrationReason::Drain,
                })
                .collect();
            let written = if wanted.is_empty() {
                Vec::new()
            } else {
                match self.store.issue_migrations(cluster, lease, &wanted).await? {
                    Some(written) => written,
                    None => return Err(self.lost_lease(cluster).await),
                }
            };
            metric::migrations(
                MigrationReason::Drain.as_str(),
                "issued",
                written.len() as u64,
            );
            room = room.saturating_sub(written.len() as u64);
            for migration in &written {
                arriving.push(Arriving {
                    from: migration.from.clone(),
                    to: migration.to.clone(),
                    count: 1,
                });
            }
            issued.migrations.extend(written);
            let full_batch = departing.len() as u64 == u64::from(limit);
            if plan.stuck.is_empty() || !full_batch {
                issued.stuck.extend(plan.stuck);
                break;
            }
            // A full batch with stuck types: set them aside and look further.
            set_aside.extend(plan.stuck.iter().map(|s| s.grain_type.clone()));
            issued.stuck.extend(plan.stuck);
        }
        issued.stuck.sort_by(|a, b| a.grain_type.cmp(&b.grain_type));
        issued.stuck.dedup_by(|later, first| {
            let same = later.grain_type == first.grain_type;
            if same {
                first.activations += later.activations;
            }
            same
        });
        Ok(issued)
    }
}
