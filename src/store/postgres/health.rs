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
//! looks like to a client ([`StoreError::reach`], of the errors `super::error` makes of sqlx's):
//! refused connections, sessions terminated
//! (57P01), a server starting up or shutting down, a server that can no longer write — and calls
//! that got no answer in time (a wait for a pooled connection, a statement past its deadline)
//! while no other call got one either: no connection could be made, or the network swallowed
//! them. Such a wait while other calls are being answered is overload, a slow statement, or
//! commits waiting for a synchronous standby that is gone — not an outage (the circuit stays
//! closed, reads go on). But what that call sent, perhaps a heartbeat, may not be stored, so
//! silence counts again from then: a replica that cannot get its writes answered in time does
//! not judge silence either (a heartbeat that could not be stored is not a silo's silence).
//!
//! The durations are this replica's own (a monotonic clock in production), which is why it is per
//! replica: a replica that could not reach the store does not judge silence it could not see. Nor
//! does one whose process did not run ([`StallWatch`]): a stall counts here as an outage that began
//! and ended, without opening the circuit (the database was never the problem).

use std::sync::{Arc, Mutex};

use crate::clock::{Clock, Millis};
use crate::store::stalls::{StallWatch, StallsTaken};
use crate::store::{Reach, StoreError};
use crate::telemetry::metric;

/// While the circuit is open, one call per interval goes through to find out whether the store is
/// back; the others fail at once.
pub const PROBE_INTERVAL_MS: Millis = 100;

/// A call slower than this restarts the count of silence, as one that got no answer does: a
/// heartbeat stamped at the start of a statement acknowledged this much later leaves its silo
/// looking silent for that long (commits that waited for a synchronous standby after a failover
/// made silos of a 3 s TTL look dead). The bound of a process's own stall, for the same reason.
pub const SLOW_CALL_MS: Millis = crate::store::stalls::STALL_MS;

#[derive(Debug)]
struct State {
    /// Closed while the store answers; when open, the last probe went through at `probed`.
    open_since_probe: Option<Millis>,
    /// When a call last got an answer from the database.
    last_answer: Option<Millis>,
    /// Since when every call has reached the store; `None` during an outage and before the first
    /// answer.
    reachable_since: Option<Millis>,
    /// The outage under way: it may have begun right after `.0` (the last answer before it), and
    /// was noticed at `.1`. An answer to a call that started before `.1` does not end it: the
    /// call may have reached the database just before it went down.
    outage: Option<(Millis, Millis)>,
    /// How many outages began (see [`StoreHealth::outages_seen`]).
    outages_seen: u64,
    /// How many times silence began to be counted again: every outage, stall and slow call (see
    /// [`StoreHealth::watch_restarts`]).
    watch_restarts: u64,
    /// The last call lost during the outage found the database answering but read-only (a standby
    /// not yet promoted, a primary set read-only): the calls the open circuit refuses say so.
    read_only: bool,
    /// The stalls of this replica's process already counted, and when the last was (this
    /// replica's clock).
    stalls: StallsTaken,
    last_stall: Option<Millis>,
}

