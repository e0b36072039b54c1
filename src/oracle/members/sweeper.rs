//! The membership sweep's steps (run by [`crate::background`] on the replica that owns the
//! clusters and holds their leases): reads what is due in many clusters at once, then in each
//! cluster with something due declares silent silos dead, releases dead silos'
//! directory entries in bounded chunks, forgets long-dead silos; and the gauges.
//!
//! The store's steps are idempotent, so two replicas that overlap on a cluster (one whose lease
//! ran out while it swept) do no harm, and correctness never waits for them: lookups and
//! placements judge liveness themselves at request time, and an entry on a dead silo is never
//! live. The sweep makes deaths and releases visible (listings, metrics) within about a second.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::Members;
use crate::cluster::{ClusterName, SiloStatus};
use crate::store::{Due, DueQuery, Reaped, Reaping, SilenceLook, StoreError, RELEASE_CHUNK};
use crate::telemetry::metric;

/// Longest time one sweep spends releasing entries before it lets the next tick come (each chunk
/// is one short statement; a dead silo with 100,000 entries goes in a few seconds).
const RELEASE_BUDGET: Duration = Duration::from_millis(500);
/// Most silo ids one death log line names; the rest are counted.
const IDS_PER_LOG_LINE: usize = 5;

/// What a sweep of many clusters did.
#[derive(Debug, Default)]
pub struct Swept {
    /// Silos it declared dead.
    pub dead: usize,
    /// The clusters whose grains may have to move (their movers have work).
    pub moving: BTreeSet<ClusterName>,
    /// The clusters whose steps failed, and why (the others were swept all the same).
    pub failed: Vec<(ClusterName, StoreError)>,
}

impl Members {
    /// A sweep of every cluster, then the gauges (tests; the background work sweeps the
    /// clusters each replica holds the leases of, [`Self::sweep_clusters`]). Returns how many
    /// silos it declared dead, or the first failure.
    pub async fn sweep(&self) -> Result<usize, StoreError> {
        let mut dead = 0;
        let mut after: Option<ClusterName> = None;
        loop {
            let page = self.store.clusters(after.as_ref(), 1_000).await?;
            let swept = self.sweep_clusters(&page).await?;
            if let Some((_, error)) = swept.failed.into_iter().next() {
                return Err(error);
            }
            dead += swept.dead;
            match page.last() {
                Some(last) if page.len() == 1_000 => after = Some(last.clone()),
                _ => break,
            }
        }
        self.refresh_gauges().await?;
        Ok(dead)
    }

    /// The sweep of `clusters`: reads what is due in them all (one statement per page of
    /// clusters; a cluster's silos are read only when this replica's last look at their silence
    /// is over), then does in each only what is due there. An error reading
    /// what is due fails the sweep; an error in one cluster's steps is that cluster's.
    pub async fn sweep_clusters(&self, clusters: &[ClusterName]) -> Result<Swept, StoreError> {
        let queries: Vec<DueQuery> = {
            let looks = self.silence_looks();
            clusters
                .iter()
                .map(|c| (c.clone(), looks.get(c).copied()))
                .collect()
        };
        let due = self
            .store
            .due(&queries)
            .await
            .inspect_err(|_| metric::store_error("due"))?;
        {
            let mut looks = self.silence_looks();
            for (cluster, due) in &due {
                if let Some(look) = due.looked {
                    looks.insert(cluster.clone(), look);
                }
            }
        }
        {
            // Nothing silent: whatever it deferred there is over.
            let mut deferred = self
                .deferred_deaths
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            for cluster in clusters {
                if !due.get(cluster).is_some_and(|d| d.silent) {
                    deferred.note(cluster.as_str(), &[]);
                }
            }
        }
        let mut swept = Swept::default();
        for (cluster, due) in due {
            if !due.any() {
                continue;
            }
            match self.sweep_due(&cluster, due).await {
                Ok(dead) => swept.dead += dead,
                Err(error) => swept.failed.push((cluster.clone(), error)),
            }
            if due.moving {
                swept.moving.insert(cluster);
            }
        }
        Ok(swept)
    }

    /// The last look at each cluster's silence this replica took (see [`SilenceLook`]). Kept for
    /// every cluster it swept, so bounded by the clusters.
    fn silence_looks(&self) -> std::sync::MutexGuard<'_, HashMap<ClusterName, SilenceLook>> {
        self.silence_looks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What is due in `cluster`, done: deaths, releases, forgetting; returns how many silos it
    /// declared dead.
    async fn sweep_due(&self, cluster: &ClusterName, due: Due) -> Result<usize, StoreError> {
        let mut dead = 0;
        if due.silent {
            dead = self.declare_dead(cluster).await?.dead.len();
        }
        if due.unreleased || dead > 0 {
            self.release_dead(cluster).await?;
        }
        if due.expired {
            self.store
                .forget_expired(cluster)
                .await
                .inspect_err(|_| metric::store_error("forget_expired"))?;
        }
        Ok(dead)
    }

