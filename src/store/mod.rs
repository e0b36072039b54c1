//! The store interface: membership, the grain directory and the rest of what the oracle keeps.
//!
//! Two implementations pass one behavioural suite (`tests/api/store_suite.rs`): [`postgres`], the
//! production store that any number of replicas share, and [`memory`], an in-process store for first
//! runs and demos. The store keeps state and enforces the invariants that need atomicity — one
//! directory entry per grain, registration only on a live silo, release of a dead silo's entries —
//! and leaves every decision to the domain.
//!
//! Time is the store's: every stamp and every liveness judgement uses one clock ([`StoreTime`]),
//! the database's in production, so replicas whose clocks disagree still agree on who is alive.
//!
//! One file per aggregate holds its trait and the types it speaks in, and each implementation has
//! a file of the same name:
//!
//! - `membership.rs` — [`MembershipStore`]: heartbeats, membership reads, leaves and deaths.
//! - `background.rs` — [`BackgroundStore`]: the live replicas, and what is due in the clusters a replica runs.
//! - `directory.rs` — [`DirectoryStore`]: the single-activation directory.
//! - `policy.rs` — [`PolicyStore`]: the versioned cluster policy.
//! - `pools.rs` — [`PoolStore`]: connection pools and their round-robin counters.
//! - `leases.rs` — [`LeaseStore`]: who runs a cluster's background work.
//! - `migrations.rs` — [`MigrationStore`]: grains that should move.
//! - `edges.rs` — [`EdgeStore`]: reports of calls between grains, waiting to be counted.
//! - `keys.rs` — [`KeyStore`]: cluster keys.
//! - `stalls.rs` — [`stalls::StallWatch`]: whether the replica's own process has been running, which
//!   both stores count silence from.
//! - `error.rs` — [`StoreError`] in the domain's words (unreachable, read-only, timed out,
//!   contended, overloaded, corrupt, a limit, failed), what it says about reaching the database
//!   ([`Reach`]), and the limits that refuse writes ([`LimitReached`]). No sqlx in it: the Postgres
//!   store says what its errors mean (`postgres/error.rs`), and keeps its circuit breaker
//!   ([`postgres::health`]) beside it.
//!
//! This file holds what concerns a store as a whole: [`Store`], which every aggregate's trait
//! makes up, its clock and settings, and the counts it reports.

mod background;
mod directory;
mod edges;
mod error;
mod keys;
mod leases;
mod membership;
mod migrations;
mod policy;
mod pools;

pub mod memory;
pub mod postgres;
pub mod stalls;

use std::sync::Arc;

use async_trait::async_trait;

use crate::clock::{Clock, Millis};
use crate::cluster::SiloStatus;

pub use background::{BackgroundStore, Due, DueQuery, SilenceLook};
pub use directory::{
    by_cluster, lookup_then_register, Activation, DirectoryStore, Located, NewActivation, Proposal,
    Registration,
};
pub use edges::{EdgeIntake, EdgeReport, EdgeStore, PendingEdge};
pub use error::{LimitReached, Reach, StoreError};
pub use keys::{KeyStore, StoredKey, MAX_KEYS_PER_CLUSTER};
pub use leases::{Lease, LeaseClaim, LeaseStore};
pub use membership::{
    Departure, HeartbeatOutcome, HeartbeatUpdate, HeartbeatUpdates, Membership, MembershipStore,
    Reaped, Reaping, SiloPage, FLUSH_HELD_EVERY_MS,
};
pub use migrations::{
    Completion, Ending, Failure, Migration, MigrationReason, MigrationStore, NewMigration, Refusal,
    SiloCounts, ENDING_KEPT_MS,
};
pub use policy::PolicyStore;
pub use pools::PoolStore;

use membership::declared_dead_on_the_way;

/// How long a dead silo stays listed (status `dead`) before its record is dropped. Its id stays
/// spent: a compact record of the newest dead generation at its address remains (see
/// [`SiloId::incarnation`](crate::cluster::SiloId::incarnation)).
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
    /// How old a silo's stored heartbeat gets before the heartbeats that changed only its load
    /// figures are written (0: every heartbeat is written): by the flush of held heartbeats, or by
    /// a heartbeat's own request at twice this age. Only the Postgres store holds any back (a
    /// replica folding heartbeats onto its copies of silo rows); never more than a third of the
    /// cluster's TTL.
    pub heartbeat_write_after_ms: Millis,
}

/// The default of [`StoreSettings::heartbeat_write_after_ms`]: a second, so that other replicas see a
/// silo's load figures that moved at most about a second late.
pub const DEFAULT_HEARTBEAT_WRITE_AFTER_MS: Millis = 1_000;

impl StoreSettings {
    /// The defaults, with this TTL (tests and examples).
    pub fn with_ttl(default_silo_ttl_ms: Millis) -> Self {
        Self {
            default_silo_ttl_ms,
            max_clusters: 10_000,
            max_silos_per_cluster: 5_000,
            heartbeat_write_after_ms: DEFAULT_HEARTBEAT_WRITE_AFTER_MS,
        }
    }
}

/// Counts for the gauges on `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreStats {
    pub silos_by_status: Vec<(SiloStatus, u64)>,
    pub directory_entries: u64,
    pub open_migrations: u64,
    /// This replica's connections to the database, when it has a pool of them.
    pub pool: Option<PoolStats>,
}

/// A replica's Postgres connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub in_use: u32,
    pub idle: u32,
    pub max: u32,
}

/// The database server a store's connections reach, as its last new connection found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseServer {
    /// `address:port` of the server itself (behind a proxy, the one the proxy chose).
    pub server: String,
    /// Its WAL timeline: one more at each promotion.
    pub timeline: i64,
}

/// A whole store: every aggregate, plus what concerns the store itself.
#[async_trait]
pub trait Store:
    MembershipStore
    + BackgroundStore
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

    /// How many outages this replica has seen its store go through (the memory store has none).
    /// Caches of the store's answers are dropped when it moves: a failover may have lost what
    /// they say.
    fn outages_seen(&self) -> u64 {
        0
    }

    /// Succeeds when the store can serve requests: it is reached and (Postgres) commits a small
    /// write in time, so a read-only database or one whose commits hang is not ready.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The replica refused work it could not keep up with: silence counts again from now, as
    /// after a stall of its process ([`stalls::StallWatch::could_not_keep_up`]).
    fn could_not_keep_up(&self);

    /// The database server the last new connection reached (`None` for the embedded store, and
    /// before a connection was checked).
    fn database_server(&self) -> Option<DatabaseServer> {
        None
    }

    /// Counts for metrics.
    async fn stats(&self) -> Result<StoreStats, StoreError>;
}
