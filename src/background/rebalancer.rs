//! The rebalancer's driver: every [`REBALANCER_TICK`], for each cluster whose policy enables the
//! rebalancer, keep (or wait for) the cluster's lease and run whatever cycle is due
//! ([`Oracle::drive_rebalancer`]). Every replica runs it; the lease makes exactly one of them
//! act for a cluster, and another takes over within a lease period when it stops.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::oracle::Oracle;

/// How often the driver looks: a fraction of the shortest session cycle period (2 s).
pub const REBALANCER_TICK: Duration = Duration::from_millis(500);

/// Drives rebalancers until `shutdown` completes; errors are logged and retried next tick.
pub async fn run_rebalancer(oracle: Arc<Oracle>, shutdown: impl Future<Output = ()>) {
    let mut ticks = tokio::time::interval(REBALANCER_TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {
                let clusters = match oracle.store().clusters_rebalancing().await {
                    Ok(clusters) => clusters,
                    Err(error) => {
                        tracing::error!(%error, "cannot list the clusters to rebalance; retrying next tick");
                        continue;
                    }
                };
                for cluster in clusters {
                    match oracle.drive_rebalancer(&cluster).await {
                        Ok(Some(cycle)) => tracing::info!(
                            %cluster,
                            session = cycle.report.session,
                            cycle = cycle.report.cycle,
                            outcome = ?cycle.report.outcome,
                            deviation = cycle.report.deviation,
                            migrations = cycle.migrations.len(),
                            "rebalancer cycle"
                        ),
                        Ok(None) => {}
                        Err(error) => tracing::warn!(%cluster, %error, "rebalancer step failed; retrying next tick"),
                    }
                }
            }
        }
    }
}
