//! Whether this replica's own process has been running: a replica that did not run did not watch.
//!
//! The death rule declares a silo dead only after the judging replica has watched a whole TTL of
//! its silence, and a replica that could not reach its store did not watch ([`super::postgres::health`]).
//! Nor did one that was not running at all: frozen (SIGSTOP, a debugger), its VM paused, its CPU
//! throttled to nothing, its runtime stalled. Its silos' heartbeats wait in its socket queues
//! meanwhile, and when it runs again the first of them would find its silo silent for longer than
//! the TTL — and declare it dead for a silence the replica itself caused.
//!
//! **How a stall is detected.** A thread of its own looks at the replica's monotonic clock every
//! [`TICK_MS`] (100 ms); every judge of silence looks too, just before it judges. A look that finds
//! more than [`STALL_MS`] (1 s) since the one before saw a stall: the process did not run for that
//! long (a thread that sleeps 100 ms is not late by a second on a running machine). The looks are
//! what makes it exact: after a freeze, whichever runs first — the ticking thread or a queued
//! heartbeat's judge — finds the gap, so no judgement is made on the old reckoning.
//!
//! **What a stall does.** The stores count silence again from the end of the stall, as after an
//! outage of their store (each silo gets a whole TTL), and a judgement under way across it is
//! rolled back (`watch_restarts`); nothing was lost in the store, so caches stay. Work the replica
//! refused because it could not keep up ([`StallWatch::could_not_keep_up`]) does the same. Its bound: a stall of
//! [`STALL_MS`] or less is not seen, so a silo's silence as judged may include up to that much of
//! the replica's own stall — a tenth of the default 10 s TTL, which a silo beating once a second
//! never comes near. A stall seen where there was none (a ticking thread starved for over a
//! second) only delays real deaths by a TTL.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use crate::clock::{Clock, Millis, MonotonicClock};
use crate::telemetry::metric;

/// How often the ticking thread looks at the clock.
pub const TICK_MS: Millis = 100;

/// A gap between two looks longer than this was a stall of the process.
pub const STALL_MS: Millis = 1_000;

#[derive(Debug, Clone, Copy)]
struct Looked {
    /// When the clock was last looked at.
    last: Millis,
    /// How many stalls the looks found, and times the replica could not keep up.
    stalls: u64,
    /// When the replica last said it could not keep up.
    last_behind: Option<Millis>,
}

/// A process's record of its stalls, on a clock of its own (the monotonic one in production).
pub struct StallWatch {
    clock: Arc<dyn Clock>,
    looked: Mutex<Looked>,
}

impl std::fmt::Debug for StallWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StallWatch")
            .field("looked", &*self.lock())
            .finish()
    }
}

impl StallWatch {
    /// A watch on `clock` that nothing ticks: it sees a stall only where its clock moved more than
    /// [`STALL_MS`] between two looks. Tests hand it a clock of its own and move it to stage one.
    pub fn on(clock: Arc<dyn Clock>) -> Arc<Self> {
        let last = clock.now_ms();
        Arc::new(Self {
            clock,
            looked: Mutex::new(Looked {
                last,
                stalls: 0,
                last_behind: None,
            }),
        })
    }

    /// The process's watch: on the monotonic clock, looked at every [`TICK_MS`] by a thread of its
    /// own for as long as the process runs. Every store of a serving replica uses this one.
    pub fn process() -> Arc<Self> {
        static PROCESS: OnceLock<Arc<StallWatch>> = OnceLock::new();
        PROCESS
            .get_or_init(|| {
                let watch = Self::on(Arc::new(MonotonicClock::default()));
                watch.tick_in_a_thread();
                watch
            })
            .clone()
    }

