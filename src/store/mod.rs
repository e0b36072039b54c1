//! The store interface: membership and the grain directory.
//!
//! Two implementations pass one behavioural suite (`tests/api/store_suite.rs`): [`postgres`], the
//! production store that any number of replicas share, and [`memory`], an in-process store for first
//! runs and demos. The store keeps state and enforces the invariants that need atomicity — one
//! directory entry per grain, registration only on a live silo, release of a dead silo's entries —
//! and leaves every decision to the domain.
//!
//! Time is the store's: every stamp and every liveness judgement uses one clock ([`StoreTime`]),
//! the database's in production, so replicas whose clocks disagree still agree on who is alive.

pub mod health;
pub mod memory;
pub mod postgres;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use utoipa::ToSchema;

use crate::clock::{Clock, Millis};
use crate::cluster::{
    ClusterName, GrainId, HeartbeatRejection, Liveness, PoolName, SiloId, SiloRecord, SiloStatus,
};
use crate::connect::Pool;
use crate::placement::ClusterView;
use crate::policy::Policy;

/// How long a dead silo stays listed (status `dead`) before its record is dropped. Its id stays
/// spent: a compact record of the newest dead generation at its address remains (see
/// [`SiloId::incarnation`]).
pub const DEAD_SILO_RETENTION_MS: Millis = 60 * 60 * 1000;

/// Most directory entries one statement releases. A dead silo's entries go in chunks of this size
/// (the first with its death, the rest in the background), so releasing a silo with 100,000 grains
/// never holds one long statement inside a request's timeout.
pub const RELEASE_CHUNK: u32 = 5_000;

/// Where the store's time comes from.
#[derive(Clone)]
pub enum StoreTime {
    /// The database's clock (`oracle_now_ms()`), read by each statement: one clock for every
    /// replica. Postgres only.
    Database,
    /// An injected clock: the embedded store's (one process, one clock) and tests'.
    Clock(Arc<dyn Clock>),
}

impl std::fmt::Debug for StoreTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreTime::Database => f.write_str("Database"),
            StoreTime::Clock(clock) => write!(f, "Clock(now = {})", clock.now_ms()),
        }
    }
}

/// What both stores are told at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSettings {
    /// The TTL a new cluster starts with (and keeps unless its policy names another). Stored with
    /// the cluster, so replicas configured differently still judge it alike.
    pub default_silo_ttl_ms: Millis,
    /// Most clusters; creating one more is refused.
    pub max_clusters: u64,
    /// Most silos that are not dead in one cluster; a new silo beyond it is refused until one dies
    /// or leaves.
    pub max_silos_per_cluster: u64,
}

impl StoreSettings {
    /// The defaults, with this TTL (tests and examples).
    pub fn with_ttl(default_silo_ttl_ms: Millis) -> Self {
        Self {
            default_silo_ttl_ms,
            max_clusters: 10_000,
            max_silos_per_cluster: 5_000,
        }
    }
}

/// A limit that refused a write; the caller's request, not the store, is what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitReached {
    #[error("the oracle already holds its limit of {max} clusters (ORACLE_MAX_CLUSTERS); no new cluster can be created")]
    Clusters { max: u64 },
    #[error("cluster `{cluster}` already has its limit of {max} silos that are not dead (ORACLE_MAX_SILOS_PER_CLUSTER); a new silo can join when one leaves or dies")]
    Silos {
        cluster: String,
        max: u64,
        retry_after_ms: Millis,
    },
    #[error(
        "cluster `{cluster}` already has its limit of {max} keys; revoke one it no longer uses"
    )]
    Keys { cluster: String, max: u64 },
}

