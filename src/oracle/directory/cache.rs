//! This replica's recent directory answers, so that a placement of a grain that has a live
//! activation need not cost a database round trip.
//!
//! The cache is an optimisation of *answers*, never of *registrations*: nothing is registered,
//! moved or removed on its word, and the single-activation guarantee stays the store's alone. An
//! entry can be stale — another replica may have deactivated or moved the grain since — for at
//! most the cache's time to live. What a stale answer can cost is a forwarded call, never a second
//! activation, because a silo runs a grain only under a registration it holds (see the README's
//! "What a runtime does with an answer"). To keep staleness rare and short:
//! - a hit is served only while its silo is still alive in the membership the request reads;
//! - an answer naming the requesting silo itself is never served from here (a silo asking where
//!   its own grain lives evidently does not run it: the store is asked);
//! - this replica's own deactivations and completed migrations forget the grain at once, and its
//!   lookups (`GET …/activations/{grain}`, always read from the store) refresh it;
//! - everything is forgotten when the store had an outage since (an era ends): what ended it may
//!   have been a failover that lost the registrations the cache still holds.
//!
//! Bounded: at most `capacity` entries; a full shard first drops expired entries, then arbitrary
//! ones.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::Activation;

/// Shards, so that concurrent requests seldom wait for one another's lock.
const SHARDS: usize = 16;

/// How long an answer may be served, and how many are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSettings {
    /// Zero turns the cache off.
    pub ttl: Duration,
    pub capacity: usize,
}

impl Default for CacheSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(10),
            capacity: 1_000_000,
        }
    }
}

struct Entry {
    /// `None` once the grain was forgotten: a tombstone, so that a placement answered from an
    /// older read cannot put the forgotten activation back.
    activation: Option<Activation>,
    /// Answers with a smaller epoch are older than what this entry knows, and are not kept.
    min_epoch: i64,
    cached_at: Instant,
}

/// Grains by cluster, in one shard.
type Shard = HashMap<String, HashMap<String, Entry>>;

pub struct DirectoryCache {
    settings: CacheSettings,
    hasher: std::collections::hash_map::RandomState,
    shards: Vec<Mutex<(Shard, usize)>>,
    /// The store outages seen when the entries were kept (see [`Self::enter_era`]).
    era: AtomicU64,
}

impl DirectoryCache {
    pub fn new(settings: CacheSettings) -> Self {
        Self {
            settings,
            hasher: Default::default(),
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            era: AtomicU64::new(0),
        }
    }

    /// Forgets every entry when `outages_seen` (the store's count of outages this replica saw)
    /// moved since the entries were kept. Cheap when it did not: one atomic read.
    pub fn enter_era(&self, outages_seen: u64) {
        if self.era.load(Ordering::Acquire) == outages_seen {
            return;
        }
        for shard in &self.shards {
            let mut guard = shard
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *guard = (Shard::new(), 0);
        }
        self.era.store(outages_seen, Ordering::Release);
    }

    pub fn enabled(&self) -> bool {
        !self.settings.ttl.is_zero() && self.settings.capacity > 0
    }

