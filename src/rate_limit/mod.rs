//! Per-cluster rate limits on the three calls a cluster makes at volume: heartbeats, placements
//! (counted in grains) and edge reports (counted in edges).
//!
//! They keep one misbehaving cluster (a retry storm, a runaway batch job) from taking a replica's
//! capacity from every other cluster. The defaults sit far above what a legitimate cluster does
//! (see the settings in [`crate::config::Config`]), so they only ever stop a cluster that has
//! gone wrong. Limits are per replica: with `n` replicas behind a load balancer a cluster may send
//! up to `n` times as much in all.
//!
//! The arithmetic is the pure [`bucket`]; this is the shell around it: one bucket per cluster and
//! kind, the clock, the bound on how many buckets are kept, and the metric.

pub mod admission;
pub mod bucket;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};

use crate::clock::{Clock, Millis};
use crate::cluster::ClusterName;
use crate::telemetry::metric;

use bucket::{Bucket, Decision};

/// What is limited, each with its own setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Heartbeats,
    Placements,
    Edges,
}

impl Kind {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Heartbeats => "heartbeats",
            Self::Placements => "placements",
            Self::Edges => "edges",
        }
    }

    /// The setting an operator raises when the limit is too low.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Heartbeats => "ORACLE_RATE_LIMIT_HEARTBEATS",
            Self::Placements => "ORACLE_RATE_LIMIT_PLACEMENTS",
            Self::Edges => "ORACLE_RATE_LIMIT_EDGES",
        }
    }

    /// What one token stands for, in words.
    fn unit(self) -> &'static str {
        match self {
            Self::Heartbeats => "heartbeats",
            Self::Placements => "grains placed",
            Self::Edges => "edges reported",
        }
    }
}

/// Each kind's rate, per second per cluster on one replica; 0 means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rates {
    pub heartbeats: u32,
    pub placements: u32,
    pub edges: u32,
}

impl Rates {
    /// The defaults of `ORACLE_RATE_LIMIT_*` (why these: see [`crate::config::Config`]).
    pub const DEFAULT: Self = Self {
        heartbeats: 10_000,
        placements: 100_000,
        edges: 200_000,
    };

    /// No limit at all.
    pub const UNLIMITED: Self = Self {
        heartbeats: 0,
        placements: 0,
        edges: 0,
    };
}

/// A request refused because its cluster is over a rate limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cluster `{cluster}` is over its limit of {per_second} {unit} per second on this replica ({setting}); retry after the delay in Retry-After, or raise {setting} if this rate is legitimate", unit = kind.unit(), setting = kind.setting())]
pub struct RateLimited {
    pub kind: Kind,
    pub cluster: ClusterName,
    pub per_second: u32,
    /// How long until the same request would be admitted, if nothing else is meanwhile.
    pub retry_after_ms: u64,
}

/// Every cluster's buckets, shared by all handlers of a replica.
pub struct RateLimits {
    heartbeats: ClusterBuckets,
    placements: ClusterBuckets,
    edges: ClusterBuckets,
    clock: Arc<dyn Clock>,
}

impl RateLimits {
    /// `max_clusters` bounds the buckets kept per kind (ORACLE_MAX_CLUSTERS: no more clusters can
    /// be live at once). `clock` is the replica's monotonic clock in production, a manual one in
    /// tests; only its differences matter.
    pub fn new(rates: Rates, max_clusters: usize, clock: Arc<dyn Clock>) -> Self {
        Self {
            heartbeats: ClusterBuckets::new(rates.heartbeats, max_clusters),
            placements: ClusterBuckets::new(rates.placements, max_clusters),
            edges: ClusterBuckets::new(rates.edges, max_clusters),
            clock,
        }
    }

    /// One heartbeat of `cluster`, admitted or refused.
    pub fn heartbeat(&self, cluster: &ClusterName) -> Result<(), RateLimited> {
        self.admit(Kind::Heartbeats, cluster, 1)
    }

