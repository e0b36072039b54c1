//! Whether this replica can reach its store: a circuit breaker, and the outage that liveness forgives.
//!
//! Two problems with one cause. While the database is down, every request used to wait for a
//! connection until the request timed out (5 s), and `/readyz` with them; now the first failures
//! open a circuit and calls fail at once with [`StoreError::Unreachable`], except one probe per
//! [`PROBE_INTERVAL_MS`] that tries for real and closes the circuit when it gets an answer. And while
//! the database is down no heartbeat can be stored, so when it comes back every silo looks silent:
//! [`StoreHealth::last_outage`] tells the liveness rule when this replica last could not reach the
//! store, and that span is not counted as anyone's silence (`cluster::silo::Liveness`). Only as long
//! as the outage itself: a blip forgives a blip, so a replica that sees the odd broken connection
//! still declares the dead dead.
//!
//! The durations are this replica's own (a monotonic clock in production), which is why it is per
//! replica: a replica that could not reach the store does not judge silence it could not see.

use std::sync::{Arc, Mutex};

use super::StoreError;
use crate::clock::{Clock, Millis};

/// While the circuit is open, one call per interval goes through to find out whether the store is
/// back; the others fail at once.
pub const PROBE_INTERVAL_MS: Millis = 100;

/// The last outage, as how long ago (on this replica's clock) it began and ended; `ended_ago` is 0
/// while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutageAgo {
    pub began_ago: Millis,
    pub ended_ago: Millis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Calls reach the store, the last at `last_ok`; the last outage, if any, began and ended then.
    Reachable {
        last_ok: Millis,
        last_outage: Option<(Millis, Millis)>,
    },
    /// The store has not been reached since `since` (the last call that reached it: the outage may
    /// have begun right after it); the last probe went through at `probed`.
    Unreachable { since: Millis, probed: Millis },
}

/// The circuit and the outage record of one store client.
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
    /// Starts reachable. A replica that just started has no outage to forgive: it judges by the
    /// stamps in the store, which other replicas kept current.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let now = clock.now_ms();
        Self {
            clock,
            state: Mutex::new(State::Reachable {
                last_ok: now,
                last_outage: None,
            }),
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

    /// Records how a call that was admitted went: an error that says the store could not be
    /// reached opens the circuit, and any answer from the database closes it.
    pub fn observe<T>(&self, outcome: &Result<T, StoreError>) {
        let unreachable = matches!(outcome, Err(error) if error.is_unreachable());
        let now = self.clock.now_ms();
        let mut state = self.state();
        match (unreachable, *state) {
            (true, State::Reachable { last_ok, .. }) => {
                if let Err(error) = outcome {
                    tracing::error!(%error, "the store is unreachable; failing fast until it answers");
                }
                *state = State::Unreachable {
                    since: last_ok,
                    probed: now,
                };
            }
            (false, State::Reachable { last_outage, .. }) => {
                *state = State::Reachable {
                    last_ok: now,
                    last_outage,
                };
            }
            (false, State::Unreachable { since, .. }) => {
                tracing::warn!(down_ms = now - since, "the store answers again");
                *state = State::Reachable {
                    last_ok: now,
                    last_outage: Some((since, now)),
                };
            }
            (true, State::Unreachable { .. }) => {}
        }
    }

    /// When this replica last could not reach the store, if it ever could not.
    pub fn last_outage(&self) -> Option<OutageAgo> {
        let now = self.clock.now_ms();
        match *self.state() {
            State::Reachable { last_outage, .. } => last_outage.map(|(began, ended)| OutageAgo {
                began_ago: now - began,
                ended_ago: now - ended,
            }),
            State::Unreachable { since, .. } => Some(OutageAgo {
                began_ago: now - since,
                ended_ago: 0,
            }),
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
    fn an_unreachable_store_fails_fast_is_probed_and_its_outage_is_remembered() {
        let clock = ManualClock::starting_at(0);
        let health = StoreHealth::new(Arc::new(clock.clone()));
        clock.advance_ms(60_000);
        health.observe(&Ok(()));
        assert_eq!(health.last_outage(), None);

        // The failure is seen 500 ms after the last success: the outage may have begun right
        // after that success, and counts from there.
        clock.advance_ms(500);
        health.admit().unwrap();
        health.observe::<()>(&Err(io_error()));
        assert!(matches!(health.admit(), Err(StoreError::Unreachable)));
        clock.advance_ms(2_500);
        assert_eq!(
            health.last_outage(),
            Some(OutageAgo {
                began_ago: 3_000,
                ended_ago: 0
            })
        );

        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().expect("a probe goes through");
        assert!(
            matches!(health.admit(), Err(StoreError::Unreachable)),
            "one probe per interval"
        );
        health.observe::<()>(&Err(StoreError::Database(Arc::new(
            sqlx::Error::PoolTimedOut,
        ))));
        assert!(
            matches!(health.admit(), Err(StoreError::Unreachable)),
            "still down"
        );
        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().unwrap();
        health.observe(&Ok(()));
        health.admit().unwrap();
        clock.advance_ms(2_500);
        assert_eq!(
            health.last_outage(),
            Some(OutageAgo {
                began_ago: 2_500 + 2 * PROBE_INTERVAL_MS + 3_000,
                ended_ago: 2_500
            })
        );
    }

    #[test]
    fn a_refused_statement_is_an_answer_not_an_outage() {
        let clock = ManualClock::starting_at(0);
        let health = StoreHealth::new(Arc::new(clock.clone()));
        health.observe::<()>(&Err(StoreError::Corrupt("bad row".into())));
        health.observe::<()>(&Err(StoreError::Contended(3)));
        assert_eq!(health.last_outage(), None);
        health.observe::<()>(&Err(io_error()));
        clock.advance_ms(1_000);
        health.observe::<()>(&Err(StoreError::Contended(3)));
        assert_eq!(
            health.last_outage(),
            Some(OutageAgo {
                began_ago: 1_000,
                ended_ago: 0
            }),
            "a refusal closes the circuit: the database answered"
        );
    }
}
