//! The oracle's use cases: the one place that combines the store, the clock, the RNG and the pure
//! domain. HTTP handlers (and anything else that drives the oracle) call these methods and only
//! translate inputs and outputs.

mod batcher;
mod connections;
mod credentials;
mod directory;
mod directory_cache;
mod distribution;
mod draining;
mod leases;
mod membership;
mod migrations;
mod movers;
mod preview;
mod rebalancing;
mod repartitioning;
mod sweeper;
mod webhook;

pub use credentials::{Credentials, IssuedKey, Unidentified};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use connections::{Connection, ConnectionExplanation};
pub use directory::{Outcome, Page, PlaceRequest, Placement};
pub use distribution::{Distribution, Flow, SiloShare};
pub use draining::{DrainProgress, Drained};
pub use membership::{SiloListing, SiloSnapshot};
pub use migrations::{MigrationListing, Moved};
pub use movers::DriverStep;
pub use preview::Preview;
pub use rebalancing::{RebalancerCycle, RebalancerStatus};
pub use repartitioning::{EdgesTaken, RepartitionerRound, RepartitionerStatus};
pub use webhook::MAX_ANSWER_BYTES as MAX_WEBHOOK_ANSWER_BYTES;

use crate::cluster::{ClusterName, GrainId, Heartbeat, HeartbeatRejection, SiloId};
use crate::placement::webhook_hosts::WebhookHosts;
use crate::placement::{LocalDeltas, PlacementError};
use crate::policy::Policy;
use crate::store::{Located, Membership, NewActivation, Proposal, Registration, Store, StoreError};
use crate::telemetry::metric;
use crate::validation::Invalid;
use batcher::Batcher;
pub use directory_cache::CacheSettings;
use directory_cache::DirectoryCache;

/// Most grains one batched lookup or registration carries.
const MAX_BATCH: usize = 1_000;
/// Batched store calls of one kind in flight at once. Fewer in flight means fuller batches (fewer
/// statements and commits per call) but more waiting behind the one under way. Measured on two
/// cores with bench/run.sh's new-grain scenario (64 connections), after placements became one
/// statement per batch: 2 gave 10–14k placements/s against 10–11k for 4 (8 and 15 grains per
/// commit); 1 varied from 13k to 17k with a p99 of up to 41 ms.
const BATCHES_IN_FLIGHT: usize = 2;
/// Most calls one batcher holds waiting for the store; beyond it a call is refused at once (503
/// with Retry-After) instead of queueing without bound while the store is slow.
const MAX_QUEUED_CALLS: usize = 20_000;
/// Most clusters whose membership this replica keeps cached; expired reads are dropped first.
const MAX_CACHED_MEMBERSHIPS: usize = 1_024;
/// How long a placement may decide against a membership (and policy) read by an earlier placement. Correctness
/// does not depend on it: registration re-checks the chosen silo in the same statement that
/// inserts, and a placement that finds its silo gone decides again on a fresh read. It only bounds
/// how stale the load figures behind a decision may be (Orleans publishes them once a second).
const MEMBERSHIP_MAX_AGE: Duration = Duration::from_millis(250);
/// While one caller reads a cluster's membership afresh, the others go on deciding with the
/// previous read if it is younger than this, instead of waiting for the store.
const MEMBERSHIP_STALE_LIMIT: Duration = Duration::from_secs(1);