/// A failure of the store itself (never of the caller's input). Logged, counted and answered as 503.
/// Cloneable, because one failed batched query fails every request in the batch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(Arc<sqlx::Error>),
    #[error("database migration failed: {0}")]
    Migration(Arc<sqlx::migrate::MigrateError>),
    #[error("stored data is not what this version expects: {0}")]
    Corrupt(String),
    #[error("gave up after {0} attempts that lost to concurrent writers")]
    Contended(u32),
    /// Recent calls could not reach the database: answered at once instead of waiting for it
    /// (one call in a while still tries, and the first that succeeds closes the circuit).
    #[error("the database is unreachable (failing fast until it answers again)")]
    Unreachable,
    /// More calls are queued for the database than this replica will hold.
    #[error("too many store calls are queued on this replica")]
    Overloaded,
    #[error(transparent)]
    Limit(#[from] LimitReached),
}

/// What a store call's outcome says about whether the database can be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The database answered, perhaps with a refusal.
    Answered,
    /// It could not be reached, or could not take a write: the outage of [`health`].
    Unreachable,
    /// No answer in time (a wait for a pooled connection timed out, or a statement outlived its
    /// deadline): an outage if no other call got an answer meanwhile (no connection could be
    /// made, the network swallowed the calls), overload or a slow statement if others did.
    NoAnswer,
    /// Nothing is known about the database (this replica's own queue was full, …).
    Unknown,
}

impl StoreError {
    /// What the error says about reaching the database: what opens the circuit, and what restarts
    /// the death rule's count of reachable time ([`health`]). Every way a real server stop,
    /// restart, crash or failover shows itself to a client counts as unreachable.
    pub fn reach(&self) -> Reach {
        match self {
            StoreError::Unreachable => Reach::Unreachable,
            StoreError::Database(error) => match error.as_ref() {
                sqlx::Error::Io(_)
                | sqlx::Error::Tls(_)
                | sqlx::Error::Protocol(_)
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed => Reach::Unreachable,
                sqlx::Error::PoolTimedOut => Reach::NoAnswer,
                sqlx::Error::Database(db) => match db.code() {
                    Some(code) if server_unavailable(&code) => Reach::Unreachable,
                    _ => Reach::Answered,
                },
                _ => Reach::Answered,
            },
            StoreError::Overloaded | StoreError::Migration(_) => Reach::Unknown,
            StoreError::Corrupt(_) | StoreError::Contended(_) | StoreError::Limit(_) => {
                Reach::Answered
            }
        }
    }
}

/// SQLSTATEs of a server that cannot serve: connection exceptions (class 08), insufficient
/// resources (53: too many connections, out of memory or disk), the server's own I/O errors (58),
/// the server shutting down, crashing or starting up (57P01–57P03), and a read-only transaction
/// refusing a write (25006: a standby, or a primary set read-only) — no heartbeat can be stored.
fn server_unavailable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("58")
        || matches!(code, "57P01" | "57P02" | "57P03" | "25006")
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(Arc::new(error))
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        Self::Migration(Arc::new(error))
    }
}

/// Computes a silo's next record from its current one (absent for a new silo) and the store's
/// liveness judge at this instant (its clock and the cluster's TTL). The store calls it inside its
/// atomic read-modify-write, perhaps more than once.
pub type HeartbeatUpdate<'a> = dyn Fn(Option<&SiloRecord>, &Liveness) -> Result<SiloRecord, HeartbeatRejection>
    + Send
    + Sync
    + 'a;

/// [`HeartbeatUpdate`] for a batch: also given the heartbeat's position in the batch.
pub type HeartbeatUpdates<'a> = dyn Fn(usize, Option<&SiloRecord>, &Liveness) -> Result<SiloRecord, HeartbeatRejection>
    + Send
    + Sync
    + 'a;

/// What one heartbeat comes to: the record as written and the judge of the instant, or why it was
/// refused.
pub type HeartbeatOutcome = Result<(SiloRecord, Liveness), HeartbeatRejection>;

