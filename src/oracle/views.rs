//! The membership reads the components decide on: each cluster's live silos and policy, read
//! from the store and kept for a moment so that concurrent placements share one read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::OracleError;
use crate::cluster::ClusterName;
use crate::store::{Membership, Store};
use crate::telemetry::metric;

/// Most clusters whose membership this replica keeps cached; expired reads are dropped first.
pub(super) const MAX_CACHED_MEMBERSHIPS: usize = 1_024;
/// How long a placement may decide against a membership (and policy) read by an earlier
/// placement (up to [`MEMBERSHIP_STALE_LIMIT`] while another caller refreshes it). Correctness
/// does not depend on it: registration re-checks the chosen silo in the same statement that
/// inserts, and a placement that finds its silo gone decides again on a fresh read. It only bounds
/// how stale the load figures behind a decision may be (Orleans publishes them once a second).
pub(super) const MEMBERSHIP_MAX_AGE: Duration = Duration::from_millis(250);
/// While one caller reads a cluster's membership afresh, the others go on deciding with the
/// previous read if it is younger than this, instead of waiting for the store.
const MEMBERSHIP_STALE_LIMIT: Duration = Duration::from_secs(1);

/// The cluster membership reads of one replica, shared by its components.
pub(super) struct ClusterViews {
    store: Arc<dyn Store>,
    memberships: Mutex<HashMap<ClusterName, (Instant, Arc<Membership>)>>,
    /// One membership read per cluster at a time (see [`Self::for_placement`]).
    refresh_gates: Mutex<HashMap<ClusterName, Arc<tokio::sync::Mutex<()>>>>,
    /// Bumped whenever this replica changes membership, so a read that was under way during the
    /// change is not cached as if it came after it.
    membership_changes: AtomicU64,
}

impl ClusterViews {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            memberships: Mutex::default(),
            refresh_gates: Mutex::default(),
            membership_changes: AtomicU64::new(0),
        }
    }

    fn cached_memberships(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<ClusterName, (Instant, Arc<Membership>)>> {
        self.memberships
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cluster's membership for a placement decision: a read at most [`MEMBERSHIP_MAX_AGE`]
    /// old, or — when `fresh` is asked for — one that started after this call. Says whether it is
    /// a read that started before this call (a decision that finds nothing fits on it tries again
    /// on a fresh one).
    ///
    /// One read per cluster at a time: callers that find the cache stale wait for one read instead
    /// of each making their own — or, while the previous read is younger than
    /// [`MEMBERSHIP_STALE_LIMIT`], decide on it without waiting. With 1,000 silos a read is about a
    /// megabyte of rows to decode, and 64 concurrent callers all missing at once measured as a
    /// 450 ms p99.
    pub(super) async fn for_placement(
        &self,
        cluster: &ClusterName,
        fresh: bool,
    ) -> Result<(Arc<Membership>, bool), OracleError> {
        let asked_at = Instant::now();
        if !fresh {
            if let Some((membership, read_at)) =
                self.cached_membership(cluster, None, MEMBERSHIP_MAX_AGE)
            {
                return Ok((membership, read_at < asked_at));
            }
        }
        let gate = self.refresh_gate(cluster);
        let _turn = match gate.try_lock() {
            Ok(turn) => turn,
            Err(_) => {
                // Another caller is reading: go on with the previous read while it is young
                // enough, so that only the caller refreshing waits for the store.
                if !fresh {
                    if let Some((membership, _)) =
                        self.cached_membership(cluster, None, MEMBERSHIP_STALE_LIMIT)
                    {
                        return Ok((membership, true));
                    }
                }
                gate.lock().await
            }
        };
        let newer_than = fresh.then_some(asked_at);
        if let Some((membership, read_at)) =
            self.cached_membership(cluster, newer_than, MEMBERSHIP_MAX_AGE)
        {
            return Ok((membership, read_at < asked_at));
        }
        let changes_before = self.membership_changes.load(Ordering::SeqCst);
        let read_at = Instant::now();
        let membership = Arc::new(self.read(cluster).await?);
        let mut cache = self.cached_memberships();
        if self.membership_changes.load(Ordering::SeqCst) == changes_before {
            if cache.len() >= MAX_CACHED_MEMBERSHIPS {
                cache.retain(|_, (at, _)| at.elapsed() < MEMBERSHIP_MAX_AGE);
            }
            if cache.len() < MAX_CACHED_MEMBERSHIPS {
                cache.insert(cluster.clone(), (read_at, membership.clone()));
            }
        }
        Ok((membership, false))
    }

    /// A cached read younger than `max_age` (and, when given, made after `newer_than`), judged as
    /// of now: the store's clock at the read plus the time since. With the instant of the read.
    fn cached_membership(
        &self,
        cluster: &ClusterName,
        newer_than: Option<Instant>,
        max_age: Duration,
    ) -> Option<(Arc<Membership>, Instant)> {
        let cache = self.cached_memberships();
        let (read_at, membership) = cache.get(cluster)?;
        let age = read_at.elapsed();
        if age >= max_age || newer_than.is_some_and(|after| *read_at < after) {
            return None;
        }
        let mut membership = Membership::clone(membership);
        let later = match self.store.local_now() {
            Some(now) => (now - membership.liveness.now).max(0),
            None => i64::try_from(age.as_millis()).unwrap_or(i64::MAX),
        };
        membership.liveness = membership.liveness.later_by(later);
        Some((Arc::new(membership), *read_at))
    }

    /// The cluster's refresh turn. Bounded: past [`MAX_CACHED_MEMBERSHIPS`] clusters, turns nobody
    /// holds are dropped (a caller naming clusters that do not exist cannot grow it).
    fn refresh_gate(&self, cluster: &ClusterName) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = self
            .refresh_gates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if gates.len() >= MAX_CACHED_MEMBERSHIPS && !gates.contains_key(cluster) {
            gates.retain(|_, gate| Arc::strong_count(gate) > 1);
        }
        gates.entry(cluster.clone()).or_default().clone()
    }

    /// The cluster's membership as stored now; unknown clusters are an error.
    pub(super) async fn read(&self, cluster: &ClusterName) -> Result<Membership, OracleError> {
        self.store
            .membership(cluster)
            .await
            .inspect_err(|_| metric::store_error("membership"))?
            .ok_or_else(|| OracleError::ClusterNotFound(cluster.to_string()))
    }

    /// Drops this replica's cached membership after it changed it, so its next decision sees the
    /// change (other replicas see it within [`MEMBERSHIP_MAX_AGE`], or [`MEMBERSHIP_STALE_LIMIT`]
    /// while one of their callers refreshes it).
    pub(super) fn forget(&self, cluster: &ClusterName) {
        let mut cache = self.cached_memberships();
        self.membership_changes.fetch_add(1, Ordering::SeqCst);
        cache.remove(cluster);
    }
}
