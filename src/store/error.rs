//! What can go wrong in a store call, and what it says about reaching the database.

use std::sync::Arc;

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
    /// the death rule's count of reachable time ([`health`](super::health)). Every way a real server stop,
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