/// The circuit and the reachability record of one store client.
pub struct StoreHealth {
    clock: Arc<dyn Clock>,
    /// Whether this replica's process has been running.
    stalls: Arc<StallWatch>,
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
    /// until it has watched a whole TTL go by itself. `stalls` tells it when its process did not
    /// run ([`StallWatch::process`] in production).
    pub fn new(clock: Arc<dyn Clock>, stalls: Arc<StallWatch>) -> Self {
        let created = clock.now_ms();
        Self {
            clock,
            stalls,
            created,
            state: Mutex::new(State {
                open_since_probe: None,
                last_answer: None,
                reachable_since: None,
                outage: None,
                outages_seen: 0,
                watch_restarts: 0,
                read_only: false,
                stalls: StallsTaken::default(),
                last_stall: None,
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
            Some(_) if state.read_only => Err(StoreError::ReadOnly(String::new())),
            Some(_) => Err(StoreError::Unreachable(String::new())),
        }
    }

    /// The replica refused work it could not keep up with (see [`StallWatch::could_not_keep_up`]).
    pub fn could_not_keep_up(&self) {
        self.stalls.could_not_keep_up();
    }

    /// This replica's own time (what [`Self::settle`] is given a call's start in).
    pub fn now(&self) -> Millis {
        self.clock.now_ms()
    }

    /// How long this replica has reached the store without a break, on its own clock: 0 while it
    /// cannot, and until its first answer; counted again from the end of a stall of its process.
    pub fn reachable_for(&self) -> Millis {
        let now = self.clock.now_ms();
        let mut state = self.state();
        self.take_stalls(&mut state, now);
        state
            .reachable_since
            .map_or(0, |since| (now - since).max(0))
    }

    /// How many outages this replica has seen begin: what may have lost a write, so that caches
    /// of the store's answers are dropped when it moves.
    pub fn outages_seen(&self) -> u64 {
        self.state().outages_seen
    }

    /// How many times the count of silence restarted: at every outage, stall and slow call. A
    /// statement that judges (and kills) with [`Self::reachable_for`] read before it checks that
    /// this did not change before it commits: a restart while it waited (for a connection, for a
    /// commit) would otherwise not be counted in its judgement.
    pub fn watch_restarts(&self) -> u64 {
        let now = self.clock.now_ms();
        let mut state = self.state();
        self.take_stalls(&mut state, now);
        state.watch_restarts
    }

    /// Silence counts again from `now` (while the store is reached; during an outage it already
    /// counts from the outage's end), and judgements under way roll back.
    fn restart_watch(state: &mut State, now: Millis) {
        state.watch_restarts += 1;
        if state.reachable_since.is_some() {
            state.reachable_since = Some(now);
        }
    }

    /// A stall of this replica's process (or work it could not keep up with) not yet counted:
    /// reachability restarts, and judgements made across it roll back. Nothing was lost in the
    /// store, so no outage is counted (caches stay) and the circuit stays as it is.
    fn take_stalls(&self, state: &mut State, now: Millis) {
        if !state.stalls.news(&self.stalls) {
            return;
        }
        state.last_stall = Some(now);
        Self::restart_watch(state, now);
    }

    /// Settles a call that started at `started` (this replica's clock) and came to `outcome`,
    /// with what that says about the store (`reach`, usually [`StoreError::reach`]): records it,
    /// and turns a call that got no answer in time into [`StoreError::Overloaded`] when other
    /// calls were answered meanwhile or when this replica's process stalled meanwhile (its
    /// deadline ran out while it did not run, which says nothing of the store), and into an
    /// outage otherwise. A call that got no answer, or one slower than [`SLOW_CALL_MS`], restarts
    /// the count of silence: what it sent, perhaps a heartbeat, was not stored in time.
    pub fn settle<T>(
        &self,
        started: Millis,
        reach: Reach,
        outcome: Result<T, StoreError>,
    ) -> (Result<T, StoreError>, Verdict) {
        let now = self.clock.now_ms();
        let mut state = self.state();
        if now - started > SLOW_CALL_MS && reach != Reach::Unknown {
            Self::restart_watch(&mut state, now);
        }
        let lost = match reach {
            Reach::Answered => false,
            Reach::Unknown => return (outcome, Verdict::NoNews),
            Reach::Unreachable => true,
            Reach::NoAnswer => {
                self.take_stalls(&mut state, now);
                let answered = state.last_answer.is_some_and(|answer| answer > started);
                let stalled = state.last_stall.is_some_and(|stall| stall >= started);
                if answered || stalled {
                    // Others were answered, but this call was not: if it was a heartbeat, its
                    // silo's silence is not the silo's. Commits waiting for a synchronous standby
                    // that is gone look like this (reads answered, writes not): silence counts
                    // again from now, without an outage (the circuit stays closed).
                    Self::restart_watch(&mut state, now);
                    return (Err(StoreError::Overloaded), Verdict::NoNews);
                }
                true
            }
        };
        if !lost {
            if let Some((_, noticed)) = state.outage {
                if started < noticed {
                    // It reached the database before the outage was noticed: no news of now.
                    return (outcome, Verdict::NoNews);
                }
            }
            state.last_answer = Some(now);
            state.open_since_probe = None;
            state.read_only = false;
            state.reachable_since.get_or_insert(now);
            if let Some((since, _)) = state.outage.take() {
                metric::store_circuit(false);
                let down_ms = now - since;
                tracing::warn!(
                    down_ms,
                    "the store answers again; silence before now is not counted against any \
                     silo: each gets a whole TTL from now"
                );
                metric::store_outage_ended(down_ms);
            }
            return (outcome, Verdict::Answered);
        }
        state.reachable_since = None;
        state.open_since_probe = Some(now);
        state.read_only = matches!(outcome, Err(StoreError::ReadOnly(_)));
        if state.outage.is_some() {
            return (outcome, Verdict::StillDown);
        }
        let since = state.last_answer.unwrap_or(self.created);
        state.outage = Some((since, now));
        state.outages_seen += 1;
        state.watch_restarts += 1;
        if let Err(error) = &outcome {
            tracing::error!(
                %error,
                last_answer_ms_ago = now - since,
                "the store cannot be reached: an outage begins; failing fast until it answers, and \
                 declaring no silo dead for its silence meanwhile"
            );
        }
        metric::store_outage_began();
        metric::store_circuit(true);
        (outcome, Verdict::OutageBegan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::stalls::STALL_MS;

    fn io_error() -> StoreError {
        StoreError::from(sqlx::Error::Io(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        )))
    }

    fn pool_timed_out() -> StoreError {
        StoreError::from(sqlx::Error::PoolTimedOut)
    }

    /// Health on a clock of its own, on a process whose own clock a test moves to stage a stall:
    /// the health, its clock and the process's.
    fn health_with_process() -> (StoreHealth, ManualClock, ManualClock) {
        let clock = ManualClock::starting_at(0);
        let process = ManualClock::starting_at(0);
        let health = StoreHealth::new(
            Arc::new(clock.clone()),
            StallWatch::on(Arc::new(process.clone())),
        );
        (health, clock, process)
    }

    /// Health on `clock`, on a process that never stalls (its watch's clock stands still).
    fn health_at(clock: &ManualClock) -> StoreHealth {
        StoreHealth::new(
            Arc::new(clock.clone()),
            StallWatch::on(Arc::new(ManualClock::starting_at(0))),
        )
    }

    /// Settles a call that began `took` ms before now; what it said about the store.
    fn call(
        health: &StoreHealth,
        clock: &ManualClock,
        took: Millis,
        outcome: Result<(), StoreError>,
    ) -> Verdict {
        let reach = match &outcome {
            Ok(_) => Reach::Answered,
            Err(error) => error.reach(),
        };
        health.settle(clock.now_ms() - took, reach, outcome).1
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
    fn a_stall_of_the_process_restarts_reachability_and_rolls_judgements_back_but_keeps_the_circuit(
    ) {
        let (health, clock, process) = health_with_process();
        call(&health, &clock, 1, Ok(()));
        // The process's own clock stands for looks often enough to see no stall (in production,
        // the ticking thread's every 100 ms).
        clock.advance_ms(20_000);
        process.advance_ms(STALL_MS);
        let judging = health.watch_restarts();
        assert_eq!(health.reachable_for(), 20_000, "no stall");

        // Frozen for 15 s: the store's clock and the process's move on together, and the first
        // look after it — here a judge's — finds the gap.
        clock.advance_ms(15_000);
        process.advance_ms(15_000);
        assert_eq!(
            health.reachable_for(),
            0,
            "silence counts from the end of the stall"
        );
        assert_eq!(
            health.watch_restarts(),
            judging + 1,
            "a judgement made across it rolls back"
        );
        health
            .admit()
            .expect("the circuit stays closed: the database was never the problem");
        clock.advance_ms(300);
        process.advance_ms(300);
        assert_eq!(health.reachable_for(), 300);
        assert_eq!(health.watch_restarts(), judging + 1, "counted once");
    }

    #[test]
    fn a_slow_answer_restarts_the_count_of_silence_and_voids_judgements_under_way() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(10_000);
        let judging = health.watch_restarts();
        // Answered in time: nothing changes.
        call(&health, &clock, SLOW_CALL_MS, Ok(()));
        assert_eq!(health.reachable_for(), 10_000);
        assert_eq!(health.watch_restarts(), judging);
        // A commit that waited 2.8 s (a synchronous standby reattaching after a failover): the
        // heartbeat it stored was stamped 2.8 s before its silo heard back.
        call(&health, &clock, 2_800, Ok(()));
        assert_eq!(health.reachable_for(), 0, "silence counts again from now");
        assert_eq!(
            health.watch_restarts(),
            judging + 1,
            "a judgement under way rolls back"
        );
        assert_eq!(health.outages_seen(), 0, "no outage: caches stay");
        health.admit().expect("the circuit stays closed");
    }

    #[test]
    fn a_call_whose_deadline_ran_out_while_the_process_stalled_is_no_outage() {
        let (health, clock, process) = health_with_process();
        call(&health, &clock, 1, Ok(()));
        // A statement is sent; the process freezes for 9 s; when it runs again its 3 s deadline
        // has passed, though the database may well have answered long ago.
        let started = clock.now_ms();
        clock.advance_ms(9_000);
        process.advance_ms(9_000);
        let (outcome, verdict) =
            health.settle(started, Reach::NoAnswer, Err::<(), _>(pool_timed_out()));
        assert_eq!(verdict, Verdict::NoNews);
        assert!(matches!(outcome, Err(StoreError::Overloaded)));
        health.admit().expect("the circuit stays closed");
        // A later call that gets no answer with no stall and no other answer is an outage again.
        clock.advance_ms(500);
        process.advance_ms(500);
        let started = clock.now_ms();
        clock.advance_ms(3_000);
        let (_, verdict) = health.settle(started, Reach::NoAnswer, Err::<(), _>(pool_timed_out()));
        assert_eq!(verdict, Verdict::OutageBegan);
    }

    #[test]
    fn a_stall_during_an_outage_leaves_the_replica_unreachable() {
        let (health, clock, process) = health_with_process();
        call(&health, &clock, 1, Ok(()));
        call(&health, &clock, 1, Err(io_error()));
        process.advance_ms(5_000);
        clock.advance_ms(5_000);
        assert_eq!(health.reachable_for(), 0);
        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().expect("a probe");
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(40);
        assert_eq!(
            health.reachable_for(),
            40,
            "counted from the answer after both"
        );
    }

    #[test]
    fn what_a_real_server_stop_looks_like_is_an_outage() {
        let terminated = |code: &'static str| {
            // The server's FATAL error as sqlx reports it.
            StoreError::from(sqlx::Error::Database(Box::new(TestDbError(code))))
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
            StoreError::Unreachable(String::new()),
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
        // In the domain's words: a standby is read-only, and whatever else the server refuses is
        // a failure it answered.
        assert!(matches!(terminated("25006"), StoreError::ReadOnly(_)));
        assert!(matches!(terminated("57P01"), StoreError::Unreachable(_)));
        assert!(matches!(terminated("23505"), StoreError::Failed(_)));
        assert!(matches!(pool_timed_out(), StoreError::TimedOut(_)));
    }

    #[test]
    fn the_open_circuit_says_the_database_is_read_only_until_an_answer_closes_it() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(10);
        let read_only = StoreError::ReadOnly("cannot execute UPDATE".into());
        assert_eq!(
            call(&health, &clock, 1, Err(read_only)),
            Verdict::OutageBegan
        );
        clock.advance_ms(1);
        assert!(matches!(health.admit(), Err(StoreError::ReadOnly(d)) if d.is_empty()));
        // A probe that finds the database unreachable instead changes what is said.
        clock.advance_ms(PROBE_INTERVAL_MS);
        assert_eq!(
            call(&health, &clock, 1, Err(io_error())),
            Verdict::StillDown
        );
        clock.advance_ms(1);
        assert!(matches!(health.admit(), Err(StoreError::Unreachable(_))));
        clock.advance_ms(PROBE_INTERVAL_MS);
        assert_eq!(call(&health, &clock, 1, Ok(())), Verdict::Answered);
        assert!(health.admit().is_ok());
    }

    #[test]
    fn a_call_without_an_answer_in_time_while_nothing_else_is_answered_is_an_outage() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(10_000);
        // Waited 500 ms for a connection; no call was answered meanwhile (the server is down and
        // the pool keeps failing to connect).
        let (outcome, verdict) = health.settle(
            clock.now_ms() - 500,
            Reach::NoAnswer,
            Err::<(), _>(pool_timed_out()),
        );
        assert_eq!(verdict, Verdict::OutageBegan);
        assert!(
            matches!(outcome, Err(StoreError::TimedOut(_))),
            "the error is kept"
        );
        assert_eq!(health.reachable_for(), 0);
        assert!(health.admit().is_err(), "the circuit opened");
    }

    #[test]
    fn a_call_without_an_answer_in_time_while_others_are_answered_is_overload_and_restarts_the_watch(
    ) {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(10_000);
        // Another call is answered while this one waits for a connection (or for its statement:
        // a lock wait past the deadline is the same case).
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(300);
        let (outcome, verdict) = health.settle(
            clock.now_ms() - 500,
            Reach::NoAnswer,
            Err::<(), _>(pool_timed_out()),
        );
        assert_eq!(verdict, Verdict::NoNews);
        assert!(matches!(outcome, Err(StoreError::Overloaded)));
        assert_eq!(
            health.reachable_for(),
            0,
            "what it sent (a heartbeat?) may not be stored: silence counts again from now"
        );
        health.admit().expect("the circuit stays closed");
        clock.advance_ms(200);
        assert_eq!(
            health.reachable_for(),
            200,
            "no outage: reachable from then on"
        );
    }

    #[test]
    fn an_answer_to_a_call_made_before_the_outage_was_noticed_does_not_end_it() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        clock.advance_ms(1_000);
        let outages = health.outages_seen();
        assert_eq!(
            call(&health, &clock, 1, Err(io_error())),
            Verdict::OutageBegan
        );
        assert_eq!(health.outages_seen(), outages + 1);
        clock.advance_ms(10);
        // This call started 200 ms ago, before the failure above was noticed: it reached the
        // database just before it went down, which says nothing of now.
        assert_eq!(call(&health, &clock, 200, Ok(())), Verdict::NoNews);
        assert_eq!(health.reachable_for(), 0);
        assert!(health.admit().is_err(), "still open");
        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().expect("a probe");
        assert_eq!(call(&health, &clock, 1, Ok(())), Verdict::Answered);
        assert_eq!(health.outages_seen(), outages + 1);
    }

    #[test]
    fn an_open_circuit_fails_fast_and_lets_one_probe_through_per_interval() {
        let clock = ManualClock::starting_at(0);
        let health = health_at(&clock);
        call(&health, &clock, 1, Ok(()));
        call(&health, &clock, 1, Err(io_error()));
        assert!(matches!(health.admit(), Err(StoreError::Unreachable(_))));
        clock.advance_ms(PROBE_INTERVAL_MS);
        health.admit().expect("a probe goes through");
        assert!(matches!(health.admit(), Err(StoreError::Unreachable(_))));
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
