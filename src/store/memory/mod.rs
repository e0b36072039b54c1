//! The embedded store: everything in one process, behind one lock.
//!
//! Used when no `DATABASE_URL` is set. It keeps the same invariants as Postgres (one lock makes each
//! call atomic) but nothing survives a restart and replicas cannot share it.

mod edges;
mod keys;
mod leases;
mod migrations;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Activation, Departure, DirectoryStore, HeartbeatUpdate, Lease, LimitReached, Located,
    Membership, MembershipStore, Migration, NewActivation, PendingEdge, PolicyStore, PoolStore,
    Reaped, Reaping, Registration, SiloPage, Store, StoreError, StoreSettings, StoreStats,
    DEAD_SILO_RETENTION_MS,
};
use crate::clock::{Clock, Millis};
use crate::cluster::{
    ClusterName, GrainId, HeartbeatRejection, Liveness, PoolName, SiloId, SiloRecord, SiloStatus,
};
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
    last_migration_id: i64,
    /// The background work's state by kind, written under the lease.
    work_state: HashMap<String, serde_json::Value>,
    /// Edge reports waiting to be counted ([`edges`]).
    edges: VecDeque<PendingEdge>,
    edge_last_seq: i64,
    edges_dropped: u64,
}

impl ClusterState {
    /// The judge at `now` (the embedded store cannot be unreachable: it has always reached itself).
    fn liveness(&self, now: Millis) -> Liveness {
        Liveness::at(now, self.silo_ttl_ms)
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
    last_epoch: Mutex<i64>,
    /// Cluster keys by id ([`keys`]): apart from the clusters, as a key may name a cluster
    /// that does not exist yet.
    keys: Mutex<BTreeMap<String, crate::store::StoredKey>>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl MemoryStore {
    /// An empty store on `clock` (the process's clock: one process, one clock).
    pub fn new(settings: StoreSettings, clock: Arc<dyn Clock>) -> Self {
        Self {
            settings,
            clock,
            clusters: Mutex::default(),
            last_epoch: Mutex::new(0),
            keys: Mutex::default(),
        }
    }

    fn clusters(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterName, ClusterState>> {
        // A panic while holding the lock cannot leave a half-applied change behind (every change is
        // computed before it is written), so a poisoned lock is safe to keep using.
        self.clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                policy: Policy::default(),
                policy_version: 0,
                silos: BTreeMap::new(),
                dead_since: HashMap::new(),
                retired: HashMap::new(),
                directory: HashMap::new(),
                by_silo: HashMap::new(),
                lease: None,
                migrations: BTreeMap::new(),
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
impl MembershipStore for MemoryStore {
    async fn record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<Result<(SiloRecord, Liveness), HeartbeatRejection>, StoreError> {
        let now = self.clock.now_ms();
        let max_silos = self.settings.max_silos_per_cluster;
        let mut clusters = self.clusters();
        let state = self.cluster_state(&mut clusters, cluster)?;
        let liveness = state.liveness(now);
        let previous = state.silos.get(silo.as_str());
        if previous.is_none() {
            let (address, generation) = silo.incarnation();
            if let Some(&dead_generation) = state.retired.get(address) {
                if generation <= dead_generation {
                    return Ok(Err(HeartbeatRejection::Retired {
                        silo: silo.to_string(),
                        address: address.to_owned(),
                        dead_generation,
                    }));
                }
            }
        }
        let was_alive = previous.is_some_and(|p| p.status != SiloStatus::Dead);
        match update(previous, &liveness) {
            Err(rejection @ HeartbeatRejection::DeclaredDead { .. }) if was_alive => {
                // Told it is dead, it is made dead (as a sweep would), so nothing revives it.
                state.mark_dead(silo.as_str(), liveness.now);
                state.release_silo(silo.as_str());
                super::declared_dead_on_the_way(cluster.as_str(), &[silo.as_str()], "heartbeat");
                Ok(Err(rejection))
            }
            Ok(record) => {
                if previous.is_none() && state.live_silos() as u64 >= max_silos {
                    return Err(LimitReached::Silos {
                        cluster: cluster.to_string(),
                        max: max_silos,
                        retry_after_ms: liveness.silo_ttl_ms,
                    }
                    .into());
                }
                state.silos.insert(silo.to_string(), record.clone());
                Ok(Ok((record, liveness)))
            }
            Err(rejection) => Ok(Err(rejection)),
        }
    }

    async fn membership(&self, cluster: &ClusterName) -> Result<Option<Membership>, StoreError> {
        let now = self.clock.now_ms();
        Ok(self.clusters().get(cluster).map(|state| Membership {
            liveness: state.liveness(now),
            silos: Arc::new(
                state
                    .silos
                    .values()
                    .filter(|s| s.status != SiloStatus::Dead)
                    .cloned()
                    .collect(),
            ),
            policy: Arc::new(state.policy.clone()),
            policy_version: state.policy_version,
        }))
    }

    async fn clusters(
        &self,
        after: Option<&ClusterName>,
        limit: u32,
    ) -> Result<Vec<ClusterName>, StoreError> {
        let mut names: Vec<ClusterName> = self
            .clusters()
            .keys()
            .filter(|name| after.is_none_or(|after| name.as_str() > after.as_str()))
            .cloned()
            .collect();
        names.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        names.truncate(limit as usize);
        Ok(names)
    }

    async fn silos(
        &self,
        cluster: &ClusterName,
        after: Option<&SiloId>,
        limit: u32,
    ) -> Result<Option<SiloPage>, StoreError> {
        let now = self.clock.now_ms();
        Ok(self.clusters().get(cluster).map(|state| {
            let range = match after {
                Some(after) => state.silos.range::<str, _>((
                    std::ops::Bound::Excluded(after.as_str()),
                    std::ops::Bound::Unbounded,
                )),
                None => state.silos.range::<str, _>(..),
            };
            SiloPage {
                liveness: state.liveness(now),
                silos: range.take(limit as usize).map(|(_, s)| s.clone()).collect(),
            }
        }))
    }

    async fn silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        let now = self.clock.now_ms();
        Ok(self.clusters().get(cluster).and_then(|state| {
            state
                .silos
                .get(silo.as_str())
                .map(|record| (record.clone(), state.liveness(now)))
        }))
    }

    async fn remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<Departure>, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(None);
        };
        if !state.silos.contains_key(silo.as_str()) {
            return Ok(None);
        }
        state.mark_dead(silo.as_str(), now);
        // In memory the whole release is one cheap step under the lock.
        Ok(Some(Departure {
            released: state.release_silo(silo.as_str()),
            release_pending: false,
        }))
    }

    async fn drain_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(None);
        };
        let liveness = state.liveness(now);
        let Some(record) = state.silos.get_mut(silo.as_str()) else {
            return Ok(None);
        };
        // Only a live silo is marked: one silent past its TTL is dead already.
        if record.status_at(&liveness) != SiloStatus::Dead {
            record.status = SiloStatus::ShuttingDown;
            record.drained_at_ms.get_or_insert(now);
        }
        Ok(Some((record.clone(), liveness)))
    }

