//! The embedded store: everything in one process, behind one lock.
//!
//! Used when no `DATABASE_URL` is set. It keeps the same invariants as Postgres (one lock makes each
//! call atomic) but nothing survives a restart and replicas cannot share it.
//!
//! Each aggregate's `impl` has a file, named as the trait's and the Postgres store's are; this one
//! holds the state they share (a cluster's silos, directory, pools, lease, migrations and edges)
//! and `impl Store`.
//!
//! It cannot be unreachable, but its process can stall ([`StallWatch`]): silence is then counted
//! again from the end of the stall, as the Postgres store counts it from the end of an outage.

mod background;
mod directory;
mod edges;
mod keys;
mod leases;
mod membership;
mod migrations;
mod policy;
mod pools;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::stalls::{StallWatch, StallsTaken};
use super::{
    Activation, Ending, Lease, LimitReached, Located, Migration, PendingEdge, Store, StoreError,
    StoreSettings, StoreStats,
};
use crate::clock::{Clock, Millis};
use crate::cluster::{ClusterName, Liveness, SiloRecord, SiloStatus};
use crate::connect::Pool;
use crate::policy::Policy;

#[derive(Debug, Clone, Default)]
struct Entry {
    silo: String,
    strategy: String,
    epoch: i64,
    created_ms: Millis,
}

#[derive(Debug)]
struct ClusterState {
    /// Connection pools and their round-robin counters.
    pools: BTreeMap<String, (Pool, u64)>,
    silo_ttl_ms: Millis,
    /// Since when this process has watched the cluster's silos: the end of its last stall, or
    /// `Millis::MIN` (always).
    watched_since: Millis,
    policy: Policy,
    policy_version: i64,
    silos: BTreeMap<String, SiloRecord>,
    /// When each dead silo was declared dead, for tombstone expiry.
    dead_since: HashMap<String, Millis>,
    /// The newest dead generation per address, recorded at each death (see `SiloId::incarnation`):
    /// dead is final for an id, for ever, also after its tombstone is forgotten.
    retired: HashMap<String, i64>,
    directory: HashMap<String, Entry>,
    /// Grains per silo, ordered, for paging through a silo's activations.
    by_silo: HashMap<String, BTreeSet<String>>,
    /// Who runs the cluster's background work ([`leases`]).
    lease: Option<Lease>,
    /// Open migrations by id ([`migrations`]).
    migrations: BTreeMap<i64, Migration>,
    /// How silos' calls ended migrations lately, by id: when, the migration, the ending.
    migration_endings: BTreeMap<i64, (Millis, Migration, Ending)>,
    last_migration_id: i64,
    /// The background work's state by kind, written under the lease.
    work_state: HashMap<String, serde_json::Value>,
    /// Edge reports waiting to be counted ([`edges`]).
    edges: VecDeque<PendingEdge>,
    edge_last_seq: i64,
    edges_dropped: u64,
}

impl ClusterState {
    /// The judge at `now`: the embedded store cannot be unreachable, so it has watched since its
    /// process last stalled.
    fn liveness(&self, now: Millis) -> Liveness {
        Liveness {
            reachable_since: self.watched_since,
            ..Liveness::at(now, self.silo_ttl_ms)
        }
    }

    fn live(&self, silo: &str, now: Millis) -> bool {
        let liveness = self.liveness(now);
        self.silos
            .get(silo)
            .is_some_and(|s| s.status_at(&liveness) != SiloStatus::Dead)
    }

    fn live_silos(&self) -> usize {
        self.silos
            .values()
            .filter(|s| s.status != SiloStatus::Dead)
            .count()
    }

    /// Marks the silo dead and retires its generation (see `SiloId::incarnation`).
    fn mark_dead(&mut self, silo: &str, now: Millis) {
        if let Some(record) = self.silos.get_mut(silo) {
            record.status = SiloStatus::Dead;
            let (address, generation) = record.id.incarnation();
            let newest = self.retired.entry(address.to_owned()).or_insert(generation);
            *newest = (*newest).max(generation);
        }
        self.dead_since.entry(silo.to_owned()).or_insert(now);
    }

    fn activation(&self, grain: &str, entry: &Entry) -> Activation {
        Activation {
            grain: grain.to_owned(),
            silo: entry.silo.clone(),
            address: self
                .silos
                .get(&entry.silo)
                .map(|s| s.profile.address.clone())
                .unwrap_or_default(),
            strategy: entry.strategy.clone(),
            epoch: entry.epoch,
            created_ms: entry.created_ms,
        }
    }

    fn located(&self, grain: &str, now: Millis) -> Option<Located> {
        self.directory.get(grain).map(|entry| Located {
            activation: self.activation(grain, entry),
            live: self.live(&entry.silo, now),
        })
    }

