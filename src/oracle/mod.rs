//! The oracle's use cases: the one place that combines the store, the clock, the RNG and the pure
//! domain. HTTP handlers (and anything else that drives the oracle) call these methods and only
//! translate inputs and outputs.
//!
//! The use cases come in components, each holding its own state and handed to the handlers that
//! use it: [`Members`] (heartbeats, membership, the sweep), [`Policies`] (each cluster's policy),
//! [`Directory`] (placement, lookups, deactivations, previews, distributions), [`Movers`] (leases,
//! migrations, drains, the rebalancer, the repartitioner), [`Connections`] (pools) and
//! [`Credentials`] (keys and callers). They share the store, the membership reads ([`views`]) and
//! one seeded RNG; [`Oracle`] builds them together. None of them hands the store out.

mod batcher;
mod connections;
mod credentials;
mod directory;
mod members;
mod movers;
pub mod outside_waits;
mod ownership;
mod policies;
mod snapshot;
mod views;

use std::sync::{Arc, Mutex};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

pub use connections::{Connection, ConnectionExplanation, Connections};
pub use credentials::{scopes_of, AdminCredentials, Credentials, IssuedKey, Unidentified};
pub use directory::{
    CacheSettings, Directory, Distribution, Flow, Outcome, Page, PlaceRequest, Placement, Preview,
    SiloShare, MAX_WEBHOOK_ANSWER_BYTES,
};
pub use members::{Members, SiloListing, Swept};
pub use movers::{
    Drained, DriverStep, EdgesTaken, MigrationListing, Moved, Movers, RebalancerCycle,
    RebalancerStatus, RepartitionerRound, RepartitionerStatus,
};
pub use ownership::{Ownership, Refreshed};
pub use policies::Policies;
pub use snapshot::{DrainProgress, SiloSnapshot};

use crate::cluster::HeartbeatRejection;
use crate::placement::webhook_hosts::WebhookHosts;
use crate::placement::PlacementError;
use crate::store::{Store, StoreError};
use crate::validation::Invalid;
use batcher::Batcher;
use views::ClusterViews;

/// Most grains one batched lookup or registration carries.
const MAX_BATCH: usize = 1_000;
/// Batched store calls of one kind in flight at once. Fewer in flight means fuller batches (fewer
/// statements and commits per call) but more waiting behind the one under way, and one batch
/// stuck behind a lock would hold up every call of its kind: two may run, the second only as the
/// overlap delays below allow.
const BATCHES_IN_FLIGHT: usize = 2;
/// Reads (directory lookups) start beside one another at once: they lock and commit nothing, so
/// two in flight keep the oracle and the database both busy. Measured with the writes' delay too,
/// known grains lost a fifth of their rate and their p99 rose past 5 ms.
const READS_OVERLAP_AFTER: std::time::Duration = std::time::Duration::ZERO;
/// Writes (heartbeats, registrations, proposals) start beside one another only once the latest
/// batch still under way has been out this long: batches that come back quicker are waited for,
/// so the calls that pile up behind one ride the next (fewer statements, commits and row locks
/// per call), and a batch stuck behind a lock or a slow store holds the rest up for no longer
/// than this.
const WRITES_OVERLAP_AFTER: std::time::Duration = std::time::Duration::from_millis(5);
/// Most calls one batcher holds waiting for the store; beyond it a call is refused at once (503
/// with Retry-After) instead of queueing without bound while the store is slow.
const MAX_QUEUED_CALLS: usize = 20_000;

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
    #[error("migration {0} is not open, and no silo completed or failed it within the last hour: the oracle cancelled it (it no longer applied), it ended longer ago, or it was never issued")]
    MigrationNotFound(i64),
    /// The other call ended the migration already (a retry of the same call gets its first
    /// answer instead).
    #[error("migration {id} was {how}")]
    MigrationEnded { id: i64, how: String },
    #[error("migration {id} was not applied and is cancelled: {why}")]
    MigrationRefused { id: i64, why: String },
    #[error("this replica's lease on the cluster ran out while the work was under way; nothing was written, retry")]
    LeaseExpired,
    #[error("replica `{holder}` took this cluster's lease over while the request ran (its lease expires at {expires_at_ms} ms); send the request again")]
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

