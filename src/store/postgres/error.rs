//! Postgres' errors in the store's words: which of sqlx's errors and which SQLSTATEs mean the
//! database cannot be reached, cannot take a write, or gave no answer in time. Nothing above the
//! store sees sqlx or a SQLSTATE; what they say is decided here, once.
//!
//! A few calls answer some SQLSTATEs differently — a deadlock or a serialization failure is
//! contention there, retried — so their statements keep sqlx's error ([`PgError`]) until the
//! call's end, where [`conflict_as_contention`] reads its SQLSTATE before it becomes a
//! [`StoreError`].

use crate::store::StoreError;

/// SQLSTATE of a foreign key violation.
pub(super) const FOREIGN_KEY_VIOLATION: &str = "23503";
/// SQLSTATE of a deadlock (two statements locking silo rows in opposite orders; rare, retryable).
const DEADLOCK_DETECTED: &str = "40P01";
/// SQLSTATE of a serialization failure: what an engine that runs transactions serializable (by
/// default or by configuration: some distributed Postgres-compatible engines) answers a
/// transaction that raced another. As retryable as a deadlock.
const SERIALIZATION_FAILURE: &str = "40001";
/// SQLSTATE of a write refused by a read-only transaction: a standby, or a primary set read-only.
const READ_ONLY_SQL_TRANSACTION: &str = "25006";

/// SQLSTATEs of a prepared statement that is missing or already exists (invalid statement name,
/// duplicate prepared statement), and of a protocol violation: what a transaction-mode pooler
/// answers a client that keeps statements by name on a connection.
const STATEMENT_NAME_ERRORS: [&str; 3] = ["26000", "42P05", "08P01"];

/// Whether the error is the database's, with this SQLSTATE.
pub(super) fn has_sqlstate(error: &sqlx::Error, sqlstate: &str) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some(sqlstate))
}

/// SQLSTATEs of a server that cannot serve: connection exceptions (class 08), insufficient
/// resources (53: too many connections, out of memory or disk), the server's own I/O errors (58),
/// the server shutting down, crashing or starting up (57P01–57P03). (A read-only transaction
/// refusing a write, 25006, cannot serve either — no heartbeat can be stored — and is
/// [`StoreError::ReadOnly`].)
fn server_unavailable(code: &str) -> bool {
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("58")
        || matches!(code, "57P01" | "57P02" | "57P03")
}

impl From<sqlx::Error> for StoreError {
    /// Every way a real server stop, restart, crash or failover shows itself to a client is
    /// [`StoreError::Unreachable`] (or [`StoreError::ReadOnly`]: a standby cannot store a
    /// heartbeat either); a wait for a pooled connection that timed out is
    /// [`StoreError::TimedOut`]; whatever else the database says is [`StoreError::Failed`].
    fn from(error: sqlx::Error) -> Self {
        let mut detail = error.to_string();
        if STATEMENT_NAME_ERRORS
            .iter()
            .any(|code| has_sqlstate(&error, code))
            && detail.contains("prepared statement")
        {
            detail.push_str(
                " (is DATABASE_URL a transaction-mode pooler? set ORACLE_DB_TRANSACTION_POOLING=true)",
            );
        }
        if matches!(&error, sqlx::Error::Protocol(message) if message.contains("SSLRequest")) {
            // What sqlx says when the address accepts a connection and closes it (or answers
            // nothing Postgres would): a proxy with no server up behind it, most often.
            detail = format!(
                "the address accepted the connection but no Postgres server answered (a proxy \
                 with no server up behind it?): {detail}"
            );
        }
        match &error {
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed => StoreError::Unreachable(detail),
            sqlx::Error::PoolTimedOut => StoreError::TimedOut(detail),
            sqlx::Error::Database(db) => match db.code() {
                Some(code) if code == READ_ONLY_SQL_TRANSACTION => StoreError::ReadOnly(detail),
                Some(code) if server_unavailable(&code) => StoreError::Unreachable(detail),
                _ => StoreError::Failed(detail),
            },
            _ => StoreError::Failed(detail),
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(error: sqlx::migrate::MigrateError) -> Self {
        StoreError::Schema(error.to_string())
    }
}

/// An error of a call that answers some SQLSTATEs its own way: sqlx's error as it came (its
/// SQLSTATE still readable), or one the store made itself. It becomes a [`StoreError`] at the
/// call's end ([`conflict_as_contention`]), or through `?` in a call that does not look.
#[derive(Debug)]
pub(super) enum PgError {
    Sqlx(sqlx::Error),
    Store(StoreError),
}

impl From<sqlx::Error> for PgError {
    fn from(error: sqlx::Error) -> Self {
        PgError::Sqlx(error)
    }
}

impl From<StoreError> for PgError {
    fn from(error: StoreError) -> Self {
        PgError::Store(error)
    }
}

impl From<PgError> for StoreError {
    fn from(error: PgError) -> Self {
        match error {
            PgError::Sqlx(error) => error.into(),
            PgError::Store(error) => error,
        }
    }
}

/// Whether the transaction lost a race the database broke (a deadlock, or a serialization
/// failure): nothing was written, and trying again is safe.
pub(super) fn lost_a_race(error: &sqlx::Error) -> bool {
    has_sqlstate(error, DEADLOCK_DETECTED) || has_sqlstate(error, SERIALIZATION_FAILURE)
}

/// A transaction that lost a race (a deadlock between two statements locking silo rows in
/// opposite orders, or a serialization failure) is rare and safe to retry: answered as
/// contention (503 with Retry-After), not as an outage.
pub(super) fn conflict_as_contention<T>(outcome: Result<T, PgError>) -> Result<T, StoreError> {
    match outcome {
        Err(PgError::Sqlx(error)) if lost_a_race(&error) => Err(StoreError::Contended(1)),
        other => other.map_err(StoreError::from),
    }
}