/// The cluster's silos that are not marked dead, how to judge them, and the placement policy: all
/// that a placement decision reads, in one store call. (Silos dead for the last hour are listed by
/// [`MembershipStore::silos`], never loaded here.)
#[derive(Debug, Clone)]
pub struct Membership {
    pub liveness: Liveness,
    /// Ordered by silo id.
    pub silos: Arc<Vec<SiloRecord>>,
    /// Shared, so that a cached read is judged anew (a fresh `liveness`) without copying it.
    pub policy: Arc<Policy>,
    pub policy_version: i64,
}

impl Membership {
    /// What the pure decisions (placement, connection rules) judge: the silos as of this read.
    /// The one place a [`ClusterView`] is built from the store's answer.
    pub fn view(&self) -> ClusterView {
        ClusterView {
            liveness: self.liveness,
            silos: self.silos.clone(),
        }
    }
}

/// One page of a cluster's silos (dead ones included while they are listed).
#[derive(Debug, Clone)]
pub struct SiloPage {
    pub liveness: Liveness,
    /// Ordered by silo id.
    pub silos: Vec<SiloRecord>,
}

/// What a graceful leave did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// Entries released with the departure (at most [`RELEASE_CHUNK`]).
    pub released: u64,
    /// Whether more remain; they are released in the background and are never live meanwhile.
    pub release_pending: bool,
}

/// One directory entry: a grain's single activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    pub grain: String,
    pub silo: String,
    /// The silo's address, as of its last heartbeat.
    pub address: String,
    /// Strategy that placed it.
    pub strategy: String,
    /// Identifies this activation: every registration gets a larger one than any before it.
    pub epoch: i64,
    pub created_ms: Millis,
}

/// A directory entry and whether its silo is alive now; entries on dead silos are as good as gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub activation: Activation,
    pub live: bool,
}

/// A registration to attempt.
#[derive(Debug, Clone)]
pub struct NewActivation {
    pub grain: GrainId,
    pub silo: SiloId,
    pub strategy: &'static str,
    /// The epoch of a stale entry (on a dead silo) that this one replaces; the replacement only
    /// happens if that exact entry is still there.
    pub replaces_epoch: Option<i64>,
}

/// A directory question for one grain: its entry if it has one, else — when `silo` is given —
/// registration on that silo. One statement answers a whole batch of them.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub grain: GrainId,
    /// The silo a decision chose; `None` asks only for the existing entry.
    pub silo: Option<SiloId>,
    pub strategy: &'static str,
}

/// What a registration attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// This call created the entry.
    Registered(Activation),
    /// Another entry got there first (the directory is first-writer-wins); here it is.
    Existing(Located),
    /// Nothing was registered: the chosen silo is no longer active and alive, another caller's
    /// entry appeared meanwhile, or (for a [`Proposal`] without a silo) there is no entry.
    SiloUnavailable,
}

/// A silo named by a sweep ([`Reaping`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reaped {
    pub cluster: String,
    pub silo: String,
}

/// Logs and counts the deaths a store declares on the way, outside a sweep (which the oracle
/// logs itself): a placement replacing the grain of a silo past its TTL, or a heartbeat from one.
/// Either way the death rule found the silo dead, and an operator must see it like any other.
fn declared_dead_on_the_way(cluster: &str, silos: &[&str], found_by: &'static str) {
    if silos.is_empty() {
        return;
    }
    tracing::warn!(
        cluster,
        count = silos.len(),
        silos = %silos.join(", "),
        found_by,
        "silos declared dead after missing heartbeats; their activations are released"
    );
    crate::telemetry::metric::silos_declared_dead(silos.len() as u64);
}

/// What one judgement of every silo found (see [`MembershipStore::reap`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaping {
    /// Silos it declared dead. Their entries are released by [`DirectoryStore::release_dead`].
    pub dead: Vec<Reaped>,
    /// Silos past their TTL and their lease that it did not declare dead, because the replica
    /// judging has not reached the store for a whole TTL since their last heartbeat (so it
    /// cannot tell silence from heartbeats it failed to store). Always empty for a store that
    /// cannot be unreachable.
    pub deferred: Vec<Reaped>,
}