/// Every component of one replica, built together on one store. Cheap to clone (each component
/// is shared); the HTTP state, the background tasks and the DNS listener each take what they use.
#[derive(Clone)]
pub struct Oracle {
    pub members: Arc<Members>,
    pub policies: Arc<Policies>,
    pub directory: Arc<Directory>,
    pub movers: Arc<Movers>,
    pub ownership: Arc<Ownership>,
    pub connections: Arc<Connections>,
    pub credentials: Arc<Credentials>,
    pub readiness: Arc<Readiness>,
}

/// How a replica's components are set up; [`Default`] is an open-mode replica seeded from the OS.
#[derive(Debug, Clone, Default)]
pub struct OracleSettings {
    /// Seeds every random decision of this process: with one, a given sequence of requests gets
    /// the same decisions every run. `None` seeds from the OS (production).
    pub seed: Option<u64>,
    /// Who this replica is to cluster leases.
    pub replica: Replica,
    /// Recent directory answers kept for placements of known grains.
    pub directory_cache: CacheSettings,
    /// The hosts webhook URLs may name. The default allows loopback hosts only, as in open mode.
    pub webhook_hosts: WebhookHosts,
    /// The admin token and how keys are checked; `None` is open mode.
    pub credentials: Option<AdminCredentials>,
}

impl Oracle {
    /// Builds every component on `store` and starts their batching tasks (so it must be called
    /// inside a Tokio runtime). Time comes from the store: what it stamps and judges uses the
    /// store's clock.
    pub fn new(store: Arc<dyn Store>, settings: OracleSettings) -> Self {
        let rng: SharedRng = Arc::new(Mutex::new(match settings.seed {
            Some(seed) => ChaCha8Rng::seed_from_u64(seed),
            None => ChaCha8Rng::from_entropy(),
        }));
        let views = Arc::new(ClusterViews::new(store.clone()));
        let cache = Arc::new(directory::DirectoryCache::new(settings.directory_cache));
        Self {
            members: Arc::new(Members::new(store.clone(), views.clone())),
            policies: Arc::new(Policies::new(
                store.clone(),
                views.clone(),
                settings.webhook_hosts.clone(),
            )),
            directory: Arc::new(Directory::new(
                store.clone(),
                views.clone(),
                rng.clone(),
                cache.clone(),
                settings.webhook_hosts,
            )),
            movers: Arc::new(Movers::new(
                store.clone(),
                views.clone(),
                rng,
                cache,
                settings.replica.clone(),
            )),
            ownership: Arc::new(Ownership::new(store.clone(), settings.replica)),
            connections: Arc::new(Connections::new(store.clone(), views)),
            credentials: Arc::new(Credentials::new(store.clone(), settings.credentials)),
            readiness: Arc::new(Readiness { store }),
        }
    }
}

/// Whether the store can serve, for `/readyz` (the store itself stays inside the components).
pub struct Readiness {
    store: Arc<dyn Store>,
}

impl Readiness {
    /// `"postgres"` or `"memory"`.
    pub fn store_kind(&self) -> &'static str {
        self.store.kind()
    }

    /// The database server the store reaches, as its last new connection found it.
    pub fn database_server(&self) -> Option<crate::store::DatabaseServer> {
        self.store.database_server()
    }

    /// Succeeds when the store answers (and takes writes: see `Store::ping`); the outcome is
    /// `oracle_ready`.
    pub async fn check(&self) -> Result<(), StoreError> {
        let checked = self.store.ping().await;
        crate::telemetry::metric::ready(checked.is_ok());
        checked
    }
}

/// One seeded generator for every random decision of the process (placements, drain plans, the
/// repartitioner), shared so that a seed fixes them all, in the order they are made.
pub(crate) type SharedRng = Arc<Mutex<ChaCha8Rng>>;

/// Locks the shared RNG (a panic elsewhere leaves it usable).
fn lock_rng(rng: &SharedRng) -> std::sync::MutexGuard<'_, ChaCha8Rng> {
    rng.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A [`Batcher`] in front of one batched store operation, with the oracle's batch limits.
fn store_batcher<I, O, F, Fut>(
    store: &Arc<dyn Store>,
    overlap_after: std::time::Duration,
    run: F,
) -> Batcher<I, O>
where
    I: Send + 'static,
    O: Send + 'static,
    F: Fn(Arc<dyn Store>, Vec<I>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
{
    let store = store.clone();
    let limits = batcher::Limits {
        max_batch: MAX_BATCH,
        max_in_flight: BATCHES_IN_FLIGHT,
        overlap_after,
        max_queued: MAX_QUEUED_CALLS,
    };
    Batcher::spawn(limits, move |calls| run(store.clone(), calls))
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