    fn shard(&self, cluster: &str, grain: &str) -> std::sync::MutexGuard<'_, (Shard, usize)> {
        let mut hasher = self.hasher.build_hasher();
        cluster.hash(&mut hasher);
        grain.hash(&mut hasher);
        let index = (hasher.finish() % SHARDS as u64) as usize;
        self.shards[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The grain's cached activation, if it was cached less than the time to live ago.
    pub fn get(&self, cluster: &str, grain: &str) -> Option<Activation> {
        if !self.enabled() {
            return None;
        }
        let mut guard = self.shard(cluster, grain);
        let (shard, len) = &mut *guard;
        let grains = shard.get_mut(cluster)?;
        let entry = grains.get(grain)?;
        if entry.cached_at.elapsed() < self.settings.ttl {
            return entry.activation.clone();
        }
        grains.remove(grain);
        *len -= 1;
        None
    }

    /// Remembers a live activation the store just answered with.
    pub fn put(&self, cluster: &str, activation: &Activation) {
        if !self.enabled() {
            return;
        }
        let per_shard = self.settings.capacity.div_ceil(SHARDS);
        let ttl = self.settings.ttl;
        let mut guard = self.shard(cluster, &activation.grain);
        let (shard, len) = &mut *guard;
        if *len >= per_shard {
            *len = evict(shard, ttl, per_shard);
        }
        let grains = shard.entry(cluster.to_owned()).or_default();
        let known = grains
            .get(&activation.grain)
            .filter(|entry| entry.cached_at.elapsed() < ttl);
        if known.is_some_and(|entry| activation.epoch < entry.min_epoch) {
            return;
        }
        let entry = Entry {
            activation: Some(activation.clone()),
            min_epoch: activation.epoch,
            cached_at: Instant::now(),
        };
        if grains.insert(activation.grain.clone(), entry).is_none() {
            *len += 1;
        }
    }

    /// Forgets the grain, and — for the time to live — any answer about it with an epoch below
    /// `min_epoch`: call it after the store removed or moved an activation through this replica
    /// (a placement that read the old entry just before must not bring it back). A bar is never
    /// lowered by a later, smaller one, and a kept answer at or above the bar stays.
    pub fn forget(&self, cluster: &str, grain: &str, min_epoch: i64) {
        let ttl = self.settings.ttl;
        let mut guard = self.shard(cluster, grain);
        let (shard, len) = &mut *guard;
        let known = shard
            .get_mut(cluster)
            .and_then(|grains| grains.get_mut(grain))
            .filter(|entry| entry.cached_at.elapsed() < ttl);
        if let Some(entry) = known {
            let raised = min_epoch > entry.min_epoch;
            entry.min_epoch = entry.min_epoch.max(min_epoch);
            if entry
                .activation
                .as_ref()
                .is_some_and(|a| a.epoch < entry.min_epoch)
            {
                entry.activation = None;
            }
            // A raised bar guards for a whole time to live from now; a kept answer keeps its age.
            if raised && entry.activation.is_none() {
                entry.cached_at = Instant::now();
            }
            return;
        }
        if !self.enabled() {
            return;
        }
        let per_shard = self.settings.capacity.div_ceil(SHARDS);
        if *len >= per_shard {
            *len = evict(shard, ttl, per_shard);
        }
        let tombstone = Entry {
            activation: None,
            min_epoch,
            cached_at: Instant::now(),
        };
        if shard
            .entry(cluster.to_owned())
            .or_default()
            .insert(grain.to_owned(), tombstone)
            .is_none()
        {
            *len += 1;
        }
    }

    /// Drops the kept answer about the grain, if any, and bars its epoch and older ones (the store
    /// said the grain has no activation now).
    pub fn forget_answer(&self, cluster: &str, grain: &str) {
        let kept = self.get(cluster, grain);
        if let Some(activation) = kept {
            self.forget(cluster, grain, activation.epoch + 1);
        }
    }

    /// How many answers are kept now.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .1
            })
            .sum()
    }
}