    /// Declares dead the silos of `cluster` the death rule finds dead. Logged per cluster, not per silo: a
    /// flood of short-lived ids dying at once makes one line per cluster, not one per id. Deaths
    /// the rule defers because this replica could not reach the store are logged and counted
    /// once each, so an operator can tell a store outage from real deaths.
    pub async fn declare_dead(&self, cluster: &ClusterName) -> Result<Reaping, StoreError> {
        let reaping = self
            .store
            .reap(cluster)
            .await
            .inspect_err(|_| metric::store_error("reap"))?;
        for (cluster, silos) in by_cluster(&reaping.dead) {
            tracing::warn!(
                cluster,
                count = silos.len(),
                silos = %named(&silos),
                "silos declared dead after missing heartbeats; their activations are released"
            );
        }
        metric::silos_declared_dead(reaping.dead.len() as u64);
        let newly_deferred = self
            .deferred_deaths
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .note(cluster.as_str(), &reaping.deferred);
        for (cluster, silos) in by_cluster(&newly_deferred) {
            tracing::warn!(
                cluster,
                count = silos.len(),
                silos = %named(&silos),
                "silos silent past their TTL are not declared dead: this replica has not watched \
                 them for a whole TTL since their last heartbeat (its store unreachable, its \
                 process stalled, or requests it could not keep up with refused: their silence \
                 may be its own); they are judged once it has"
            );
        }
        metric::silo_deaths_deferred(newly_deferred.len() as u64);
        Ok(reaping)
    }

    /// Releases the entries of `cluster`'s dead silos, a chunk at a time, for at most
    /// [`RELEASE_BUDGET`]. Returns how many.
    pub async fn release_dead(&self, cluster: &ClusterName) -> Result<u64, StoreError> {
        let started = Instant::now();
        let mut released = 0;
        loop {
            let chunk = self
                .store
                .release_dead(cluster, RELEASE_CHUNK)
                .await
                .inspect_err(|_| metric::store_error("release_dead"))?;
            released += chunk;
            if chunk == 0 || started.elapsed() >= RELEASE_BUDGET {
                return Ok(released);
            }
        }
    }

    /// Refreshes the membership and directory gauges (counts over every cluster, as an admin
    /// listing: every few seconds on each replica).
    pub async fn refresh_gauges(&self) -> Result<(), StoreError> {
        let stats = self
            .store
            .stats()
            .await
            .inspect_err(|_| metric::store_error("stats"))?;
        let by_status: Vec<(&'static str, u64)> = SiloStatus::ALL
            .into_iter()
            .map(|status| {
                let n = stats
                    .silos_by_status
                    .iter()
                    .find(|(s, _)| *s == status)
                    .map_or(0, |(_, n)| *n);
                (status.as_str(), n)
            })
            .collect();
        let pool = stats.pool.map(|pool| metric::PoolGauges {
            in_use: pool.in_use,
            idle: pool.idle,
            max: pool.max,
        });
        metric::store_gauges(
            &by_status,
            stats.directory_entries,
            stats.open_migrations,
            pool,
        );
        Ok(())
    }
}

/// The silos named, by cluster.
fn by_cluster(silos: &[Reaped]) -> BTreeMap<&str, Vec<&str>> {
    let mut by_cluster: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for silo in silos {
        by_cluster
            .entry(&silo.cluster)
            .or_default()
            .push(&silo.silo);
    }
    by_cluster
}

/// The first few ids, for a log line.
fn named(silos: &[&str]) -> String {
    silos
        .iter()
        .take(IDS_PER_LOG_LINE)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// The silos whose death the sweeps are deferring now, so that each deferral is logged and
/// counted once, however many sweeps it lasts. Bounded by the silos alive in the store.
#[derive(Debug, Default)]
pub(super) struct DeferredDeaths {
    /// By cluster: each cluster is swept on its own.
    deferring: HashMap<String, HashSet<Reaped>>,
}

impl DeferredDeaths {
    /// Takes the silos one sweep of `cluster` deferred; returns those it had not been deferring.
    pub(super) fn note(&mut self, cluster: &str, deferred: &[Reaped]) -> Vec<Reaped> {
        let now: HashSet<Reaped> = deferred.iter().cloned().collect();
        let before = self.deferring.remove(cluster).unwrap_or_default();
        let new = now.difference(&before).cloned().collect();
        if !now.is_empty() {
            self.deferring.insert(cluster.to_owned(), now);
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn silo(name: &str) -> Reaped {
        Reaped {
            cluster: "c".into(),
            silo: name.into(),
        }
    }

    #[test]
    fn a_deferred_death_is_counted_once_while_it_lasts_and_again_when_deferred_anew() {
        let mut deferred = DeferredDeaths::default();
        assert_eq!(deferred.note("c", &[silo("a@1"), silo("b@1")]).len(), 2);
        assert_eq!(deferred.note("c", &[silo("a@1"), silo("b@1")]), vec![]);
        assert_eq!(deferred.note("c", &[silo("a@1")]), vec![]);
        assert_eq!(deferred.note("c", &[]), vec![]);
        assert_eq!(deferred.note("c", &[silo("a@1")]), vec![silo("a@1")]);
    }

    #[test]
    fn clusters_swept_in_turn_keep_their_own_deferred_deaths() {
        let mut deferred = DeferredDeaths::default();
        let other = Reaped {
            cluster: "d".into(),
            silo: "x@1".into(),
        };
        assert_eq!(deferred.note("c", &[silo("a@1")]).len(), 1);
        assert_eq!(deferred.note("d", std::slice::from_ref(&other)).len(), 1);
        assert_eq!(deferred.note("c", &[silo("a@1")]), vec![]);
        assert_eq!(deferred.note("d", std::slice::from_ref(&other)), vec![]);
    }
}
