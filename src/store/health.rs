//! Whether this replica can reach its store: a circuit breaker, and how long it has reached it
//! without a break — what the death rule counts silence from.
//!
//! Two problems with one cause. While the database is down, every request used to wait for a
//! connection until the request timed out, and `/readyz` with them; now the first failure opens a
//! circuit and calls fail at once with [`StoreError::Unreachable`], except one probe per
//! [`PROBE_INTERVAL_MS`] that tries for real and closes the circuit when it gets an answer. And
//! while the database is down no heartbeat can be stored, so when it comes back every silo looks
//! silent: [`StoreHealth::reachable_for`] says how long this replica has reached the store without
//! a break, and the death rule (`cluster::silo::Liveness`) counts no silence from before then.
//!
//! What counts as not reaching the store is whatever a real stop, restart, crash or failover
//! looks like to a client ([`StoreError::reach`]): refused connections, sessions terminated
//! (57P01), a server starting up or shutting down, a server that can no longer write, statements
//! that outlive their deadline — and waits for a pooled connection that time out while no call
//! gets an answer, because no connection can be made. A wait that times out while other calls are
//! being answered is overload, not an outage.
//!
//! The durations are this replica's own (a monotonic clock in production), which is why it is per
//! replica: a replica that could not reach the store does not judge silence it could not see.

use std::sync::{Arc, Mutex};

use super::{Reach, StoreError};
use crate::clock::{Clock, Millis};
use crate::telemetry::metric;

/// While the circuit is open, one call per interval goes through to find out whether the store is
/// back; the others fail at once.
pub const PROBE_INTERVAL_MS: Millis = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    /// Closed while the store answers; when open, the last probe went through at `probed`.
    open_since_probe: Option<Millis>,
    /// When a call last got an answer from the database.
    last_answer: Option<Millis>,
    /// Since when every call has reached the store; `None` during an outage and before the first
    /// answer.
    reachable_since: Option<Millis>,
    /// The outage under way: it may have begun right after this (the last answer before it).
    outage_since: Option<Millis>,
}

/// The circuit and the reachability record of one store client.
pub struct StoreHealth {
    clock: Arc<dyn Clock>,
    /// When it was made: an outage before any answer counts from here.
    created: Millis,
    state: Mutex<State>,
}

impl std::fmt::Debug for StoreHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHealth")
            .field("state", &*self.state())
            .finish()
    }
}

/// What became of one call, for the store's own bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The database answered (perhaps with a refusal).
    Answered,
    /// The store could not be reached; an outage began with this call.
    OutageBegan,
    /// The store could not be reached, as on the calls before.
    StillDown,
    /// Nothing learned about the store (the replica's own queue was full, …).
    NoNews,
}