/// Makes room in a full shard: drops expired entries; if it is still full, answers, then
/// tombstones (they guard against stale answers, so they go last), until a tenth of it is free.
/// Returns the new length.
fn evict(shard: &mut Shard, ttl: Duration, per_shard: usize) -> usize {
    for grains in shard.values_mut() {
        grains.retain(|_, entry| entry.cached_at.elapsed() < ttl);
    }
    let mut len: usize = shard.values().map(HashMap::len).sum();
    let keep = per_shard - per_shard.div_ceil(10);
    for tombstones_too in [false, true] {
        for grains in shard.values_mut() {
            if len <= keep {
                break;
            }
            let surplus: Vec<String> = grains
                .iter()
                .filter(|(_, entry)| tombstones_too || entry.activation.is_some())
                .map(|(grain, _)| grain.clone())
                .take(len - keep)
                .collect();
            for grain in surplus {
                grains.remove(&grain);
                len -= 1;
            }
        }
    }
    shard.retain(|_, grains| !grains.is_empty());
    len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activation(grain: &str, epoch: i64) -> Activation {
        Activation {
            grain: grain.into(),
            silo: "10.0.0.1:1@1".into(),
            address: "10.0.0.1:1".into(),
            strategy: "random".into(),
            epoch,
            created_ms: 0,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn answers_expire_after_their_time_to_live_and_can_be_forgotten() {
        let cache = DirectoryCache::new(CacheSettings {
            ttl: Duration::from_secs(10),
            capacity: 100,
        });
        cache.put("c", &activation("user/a", 1));
        cache.put("c", &activation("user/b", 2));
        assert_eq!(cache.get("c", "user/a").map(|a| a.epoch), Some(1));
        assert_eq!(cache.get("other", "user/a"), None, "clusters are apart");
        cache.forget("c", "user/b", 3);
        assert_eq!(cache.get("c", "user/b"), None);
        cache.put("c", &activation("user/b", 2));
        assert_eq!(
            cache.get("c", "user/b"),
            None,
            "an answer older than the forgetting is not kept"
        );
        cache.forget("c", "user/b", 0);
        cache.put("c", &activation("user/b", 2));
        assert_eq!(
            cache.get("c", "user/b"),
            None,
            "a later, lower bar does not lower it"
        );
        cache.put("c", &activation("user/b", 3));
        assert_eq!(cache.get("c", "user/b").map(|a| a.epoch), Some(3));
        cache.forget("c", "user/b", 3);
        assert_eq!(
            cache.get("c", "user/b").map(|a| a.epoch),
            Some(3),
            "an answer at the bar stays"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            cache.get("c", "user/a"),
            None,
            "expired at its time to live"
        );
        assert_eq!(cache.get("c", "user/b"), None);
        assert_eq!(cache.len(), 0, "expired entries are dropped when read");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cache_stays_within_its_capacity() {
        let capacity = 160;
        let cache = DirectoryCache::new(CacheSettings {
            ttl: Duration::from_secs(10),
            capacity,
        });
        for i in 0..10 * capacity {
            cache.put("c", &activation(&format!("user/{i}"), i as i64));
            assert!(cache.len() <= capacity, "{} entries", cache.len());
        }
        assert!(
            cache.len() > capacity / 2,
            "eviction keeps most of a full cache"
        );
        let newest = format!("user/{}", 10 * capacity - 1);
        assert!(
            cache.get("c", &newest).is_some(),
            "the newest entry is kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_answer_is_forgotten_once_the_store_had_an_outage() {
        let cache = DirectoryCache::new(CacheSettings {
            ttl: Duration::from_secs(10),
            capacity: 100,
        });
        cache.put("c", &activation("user/a", 1));
        cache.enter_era(0);
        assert_eq!(cache.get("c", "user/a").map(|a| a.epoch), Some(1));
        cache.enter_era(1);
        assert_eq!(cache.get("c", "user/a"), None, "kept before the outage");
        assert_eq!(cache.len(), 0);
        cache.put("c", &activation("user/a", 2));
        cache.enter_era(1);
        assert_eq!(
            cache.get("c", "user/a").map(|a| a.epoch),
            Some(2),
            "kept since"
        );
    }

    #[tokio::test]
    async fn a_zero_time_to_live_turns_it_off() {
        let cache = DirectoryCache::new(CacheSettings {
            ttl: Duration::ZERO,
            capacity: 100,
        });
        cache.put("c", &activation("user/a", 1));
        assert_eq!(cache.get("c", "user/a"), None);
        assert_eq!(cache.len(), 0);
    }
}