/// Counts for the gauges on `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub silos_by_status: Vec<(SiloStatus, u64)>,
    pub directory_entries: u64,
}

/// Silos and their clusters: heartbeats, membership reads, leaves and deaths.
#[async_trait]
pub trait MembershipStore: Send + Sync + 'static {
    /// Applies a heartbeat atomically, stamped with the store's clock; creates the cluster on its
    /// first heartbeat. Refuses an id retired by a dead incarnation, and a new silo beyond
    /// [`StoreSettings::max_silos_per_cluster`].
    async fn record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<HeartbeatOutcome, StoreError>;

    /// Applies many heartbeats, each as [`MembershipStore::record_heartbeat`] would, one outcome
    /// per heartbeat in order. Heartbeats of one silo are applied in their order, each to the
    /// record the one before it left. A store where a call is a round trip does them together;
    /// this default, for stores where it is not, does them one by one.
    async fn record_heartbeats(
        &self,
        silos: &[(ClusterName, SiloId)],
        update: &HeartbeatUpdates<'_>,
    ) -> Result<Vec<Result<HeartbeatOutcome, StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(silos.len());
        for (i, (cluster, silo)) in silos.iter().enumerate() {
            let one =
                |previous: Option<&SiloRecord>, liveness: &Liveness| update(i, previous, liveness);
            outcomes.push(self.record_heartbeat(cluster, silo, &one).await);
        }
        Ok(outcomes)
    }

    /// The cluster's silos that are not marked dead, or `None` when the cluster does not exist.
    async fn membership(&self, cluster: &ClusterName) -> Result<Option<Membership>, StoreError>;

    /// Up to `limit` cluster names after `after` (exclusive), in byte order.
    async fn clusters(
        &self,
        after: Option<&ClusterName>,
        limit: u32,
    ) -> Result<Vec<ClusterName>, StoreError>;

    /// Up to `limit` silos after `after` (exclusive) in id order, dead ones included while listed;
    /// `None` when the cluster does not exist.
    async fn silos(
        &self,
        cluster: &ClusterName,
        after: Option<&SiloId>,
        limit: u32,
    ) -> Result<Option<SiloPage>, StoreError>;

    /// One silo (dead ones included while listed) and its judge; `None` when the cluster or the
    /// silo is unknown.
    async fn silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError>;

    /// A graceful leave: marks the silo dead (so the id cannot rejoin) and releases its first
    /// [`RELEASE_CHUNK`] activations; `None` when unknown. Leaving twice releases what is left.
    async fn remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<Departure>, StoreError>;

    /// Marks the silo drained (once: the first request's time stays) and `shutting_down`, if it
    /// is alive; returns it as it is now (dead ones too, so the caller can say so), or `None` when
    /// the cluster or the silo is unknown.
    async fn drain_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError>;

    /// Declares dead every silo the death rule finds dead ([`Liveness::is_alive`]: past its
    /// protection, and silent for the cluster's TTL while this replica reached the store), and
    /// forgets silos dead for longer than [`DEAD_SILO_RETENTION_MS`] whose entries are all released
    /// (keeping their retired generation). Idempotent; replicas may race on it.
    async fn reap(&self) -> Result<Reaping, StoreError>;
}

