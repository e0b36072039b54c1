//! Membership in the embedded store: the same rules as Postgres', under its one lock. The
//! embedded store cannot be unreachable, so it never defers a death.

use std::sync::Arc;

use async_trait::async_trait;

use super::MemoryStore;
use crate::cluster::{ClusterName, HeartbeatRejection, Liveness, SiloId, SiloRecord, SiloStatus};
use crate::store::{
    Departure, HeartbeatUpdate, LimitReached, Membership, MembershipStore, Reaped, Reaping,
    SiloPage, StoreError, DEAD_SILO_RETENTION_MS,
};

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
                crate::store::declared_dead_on_the_way(
                    cluster.as_str(),
                    &[silo.as_str()],
                    "heartbeat",
                );
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

    async fn reap(&self, cluster: &ClusterName) -> Result<Reaping, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let mut reaped = Vec::new();
        if let Some(state) = clusters.get_mut(cluster) {
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
                    cluster: cluster.to_string(),
                    silo,
                });
            }
        }
        // The embedded store cannot be unreachable: it never defers a death.
        Ok(Reaping {
            dead: reaped,
            deferred: Vec::new(),
        })
    }

    async fn forget_expired(&self, cluster: &ClusterName) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        if let Some(state) = self.clusters().get_mut(cluster) {
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
        Ok(())
    }
}
