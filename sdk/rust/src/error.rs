//! What the oracle refused, or that no replica answered.

use std::time::Duration;

/// A problem (RFC 9457) the oracle answered, by its type's last segment
/// (`silo-declared-dead`, `store-unavailable`, …), or `status` 0 when no replica could be
/// reached at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {problem}: {detail}")]
pub struct OracleError {
    pub status: u16,
    pub problem: String,
    pub detail: String,
    /// What `Retry-After` asked for.
    pub retry_after: Option<Duration>,
}

impl OracleError {
    /// No replica answered: refused, reset or timed out.
    pub fn unreachable(detail: impl Into<String>) -> Self {
        Self {
            status: 0,
            problem: "unreachable".to_owned(),
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// An answer that was not what the API documents (a bug on one side or the other).
    pub fn unexpected(detail: impl Into<String>) -> Self {
        Self {
            status: 0,
            problem: "unexpected-answer".to_owned(),
            detail: detail.into(),
            retry_after: None,
        }
    }

    /// Worth trying again later: nothing answered, or the oracle asked to come back.
    pub fn is_retryable(&self) -> bool {
        matches!(self.status, 0 | 429 | 502..=504) && self.problem != "unexpected-answer"
    }

    /// The oracle declared this silo dead: drop every grain and rejoin as the next generation.
    pub fn is_declared_dead(&self) -> bool {
        self.problem == "silo-declared-dead"
    }
}