/// Where grains live: the single-activation directory.
#[async_trait]
pub trait DirectoryStore: Send + Sync + 'static {
    /// Directory entries of these grains (absent grains are left out), judged live now.
    async fn lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
    ) -> Result<Vec<Located>, StoreError>;

    /// Registers new activations, one result per entry, in order. Each registration succeeds only if
    /// no live entry exists for the grain and the chosen silo is active and alive — and stays so
    /// until the registration commits (a silo being declared dead at that moment is waited for).
    async fn register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
    ) -> Result<Vec<Registration>, StoreError>;

    /// For each proposal, in order: the grain's entry (`Existing`, live or not) if it has one, else
    /// the registration of the proposed silo by [`DirectoryStore::register`]'s rules. A grain that exists
    /// costs a lookup; a new one is registered in the same call, without a second trip through the
    /// oracle. The Postgres store does both in one statement.
    async fn lookup_or_register(
        &self,
        cluster: &ClusterName,
        proposals: &[Proposal],
    ) -> Result<Vec<Registration>, StoreError> {
        lookup_then_register(self, cluster, proposals).await
    }

    /// Removes the grain's entry if it is activation `epoch` on `silo`; `true` when it did.
    async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: i64,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` of a silo's activations that a mover may pick, least recently placed first:
    /// not of an `immovable` grain type, not brought by a migration since `moved_since` (a grain
    /// that just arrived is not sent on at once), and without an open migration.
    async fn movable_activations(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        immovable: &[String],
        moved_since: Millis,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError>;

    /// How many directory entries each silo of the cluster holds (silos without any are left
    /// out), in one statement.
    async fn activation_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError>;

    /// A silo's activations ordered by grain, after `after` (exclusive), at most `limit`.
    async fn activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError>;

    /// Releases up to `limit` directory entries of a dead silo; returns how many, 0 when no dead
    /// silo has any left. Idempotent; replicas may race on it.
    async fn release_dead(&self, limit: u32) -> Result<u64, StoreError>;
}

/// [`DirectoryStore::lookup_or_register`] as a lookup, then a registration of the grains it did not
/// find.
pub async fn lookup_then_register(
    store: &(impl DirectoryStore + ?Sized),
    cluster: &ClusterName,
    proposals: &[Proposal],
) -> Result<Vec<Registration>, StoreError> {
    let grains: Vec<GrainId> = proposals.iter().map(|p| p.grain.clone()).collect();
    let mut found: HashMap<String, Located> = store
        .lookup(cluster, &grains)
        .await?
        .into_iter()
        .map(|l| (l.activation.grain.clone(), l))
        .collect();
    let new: Vec<NewActivation> = proposals
        .iter()
        .filter(|p| !found.contains_key(p.grain.as_str()))
        .filter_map(|p| {
            p.silo.as_ref().map(|silo| NewActivation {
                grain: p.grain.clone(),
                silo: silo.clone(),
                strategy: p.strategy,
                replaces_epoch: None,
            })
        })
        .collect();
    let mut registered: HashMap<String, Registration> = HashMap::new();
    if !new.is_empty() {
        for (entry, outcome) in new.iter().zip(store.register(cluster, &new).await?) {
            registered.insert(entry.grain.to_string(), outcome);
        }
    }
    Ok(proposals
        .iter()
        .map(|p| match found.remove(p.grain.as_str()) {
            Some(located) => Registration::Existing(located),
            None => registered
                .remove(p.grain.as_str())
                .unwrap_or(Registration::SiloUnavailable),
        })
        .collect())
}

/// The cluster policy, versioned (it is read with the membership).
#[async_trait]
pub trait PolicyStore: Send + Sync + 'static {
    /// Replaces the cluster's policy if its version is `expected` (`None`: whatever it is),
    /// creating the cluster if needed (a cluster never written has version 0). `Ok(new version)`,
    /// or `Err(current version)` when another writer got there first.
    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError>;
}

/// A cluster's lease: who runs the cluster's background work (rebalancer sessions, repartitioner
/// rounds) until when. `token` grows on every takeover, so a write fenced by an older token (from
/// a holder that lost the lease while it worked) is refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Lease {
    /// The replica holding it (`ORACLE_REPLICA_ID`).
    #[schema(example = "oracle-7c9f-4211")]
    pub holder: String,
    #[schema(example = 3)]
    pub token: i64,
    #[schema(example = 1_764_547_210_000_i64)]
    pub expires_at_ms: Millis,
}

/// What asking for a cluster's lease gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseClaim {
    /// The asker holds it now: taken (a new token) or renewed (the same token).
    Held(Lease),
    /// Another replica holds it, unexpired.
    HeldByOther(Lease),
    /// No such cluster.
    NoCluster,
}

/// Cluster leases: background work for a cluster runs on exactly one replica at a time. A lease
/// row with an expiry and a growing token (not an advisory lock), so the schema also fits
/// distributed SQL engines; time is the store's clock.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Takes the lease for `holder` when it is free or expired (a new token), or renews it when
    /// `holder` has it (same token), for `ttl_ms` from now.
    async fn claim_lease(
        &self,
        cluster: &ClusterName,
        holder: &str,
        ttl_ms: Millis,
    ) -> Result<LeaseClaim, StoreError>;

    /// The cluster's lease, expired or not; `None` when never taken.
    async fn lease(&self, cluster: &ClusterName) -> Result<Option<Lease>, StoreError>;

    /// Gives the lease up (it expires now) if `lease` is still the current one; `true` when it was.
    async fn release_lease(&self, cluster: &ClusterName, lease: &Lease)
        -> Result<bool, StoreError>;

    /// The stored state of the cluster's background work `kind` (e.g. `rebalancer`), if any.
    async fn work_state(
        &self,
        cluster: &ClusterName,
        kind: &str,
    ) -> Result<Option<serde_json::Value>, StoreError>;

    /// Stores that state if `fence` is still the cluster's current, unexpired lease; `false` (and
    /// nothing written) when it is not.
    async fn save_work_state(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        kind: &str,
        state: &serde_json::Value,
    ) -> Result<bool, StoreError>;
}

/// Why a grain should move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MigrationReason {
    Rebalancer,
    Drain,
    Repartitioner,
}

impl MigrationReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rebalancer => "rebalancer",
            Self::Drain => "drain",
            Self::Repartitioner => "repartitioner",
        }
    }

    fn parse(text: &str) -> Result<Self, StoreError> {
        match text {
            "rebalancer" => Ok(Self::Rebalancer),
            "drain" => Ok(Self::Drain),
            "repartitioner" => Ok(Self::Repartitioner),
            other => Err(StoreError::Corrupt(format!(
                "unknown migration reason {other:?}"
            ))),
        }
    }
}

/// A grain that should move: the silo hosting it (`from`) is to hand it over to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Migration {
    #[schema(example = 17)]
    pub id: i64,
    #[schema(example = "user/alice")]
    pub grain: String,
    #[schema(example = "10.0.0.5:11111@1")]
    pub from: String,
    #[schema(example = "10.0.0.6:11111@1")]
    pub to: String,
    pub reason: MigrationReason,
    /// The activation's epoch when the migration was issued: it applies to that activation only.
    #[schema(example = 8)]
    pub epoch: i64,
    #[schema(example = 1_764_547_200_000_i64)]
    pub created_at_ms: Millis,
}

/// A migration to issue.
#[derive(Debug, Clone)]
pub struct NewMigration {
    pub grain: GrainId,
    pub from: SiloId,
    pub to: SiloId,
    /// The epoch of the activation on `from` that should move.
    pub epoch: i64,
    pub reason: MigrationReason,
}

/// A silo's activations and how many are leaving (see [`MigrationStore::silo_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiloCounts {
    /// Directory entries on the silo.
    pub activations: u64,
    /// Of those, how many have an open migration.
    pub migrating: u64,
}

