//! Open migrations in the embedded store: the same rules as Postgres', under its one lock.

use async_trait::async_trait;

use super::{ClusterState, MemoryStore};
use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloId, SiloStatus};
use crate::store::{
    Completion, Ending, Failure, Lease, Migration, MigrationStore, NewMigration, Refusal,
    SiloCounts, StoreError, ENDING_KEPT_MS,
};

impl ClusterState {
    /// Keeps how a silo's call ended `migration` (the migration itself is removed already);
    /// the driver's `cancel_stale_migrations` forgets endings older than [`ENDING_KEPT_MS`].
    fn end(&mut self, migration: &Migration, ending: Ending, now: Millis) {
        self.migration_endings
            .insert(migration.id, (now, migration.clone(), ending));
    }

    /// How a call within [`ENDING_KEPT_MS`] ended migration `id`, if one did.
    fn ending(&self, id: i64, now: Millis) -> Option<(Migration, Ending)> {
        self.migration_endings
            .get(&id)
            .filter(|(ended, ..)| now - *ended <= ENDING_KEPT_MS)
            .map(|(_, migration, ending)| (migration.clone(), ending.clone()))
    }

    /// Why `m` can no longer apply at `now`, if it cannot.
    fn refusal(&self, m: &Migration, now: Millis, ttl_ms: Millis) -> Option<Refusal> {
        if now - m.created_at_ms > ttl_ms {
            return Some(Refusal::Expired);
        }
        let liveness = self.liveness(now);
        let status = |silo: &str| self.silos.get(silo).map(|s| s.status_at(&liveness));
        if status(&m.from).is_none_or(|s| s == SiloStatus::Dead) {
            return Some(Refusal::SourceDead);
        }
        let grain_type = m.grain.split('/').next().unwrap_or_default();
        let hosts = self.silos.get(&m.to).is_some_and(|s| s.hosts(grain_type));
        if status(&m.to) != Some(SiloStatus::Active) || !hosts {
            return Some(Refusal::TargetUnavailable);
        }
        match self.directory.get(&m.grain) {
            None => Some(Refusal::GrainGone),
            Some(entry) if entry.silo != m.from || entry.epoch != m.epoch => {
                Some(Refusal::GrainMoved {
                    silo: entry.silo.clone(),
                    epoch: entry.epoch,
                })
            }
            Some(_) => None,
        }
    }
}

