//! Which clusters this replica runs the background work of, under their leases.
//!
//! Every tick the replica stamps its row in the replicas table and reads the replicas seen
//! within [`Ownership::replica_ttl_ms`]; every few seconds it lists the clusters (an admin
//! listing, the one statement of the background path that names no cluster). It owns the
//! clusters that rendezvous hashing gives it among the live replicas
//! ([`crate::cluster::ownership`]), and takes or renews each owned cluster's lease before it
//! works on it: ownership says who asks, the lease says who acts, so two replicas that briefly
//! disagree on who is alive never both work on a cluster. A lease it holds for a cluster it no
//! longer owns (a replica joined) is given up at once (under the cluster's movers' gate, so not in
//! the middle of an operator's request on this replica), so the new owner starts within a tick; a
//! replica that stops is seen gone after the replica TTL, and its leases run out within the
//! lease TTL, whichever is later (at shutdown it retires its row and gives its leases up, so the
//! others start at once).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use std::sync::Arc;

use super::{OracleError, Replica};
use crate::clock::Millis;
use crate::cluster::ownership::owns;
use crate::cluster::ClusterName;
use crate::store::{Lease, Store};
use crate::telemetry::metric;

/// How often the list of clusters is read again (a cluster created meanwhile waits that long for
/// its background work: its first heartbeat is its only traffic until then).
const CLUSTER_LIST_AGE: Duration = Duration::from_secs(5);
/// Page size of the cluster listing.
const LIST_PAGE: u32 = 1_000;
/// How old the last stamp may be before a refresh stamps itself.
const STAMP_AGE: Duration = Duration::from_secs(2);
/// A replica missing from the table this long is taken for gone, at the least.
const MIN_REPLICA_TTL_MS: Millis = 3_000;

/// What a refresh found.
pub struct Refreshed {
    /// The clusters this replica owns now.
    pub owned: Vec<ClusterName>,
    /// Leases it held for clusters it no longer owns.
    pub lost: Vec<(ClusterName, Lease)>,
}

#[derive(Default)]
struct State {
    replicas: Vec<String>,
    stamped_at: Option<Instant>,
    clusters: Vec<ClusterName>,
    listed_at: Option<Instant>,
    /// Leases this replica's background work holds, with when (monotonic) each was taken or
    /// renewed.
    leases: HashMap<ClusterName, (Lease, Instant)>,
}

pub struct Ownership {
    store: Arc<dyn Store>,
    replica: Replica,
    state: Mutex<State>,
}