/// Why a migration was not applied (it is cancelled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The grain has no activation any more.
    GrainGone,
    /// The grain is now another activation (elsewhere, or placed anew).
    GrainMoved { silo: String, epoch: i64 },
    /// The source silo is dead.
    SourceDead,
    /// The target silo is not active and alive, or does not host the grain's type.
    TargetUnavailable,
    /// Older than the cluster's migration TTL.
    Expired,
}

/// What completing a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// The entry now names `to`, as a new activation with this epoch.
    Moved { migration: Migration, epoch: i64 },
    /// Not applied, and cancelled.
    Refused {
        migration: Migration,
        refusal: Refusal,
    },
    /// No such open migration (completed, failed or cancelled already, or never issued).
    NotFound,
}

/// Open migrations: issued by the holder of the cluster's lease, polled by source silos,
/// completed (the directory entry moves in the same transaction) or failed. A grain has at most
/// one open migration; finished ones are removed.
#[async_trait]
pub trait MigrationStore: Send + Sync + 'static {
    /// Writes the migrations whose grain is still activation `epoch` on `from` and has no open
    /// migration, if `fence` is still the cluster's current, unexpired lease; `Ok(None)` when it
    /// is not (the writer lost the lease: nothing is written). Returns those written.
    async fn issue_migrations(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        migrations: &[NewMigration],
    ) -> Result<Option<Vec<Migration>>, StoreError>;

    /// Open migrations whose source is `from`, by id, after `after` (exclusive), at most `limit`.
    async fn pending_migrations(
        &self,
        cluster: &ClusterName,
        from: &SiloId,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Migration>, StoreError>;

    /// Moves the grain's entry to the migration's target, as a new activation (a new epoch, and
    /// the migration's reason as the strategy that placed it), in the transaction that removes
    /// the migration, if the grain is still that activation on the
    /// source, the source is not dead, the target is active and alive, and the migration is not
    /// older than `ttl_ms`; otherwise the migration is cancelled and the answer says why.
    async fn complete_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
        ttl_ms: Millis,
    ) -> Result<Completion, StoreError>;

    /// How many migrations are open from each silo to each other: moves planned but not done yet.
    async fn open_migration_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<Vec<(String, String, u64)>, StoreError>;

    /// Removes an open migration the source could not carry out; `None` when there was none.
    async fn fail_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
    ) -> Result<Option<Migration>, StoreError>;

    /// The clusters whose grains may have to move, for the movers' driver: the rebalancer or the
    /// repartitioner is enabled, a silo is being drained, migrations are open (to cancel them when
    /// stale), or edge reports wait to be counted.
    async fn clusters_moving_grains(&self) -> Result<Vec<ClusterName>, StoreError>;

    /// A silo's directory entries, and how many of them have an open migration (how far a drain
    /// has got; what the repartitioner balances).
    async fn silo_counts(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<SiloCounts, StoreError>;

    /// Cancels the cluster's migrations that can no longer apply: older than `ttl_ms`, grain gone
    /// or no longer that activation on the source, source or target silo dead. Returns them.
    async fn cancel_stale_migrations(
        &self,
        cluster: &ClusterName,
        ttl_ms: Millis,
    ) -> Result<Vec<Migration>, StoreError>;
}