    /// `grains` placements for `cluster` (a batch counts each grain listed), admitted or refused
    /// together.
    pub fn placements(&self, cluster: &ClusterName, grains: usize) -> Result<(), RateLimited> {
        self.admit(Kind::Placements, cluster, grains)
    }

    /// An edge report of `cluster` listing `edges` edges, admitted or refused.
    pub fn edges(&self, cluster: &ClusterName, edges: usize) -> Result<(), RateLimited> {
        self.admit(Kind::Edges, cluster, edges)
    }

    /// Admits `cost` tokens of `kind` for `cluster` now, or refuses the whole request (and counts
    /// the refusal in `oracle_rate_limited_total{kind}`).
    pub fn admit(&self, kind: Kind, cluster: &ClusterName, cost: usize) -> Result<(), RateLimited> {
        let buckets = match kind {
            Kind::Heartbeats => &self.heartbeats,
            Kind::Placements => &self.placements,
            Kind::Edges => &self.edges,
        };
        let Some(rate) = buckets.rate else {
            return Ok(());
        };
        let cost = u64::try_from(cost).unwrap_or(u64::MAX);
        match buckets.admit(rate, cluster, cost, self.clock.now_ms()) {
            Decision::Admitted => Ok(()),
            Decision::Denied { retry_after_ms } => {
                metric::rate_limited(kind.as_str());
                Err(RateLimited {
                    kind,
                    cluster: cluster.clone(),
                    per_second: rate.get(),
                    retry_after_ms,
                })
            }
        }
    }
}

/// How often, at most, a full table is searched for idle buckets. Between searches a cluster that
/// finds no room is admitted unlimited (see [`ClusterBuckets::admit`]).
const SWEEP_INTERVAL_MS: Millis = 1_000;

/// One kind's buckets by cluster name.
struct ClusterBuckets {
    /// None: unlimited, no buckets kept.
    rate: Option<NonZeroU32>,
    max_buckets: usize,
    table: Mutex<Table>,
}

struct Table {
    /// Only buckets that are not full: a full bucket is the same as none.
    buckets: HashMap<String, Bucket>,
    /// When a full table may next be searched for buckets that have filled up.
    next_sweep_ms: Millis,
}

impl ClusterBuckets {
    fn new(per_second: u32, max_buckets: usize) -> Self {
        Self {
            rate: NonZeroU32::new(per_second),
            max_buckets,
            table: Mutex::new(Table {
                buckets: HashMap::new(),
                next_sweep_ms: Millis::MIN,
            }),
        }
    }

