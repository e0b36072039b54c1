//! Open migrations: grains that should move, issued under the cluster's lease and completed by
//! their source silos.

use async_trait::async_trait;
use serde::Serialize;
use utoipa::ToSchema;

use super::{Lease, StoreError};
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId};

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

    pub(super) fn parse(text: &str) -> Result<Self, StoreError> {
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

/// How long the ending of a migration that a silo completed or failed is kept, so that a retried
/// call (its first answer lost on the way) gets the first answer rather than 404.
pub const ENDING_KEPT_MS: Millis = 3_600_000;

/// A grain that should move: the silo hosting it (`from`) is to hand it over to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
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

/// How a silo's call ended a migration: what a retry of either call is answered by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ending {
    /// Completed: the grain became activation `epoch` on the target.
    Moved { epoch: i64 },
    /// Completion was refused, and the migration cancelled.
    Refused { refusal: Refusal },
    /// Failed by its source; the grain stayed.
    Failed,
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
    /// A call within [`ENDING_KEPT_MS`] ended it already; nothing was done now.
    Ended {
        migration: Migration,
        ending: Ending,
    },
    /// No such open migration, nor one a silo ended lately (cancelled by the oracle, ended
    /// longer ago, or never issued).
    NotFound,
}

/// What failing a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Removed; the grain stays.
    Failed(Migration),
    /// A call within [`ENDING_KEPT_MS`] ended it already; nothing was done now.
    Ended {
        migration: Migration,
        ending: Ending,
    },
    /// As [`Completion::NotFound`].
    NotFound,
}

/// Open migrations: issued by the holder of the cluster's lease, polled by source silos,
/// completed (the directory entry moves in the same transaction) or failed. A grain has at most
/// one open migration; finished ones are removed (how a silo's call ended one is kept a while).
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

    /// Removes an open migration the source could not carry out. Both this and
    /// [`Self::complete_migration`] keep how they ended the migration for [`ENDING_KEPT_MS`], and
    /// answer a later call about it with that ending.
    async fn fail_migration(&self, cluster: &ClusterName, id: i64) -> Result<Failure, StoreError>;

    /// A silo's directory entries, and how many of them have an open migration (how far a drain
    /// has got; what the repartitioner balances).
    async fn silo_counts(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<SiloCounts, StoreError>;

    /// Cancels the cluster's migrations that can no longer apply: older than `ttl_ms`, grain gone
    /// or no longer that activation on the source, source or target silo dead. Returns them.
    /// Also forgets the cluster's endings older than [`ENDING_KEPT_MS`].
    async fn cancel_stale_migrations(
        &self,
        cluster: &ClusterName,
        ttl_ms: Millis,
    ) -> Result<Vec<Migration>, StoreError>;
}