/// One report of calls between two grains, as silos send them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeReport {
    pub from: GrainId,
    pub to: GrainId,
    pub count: u64,
}

/// An edge report waiting to be counted, numbered in order of arrival within its cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingEdge {
    pub seq: i64,
    pub from: String,
    pub to: String,
    pub count: u64,
}

/// The cluster's edge reports waiting to be counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeIntake {
    /// The number of the last report stored.
    pub last_seq: i64,
    /// Reports waiting (not yet forgotten after counting).
    pub pending: u64,
    /// Reports dropped unread, ever, because the buffer was full.
    pub dropped: u64,
}

/// Edge reports between their arrival on any replica and the lease holder's counting: a bounded
/// buffer per cluster (the oldest dropped, and counted, beyond the bound).
#[async_trait]
pub trait EdgeStore: Send + Sync + 'static {
    /// Appends reports (numbered on from the last), then drops the oldest beyond
    /// `max_unprocessed`; returns how many it dropped, or `None` when the cluster is unknown.
    async fn append_edges(
        &self,
        cluster: &ClusterName,
        edges: &[EdgeReport],
        max_unprocessed: u32,
    ) -> Result<Option<u64>, StoreError>;

    /// Up to `limit` waiting reports numbered after `after`, in order.
    async fn pending_edges(
        &self,
        cluster: &ClusterName,
        after: i64,
        limit: u32,
    ) -> Result<Vec<PendingEdge>, StoreError>;

    /// Forgets the reports numbered up to `through` (they were counted).
    async fn forget_edges(&self, cluster: &ClusterName, through: i64) -> Result<(), StoreError>;

    /// The buffer's state.
    async fn edge_intake(&self, cluster: &ClusterName) -> Result<EdgeIntake, StoreError>;
}

