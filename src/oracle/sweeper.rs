//! The membership sweep's steps (run periodically by [`crate::background`]): declares silent silos dead, releases dead silos' directory entries in
//! bounded chunks, refreshes the membership and directory gauges and keeps the metrics recorder's
//! memory bounded.
//!
//! Every replica runs it. The store's steps are idempotent, so replicas racing on them do no harm,
//! and correctness never waits for them: lookups and placements judge liveness themselves at
//! request time, and an entry on a dead silo is never live. The sweep makes deaths and releases
//! visible (listings, metrics) within about a second.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::Oracle;
use crate::store::{StoreError, RELEASE_CHUNK};
use crate::telemetry::metric;

/// Longest time one sweep spends releasing entries before it lets the next tick come (each chunk
/// is one short statement; a dead silo with 100,000 entries goes in a few seconds).
const RELEASE_BUDGET: Duration = Duration::from_millis(500);
/// Most silo ids one death log line names; the rest are counted.
const IDS_PER_LOG_LINE: usize = 5;

impl Oracle {
    /// One sweep. Returns how many silos it declared dead.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let reaped = self.declare_dead().await?;
        self.release_dead().await?;
        self.refresh_gauges().await?;
        Ok(reaped)
    }

    /// Declares silent silos dead. Logged per cluster, not per silo: a flood of short-lived ids
    /// dying at once makes one line per cluster, not one per id.
    pub async fn declare_dead(&self) -> Result<usize, StoreError> {
        let reaped = self
            .store
            .reap()
            .await
            .inspect_err(|_| metric::store_error("reap"))?;
        let mut by_cluster: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for silo in &reaped {
            by_cluster
                .entry(&silo.cluster)
                .or_default()
                .push(&silo.silo);
        }
        for (cluster, silos) in by_cluster {
            tracing::warn!(
                cluster,
                count = silos.len(),
                silos = %silos.iter().take(IDS_PER_LOG_LINE).copied().collect::<Vec<_>>().join(", "),
                "silos declared dead after missing heartbeats; their activations are released"
            );
        }
        metric::silos_declared_dead(reaped.len() as u64);
        Ok(reaped.len())
    }

    /// Releases dead silos' entries, a chunk at a time, for at most [`RELEASE_BUDGET`]. Returns
    /// how many.
    pub async fn release_dead(&self) -> Result<u64, StoreError> {
        let started = Instant::now();
        let mut released = 0;
        loop {
            let chunk = self
                .store
                .release_dead(RELEASE_CHUNK)
                .await
                .inspect_err(|_| metric::store_error("release_dead"))?;
            released += chunk;
            if chunk == 0 || started.elapsed() >= RELEASE_BUDGET {
                return Ok(released);
            }
        }
    }

    /// Refreshes the membership and directory gauges.
    async fn refresh_gauges(&self) -> Result<(), StoreError> {
        let stats = self
            .store
            .stats()
            .await
            .inspect_err(|_| metric::store_error("stats"))?;
        metric::store_gauges(&stats);
        Ok(())
    }
}
