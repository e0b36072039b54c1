//! The background sweep: declares silent silos dead, releases their activations and refreshes the
//! membership and directory gauges.
//!
//! Every replica runs it. The store's sweep is idempotent, so replicas racing on it do no harm, and
//! correctness never waits for it: lookups and placements judge liveness themselves at request time.
//! The sweep makes the release visible (listings, metrics) within about a second.

use std::future::Future;
use std::time::Duration;

use super::Oracle;
use crate::telemetry::metric;

/// How often the sweep runs.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Every how many sweeps the gauges are refreshed: counting the directory reads every entry, so it
/// runs every ten seconds rather than every second.
const SWEEPS_PER_GAUGE_REFRESH: u64 = 10;

impl Oracle {
    /// One sweep. Returns how many silos it declared dead.
    pub async fn sweep(&self) -> Result<usize, crate::store::StoreError> {
        let reaped = self.declare_dead().await?;
        self.refresh_gauges().await?;
        Ok(reaped)
    }

    /// Declares silent silos dead and releases their activations.
    async fn declare_dead(&self) -> Result<usize, crate::store::StoreError> {
        let reaped = self
            .store
            .reap(self.clock.now_ms())
            .await
            .inspect_err(|_| metric::store_error("reap"))?;
        for silo in &reaped {
            tracing::warn!(
                cluster = %silo.cluster,
                silo = %silo.silo,
                released = silo.released,
                "silo declared dead after missing heartbeats; its activations were released"
            );
        }
        metric::silos_declared_dead(reaped.len() as u64);
        Ok(reaped.len())
    }

    /// Refreshes the membership and directory gauges.
    async fn refresh_gauges(&self) -> Result<(), crate::store::StoreError> {
        let stats = self
            .store
            .stats()
            .await
            .inspect_err(|_| metric::store_error("stats"))?;
        metric::store_gauges(&stats);
        Ok(())
    }
}

/// Sweeps every [`SWEEP_INTERVAL`] until `shutdown` completes. Store errors are logged and retried
/// on the next tick.
pub async fn run_sweeper(oracle: std::sync::Arc<Oracle>, shutdown: impl Future<Output = ()>) {
    let mut ticks = tokio::time::interval(SWEEP_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    for sweep in 0u64.. {
        tokio::select! {
            _ = &mut shutdown => return,
            _ = ticks.tick() => {
                let outcome = if sweep % SWEEPS_PER_GAUGE_REFRESH == 0 {
                    oracle.sweep().await.map(|_| ())
                } else {
                    oracle.declare_dead().await.map(|_| ())
                };
                if let Err(error) = outcome {
                    tracing::error!(%error, "membership sweep failed; retrying next tick");
                }
            }
        }
    }
}