/// Why a use case could not be carried out.
#[derive(Debug, thiserror::Error)]
pub enum OracleError {
    #[error("cluster `{0}` is unknown: clusters come into being with their first heartbeat")]
    ClusterNotFound(String),
    #[error("silo `{silo}` is not a member of cluster `{cluster}`")]
    SiloNotFound { cluster: String, silo: String },
    #[error("silo `{0}` is dead: its activations were released, so there is nothing to drain")]
    SiloDead(String),
    #[error("grain `{0}` has no activation")]
    ActivationNotFound(String),
    #[error("grain `{grain}` is now activation {epoch} on silo `{silo}`, not the one named; nothing was removed")]
    ActivationElsewhere {
        grain: String,
        silo: String,
        epoch: i64,
    },
    #[error("pool `{pool}` does not exist in cluster `{cluster}`")]
    PoolNotFound { cluster: String, pool: String },
    #[error("pool `{pool}` has no member that is active and alive")]
    NoAvailableNode { pool: String },
    #[error("pool `{pool}` has no available member with an address of the family asked for")]
    NoNodeOfFamily { pool: String },
    #[error("migration {0} is not open: completed, failed or cancelled already, or never issued")]
    MigrationNotFound(i64),
    #[error("migration {id} was not applied and is cancelled: {why}")]
    MigrationRefused { id: i64, why: String },
    #[error("this replica's lease on the cluster ran out while the work was under way; nothing was written, retry")]
    LeaseExpired,
    #[error("replica `{holder}` runs this cluster's background work (its lease expires at {expires_at_ms} ms); send the request again, to it or after the lease moves")]
    LeaseHeldElsewhere { holder: String, expires_at_ms: i64 },
    #[error("the policy is at version {current}, not the version named in If-Match; read it again and reapply the change")]
    PolicyVersionMismatch { current: i64 },
    /// Input refused by a rule of this replica's configuration (not of the schema), each field
    /// named: a webhook URL whose host is not allowed.
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error(transparent)]
    HeartbeatRejected(#[from] HeartbeatRejection),
    #[error(transparent)]
    Unplaceable(#[from] PlacementError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The oracle: shared by every request of one process.
pub struct Oracle {
    store: Arc<dyn Store>,
    /// One seeded generator for every random decision of this process. Seeded from the OS in
    /// production; with a seed, a given sequence of requests gets the same decisions every run.
    rng: Mutex<ChaCha8Rng>,
    lookups: Batcher<(ClusterName, GrainId), Option<Located>>,
    registrations: Batcher<(ClusterName, NewActivation), Registration>,
    proposals: Batcher<(ClusterName, Proposal), Registration>,
    heartbeats: Batcher<(ClusterName, Heartbeat), membership::HeartbeatAnswer>,
    /// Recent answers for placements of known grains (see [`directory_cache`]).
    directory_cache: DirectoryCache,
    memberships: Mutex<HashMap<ClusterName, (Instant, Arc<Membership>)>>,
    /// One membership read per cluster at a time (see `membership_for_placement`).
    refresh_gates: Mutex<HashMap<ClusterName, Arc<tokio::sync::Mutex<()>>>>,
    /// Bumped whenever this replica changes membership, so a read that was under way during the
    /// change is not cached as if it came after it.
    membership_changes: AtomicU64,
    /// What this replica placed on each silo since its last heartbeat, per cluster
    /// (`activation_count` adds it to the silo's reported figures).
    deltas: Mutex<HashMap<ClusterName, LocalDeltas>>,
    /// For the `webhook` strategy; pools connections to the operators' endpoints. Follows no
    /// redirects: a redirect would lead to a host the allow-list never judged.
    http: reqwest::Client,
    /// The hosts webhook URLs may name: checked when a policy is written and before every call.
    webhook_hosts: WebhookHosts,
    pool_states: connections::PoolStates,
    /// This replica's name and lease length in cluster leases.
    replica: Replica,
    /// The token of each cluster lease this replica last held, to count takeovers.
    lease_tokens: Mutex<HashMap<ClusterName, i64>>,
    /// The repartitioner state this replica last stored for each cluster, with the lease token
    /// it was stored under: while that token is still the lease's, no one else has written it,
    /// so the driver's every tick need not read and parse it again.
    repartitioner_states: Mutex<HashMap<ClusterName, (i64, crate::repartitioner::Repartitioner)>>,
    /// One mover of a cluster at a time on this replica (see `mover_gate`).
    mover_gates: Mutex<HashMap<ClusterName, Arc<tokio::sync::Mutex<()>>>>,
    /// The admin token and cluster keys ([`credentials`]); none in open mode.
    credentials: Credentials,
    /// Deaths the sweep defers because of a store outage (see [`sweeper::DeferredDeaths`]).
    deferred_deaths: Mutex<sweeper::DeferredDeaths>,
}

/// A [`Batcher`] in front of one batched store operation, with the oracle's batch limits.
fn store_batcher<I, O, F, Fut>(store: &Arc<dyn Store>, run: F) -> Batcher<I, O>
where
    I: Send + 'static,
    O: Send + 'static,
    F: Fn(Arc<dyn Store>, Vec<I>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
{
    let store = store.clone();
    Batcher::spawn(
        MAX_BATCH,
        BATCHES_IN_FLIGHT,
        MAX_QUEUED_CALLS,
        move |calls| run(store.clone(), calls),
    )
}

/// Who this replica is to cluster leases.
#[derive(Debug, Clone)]
pub struct Replica {
    pub id: String,
    pub lease_ttl_ms: crate::clock::Millis,
}

impl Default for Replica {
    fn default() -> Self {
        Self {
            id: format!("oracle-{}", std::process::id()),
            lease_ttl_ms: 10_000,
        }
    }
}

impl Oracle {
    /// Builds the oracle and starts its batching tasks (so it must be called inside a Tokio
    /// runtime). Time comes from the store: what it stamps and judges uses the store's clock.
    pub fn new(store: Arc<dyn Store>, seed: Option<u64>) -> Self {
        let rng = match seed {
            Some(seed) => ChaCha8Rng::seed_from_u64(seed),
            None => ChaCha8Rng::from_entropy(),
        };
        let lookups = store_batcher(&store, directory::lookup_batch);
        let registrations = store_batcher(&store, directory::register_batch);
        let proposals = store_batcher(&store, directory::propose_batch);
        let heartbeats = store_batcher(&store, membership::heartbeat_batch);
        Self {
            store,
            rng: Mutex::new(rng),
            lookups,
            registrations,
            proposals,
            heartbeats,
            directory_cache: DirectoryCache::new(CacheSettings::default()),
            memberships: Mutex::default(),
            refresh_gates: Mutex::default(),
            membership_changes: AtomicU64::new(0),
            deltas: Mutex::default(),
            http: webhook::client(),
            webhook_hosts: WebhookHosts::loopback_only(),
            pool_states: Mutex::default(),
            replica: Replica::default(),
            lease_tokens: Mutex::default(),
            repartitioner_states: Mutex::default(),
            mover_gates: Mutex::default(),
            credentials: Credentials::default(),
            deferred_deaths: Mutex::default(),
        }
    }

    /// Who this replica is to cluster leases.
    pub fn replica(&self) -> &Replica {
        &self.replica
    }

    /// The same oracle, known to cluster leases as `replica`.
    pub fn with_replica(mut self, replica: Replica) -> Self {
        self.replica = replica;
        self
    }

    /// The same oracle, keeping recent directory answers as `settings` say.
    pub fn with_directory_cache(mut self, settings: CacheSettings) -> Self {
        self.directory_cache = DirectoryCache::new(settings);
        self
    }

    /// The same oracle, letting the `webhook` strategy call only `hosts`. Without it, only
    /// loopback hosts are allowed, as in open mode: an oracle built in-process (tests, tools) can
    /// reach a local endpoint and nothing else.
    pub fn with_webhook_hosts(mut self, hosts: WebhookHosts) -> Self {
        self.webhook_hosts = hosts;
        self
    }

    pub fn store(&self) -> &dyn Store {
        self.store.as_ref()
    }

    /// The store, shared: another oracle on it acts as another replica.
    pub fn store_handle(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Takes back tallied decisions that did not become placements (one per silo id listed): the
    /// grain existed, or its registration failed. Decisions are tallied when made, so placements
    /// still in flight already count for the decisions made meanwhile.
    fn untally(
        &self,
        cluster: &ClusterName,
        view: &crate::placement::ClusterView,
        silos: &[SiloId],
    ) {
        if silos.is_empty() {
            return;
        }
        self.with_rng_and_deltas(cluster, |_, deltas| {
            for silo in silos {
                if let Some(record) = view.find(silo) {
                    deltas.remove(record, 1);
                }
            }
        });
    }

    /// Runs `f` with the RNG and the cluster's placement tally, both held for its duration (always
    /// locked in this order). Tallies exist only for clusters that exist (a decision needs a
    /// membership read), and [`LocalDeltas::retain_silos`] keeps each to the silos of a view.
    fn with_rng_and_deltas<T>(
        &self,
        cluster: &ClusterName,
        f: impl FnOnce(&mut ChaCha8Rng, &mut LocalDeltas) -> T,
    ) -> T {
        let mut rng = self
            .rng
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut deltas = self
            .deltas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut rng, deltas.entry(cluster.clone()).or_default())
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
    async fn membership_for_placement(
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
        let membership = Arc::new(self.read_membership(cluster).await?);
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
    async fn read_membership(&self, cluster: &ClusterName) -> Result<Membership, OracleError> {
        self.store
            .membership(cluster)
            .await
            .inspect_err(|_| metric::store_error("membership"))?
            .ok_or_else(|| OracleError::ClusterNotFound(cluster.to_string()))
    }

    /// Drops this replica's cached membership after it changed it, so its next decision sees the
    /// change (other replicas see it within [`MEMBERSHIP_MAX_AGE`]).
    fn forget_membership(&self, cluster: &ClusterName) {
        let mut cache = self.cached_memberships();
        self.membership_changes.fetch_add(1, Ordering::SeqCst);
        cache.remove(cluster);
    }

    /// The cluster's policy and its version.
    pub async fn policy(&self, cluster: &ClusterName) -> Result<(Policy, i64), OracleError> {
        let membership = self.read_membership(cluster).await?;
        Ok((
            Arc::unwrap_or_clone(membership.policy),
            membership.policy_version,
        ))
    }

    /// Replaces the cluster's policy if it is still at version `expected` (`None`: any), creating
    /// the cluster if needed. Returns the new version. Other replicas decide with it within
    /// [`MEMBERSHIP_MAX_AGE`]; this one at once. A webhook URL whose host this replica may not
    /// call is refused here, in the use case, so no way of writing a policy can skip the check.
    pub async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<i64, OracleError> {
        policy.validate_webhook_hosts(&self.webhook_hosts)?;
        let written = self
            .store
            .put_policy(cluster, policy, expected)
            .await
            .inspect_err(|_| metric::store_error("put_policy"))?;
        self.forget_membership(cluster);
        match written {
            Ok(version) => {
                tracing::info!(%cluster, version, "placement policy changed");
                Ok(version)
            }
            Err(current) => Err(OracleError::PolicyVersionMismatch { current }),
        }
    }
}
