//! Members: heartbeats, the membership of each cluster, graceful leaves, and the sweep that
//! declares the silent dead ([`sweeper`]).

mod sweeper;

pub use sweeper::Swept;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::batcher::Batcher;
use super::snapshot::{with_drain_progress, SiloSnapshot};
use super::views::ClusterViews;
use super::OracleError;
use crate::cluster::silo::changes_membership;
use crate::cluster::{
    heartbeat, lease, ClusterName, Heartbeat, HeartbeatRejection, Liveness, SiloId, SiloRecord,
};
use crate::store::{Departure, SilenceLook, Store, StoreError};
use crate::telemetry::metric;

/// Heartbeats, membership and the sweep.
pub struct Members {
    store: Arc<dyn Store>,
    views: Arc<ClusterViews>,
    heartbeats: Batcher<(ClusterName, Heartbeat), HeartbeatAnswer>,
    /// Deaths the sweep defers because of a store outage (see [`sweeper::DeferredDeaths`]).
    deferred_deaths: Mutex<sweeper::DeferredDeaths>,
    /// The sweep's last look at each cluster's silence (see [`crate::store::SilenceLook`]).
    silence_looks: Mutex<HashMap<ClusterName, SilenceLook>>,
}

/// One page of a cluster's silos.
#[derive(Debug, Clone)]
pub struct SiloListing {
    pub silos: Vec<SiloSnapshot>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl Members {
    /// This replica refused work it could not keep up with (a request shed): its silos' silence
    /// counts again from now, since their heartbeats may be among what it refused.
    pub fn could_not_keep_up(&self) {
        self.store.could_not_keep_up();
    }

    pub(super) fn new(store: Arc<dyn Store>, views: Arc<ClusterViews>) -> Self {
        Self {
            heartbeats: super::store_batcher(&store, super::WRITES_OVERLAP_AFTER, heartbeat_batch),
            store,
            views,
            deferred_deaths: Mutex::default(),
            silence_looks: Mutex::default(),
        }
    }

    /// Writes the heartbeats this replica answered without writing them, once the stored ones
    /// are nearly the write-after age old
    /// ([`crate::store::MembershipStore::flush_held_heartbeats`]); how many silos it wrote.
    pub async fn flush_held_heartbeats(&self) -> Result<usize, StoreError> {
        self.store
            .flush_held_heartbeats()
            .await
            .inspect_err(|_| metric::store_error("flush_held_heartbeats"))
    }

    /// Records a heartbeat, stamped with the store's clock. Heartbeats arriving together share
    /// the store's round trips (see [`heartbeat_batch`]).
    pub async fn heartbeat(
        &self,
        cluster: &ClusterName,
        heartbeat: Heartbeat,
    ) -> Result<SiloSnapshot, OracleError> {
        let answer = self
            .heartbeats
            .call((cluster.clone(), heartbeat))
            .await
            .and_then(|answer| answer)
            .inspect_err(|_| metric::store_error("record_heartbeat"))?;
        match answer {
            Ok(Written {
                record,
                liveness,
                changes_membership,
                lease_lapsed,
            }) => {
                metric::heartbeat("accepted");
                if lease_lapsed {
                    metric::silo_lease_lapsed();
                }
                // Fresh load figures alone need not reach this replica's next decision at once;
                // a new silo or a new status must.
                if changes_membership {
                    self.views.forget(cluster);
                }
                let snapshot = SiloSnapshot {
                    record,
                    liveness,
                    drain: None,
                };
                with_drain_progress(self.store.as_ref(), cluster, snapshot).await
            }
            Err(rejection) => {
                metric::heartbeat("rejected");
                Err(rejection.into())
            }
        }
    }

    /// A page of the clusters' names, in byte order; the cursor is the last name of the page
    /// before.
    pub async fn clusters(
        &self,
        cursor: Option<&ClusterName>,
        limit: u32,
    ) -> Result<(Vec<ClusterName>, Option<String>), OracleError> {
        let names = self
            .store
            .clusters(cursor, limit)
            .await
            .inspect_err(|_| metric::store_error("clusters"))?;
        let next_cursor = (names.len() == limit as usize)
            .then(|| names.last().map(ClusterName::to_string))
            .flatten();
        Ok((names, next_cursor))
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
            silos.push(with_drain_progress(self.store.as_ref(), cluster, snapshot).await?);
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
                with_drain_progress(self.store.as_ref(), cluster, snapshot).await
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
        self.views.forget(cluster);
        tracing::info!(
            %cluster, %silo,
            released = departure.released,
            release_pending = departure.release_pending,
            "silo left"
        );
        Ok(departure)
    }
}

/// A heartbeat as written.
#[derive(Debug)]
struct Written {
    record: SiloRecord,
    liveness: Liveness,
    /// Whether it added a silo or changed one's status (this replica's cached membership is then
    /// out of date).
    changes_membership: bool,
    /// Whether the silo's previous lease had run out before it (see [`lease_lapsed`]).
    lease_lapsed: bool,
}

/// What one queued heartbeat comes to: written or refused, or a store failure of its own.
type HeartbeatAnswer = Result<Result<Written, HeartbeatRejection>, StoreError>;

/// Records a batch of heartbeats in one store call (for Postgres, one statement that writes the
/// silos whose rows this replica wrote last and reads the rest, and one that writes the rest);
/// two heartbeats of one silo in the batch are applied in their order.
async fn heartbeat_batch(
    store: Arc<dyn Store>,
    calls: Vec<(ClusterName, Heartbeat)>,
) -> Result<Vec<HeartbeatAnswer>, StoreError> {
    let changed: Vec<AtomicBool> = calls.iter().map(|_| AtomicBool::new(false)).collect();
    let lapsed: Vec<AtomicBool> = calls.iter().map(|_| AtomicBool::new(false)).collect();
    let update = |i: usize, previous: Option<&SiloRecord>, liveness: &Liveness| {
        let next = heartbeat::apply(&calls[i].1, previous, liveness)?;
        changed[i].store(changes_membership(previous, &next), Ordering::Relaxed);
        lapsed[i].store(
            previous.is_some_and(|p| lease_lapsed(p, &next, liveness)),
            Ordering::Relaxed,
        );
        Ok(next)
    };
    let silos: Vec<(ClusterName, SiloId)> = calls
        .iter()
        .map(|(cluster, heartbeat)| (cluster.clone(), heartbeat.silo.clone()))
        .collect();
    let outcomes = store.record_heartbeats(&silos, &update).await?;
    Ok(outcomes
        .into_iter()
        .zip(changed.iter().zip(&lapsed))
        .map(|(outcome, (changed, lapsed))| {
            outcome.map(|written| {
                written.map(|(record, liveness)| Written {
                    record,
                    liveness,
                    changes_membership: changed.load(Ordering::Relaxed),
                    lease_lapsed: lapsed.load(Ordering::Relaxed),
                })
            })
        })
        .collect())
}

/// Whether a silo's heartbeat came a whole lease after its previous one: the lease that one
/// granted (counted from a send no later than its stamp) had run out, so the silo must have
/// paused its grains meanwhile.
fn lease_lapsed(previous: &SiloRecord, next: &SiloRecord, liveness: &Liveness) -> bool {
    next.last_heartbeat_ms - previous.last_heartbeat_ms >= lease::lease_ms(liveness.silo_ttl_ms)
}
