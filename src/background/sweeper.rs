//! The membership sweep's loop: every [`SWEEP_INTERVAL`], declare silent silos dead and release
//! their entries ([`Members::sweep`] and its steps say what each does and why every replica may).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::oracle::Members;

/// How often the sweep runs.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Every how many sweeps the gauges are refreshed and the metrics recorder's upkeep runs (it
/// drains histogram samples that would otherwise pile up while nobody scrapes).
const SWEEPS_PER_GAUGE_REFRESH: u64 = 5;

/// Sweeps every [`SWEEP_INTERVAL`] until `shutdown` completes. Store errors are logged and retried
/// on the next tick.
pub async fn run_sweeper(members: Arc<Members>, shutdown: impl Future<Output = ()>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    for sweep in 0u64.. {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {
                let outcome = if sweep % SWEEPS_PER_GAUGE_REFRESH == 0 {
                    crate::telemetry::metrics_handle().run_upkeep();
                    members.sweep().await.map(|_| ())
                } else {
                    match members.declare_dead().await {
                        Ok(_) => members.release_dead().await.map(|_| ()),
                        Err(error) => Err(error),
                    }
                };
                if let Err(error) = outcome {
                    tracing::error!(%error, "membership sweep failed; retrying next tick");
                }
            }
        }
    }
}
