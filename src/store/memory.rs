//! The embedded store: everything in one process, behind one lock.
//!
//! Used when no `DATABASE_URL` is set. It keeps the same invariants as Postgres (one lock makes each
//! call atomic) but nothing survives a restart and replicas cannot share it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::{
    Activation, HeartbeatUpdate, Located, Membership, NewActivation, Reaped, Registration, Store,
    StoreError, StoreStats, DEAD_SILO_RETENTION_MS,
};
use crate::clock::Millis;
use crate::cluster::silo::is_fresh;
use crate::cluster::{
    ClusterName, GrainId, HeartbeatRejection, PoolName, SiloId, SiloRecord, SiloStatus,
};
use crate::connect::Pool;
use crate::placement::policy::Policy;

#[derive(Debug, Default)]
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
    directory: HashMap<String, Entry>,
    /// Grains per silo, ordered, for paging through a silo's activations.
    by_silo: HashMap<String, BTreeSet<String>>,
}

impl ClusterState {
    fn live(&self, silo: &str, now: Millis) -> bool {
        self.silos
            .get(silo)
            .is_some_and(|s| s.status_at(now, self.silo_ttl_ms) != SiloStatus::Dead)
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
#[derive(Debug)]
pub struct MemoryStore {
    default_silo_ttl_ms: Millis,
    clusters: Mutex<HashMap<ClusterName, ClusterState>>,
    last_epoch: Mutex<i64>,
}

impl MemoryStore {
    pub fn new(default_silo_ttl_ms: Millis) -> Self {
        Self {
            default_silo_ttl_ms,
            clusters: Mutex::default(),
            last_epoch: Mutex::new(0),
        }
    }

    fn clusters(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterName, ClusterState>> {
        // A panic while holding the lock cannot leave a half-applied change behind (every change is
        // computed before it is written), so a poisoned lock is safe to keep using.
        self.clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn cluster_state<'c>(
        &self,
        clusters: &'c mut HashMap<ClusterName, ClusterState>,
        cluster: &ClusterName,
    ) -> &'c mut ClusterState {
        clusters
            .entry(cluster.clone())
            .or_insert_with(|| ClusterState {
                pools: BTreeMap::new(),
                silo_ttl_ms: self.default_silo_ttl_ms,
                policy: Policy::default(),
                policy_version: 0,
                silos: BTreeMap::new(),
                dead_since: HashMap::new(),
                directory: HashMap::new(),
                by_silo: HashMap::new(),
            })
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

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    async fn record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        _now: Millis,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<Result<(SiloRecord, Millis), HeartbeatRejection>, StoreError> {
        let mut clusters = self.clusters();
        let state = self.cluster_state(&mut clusters, cluster);
        let ttl = state.silo_ttl_ms;
        match update(state.silos.get(silo.as_str()), ttl) {
            Ok(record) => {
                state.silos.insert(silo.to_string(), record.clone());
                Ok(Ok((record, ttl)))
            }
            Err(rejection) => Ok(Err(rejection)),
        }
    }

    async fn membership(&self, cluster: &ClusterName) -> Result<Option<Membership>, StoreError> {
        Ok(self.clusters().get(cluster).map(|state| Membership {
            silo_ttl_ms: state.silo_ttl_ms,
            silos: Arc::new(state.silos.values().cloned().collect()),
            policy: state.policy.clone(),
            policy_version: state.policy_version,
        }))
    }

    async fn remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(None);
        };
        let Some(record) = state.silos.get_mut(silo.as_str()) else {
            return Ok(None);
        };
        record.status = SiloStatus::Dead;
        state.dead_since.entry(silo.to_string()).or_insert(now);
        Ok(Some(state.release_silo(silo.as_str())))
    }

    async fn lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
        now: Millis,
    ) -> Result<Vec<Located>, StoreError> {
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
        now: Millis,
    ) -> Result<Vec<Registration>, StoreError> {
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(vec![Registration::SiloUnavailable; entries.len()]);
        };
        let mut results = Vec::with_capacity(entries.len());
        for new in entries {
            let grain = new.grain.as_str();
            if let Some(existing) = state.directory.get(grain) {
                if new.replaces_epoch == Some(existing.epoch) && !state.live(&existing.silo, now) {
                    // Declare the silo dead (final) before giving its grain away, and release the
                    // rest of its entries with it, as a sweep would.
                    let silo = existing.silo.clone();
                    if let Some(record) = state.silos.get_mut(&silo) {
                        record.status = SiloStatus::Dead;
                    }
                    state.dead_since.entry(silo.clone()).or_insert(now);
                    state.release_silo(&silo);
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
                .is_some_and(|s| s.status_at(now, state.silo_ttl_ms) == SiloStatus::Active);
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

    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
        _now: Millis,
    ) -> Result<(), StoreError> {
        let mut clusters = self.clusters();
        let state = self.cluster_state(&mut clusters, cluster);
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

    async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: Option<i64>,
    ) -> Result<bool, StoreError> {
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(false);
        };
        let on_silo = state.directory.get(grain.as_str()).is_some_and(|entry| {
            entry.silo == silo.as_str() && epoch.is_none_or(|epoch| entry.epoch == epoch)
        });
        if on_silo {
            state.remove_entry(grain.as_str());
        }
        Ok(on_silo)
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

    async fn reap(&self, now: Millis) -> Result<Vec<Reaped>, StoreError> {
        let mut clusters = self.clusters();
        let mut reaped = Vec::new();
        for (name, state) in clusters.iter_mut() {
            let newly_dead: Vec<String> = state
                .silos
                .values()
                .filter(|s| {
                    s.status != SiloStatus::Dead
                        && !is_fresh(s.last_heartbeat_ms, now, state.silo_ttl_ms)
                })
                .map(|s| s.id.to_string())
                .collect();
            for silo in newly_dead {
                if let Some(record) = state.silos.get_mut(&silo) {
                    record.status = SiloStatus::Dead;
                }
                state.dead_since.insert(silo.clone(), now);
                let released = state.release_silo(&silo);
                reaped.push(Reaped {
                    cluster: name.to_string(),
                    silo,
                    released,
                });
            }
            let expired: Vec<String> = state
                .dead_since
                .iter()
                .filter(|(_, since)| now - **since > DEAD_SILO_RETENTION_MS)
                .map(|(silo, _)| silo.clone())
                .collect();
            for silo in expired {
                state.dead_since.remove(&silo);
                state.silos.remove(&silo);
            }
        }
        Ok(reaped)
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

    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
        _now: Millis,
    ) -> Result<Result<i64, i64>, StoreError> {
        let mut clusters = self.clusters();
        let default_ttl = self.default_silo_ttl_ms;
        let state = self.cluster_state(&mut clusters, cluster);
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
