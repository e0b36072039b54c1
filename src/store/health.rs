//! Whether this replica can reach its store: a circuit breaker, and the outage grace of liveness.
//!
//! Two problems with one cause. While the database is down, every request used to wait for a
//! connection until the request timed out (5 s), and `/readyz` with them; now the first failures
//! open a circuit and calls fail at once with [`StoreError::Unreachable`], except one probe per
//! [`PROBE_INTERVAL_MS`] that tries for real and closes the circuit when it succeeds. And while the
//! database is down no heartbeat can be stored, so when it comes back every silo looks silent:
//! [`StoreHealth::reachable_for_ms`] tells the liveness rule how long the store has been reachable
//! without interruption, and nobody dies of silence until that is a whole TTL.
//!
//! The durations are this replica's own (a monotonic clock in production), which is why the grace is
//! per replica: a replica that could not reach the store does not judge silence it could not see.

use std::sync::{Arc, Mutex};

use super::StoreError;
use crate::clock::{Clock, Millis};

/// While the circuit is open, one call per interval goes through to find out whether the store is
/// back; the others fail at once.
pub const PROBE_INTERVAL_MS: Millis = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Every call since `since` has reached the store.
    Reachable { since: Millis },
    /// A call failed to reach the store at `since`; the last probe went through at `probed`.
    Unreachable { since: Millis, probed: Millis },
}

/// The circuit and the reachability record of one store client.
pub struct StoreHealth {
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

impl std::fmt::Debug for StoreHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHealth")
            .field("state", &*self.state())
            .finish()
    }
}

impl StoreHealth {
    /// Starts as reachable from now: a replica that just started has not seen the silence before
    /// it, so it gives silos a TTL before judging them.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let since = clock.now_ms();
        Self {
            clock,
            state: Mutex::new(State::Reachable { since }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a call may go to the store now: always while it is reachable; while it is not, one
    /// probe per [`PROBE_INTERVAL_MS`].
    pub fn admit(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut state = self.state();
        match *state {
            State::Reachable { .. } => Ok(()),
            State::Unreachable { since, probed } if now - probed >= PROBE_INTERVAL_MS => {
                *state = State::Unreachable { since, probed: now };
                Ok(())
            }
            State::Unreachable { .. } => Err(StoreError::Unreachable),
        }
    }

    /// Records how a call that was admitted went.
    pub fn observe<T>(&self, outcome: &Result<T, StoreError>) {
        let now = self.clock.now_ms();
        let mut state = self.state();
        match (outcome, *state) {
            (Err(error), State::Reachable { .. }) if error.is_unreachable() => {
                tracing::error!(%error, "the store is unreachable; failing fast until it answers");
                *state = State::Unreachable {
                    since: now,
                    probed: now,
                };
            }
            // Any answer from the database, even a refusal, means it is reachable again.
            (Ok(_), State::Unreachable { since, .. }) => {
                tracing::warn!(down_ms = now - since, "the store answers again");
                *state = State::Reachable { since: now };
            }
            (Err(error), State::Unreachable { since, .. }) if !error.is_unreachable() => {
                tracing::warn!(down_ms = now - since, "the store answers again");
                *state = State::Reachable { since: now };
            }
            _ => {}
        }
    }

    /// How long the store has been reachable without interruption; 0 while it is not.
    pub fn reachable_for_ms(&self) -> Millis {
        match *self.state() {
            State::Reachable { since } => self.clock.now_ms().saturating_sub(since).max(0),
            State::Unreachable { .. } => 0,
        }
    }

    /// Runs one store call through the circuit.
    pub async fn guard<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.admit()?;
        let outcome = call.await;
        self.observe(&outcome);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn io_error() -> StoreError {
        StoreError::Database(Arc::new(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ))))
    }

    #[test]
    fn an_unreachable_store_fails_fast_but_is_probed_and_then_counts_its_reachable_time_anew() {
        let clock = ManualClock::starting_at(0);
        let health = StoreHealth::new(Arc::new(clock.clone()));
        clock.advance_ms(60_000);
        assert_eq!(health.reachable_for_ms(), 60_000);

        health.admit().unwrap();
        health.observe::<()>(&Err(io_error()));
        assert_eq!(health.reachable_for_ms(), 0);
        assert!(matches!(health.admit(), Err(StoreError::Unreachable)));

        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().expect("a probe goes through");
        assert!(
            matches!(health.admit(), Err(StoreError::Unreachable)),
            "one probe per interval"
        );
        health.observe(&Ok(()));
        health.admit().unwrap();
        clock.advance_ms(2_500);
        assert_eq!(health.reachable_for_ms(), 2_500);
    }

    #[test]
    fn a_refused_statement_is_not_an_outage() {
        let clock = ManualClock::starting_at(0);
        let health = StoreHealth::new(Arc::new(clock.clone()));
        clock.advance_ms(1_000);
        health.observe::<()>(&Err(StoreError::Corrupt("bad row".into())));
        health.observe::<()>(&Err(StoreError::Contended(3)));
        assert_eq!(health.reachable_for_ms(), 1_000);
    }
}