    async fn reap(&self) -> Result<Reaping, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let mut reaped = Vec::new();
        for (name, state) in clusters.iter_mut() {
            let liveness = state.liveness(now);
            let newly_dead: Vec<String> = state
                .silos
                .values()
                .filter(|s| {
                    s.status_at(&liveness) == SiloStatus::Dead && s.status != SiloStatus::Dead
                })
                .map(|s| s.id.to_string())
                .collect();
            for silo in newly_dead {
                state.mark_dead(&silo, now);
                state.release_silo(&silo);
                reaped.push(Reaped {
                    cluster: name.to_string(),
                    silo,
                });
            }
            let expired: Vec<String> = state
                .dead_since
                .iter()
                .filter(|(_, since)| now - **since > DEAD_SILO_RETENTION_MS)
                .map(|(silo, _)| silo.clone())
                .collect();
            for silo in expired {
                // Its generation was retired when it died.
                state.dead_since.remove(&silo);
                state.silos.remove(&silo);
            }
        }
        // The embedded store cannot be unreachable: it never defers a death.
        Ok(Reaping {
            dead: reaped,
            deferred: Vec::new(),
        })
    }
}

#[async_trait]
impl DirectoryStore for MemoryStore {
    async fn lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
    ) -> Result<Vec<Located>, StoreError> {
        let now = self.clock.now_ms();
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(Vec::new());
        };
        Ok(grains
            .iter()
            .filter_map(|grain| state.located(grain.as_str(), now))
            .collect())
    }

    async fn register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
    ) -> Result<Vec<Registration>, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(vec![Registration::SiloUnavailable; entries.len()]);
        };
        let liveness = state.liveness(now);
        let mut results = Vec::with_capacity(entries.len());
        for new in entries {
            let grain = new.grain.as_str();
            if let Some(existing) = state.directory.get(grain) {
                if new.replaces_epoch == Some(existing.epoch) && !state.live(&existing.silo, now) {
                    // Declare the silo dead (final) before giving its grain away, and release the
                    // rest of its entries with it, as a sweep would.
                    let silo = existing.silo.clone();
                    state.mark_dead(&silo, now);
                    state.release_silo(&silo);
                    super::declared_dead_on_the_way(cluster.as_str(), &[&silo], "placement");
                } else {
                    results.push(Registration::Existing(
                        state.located(grain, now).expect("entry exists"),
                    ));
                    continue;
                }
            }
            let silo_ok = state
                .silos
                .get(new.silo.as_str())
                .is_some_and(|s| s.status_at(&liveness) == SiloStatus::Active);
            if !silo_ok {
                results.push(Registration::SiloUnavailable);
                continue;
            }
            let entry = Entry {
                silo: new.silo.to_string(),
                strategy: new.strategy.to_owned(),
                epoch: self.next_epoch(),
                created_ms: now,
            };
            let activation = state.activation(grain, &entry);
            state
                .by_silo
                .entry(entry.silo.clone())
                .or_default()
                .insert(grain.to_owned());
            state.directory.insert(grain.to_owned(), entry);
            results.push(Registration::Registered(activation));
        }
        Ok(results)
    }

    async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: i64,
    ) -> Result<bool, StoreError> {
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(false);
        };
        let on_silo = state
            .directory
            .get(grain.as_str())
            .is_some_and(|entry| entry.silo == silo.as_str() && entry.epoch == epoch);
        if on_silo {
            state.remove_entry(grain.as_str());
        }
        Ok(on_silo)
    }

    async fn movable_activations(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        immovable: &[String],
        moved_since: Millis,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(Vec::new());
        };
        let Some(grains) = state.by_silo.get(silo.as_str()) else {
            return Ok(Vec::new());
        };
        let migrating: HashSet<&str> = state
            .migrations
            .values()
            .map(|m| m.grain.as_str())
            .collect();
        let mut movable: Vec<Activation> = grains
            .iter()
            .filter(|grain| {
                let grain_type = grain.split('/').next().unwrap_or_default();
                !immovable.iter().any(|t| t == grain_type) && !migrating.contains(grain.as_str())
            })
            .map(|grain| state.activation(grain, &state.directory[grain]))
            .filter(|a| {
                let migrated =
                    ["rebalancer", "drain", "repartitioner"].contains(&a.strategy.as_str());
                !(migrated && a.created_ms >= moved_since)
            })
            .collect();
        movable.sort_by(|a, b| a.created_ms.cmp(&b.created_ms).then(a.grain.cmp(&b.grain)));
        movable.truncate(limit as usize);
        Ok(movable)
    }

    async fn activation_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<HashMap<String, u64>, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .map_or_else(HashMap::new, |state| {
                state
                    .by_silo
                    .iter()
                    .filter(|(_, grains)| !grains.is_empty())
                    .map(|(silo, grains)| (silo.clone(), grains.len() as u64))
                    .collect()
            }))
    }

    async fn activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(Vec::new());
        };
        let Some(grains) = state.by_silo.get(silo.as_str()) else {
            return Ok(Vec::new());
        };
        let range = match after {
            Some(after) => grains
                .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => grains.range::<str, _>(..),
        };
        Ok(range
            .take(limit as usize)
            .map(|grain| state.activation(grain, &state.directory[grain]))
            .collect())
    }

    async fn release_dead(&self, _limit: u32) -> Result<u64, StoreError> {
        // Every death releases its entries at once here; nothing is ever left to release.
        Ok(0)
    }
}