impl StoreHealth {
    /// A replica that just started has reached the store for no time at all: it judges no silence
    /// until it has watched a whole TTL go by itself.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        let created = clock.now_ms();
        Self {
            clock,
            created,
            state: Mutex::new(State {
                open_since_probe: None,
                last_answer: None,
                reachable_since: None,
                outage_since: None,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a call may go to the store now: always while the circuit is closed; while it is
    /// open, one probe per [`PROBE_INTERVAL_MS`].
    pub fn admit(&self) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        let mut state = self.state();
        match state.open_since_probe {
            None => Ok(()),
            Some(probed) if now - probed >= PROBE_INTERVAL_MS => {
                state.open_since_probe = Some(now);
                Ok(())
            }
            Some(_) => Err(StoreError::Unreachable),
        }
    }

    /// This replica's own time (what [`Self::settle`] is given a call's start in).
    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// How long this replica has reached the store without a break, on its own clock: 0 while it
    /// cannot, and until its first answer.
    pub fn reachable_for(&self) -> Millis {
        let now = self.clock.now_ms();
        self.state()
            .reachable_since
            .map_or(0, |since| (now - since).max(0))
    }

    /// Settles a call that started at `started` (this replica's clock) and came to `outcome`:
    /// records what it says about the store, and turns a timed-out wait for a connection into
    /// [`StoreError::Overloaded`] when other calls were answered meanwhile (into an outage when
    /// none was).
    pub fn settle<T>(
        &self,
        started: Millis,
        outcome: Result<T, StoreError>,
    ) -> (Result<T, StoreError>, Verdict) {
        let reach = match &outcome {
            Ok(_) => Reach::Answered,
            Err(error) => error.reach(),
        };
        let now = self.clock.now_ms();
        let mut state = self.state();
        let lost = match reach {
            Reach::Answered => false,
            Reach::Unknown => return (outcome, Verdict::NoNews),
            Reach::Unreachable => true,
            Reach::ConnectionWait => {
                if state.last_answer.is_some_and(|answer| answer > started) {
                    return (Err(StoreError::Overloaded), Verdict::NoNews);
                }
                true
            }
        };
        if !lost {
            state.last_answer = Some(now);
            state.open_since_probe = None;
            state.reachable_since.get_or_insert(now);
            let verdict = match state.outage_since.take() {
                Some(since) => {
                    let down_ms = now - since;
                    tracing::warn!(
                        down_ms,
                        "the store answers again; silence before now is not counted against any \
                         silo: each gets a whole TTL from now"
                    );
                    metric::store_outage_ended(down_ms);
                    Verdict::Answered
                }
                None => Verdict::Answered,
            };
            return (outcome, verdict);
        }
        state.reachable_since = None;
        state.open_since_probe = Some(now);
        if state.outage_since.is_some() {
            return (outcome, Verdict::StillDown);
        }
        let since = state.last_answer.unwrap_or(self.created);
        state.outage_since = Some(since);
        if let Err(error) = &outcome {
            tracing::error!(
                %error,
                last_answer_ms_ago = now - since,
                "the store cannot be reached: an outage begins; failing fast until it answers, and \
                 declaring no silo dead for its silence meanwhile"
            );
        }
        metric::store_outage_began();
        (outcome, Verdict::OutageBegan)
    }

    /// Runs one store call through the circuit.
    pub async fn guard<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.admit()?;
        let started = self.clock.now_ms();
        let outcome = call.await;
        self.settle(started, outcome).0
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

    fn pool_timed_out() -> StoreError {
        StoreError::Database(Arc::new(sqlx::Error::PoolTimedOut))
    }

    fn health_at(clock: &ManualClock) -> StoreHealth {
        StoreHealth::new(Arc::new(clock.clone()))
    }

    /// Settles a call that began `took` ms before now; what it said about the store.
    fn call(
        health: &StoreHealth,
        clock: &ManualClock,
        took: Millis,
        outcome: Result<(), StoreError>,
    ) -> Verdict {
        health.settle(clock.now_ms() - took, outcome).1
    }

    #[test]
    fn reachability_counts_from_the_first_answer_and_restarts_after_every_outage() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        assert_eq!(health.reachable_for(), 0, "nothing answered yet");
        clock.advance_ms(1_000);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(5_000);
        assert_eq!(health.reachable_for(), 5_000);

        // First outage: a refused connection.
        assert_eq!(
            call(&health, &clock, 1, Err(io_error())),
            Verdict::OutageBegan
        );
        assert_eq!(health.reachable_for(), 0);
        clock.advance_ms(2_000);
        assert_eq!(call(&health, &clock, 1, Ok(())), Verdict::Answered);
        clock.advance_ms(300);
        assert_eq!(health.reachable_for(), 300);

        // A second, shorter outage restarts the count too: every outage is forgiven.
        assert_eq!(
            call(&health, &clock, 1, Err(io_error())),
            Verdict::OutageBegan
        );
        clock.advance_ms(100);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(50);
        assert_eq!(health.reachable_for(), 50);
    }

    #[test]
    fn what_a_real_server_stop_looks_like_is_an_outage() {
        let terminated = |code: &'static str| {
            // The server's FATAL error as sqlx reports it.
            StoreError::Database(Arc::new(sqlx::Error::Database(Box::new(TestDbError(code)))))
        };
        for error in [
            io_error(),
            terminated("57P01"), // admin_shutdown: the session was terminated by a stop
            terminated("57P02"), // crash_shutdown
            terminated("57P03"), // cannot_connect_now: starting up or shutting down
            terminated("08006"), // connection_failure
            terminated("25006"), // read_only_sql_transaction: a standby cannot take the write
            terminated("53300"), // too_many_connections
            terminated("58030"), // io_error on the server
            StoreError::Unreachable,
        ] {
            assert_eq!(error.reach(), Reach::Unreachable, "{error}");
        }
        for answer in [
            terminated("23505"),
            terminated("40P01"),
            StoreError::Corrupt("bad row".into()),
            StoreError::Contended(3),
        ] {
            assert_eq!(answer.reach(), Reach::Answered, "{answer}");
        }
        assert_eq!(StoreError::Overloaded.reach(), Reach::Unknown);
    }

    #[test]
    fn a_connection_wait_that_times_out_while_nothing_is_answered_is_an_outage() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(10_000);
        // Waited 500 ms for a connection; no call was answered meanwhile (the server is down and
        // the pool keeps failing to connect).
        let (outcome, verdict) =
            health.settle(clock.now_ms() - 500, Err::<(), _>(pool_timed_out()));
        assert_eq!(verdict, Verdict::OutageBegan);
        assert!(
            matches!(outcome, Err(StoreError::Database(_))),
            "the error is kept"
        );
        assert_eq!(health.reachable_for(), 0);
        assert!(health.admit().is_err(), "the circuit opened");
    }

    #[test]
    fn a_connection_wait_that_times_out_while_others_are_answered_is_overload() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(10_000);
        // Another call is answered while this one waits for a connection.
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(300);
        let (outcome, verdict) =
            health.settle(clock.now_ms() - 500, Err::<(), _>(pool_timed_out()));
        assert_eq!(verdict, Verdict::NoNews);
        assert!(matches!(outcome, Err(StoreError::Overloaded)));
        assert_eq!(health.reachable_for(), 10_300, "no break in reachability");
        health.admit().expect("the circuit stays closed");
    }

    #[test]
    fn an_open_circuit_fails_fast_and_lets_one_probe_through_per_interval() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        call(&health, &clock, 1, Err(io_error()));
        assert!(matches!(health.admit(), Err(StoreError::Unreachable)));
        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().expect("a probe goes through");
        assert!(matches!(health.admit(), Err(StoreError::Unreachable)));
        assert_eq!(
            call(&health, &clock, 1, Err(io_error())),
            Verdict::StillDown
        );
        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().unwrap();
        call(&health, &clock, 1, Ok(()));
        health.admit().expect("closed again");
    }

    #[test]
    fn an_outage_before_the_first_answer_keeps_the_replica_from_judging() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        clock.advance_ms(5_000);
        assert_eq!(
            call(&health, &clock, 1, Err(io_error())),
            Verdict::OutageBegan
        );
        clock.advance_ms(5_000);
        call(&health, &clock, 1, Ok(()));
        assert_eq!(health.reachable_for(), 0);
    }

    /// A database error with only a code, as a server's FATAL or ERROR message reaches sqlx.
    #[derive(Debug)]
    struct TestDbError(&'static str);

    impl std::fmt::Display for TestDbError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "error {}", self.0)
        }
    }

    impl std::error::Error for TestDbError {}

    impl sqlx::error::DatabaseError for TestDbError {
        fn message(&self) -> &str {
            "test"
        }
        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }
}