impl Ownership {
    pub(super) fn new(store: Arc<dyn Store>, replica: Replica) -> Self {
        Self {
            store,
            replica,
            state: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How long a replica's stamp keeps it among the live ones: half the lease TTL (so that a
    /// stopped replica's clusters are taken over within the lease TTL), and at least three ticks.
    pub fn replica_ttl_ms(&self) -> Millis {
        (self.replica.lease_ttl_ms / 2).max(MIN_REPLICA_TTL_MS)
    }

    /// Stamps this replica, reads the live ones (and, every few seconds, the clusters), and
    /// returns the clusters it owns now, and the leases it holds for clusters it no longer owns
    /// (to be given up at once, [`super::Movers::hand_back`], so that the new owner starts).
    pub async fn refresh(&self) -> Result<Refreshed, OracleError> {
        // Stamped by its own task every second ([`Self::stamp`]); here too when that task has not
        // run for two seconds (or does not run).
        let stamped = self.lock().stamped_at;
        if stamped.is_none_or(|at| at.elapsed() >= STAMP_AGE) {
            self.stamp().await?;
        }
        let stale = self
            .lock()
            .listed_at
            .is_none_or(|at| at.elapsed() >= CLUSTER_LIST_AGE);
        if stale {
            let clusters = self.all_clusters().await?;
            let mut state = self.lock();
            state.clusters = clusters;
            state.listed_at = Some(Instant::now());
        }
        let (owned, given_up) = {
            let mut state = self.lock();
            let me = &self.replica.id;
            let owned: Vec<ClusterName> = state
                .clusters
                .iter()
                .filter(|c| owns(me, c.as_str(), &state.replicas))
                .cloned()
                .collect();
            let given_up: Vec<(ClusterName, Lease)> = state
                .leases
                .iter()
                .filter(|(c, _)| !owns(me, c.as_str(), &state.replicas))
                .map(|(c, (lease, _))| (c.clone(), lease.clone()))
                .collect();
            for (cluster, _) in &given_up {
                state.leases.remove(cluster);
            }
            (owned, given_up)
        };
        metric::clusters_owned(owned.len());
        Ok(Refreshed {
            owned,
            lost: given_up,
        })
    }

    /// Stamps this replica's row and reads the live replicas. Run on a timer of its own
    /// (`background::run_stamps`), so that a long tick of the clusters' work never lets this
    /// replica's row age past the replica TTL (the others would take its clusters).
    pub async fn stamp(&self) -> Result<(), OracleError> {
        let replicas = self
            .store
            .announce_replica(&self.replica.id, self.replica_ttl_ms())
            .await?;
        let mut state = self.lock();
        state.replicas = replicas;
        state.stamped_at = Some(Instant::now());
        Ok(())
    }

    /// How many replicas this one saw alive at its last stamp (itself included; 0 before its
    /// first).
    pub fn live_replicas(&self) -> usize {
        self.lock().replicas.len()
    }

    /// Every cluster, a page at a time.
    async fn all_clusters(&self) -> Result<Vec<ClusterName>, OracleError> {
        let mut clusters: Vec<ClusterName> = Vec::new();
        loop {
            let page = self.store.clusters(clusters.last(), LIST_PAGE).await?;
            let full = page.len() == LIST_PAGE as usize;
            clusters.extend(page);
            if !full {
                return Ok(clusters);
            }
        }
    }

    /// Which of `clusters` this replica holds the lease of for their background work: those
    /// held while two thirds of the lease are left, and the rest taken or renewed now, all in one
    /// claim (a page of clusters a statement). A cluster left out is held by another replica (an
    /// operator's request taken there, or an owner that has not seen this replica yet), or gone.
    pub async fn leases(&self, clusters: &[ClusterName]) -> Result<Vec<ClusterName>, OracleError> {
        let ttl = Duration::from_millis(u64::try_from(self.replica.lease_ttl_ms).unwrap_or(0));
        let to_claim: Vec<ClusterName> = {
            let state = self.lock();
            clusters
                .iter()
                .filter(|c| {
                    state
                        .leases
                        .get(*c)
                        .is_none_or(|(_, at)| at.elapsed() >= ttl / 3)
                })
                .cloned()
                .collect()
        };
        let claimed_at = Instant::now();
        let claimed = if to_claim.is_empty() {
            Default::default()
        } else {
            self.store
                .claim_leases(&to_claim, &self.replica.id, self.replica.lease_ttl_ms)
                .await?
        };
        let mut state = self.lock();
        for cluster in &to_claim {
            match claimed.get(cluster) {
                Some(lease) => {
                    state
                        .leases
                        .insert(cluster.clone(), (lease.clone(), claimed_at));
                }
                None => {
                    state.leases.remove(cluster);
                }
            }
        }
        Ok(clusters
            .iter()
            .filter(|c| state.leases.contains_key(*c))
            .cloned()
            .collect())
    }

    /// The replica stops: its row goes and its leases are given up, so that the others take its
    /// clusters over at once.
    pub async fn retire(&self) {
        let leases: Vec<(ClusterName, Lease)> = self
            .lock()
            .leases
            .drain()
            .map(|(cluster, (lease, _))| (cluster, lease))
            .collect();
        for (cluster, lease) in leases {
            let _ = self.store.release_lease(&cluster, &lease).await;
        }
        if let Err(error) = self.store.retire_replica(&self.replica.id).await {
            tracing::warn!(%error, "cannot retire this replica's row; the others see it gone after its TTL");
        }
    }
}