    fn remove_entry(&mut self, grain: &str) {
        if let Some(entry) = self.directory.remove(grain) {
            if let Some(grains) = self.by_silo.get_mut(&entry.silo) {
                grains.remove(grain);
            }
        }
    }

    fn release_silo(&mut self, silo: &str) -> u64 {
        let grains = self.by_silo.remove(silo).unwrap_or_default();
        for grain in &grains {
            self.directory.remove(grain);
        }
        grains.len() as u64
    }
}

/// The in-process store.
pub struct MemoryStore {
    settings: StoreSettings,
    clock: Arc<dyn Clock>,
    clusters: Mutex<HashMap<ClusterName, ClusterState>>,
    /// Whether the process has been running, and the stalls the clusters have taken in.
    stalls: Arc<StallWatch>,
    stalls_taken: Mutex<StallsTaken>,
    last_epoch: Mutex<i64>,
    /// Cluster keys by id ([`keys`]): apart from the clusters, as a key may name a cluster
    /// that does not exist yet.
    keys: Mutex<BTreeMap<String, crate::store::StoredKey>>,
    /// Replicas by their last stamp ([`background`]).
    replicas: Mutex<BTreeMap<String, Millis>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store on `clock` (the process's clock: one process, one clock), told of the
    /// process's stalls by `stalls` ([`StallWatch::process`] in production).
    pub fn new(settings: StoreSettings, clock: Arc<dyn Clock>, stalls: Arc<StallWatch>) -> Self {
        Self {
            settings,
            clock,
            clusters: Mutex::default(),
            stalls,
            stalls_taken: Mutex::default(),
            last_epoch: Mutex::new(0),
            keys: Mutex::default(),
            replicas: Mutex::default(),
        }
    }

    fn replicas(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Millis>> {
        self.replicas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every call's way to the clusters: a stall of the process not yet taken in restarts every
    /// cluster's watch first, so no call judges silence across it.
    fn clusters(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterName, ClusterState>> {
        // A panic while holding the lock cannot leave a half-applied change behind (every change is
        // computed before it is written), so a poisoned lock is safe to keep using.
        let mut clusters = self
            .clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stalled = self
            .stalls_taken
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .news(&self.stalls);
        if stalled {
            let now = self.clock.now_ms();
            for state in clusters.values_mut() {
                state.watched_since = now;
            }
        }
        clusters
    }

    /// The cluster's state, created unless that would exceed the cluster limit.
    fn cluster_state<'c>(
        &self,
        clusters: &'c mut HashMap<ClusterName, ClusterState>,
        cluster: &ClusterName,
    ) -> Result<&'c mut ClusterState, StoreError> {
        let full = clusters.len() as u64 >= self.settings.max_clusters;
        match clusters.entry(cluster.clone()) {
            std::collections::hash_map::Entry::Occupied(entry) => Ok(entry.into_mut()),
            std::collections::hash_map::Entry::Vacant(_) if full => Err(LimitReached::Clusters {
                max: self.settings.max_clusters,
            }
            .into()),
            std::collections::hash_map::Entry::Vacant(entry) => Ok(entry.insert(ClusterState {
                pools: BTreeMap::new(),
                silo_ttl_ms: self.settings.default_silo_ttl_ms,
                watched_since: Millis::MIN,
                policy: Policy::default(),
                policy_version: 0,
                silos: BTreeMap::new(),
                dead_since: HashMap::new(),
                retired: HashMap::new(),
                directory: HashMap::new(),
                by_silo: HashMap::new(),
                lease: None,
                migrations: BTreeMap::new(),
                migration_endings: BTreeMap::new(),
                last_migration_id: 0,
                work_state: HashMap::new(),
                edges: VecDeque::new(),
                edge_last_seq: 0,
                edges_dropped: 0,
            })),
        }
    }

    fn next_epoch(&self) -> i64 {
        let mut last = self
            .last_epoch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *last += 1;
        *last
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn local_now(&self) -> Option<Millis> {
        Some(self.clock.now_ms())
    }

    fn could_not_keep_up(&self) {
        self.stalls.could_not_keep_up();
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let clusters = self.clusters();
        let mut by_status: BTreeMap<&'static str, (SiloStatus, u64)> = BTreeMap::new();
        let (mut entries, mut open_migrations) = (0, 0);
        for state in clusters.values() {
            entries += state.directory.len() as u64;
            open_migrations += state.migrations.len() as u64;
            for silo in state.silos.values() {
                by_status
                    .entry(silo.status.as_str())
                    .or_insert((silo.status, 0))
                    .1 += 1;
            }
        }
        Ok(StoreStats {
            silos_by_status: by_status.into_values().collect(),
            directory_entries: entries,
            open_migrations,
            pool: None,
        })
    }
}
