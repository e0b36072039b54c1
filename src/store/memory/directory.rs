//! The grain directory in the embedded store: the same rules as Postgres', under its one lock.
//! A death releases every entry of the silo at once, so nothing is left for `release_dead`.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;

use super::{Entry, MemoryStore};
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId, SiloStatus};
use crate::store::{Activation, DirectoryStore, Located, NewActivation, Registration, StoreError};

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
                    crate::store::declared_dead_on_the_way(cluster.as_str(), &[&silo], "placement");
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

    async fn release_dead(&self, _cluster: &ClusterName, _limit: u32) -> Result<u64, StoreError> {
        // Every death releases its entries at once here; nothing is ever left to release.
        Ok(0)
    }
}
