//! What can go wrong in a store call, in the domain's words, and what it says about reaching the
//! database.
//!
//! Every layer above the store sees only these words: whether the database could be reached, could
//! take a write, answered in time, or refused. How a database error comes to one of them (sqlx's
//! errors, Postgres' SQLSTATEs) is the Postgres store's business (`postgres/error.rs`).

use crate::clock::Millis;

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
///
/// The `String`s are details for the logs, never for the caller. An empty one means there is
/// nothing to add to what was logged already (the circuit refusing a call while the outage it
/// logged when it opened goes on).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database could not be reached: the connection was refused or broke, the server is
    /// stopping, starting, out of connections or resources — or recent calls could not reach it,
    /// so this one is answered at once instead of waiting (one call in a while still tries, and the
    /// first that succeeds closes the circuit; the detail is empty then).
    #[error("the database is unreachable{}", detail_or(.0, " (failing fast until it answers again)"))]
    Unreachable(String),
    /// The database answered but cannot take a write (a standby, or a primary set read-only). No
    /// heartbeat can be stored, so it counts as [`Reach::Unreachable`], and is answered like it.
    #[error("the database is read-only{}", detail_or(.0, ""))]
    ReadOnly(String),
    /// The database answers but a write did not commit in time: commits wait for a synchronous
    /// standby that is gone, or the disk stalls. Reads may still be answered, so it says nothing
    /// about reaching the database ([`Reach::Unknown`]); readiness fails on it.
    #[error("the database takes no writes in time{}", detail_or(.0, ""))]
    WritesStalled(String),
    /// No answer in time: a wait for a pooled connection timed out, or a statement outlived the
    /// store's deadline (the detail is empty then). See [`Reach::NoAnswer`].
    #[error("the database gave no answer in time{}", detail_or(.0, ""))]
    TimedOut(String),
    #[error("gave up after {0} attempts that lost to concurrent writers")]
    Contended(u32),
    /// More calls are queued for the database than this replica will hold.
    #[error("too many store calls are queued on this replica")]
    Overloaded,
    #[error("stored data is not what this version expects: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Limit(#[from] LimitReached),
    /// The database's schema could not be brought to this version (at start-up).
    #[error("database migration failed: {0}")]
    Schema(String),
    /// Anything else the database refused or failed at (a constraint, a deadlock outside the calls
    /// that retry it, a value it could not decode, …).
    #[error("database error: {0}")]
    Failed(String),
}

/// `": detail"`, or `otherwise` when there is no detail.
fn detail_or(detail: &str, otherwise: &'static str) -> String {
    if detail.is_empty() {
        otherwise.to_owned()
    } else {
        format!(": {detail}")
    }
}

/// What a store call's outcome says about whether the database can be reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// The database answered, perhaps with a refusal.
    Answered,
    /// It could not be reached, or could not take a write: the outage of [`health`](super::health).
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
    /// the death rule's count of reachable time ([`health`](super::health)). Every way a real
    /// server stop, restart, crash or failover shows itself to a client counts as unreachable
    /// (the Postgres store says which of its errors those are when it makes a `StoreError`).
    pub fn reach(&self) -> Reach {
        match self {
            StoreError::Unreachable(_) | StoreError::ReadOnly(_) => Reach::Unreachable,
            StoreError::TimedOut(_) => Reach::NoAnswer,
            StoreError::Overloaded | StoreError::Schema(_) | StoreError::WritesStalled(_) => {
                Reach::Unknown
            }
            StoreError::Failed(_)
            | StoreError::Corrupt(_)
            | StoreError::Contended(_)
            | StoreError::Limit(_) => Reach::Answered,
        }
    }
}