#[async_trait]
impl PolicyStore for MemoryStore {
    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError> {
        let mut clusters = self.clusters();
        let default_ttl = self.settings.default_silo_ttl_ms;
        let state = self.cluster_state(&mut clusters, cluster)?;
        if expected.is_some_and(|expected| expected != state.policy_version) {
            return Ok(Err(state.policy_version));
        }
        state.policy = policy.clone();
        state.policy_version += 1;
        state.silo_ttl_ms = policy.silo_ttl_ms.map_or(default_ttl, |ttl| {
            Millis::try_from(ttl).unwrap_or(Millis::MAX)
        });
        Ok(Ok(state.policy_version))
    }
}

#[async_trait]
impl PoolStore for MemoryStore {
    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError> {
        let mut clusters = self.clusters();
        let state = self.cluster_state(&mut clusters, cluster)?;
        let counter = state
            .pools
            .get(name.as_str())
            .map_or(0, |(_, counter)| *counter);
        state
            .pools
            .insert(name.to_string(), (pool.clone(), counter));
        Ok(())
    }

    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        Ok(self
            .clusters()
            .get(cluster)
            .and_then(|state| state.pools.get(name.as_str()))
            .map(|(pool, _)| pool.clone()))
    }

    async fn next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError> {
        let mut clusters = self.clusters();
        Ok(clusters
            .get_mut(cluster)
            .and_then(|state| state.pools.get_mut(name.as_str()))
            .map(|(_, counter)| {
                *counter += 1;
                *counter - 1
            }))
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

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let clusters = self.clusters();
        let mut by_status: BTreeMap<&'static str, (SiloStatus, u64)> = BTreeMap::new();
        let mut entries = 0;
        for state in clusters.values() {
            entries += state.directory.len() as u64;
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
        })
    }
}