/// Connection pools and their shared round-robin counters.
#[async_trait]
pub trait PoolStore: Send + Sync + 'static {
    /// Creates or replaces a connection pool (and the cluster, if new). The round-robin counter of
    /// an existing pool carries on.
    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError>;

    /// A pool's definition, or `None` when it does not exist.
    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError>;

    /// Advances the pool's round-robin counter, shared by every replica, and returns its value
    /// before the advance; `None` when the pool does not exist.
    async fn next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError>;
}

/// Most keys one cluster may hold: enough for a key per team and rotation overlap, few enough
/// that a runaway script issuing keys is stopped.
pub const MAX_KEYS_PER_CLUSTER: u64 = 100;

/// A cluster key as stored: everything but the key itself, of which only a keyed hash is kept.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredKey {
    /// Public: the part of the key after `pok_` and before the secret.
    pub id: String,
    pub cluster: ClusterName,
    /// Sorted, without duplicates.
    pub scopes: Vec<crate::auth::Scope>,
    /// Who or what the key is for, as the admin wrote it.
    pub label: String,
    pub hash: Vec<u8>,
    pub created_at_ms: Millis,
}

impl std::fmt::Debug for StoredKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredKey")
            .field("id", &self.id)
            .field("cluster", &self.cluster)
            .field("scopes", &self.scopes)
            .field("label", &self.label)
            .field("created_at_ms", &self.created_at_ms)
            .finish_non_exhaustive()
    }
}

/// Cluster keys. A key names its cluster by name; the cluster itself comes into being with its
/// first heartbeat, policy or pool, as without keys.
#[async_trait]
pub trait KeyStore: Send + Sync + 'static {
    /// Stores a new key (its `created_at_ms` is the store's clock), unless its cluster already
    /// holds [`MAX_KEYS_PER_CLUSTER`].
    async fn insert_key(&self, key: StoredKey) -> Result<StoredKey, StoreError>;

    /// The key with this id, of whatever cluster.
    async fn key(&self, id: &str) -> Result<Option<StoredKey>, StoreError>;

    /// The cluster's keys, oldest first.
    async fn keys(&self, cluster: &ClusterName) -> Result<Vec<StoredKey>, StoreError>;

    /// Deletes the cluster's key `id`; `false` when it has no such key.
    async fn revoke_key(&self, cluster: &ClusterName, id: &str) -> Result<bool, StoreError>;
}

/// A whole store: every aggregate, plus what concerns the store itself.
#[async_trait]
pub trait Store:
    MembershipStore
    + DirectoryStore
    + PolicyStore
    + PoolStore
    + LeaseStore
    + MigrationStore
    + EdgeStore
    + KeyStore
{
    /// `"postgres"` or `"memory"`, for logs and `/readyz`.
    fn kind(&self) -> &'static str;

    /// The store's clock now, when the process can read it (an injected clock, or the memory
    /// store's); `None` when only the database knows it. A replica moves its cached reads on by
    /// it, so that they judge liveness at the store's time even when that clock jumps (tests).
    fn local_now(&self) -> Option<Millis> {
        None
    }

    /// Succeeds when the store can serve requests.
    async fn ping(&self) -> Result<(), StoreError>;

    /// Counts for metrics.
    async fn stats(&self) -> Result<StoreStats, StoreError>;
}
