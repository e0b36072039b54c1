//! The movers' driver: every [`MOVERS_TICK`], for each cluster whose grains may have to move (its
//! rebalancer is enabled, a silo is being drained, or migrations are open), keep (or wait for) the
//! cluster's lease and do whatever is due ([`Movers::drive`]): cancel stale migrations, issue
//! drain migrations, run the rebalancer's cycle and the repartitioner's step. Every replica runs
//! it; the lease makes exactly one of them act for a cluster, and another takes over within a
//! lease period when it stops.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::oracle::Movers;

/// How often the driver looks: a fraction of the shortest session cycle period (2 s).
pub const MOVERS_TICK: Duration = Duration::from_millis(500);

/// Drives the movers until `shutdown` completes; errors are logged and retried next tick.
pub async fn run_movers(movers: Arc<Movers>, shutdown: impl Future<Output = ()>) {
    let mut ticks = tokio::time::interval(MOVERS_TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {
                let clusters = match movers.clusters_moving_grains().await {
                    Ok(clusters) => clusters,
                    Err(error) => {
                        tracing::error!(%error, "cannot list the clusters whose grains may move; retrying next tick");
                        continue;
                    }
                };
                for cluster in clusters {
                    match movers.drive(&cluster).await {
                        Ok(Some(step)) => {
                            for drain in &step.drains {
                                tracing::info!(
                                    %cluster,
                                    silo = %drain.silo,
                                    migrations = drain.migrations.len(),
                                    "drain migrations issued"
                                );
                            }
                            if let Some(round) = &step.round {
                                tracing::info!(
                                    %cluster,
                                    round = round.summary.round,
                                    moves = round.moves.len(),
                                    migrations = round.migrations.len(),
                                    remote_before = round.summary.remote_fraction_before,
                                    remote_after = round.summary.remote_fraction_after,
                                    "repartitioner round"
                                );
                            }
                            if let Some(cycle) = &step.cycle {
                                tracing::info!(
                                    %cluster,
                                    session = cycle.report.session,
                                    cycle = cycle.report.cycle,
                                    outcome = ?cycle.report.outcome,
                                    deviation = cycle.report.deviation,
                                    migrations = cycle.migrations.len(),
                                    "rebalancer cycle"
                                );
                            }
                        }
                        Ok(None) => {}
                        Err(error) => tracing::warn!(%cluster, %error, "movers' step failed; retrying next tick"),
                    }
                }
            }
        }
    }
}
