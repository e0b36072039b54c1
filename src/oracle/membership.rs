//! Heartbeats and membership.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{DrainProgress, Oracle, OracleError};
use crate::cluster::silo::changes_membership;
use crate::cluster::{heartbeat, ClusterName, Heartbeat, Liveness, SiloId, SiloRecord, SiloStatus};
use crate::store::Departure;
use crate::telemetry::metric;

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

/// One page of a cluster's silos.
#[derive(Debug, Clone)]
pub struct SiloListing {
    pub silos: Vec<SiloSnapshot>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl Oracle {
    /// Records a heartbeat, stamped with the store's clock.
    pub async fn heartbeat(
        &self,
        cluster: &ClusterName,
        heartbeat: Heartbeat,
    ) -> Result<SiloSnapshot, OracleError> {
        let membership_changed = AtomicBool::new(false);
        let update = |previous: Option<&SiloRecord>, liveness: &Liveness| {
            let next = heartbeat::apply(&heartbeat, previous, liveness)?;
            membership_changed.store(changes_membership(previous, &next), Ordering::Relaxed);
            Ok(next)
        };
        let outcome = self
            .store
            .record_heartbeat(cluster, &heartbeat.silo, &update)
            .await
            .inspect_err(|_| metric::store_error("record_heartbeat"))?;
        match outcome {
            Ok((record, liveness)) => {
                metric::heartbeat("accepted");
                // Fresh load figures alone need not reach this replica's next decision at once;
                // a new silo or a new status must.
                if membership_changed.load(Ordering::Relaxed) {
                    self.forget_membership(cluster);
                }
                let snapshot = SiloSnapshot {
                    record,
                    liveness,
                    drain: None,
                };
                self.with_drain_progress(cluster, snapshot).await
            }
            Err(rejection) => {
                metric::heartbeat("rejected");
                Err(rejection.into())
            }
        }
    }

    /// A page of the cluster's silos in id order, dead ones included until they are forgotten.
    pub async fn silos(
        &self,
        cluster: &ClusterName,
        cursor: Option<&SiloId>,
        limit: u32,
    ) -> Result<SiloListing, OracleError> {
        let page = self
            .store
            .silos(cluster, cursor, limit)
            .await
            .inspect_err(|_| metric::store_error("silos"))?
            .ok_or_else(|| OracleError::ClusterNotFound(cluster.to_string()))?;
        let next_cursor = (page.silos.len() == limit as usize)
            .then(|| page.silos.last().map(|s| s.id.to_string()))
            .flatten();
        let liveness = page.liveness;
        let mut silos = Vec::with_capacity(page.silos.len());
        for record in page.silos {
            let snapshot = SiloSnapshot {
                record,
                liveness,
                drain: None,
            };
            silos.push(self.with_drain_progress(cluster, snapshot).await?);
        }
        Ok(SiloListing { silos, next_cursor })
    }

    /// One silo.
    pub async fn silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<SiloSnapshot, OracleError> {
        match self
            .store
            .silo(cluster, silo)
            .await
            .inspect_err(|_| metric::store_error("silo"))?
        {
            Some((record, liveness)) => {
                let snapshot = SiloSnapshot {
                    record,
                    liveness,
                    drain: None,
                };
                self.with_drain_progress(cluster, snapshot).await
            }
            None => Err(OracleError::SiloNotFound {
                cluster: cluster.to_string(),
                silo: silo.to_string(),
            }),
        }
    }

    /// A graceful leave: the silo is marked dead (its id cannot rejoin) and its activations are
    /// released — the first chunk at once, the rest by the sweep; none of them is live meanwhile.
    pub async fn leave(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Departure, OracleError> {
        let departure = self
            .store
            .remove_silo(cluster, silo)
            .await
            .inspect_err(|_| metric::store_error("remove_silo"))?
            .ok_or_else(|| OracleError::SiloNotFound {
                cluster: cluster.to_string(),
                silo: silo.to_string(),
            })?;
        self.forget_membership(cluster);
        tracing::info!(
            %cluster, %silo,
            released = departure.released,
            release_pending = departure.release_pending,
            "silo left"
        );
        Ok(departure)
    }
}
