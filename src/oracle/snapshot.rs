//! A silo as the API shows it: its record, the judge of its status, and its drain's progress.
//! Shared by [`super::Members`] (listings, heartbeats) and [`super::Movers`] (drains).

use super::OracleError;
use crate::clock::Millis;
use crate::cluster::{ClusterName, Liveness, SiloRecord, SiloStatus};
use crate::store::Store;
use crate::telemetry::metric;

/// How far a silo's drain has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainProgress {
    /// When the drain was asked for, on the store's clock.
    pub requested_at_ms: Millis,
    /// Directory entries still on the silo.
    pub remaining_activations: u64,
    /// Of those, how many have an open migration.
    pub migrating: u64,
}

/// A silo as seen at one instant: its record, and the judge that gives its status.
#[derive(Debug, Clone)]
pub struct SiloSnapshot {
    pub record: SiloRecord,
    pub liveness: Liveness,
    /// How far its drain has got, when it is drained and alive.
    pub drain: Option<DrainProgress>,
}

impl SiloSnapshot {
    pub fn status(&self) -> SiloStatus {
        self.record.status_at(&self.liveness)
    }
}

/// `snapshot` with its drain's progress, when the silo is drained and alive.
pub(in crate::oracle) async fn with_drain_progress(
    store: &dyn Store,
    cluster: &ClusterName,
    mut snapshot: SiloSnapshot,
) -> Result<SiloSnapshot, OracleError> {
    let Some(requested_at_ms) = snapshot.record.drained_at_ms else {
        return Ok(snapshot);
    };
    if snapshot.status() == SiloStatus::Dead {
        return Ok(snapshot);
    }
    let counts = store
        .silo_counts(cluster, &snapshot.record.id)
        .await
        .inspect_err(|_| metric::store_error("silo_counts"))?;
    snapshot.drain = Some(DrainProgress {
        requested_at_ms,
        remaining_activations: counts.activations,
        migrating: counts.migrating,
    });
    Ok(snapshot)
}