#[async_trait]
impl MigrationStore for MemoryStore {
    async fn issue_migrations(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        migrations: &[NewMigration],
    ) -> Result<Option<Vec<Migration>>, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(None);
        };
        if !state.holds(fence, now) {
            return Ok(None);
        }
        let mut sorted: Vec<&NewMigration> = migrations.iter().collect();
        sorted.sort_by(|a, b| a.grain.cmp(&b.grain));
        let mut written = Vec::new();
        for new in sorted {
            let grain = new.grain.as_str();
            let at_source = state
                .directory
                .get(grain)
                .is_some_and(|e| e.silo == new.from.as_str() && e.epoch == new.epoch);
            if !at_source || state.migrations.values().any(|m| m.grain == grain) {
                continue;
            }
            state.last_migration_id += 1;
            let migration = Migration {
                id: state.last_migration_id,
                grain: grain.to_owned(),
                from: new.from.to_string(),
                to: new.to.to_string(),
                reason: new.reason,
                epoch: new.epoch,
                created_at_ms: now,
            };
            state.migrations.insert(migration.id, migration.clone());
            written.push(migration);
        }
        Ok(Some(written))
    }

    async fn pending_migrations(
        &self,
        cluster: &ClusterName,
        from: &SiloId,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Migration>, StoreError> {
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(Vec::new());
        };
        Ok(state
            .migrations
            .range(after.map_or(i64::MIN, |id| id.saturating_add(1))..)
            .map(|(_, m)| m)
            .filter(|m| m.from == from.as_str())
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn complete_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
        ttl_ms: Millis,
    ) -> Result<Completion, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(Completion::NotFound);
        };
        let Some(migration) = state.migrations.remove(&id) else {
            return Ok(match state.ending(id, now) {
                Some((migration, ending)) => Completion::Ended { migration, ending },
                None => Completion::NotFound,
            });
        };
        if let Some(refusal) = state.refusal(&migration, now, ttl_ms) {
            let ending = Ending::Refused {
                refusal: refusal.clone(),
            };
            state.end(&migration, ending, now);
            return Ok(Completion::Refused { migration, refusal });
        }
        let mut entry = state
            .directory
            .get(&migration.grain)
            .cloned()
            .expect("checked by refusal");
        state.remove_entry(&migration.grain);
        entry.silo = migration.to.clone();
        entry.epoch = self.next_epoch();
        entry.created_ms = now;
        entry.strategy = migration.reason.as_str().to_owned();
        let epoch = entry.epoch;
        state
            .by_silo
            .entry(entry.silo.clone())
            .or_default()
            .insert(migration.grain.clone());
        state.directory.insert(migration.grain.clone(), entry);
        state.end(&migration, Ending::Moved { epoch }, now);
        Ok(Completion::Moved { migration, epoch })
    }

    async fn open_migration_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<Vec<(String, String, u64)>, StoreError> {
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(Vec::new());
        };
        let mut counts: std::collections::BTreeMap<(String, String), u64> = Default::default();
        for m in state.migrations.values() {
            *counts.entry((m.from.clone(), m.to.clone())).or_default() += 1;
        }
        Ok(counts
            .into_iter()
            .map(|((from, to), n)| (from, to, n))
            .collect())
    }

    async fn fail_migration(&self, cluster: &ClusterName, id: i64) -> Result<Failure, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(Failure::NotFound);
        };
        let Some(migration) = state.migrations.remove(&id) else {
            return Ok(match state.ending(id, now) {
                Some((migration, ending)) => Failure::Ended { migration, ending },
                None => Failure::NotFound,
            });
        };
        state.end(&migration, Ending::Failed, now);
        Ok(Failure::Failed(migration))
    }

    async fn cancel_stale_migrations(
        &self,
        cluster: &ClusterName,
        ttl_ms: Millis,
    ) -> Result<Vec<Migration>, StoreError> {
        let now = self.clock.now_ms();
        let mut clusters = self.clusters();
        let Some(state) = clusters.get_mut(cluster) else {
            return Ok(Vec::new());
        };
        state
            .migration_endings
            .retain(|_, (ended, ..)| now - *ended <= ENDING_KEPT_MS);
        let liveness = state.liveness(now);
        let draining = |silo: &str| {
            state
                .silos
                .get(silo)
                .is_some_and(|s| s.status_at(&liveness) == SiloStatus::ShuttingDown)
        };
        let status = |silo: &str| state.silos.get(silo).map(|s| s.status_at(&liveness));
        let stale: Vec<i64> = state
            .migrations
            .values()
            .filter(|m| {
                // As Postgres: too old, the grain not that activation on the source any more, the
                // target unknown, or a silo dead (the target also when draining). A target that is
                // only joining may still become active: kept.
                let at_source = state
                    .directory
                    .get(&m.grain)
                    .is_some_and(|e| e.silo == m.from && e.epoch == m.epoch);
                now - m.created_at_ms > ttl_ms
                    || !at_source
                    || status(&m.from).is_none_or(|s| s == SiloStatus::Dead)
                    || status(&m.to).is_none_or(|s| s == SiloStatus::Dead)
                    || draining(&m.to)
            })
            .map(|m| m.id)
            .collect();
        Ok(stale
            .into_iter()
            .filter_map(|id| state.migrations.remove(&id))
            .collect())
    }

    async fn silo_counts(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<SiloCounts, StoreError> {
        let clusters = self.clusters();
        let Some(state) = clusters.get(cluster) else {
            return Ok(SiloCounts::default());
        };
        Ok(SiloCounts {
            activations: state
                .by_silo
                .get(silo.as_str())
                .map_or(0, |g| g.len() as u64),
            migrating: state
                .migrations
                .values()
                .filter(|m| m.from == silo.as_str())
                .count() as u64,
        })
    }
}
