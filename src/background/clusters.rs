//! The clusters' background work, on the replica that owns each: every [`TICK`] the movers of the
//! clusters whose grains may move (stale migrations, drains, the rebalancer, the repartitioner),
//! and every [`SWEEP_EVERY`] ticks the ownership ([`Ownership::refresh`]: the live replicas, the
//! clusters, which are this replica's) and the owned clusters' sweep under their leases. An idle
//! fleet costs a replica a few statements a second however many clusters it runs: one read of
//! what is due in them all ([`Members::sweep_clusters`], a page of clusters a statement) and,
//! every third of the lease TTL, one renewal of their leases ([`Ownership::leases`]). Every five
//! seconds the metrics recorder's upkeep, and the gauges every five seconds times the live
//! replicas (the replicas take turns, so the store's counts are read once per five seconds).
//!
//! Each replica works on its own clusters only, so R replicas share the work instead of doing it
//! R times; the lease still makes exactly one of them act for a cluster, and another takes over
//! when it stops.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::ClusterName;
use crate::oracle::{Members, Movers, Ownership};
use crate::telemetry::metric;

/// How often the movers look: a fraction of the shortest session cycle period (2 s).
pub const TICK: Duration = Duration::from_millis(500);
/// Every how many ticks ownership is refreshed and the owned clusters swept (a second).
pub const SWEEP_EVERY: u64 = 2;
/// Every how many ticks the metrics recorder's upkeep runs (it drains histogram samples that
/// would otherwise pile up while nobody scrapes), and the replicas between them refresh the
/// store-wide gauges: each replica every this many ticks times the live replicas, so the database
/// counts every cluster's silos once per period however many replicas run (a count over a large
/// fleet costs tens of milliseconds).
const GAUGES_EVERY: u64 = 10;

/// The parts of the oracle the background work drives.
#[derive(Clone)]
pub struct ClusterWork {
    pub ownership: Arc<Ownership>,
    pub members: Arc<Members>,
    pub movers: Arc<Movers>,
}

/// Runs the clusters' background work until `shutdown` completes; errors are logged and retried
/// on the next tick.
pub async fn run_clusters(work: ClusterWork, shutdown: impl Future<Output = ()>) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let mut moving: BTreeSet<ClusterName> = BTreeSet::new();
    let mut gauges_at = 0;
    for tick in 0u64.. {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {}
        }
        metric::background_tick();
        if tick % GAUGES_EVERY == 0 {
            crate::telemetry::metrics_handle().run_upkeep();
        }
        if tick >= gauges_at {
            let replicas = work.ownership.live_replicas().max(1) as u64;
            gauges_at = tick + GAUGES_EVERY * replicas;
            if let Err(error) = work.members.refresh_gauges().await {
                tracing::warn!(%error, "cannot refresh the gauges; retrying");
                gauges_at = tick + GAUGES_EVERY;
            }
        }
        if tick % SWEEP_EVERY == 0 {
            moving = sweep_owned(&work).await;
        }
        for cluster in &moving {
            drive(&work.movers, cluster).await;
        }
    }
}

/// Stamps this replica in the replicas table every second until `shutdown` completes, apart from
/// the clusters' work, whose ticks may run long.
pub async fn run_stamps(ownership: Arc<Ownership>, shutdown: impl Future<Output = ()>) {
    let mut ticks = tokio::time::interval(TICK * SWEEP_EVERY as u32);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {}
        }
        if let Err(error) = ownership.stamp().await {
            tracing::warn!(%error, "cannot stamp this replica; retrying");
        }
    }
}

/// Refreshes ownership, takes or renews the leases of the owned clusters, and sweeps those it
/// holds (one claim and one read of what is due for them all, [`Members::sweep_clusters`]);
/// returns those whose grains may move.
async fn sweep_owned(work: &ClusterWork) -> BTreeSet<ClusterName> {
    let owned = match work.ownership.refresh().await {
        Ok(refreshed) => {
            for (cluster, lease) in &refreshed.lost {
                work.movers.hand_back(cluster, lease).await;
            }
            refreshed.owned
        }
        Err(error) => {
            tracing::error!(%error, "cannot tell which clusters this replica runs; retrying next tick");
            return BTreeSet::new();
        }
    };
    let held = match work.ownership.leases(&owned).await {
        Ok(held) => held,
        Err(error) => {
            tracing::warn!(%error, "cannot take the clusters' leases; retrying next tick");
            return BTreeSet::new();
        }
    };
    metric::clusters_run(held.len());
    match work.members.sweep_clusters(&held).await {
        Ok(swept) => {
            for (cluster, error) in &swept.failed {
                tracing::error!(%cluster, %error, "the cluster's sweep failed; retrying next tick");
            }
            swept.moving
        }
        Err(error) => {
            tracing::error!(%error, "the clusters' sweep failed; retrying next tick");
            BTreeSet::new()
        }
    }
}

/// One movers' step for `cluster`, logged.
async fn drive(movers: &Movers, cluster: &ClusterName) {
    match movers.drive(cluster).await {
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