    /// A cluster without a bucket has a full one, so a new bucket is only stored when the request
    /// takes something from it. The table is bounded: when it holds `max_buckets`, the buckets
    /// that have filled up since (idle clusters) are dropped, which changes no answer. If every
    /// one is still in use, the request is admitted without a bucket: this only happens with more
    /// busy cluster names than ORACLE_MAX_CLUSTERS, and a limit that fails open for them is better
    /// than unbounded memory or refusing clusters that did nothing wrong.
    fn admit(
        &self,
        rate: NonZeroU32,
        cluster: &ClusterName,
        cost: u64,
        now_ms: Millis,
    ) -> Decision {
        // A panic elsewhere while holding the lock leaves whole buckets behind; carry on with them.
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(bucket) = table.buckets.get_mut(cluster.as_str()) {
            return bucket.admit(rate, cost, now_ms);
        }
        if table.buckets.len() >= self.max_buckets && now_ms >= table.next_sweep_ms {
            table
                .buckets
                .retain(|_, bucket| !bucket.is_full(rate, now_ms));
            table.next_sweep_ms = now_ms.saturating_add(SWEEP_INTERVAL_MS);
        }
        let mut bucket = Bucket::full(rate, now_ms);
        let decision = bucket.admit(rate, cost, now_ms);
        if table.buckets.len() < self.max_buckets && !bucket.is_full(rate, now_ms) {
            table.buckets.insert(cluster.as_str().to_owned(), bucket);
        }
        decision
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .buckets
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn every_kind_is_exported_at_zero() {
        let kinds: Vec<&str> = [Kind::Heartbeats, Kind::Placements, Kind::Edges]
            .iter()
            .map(|kind| kind.as_str())
            .collect();
        assert_eq!(kinds, metric::RATE_LIMITED_KINDS);
    }

    fn cluster(name: &str) -> ClusterName {
        ClusterName::parse(name).unwrap()
    }

    fn limits(rates: Rates, max_clusters: usize) -> (RateLimits, ManualClock) {
        let clock = ManualClock::starting_at(1_000_000);
        (
            RateLimits::new(rates, max_clusters, Arc::new(clock.clone())),
            clock,
        )
    }

    const TWO_HEARTBEATS: Rates = Rates {
        heartbeats: 2,
        ..Rates::UNLIMITED
    };

    #[test]
    fn each_cluster_has_its_own_bucket_and_each_kind_its_own_setting() {
        let (limits, clock) = limits(TWO_HEARTBEATS, 100);
        let (a, b) = (cluster("a"), cluster("b"));
        limits.admit(Kind::Heartbeats, &a, 2).unwrap();
        let refused = limits.admit(Kind::Heartbeats, &a, 1).unwrap_err();
        assert_eq!(
            (refused.per_second, refused.retry_after_ms, &refused.cluster),
            (2, 500, &a)
        );
        let detail = refused.to_string();
        assert!(detail.contains("`a`") && detail.contains("ORACLE_RATE_LIMIT_HEARTBEATS"));
        limits.admit(Kind::Heartbeats, &b, 2).unwrap();
        // Placements and edges are unlimited here.
        limits.admit(Kind::Placements, &a, 1_000_000).unwrap();
        limits.admit(Kind::Edges, &a, usize::MAX).unwrap();
        clock.advance_ms(500);
        limits.admit(Kind::Heartbeats, &a, 1).unwrap();
    }

    #[test]
    fn only_buckets_in_use_are_kept_and_never_more_than_the_clusters_allowed() {
        let (limits, clock) = limits(TWO_HEARTBEATS, 2);
        // A request that leaves its bucket full (it cost nothing) keeps no bucket.
        limits.admit(Kind::Heartbeats, &cluster("idle"), 0).unwrap();
        assert_eq!(limits.heartbeats.tracked(), 0);
        limits.admit(Kind::Heartbeats, &cluster("a"), 2).unwrap();
        limits.admit(Kind::Heartbeats, &cluster("b"), 2).unwrap();
        assert_eq!(limits.heartbeats.tracked(), 2);
        // The table is full of busy buckets: a third cluster is admitted without one.
        limits.admit(Kind::Heartbeats, &cluster("c"), 2).unwrap();
        limits.admit(Kind::Heartbeats, &cluster("c"), 2).unwrap();
        assert_eq!(limits.heartbeats.tracked(), 2);
        assert!(limits.admit(Kind::Heartbeats, &cluster("a"), 1).is_err());
        // A second later a and b have filled up: they make room, and c is limited again.
        clock.advance_ms(1_000);
        limits.admit(Kind::Heartbeats, &cluster("c"), 2).unwrap();
        assert!(limits.admit(Kind::Heartbeats, &cluster("c"), 1).is_err());
        assert_eq!(limits.heartbeats.tracked(), 1);
    }

    #[test]
    fn zero_means_unlimited_and_keeps_nothing() {
        let (limits, _) = limits(Rates::UNLIMITED, 10);
        for _ in 0..1_000 {
            limits
                .admit(Kind::Placements, &cluster("a"), 1_000)
                .unwrap();
        }
        assert_eq!(limits.placements.tracked(), 0);
    }
}