    /// Looks at the clock every [`TICK_MS`] on a thread of its own (not a task: a runtime whose
    /// workers are all busy or blocked must not look like a stalled process), until the watch is
    /// dropped.
    fn tick_in_a_thread(self: &Arc<Self>) {
        let watch: Weak<Self> = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("stall-watch".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(TICK_MS.unsigned_abs()));
                match watch.upgrade() {
                    Some(watch) => {
                        watch.look();
                    }
                    None => return,
                }
            });
        if let Err(error) = spawned {
            // Then only the judges look: a stall is still seen by the first judge after it.
            tracing::warn!(%error, "cannot start the stall watch's thread");
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Looked> {
        self.looked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The replica refused work it could not keep up with (a request shed at its concurrency
    /// limit, perhaps a heartbeat): it did not watch either, and its silos' silence counts again
    /// from now, as after a stall. Taken in at most once per [`TICK_MS`], so that judges under a
    /// flood of refusals see one event a tick, not one a request.
    pub fn could_not_keep_up(&self) {
        let now = self.clock.now_ms();
        let mut looked = self.lock();
        if looked
            .last_behind
            .is_some_and(|behind| now - behind < TICK_MS)
        {
            return;
        }
        looked.last_behind = Some(now);
        looked.stalls += 1;
    }

    /// Looks at the clock: how many stalls the process has had (and times it could not keep up),
    /// this look's find included. A judge of silence looks just before it judges.
    pub fn look(&self) -> u64 {
        let now = self.clock.now_ms();
        let mut looked = self.lock();
        let gap = now - looked.last;
        if gap > STALL_MS {
            looked.stalls += 1;
            tracing::warn!(
                stalled_ms = gap,
                "this replica did not run for {gap} ms (frozen, paused or starved): it did not \
                 watch its silos meanwhile, so their silence is counted again from now"
            );
            metric::replica_stalled(gap);
        }
        looked.last = looked.last.max(now);
        looked.stalls
    }
}

/// What one judge has taken in of a [`StallWatch`]: the stalls it has counted.
#[derive(Debug, Default)]
pub struct StallsTaken(u64);

impl StallsTaken {
    /// Whether `watch` found a stall this judge has not taken in yet (and takes it in).
    pub fn news(&mut self, watch: &StallWatch) -> bool {
        let stalls = watch.look();
        let news = stalls > self.0;
        self.0 = self.0.max(stalls);
        news
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn watch_at(clock: &ManualClock) -> Arc<StallWatch> {
        StallWatch::on(Arc::new(clock.clone()))
    }

    #[test]
    fn looks_no_further_apart_than_the_bound_see_no_stall() {
        let clock = ManualClock::starting_at(5_000);
        let watch = watch_at(&clock);
        for _ in 0..50 {
            clock.advance_ms(TICK_MS);
            assert_eq!(watch.look(), 0);
        }
        clock.advance_ms(STALL_MS);
        assert_eq!(watch.look(), 0, "exactly the bound is not a stall");
    }

    #[test]
    fn a_gap_longer_than_the_bound_is_one_stall_however_often_it_is_looked_at_after() {
        let clock = ManualClock::starting_at(0);
        let watch = watch_at(&clock);
        clock.advance_ms(STALL_MS + 1);
        assert_eq!(watch.look(), 1);
        assert_eq!(watch.look(), 1, "seen once");
        clock.advance_ms(TICK_MS);
        assert_eq!(watch.look(), 1);
        clock.advance_ms(15_000);
        assert_eq!(watch.look(), 2, "a second stall");
    }

    #[test]
    fn the_first_judge_after_a_stall_sees_it_whether_or_not_the_ticker_looked_first() {
        let clock = ManualClock::starting_at(0);
        // The judge looks before the ticker.
        let watch = watch_at(&clock);
        let mut judge = StallsTaken::default();
        let mut other = StallsTaken::default();
        assert!(!judge.news(&watch));
        assert!(!other.news(&watch));
        clock.advance_ms(9_000);
        assert!(judge.news(&watch));
        assert!(!judge.news(&watch), "taken in");
        // Another judge that looks only now still learns of it, though the look that found it
        // was not its own (the ticker's, in production).
        clock.advance_ms(TICK_MS);
        assert!(other.news(&watch));
        assert!(!other.news(&watch));
    }

    #[test]
    fn refusing_work_it_could_not_keep_up_with_is_news_once_a_tick() {
        let clock = ManualClock::starting_at(0);
        let watch = watch_at(&clock);
        let mut judge = StallsTaken::default();
        assert!(!judge.news(&watch));
        watch.could_not_keep_up();
        watch.could_not_keep_up();
        assert!(judge.news(&watch), "refused work: silence counts again");
        assert!(
            !judge.news(&watch),
            "a flood of refusals within a tick is one"
        );
        clock.advance_ms(TICK_MS);
        watch.could_not_keep_up();
        assert!(
            judge.news(&watch),
            "the next tick's refusals are news again"
        );
    }

    #[test]
    fn the_process_watch_is_one_for_the_whole_process() {
        assert!(Arc::ptr_eq(&StallWatch::process(), &StallWatch::process()));
    }
}
