//! Heartbeats and membership.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Oracle, OracleError};
use crate::clock::Millis;
use crate::cluster::silo::changes_membership;
use crate::cluster::{heartbeat, ClusterName, Heartbeat, SiloId, SiloRecord, SiloStatus};
use crate::telemetry::metric;

/// A silo as seen at one instant: its record, and the clock reading and TTL that give its status.
#[derive(Debug, Clone)]
pub struct SiloSnapshot {
    pub record: SiloRecord,
    pub now: Millis,
    pub silo_ttl_ms: Millis,
}

impl SiloSnapshot {
    pub fn status(&self) -> SiloStatus {
        self.record.status_at(self.now, self.silo_ttl_ms)
    }
}

impl Oracle {
    /// Records a heartbeat, stamped with the oracle's clock.
    pub async fn heartbeat(
        &self,
        cluster: &ClusterName,
        heartbeat: Heartbeat,
    ) -> Result<SiloSnapshot, OracleError> {
        let now = self.clock.now_ms();
        let membership_changed = AtomicBool::new(false);
        let update = |previous: Option<&SiloRecord>, ttl: Millis| {
            let next = heartbeat::apply(&heartbeat, previous, now, ttl)?;
            membership_changed.store(changes_membership(previous, &next), Ordering::Relaxed);
            Ok(next)
        };
        let outcome = self
            .store
            .record_heartbeat(cluster, &heartbeat.silo, now, &update)
            .await
            .inspect_err(|_| metric::store_error("record_heartbeat"))?;
        match outcome {
            Ok((record, silo_ttl_ms)) => {
                metric::heartbeat("accepted");
                // Fresh load figures alone need not reach this replica's next decision at once;
                // a new silo or a new status must.
                if membership_changed.load(Ordering::Relaxed) {
                    self.forget_membership(cluster);
                }
                Ok(SiloSnapshot {
                    record,
                    now,
                    silo_ttl_ms,
                })
            }
            Err(rejection) => {
                metric::heartbeat("rejected");
                Err(rejection.into())
            }
        }
    }

    /// Every silo of the cluster, dead ones included until they are forgotten.
    pub async fn silos(&self, cluster: &ClusterName) -> Result<Vec<SiloSnapshot>, OracleError> {
        let membership = self.read_membership(cluster).await?;
        let now = self.clock.now_ms();
        let silos = std::sync::Arc::unwrap_or_clone(membership.silos);
        Ok(silos
            .into_iter()
            .map(|record| SiloSnapshot {
                record,
                now,
                silo_ttl_ms: membership.silo_ttl_ms,
            })
            .collect())
    }

    /// One silo.
    pub async fn silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<SiloSnapshot, OracleError> {
        self.silos(cluster)
            .await?
            .into_iter()
            .find(|s| &s.record.id == silo)
            .ok_or_else(|| OracleError::SiloNotFound {
                cluster: cluster.to_string(),
                silo: silo.to_string(),
            })
    }

    /// A graceful leave: the silo is marked dead (its id cannot rejoin) and its activations are
    /// released. Returns how many.
    pub async fn leave(&self, cluster: &ClusterName, silo: &SiloId) -> Result<u64, OracleError> {
        let released = self
            .store
            .remove_silo(cluster, silo, self.clock.now_ms())
            .await
            .inspect_err(|_| metric::store_error("remove_silo"))?
            .ok_or_else(|| OracleError::SiloNotFound {
                cluster: cluster.to_string(),
                silo: silo.to_string(),
            })?;
        self.forget_membership(cluster);
        tracing::info!(%cluster, %silo, released, "silo left");
        Ok(released)
    }
}
