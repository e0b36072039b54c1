//! The rebalancer's sessions as a state machine over an injected clock (reference 4.3): a trigger
//! starts a session when none runs and none is suspended; a session runs a cycle at once and then
//! every `session_cycle_period_ms`, until the cluster is balanced (completed), nothing changes for
//! too long (stagnant: stopped and backed off), or an operator suspends it. The state is plain
//! data, so the replica that holds the cluster's lease can store it and another can carry on.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::options::RebalancerOptions;
use super::plan::{measure, oracle_moves, orleans_moves, Move, SiloLoad};
use crate::clock::Millis;

/// Cycle reports kept for `GET …/rebalancer`.
pub const KEPT_REPORTS: usize = 10;

/// What one cycle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CycleOutcome {
    /// Moves were planned (possibly none: every pair's share rounded down to 0).
    Migrated,
    /// The deviation is within the allowed one: the session ended.
    Completed,
    /// The entropy barely changed since the last cycle; the session goes on, counting.
    Stagnant,
    /// Too many stagnant cycles: the session ended and the rebalancer backs off.
    Stopped,
    /// Nothing to measure (fewer than two silos with figures, or — compat — a silo without
    /// memory): not counted as a cycle.
    Skipped,
}

/// One cycle's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct CycleReport {
    pub session: u64,
    pub cycle: u32,
    pub outcome: CycleOutcome,
    pub entropy: f64,
    pub max_entropy: f64,
    pub deviation: f64,
    pub allowed_deviation: f64,
    pub moves: Vec<Move>,
    #[schema(example = 1_764_547_200_000_i64)]
    pub at_ms: Millis,
}

/// What a silo gave and took over the rebalancer's life (Orleans' rebalancing statistics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SiloTally {
    pub dispersed: u64,
    pub acquired: u64,
    pub at_ms: Millis,
}

/// A running session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub id: u64,
    pub cycle: u32,
    pub stagnant_cycles: u32,
    pub previous_entropy: f64,
    pub next_cycle_at: Millis,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Balanced: rest for this long.
    Completed(Millis),
    /// Stagnant: back off for this long (Orleans' fixed backoff of one cycle period).
    Stagnated(Millis),
    /// Suspended by an operator, for this long or until resumed.
    Suspended(Option<Millis>),
    /// A new session replaces this one.
    Restarting,
}

/// The rebalancer of one cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rebalancer {
    pub session: Option<Session>,
    /// Sessions started so far; the next one gets this number plus one.
    pub sessions_started: u64,
    pub failed_sessions: u32,
    /// The last measured deviation (Orleans' `ClusterImbalance`); 0 before the first.
    pub deviation: f64,
    /// No session starts before this instant; `Millis::MAX` means until resumed.
    pub suspended_until: Millis,
    /// When the trigger next looks for work.
    pub next_trigger_at: Millis,
    pub tallies: BTreeMap<String, SiloTally>,
    pub reports: VecDeque<CycleReport>,
}

impl Rebalancer {
    /// A rebalancer whose first trigger is `due_time_ms` from `now`.
    pub fn new(now: Millis, options: &RebalancerOptions) -> Self {
        Self {
            session: None,
            sessions_started: 0,
            failed_sessions: 0,
            deviation: 0.0,
            suspended_until: 0,
            next_trigger_at: now.saturating_add(to_millis(options.due_time_ms)),
            tallies: BTreeMap::new(),
            reports: VecDeque::new(),
        }
    }

    /// How long a suspension still lasts (`Some(Millis::MAX)` when indefinite).
    pub fn suspension_left(&self, now: Millis) -> Option<Millis> {
        match self.suspended_until {
            Millis::MAX => Some(Millis::MAX),
            until if until > now => Some(until - now),
            _ => None,
        }
    }

    /// Whether [`Self::tick`] at `now` would run a cycle (if not suspended).
    pub fn cycle_due(&self, now: Millis) -> bool {
        match &self.session {
            Some(session) => session.next_cycle_at <= now,
            None => now >= self.next_trigger_at && self.suspension_left(now).is_none(),
        }
    }

    /// The timers (Orleans' trigger at half the cycle period, and the session's cycle): runs a
    /// cycle when one is due, starting a session first when none runs and none is suspended.
    /// `loads` is asked for only when a cycle runs.
    pub fn tick(
        &mut self,
        now: Millis,
        options: &RebalancerOptions,
        loads: impl FnOnce() -> (Vec<SiloLoad>, usize),
    ) -> Option<CycleReport> {
        let cycle_due = self
            .session
            .as_ref()
            .is_some_and(|s| s.next_cycle_at <= now);
        if self.session.is_none() && now >= self.next_trigger_at {
            let half_period = to_millis(options.session_cycle_period_ms / 2).max(1);
            self.next_trigger_at = now.saturating_add(half_period);
            if self.suspension_left(now).is_none() {
                self.start_session(now);
                let (loads, active) = loads();
                return Some(self.run_cycle(now, options, &loads, active));
            }
            return None;
        }
        if cycle_due {
            let (loads, active) = loads();
            return Some(self.run_cycle(now, options, &loads, active));
        }
        None
    }

    /// Starts a session now (its first cycle is due at once), ending any running one and any
    /// suspension (Orleans' `StartSession`, and `ResumeRebalancing`).
    pub fn start_session(&mut self, now: Millis) {
        self.stop_session(now, Stop::Restarting);
        self.sessions_started += 1;
        self.session = Some(Session {
            id: self.sessions_started,
            cycle: 0,
            stagnant_cycles: 0,
            previous_entropy: 0.0,
            next_cycle_at: now,
        });
    }

    /// Stops any session and suspends the rebalancer for `duration` (indefinitely with `None`);
    /// the latest request wins.
    pub fn suspend(&mut self, now: Millis, duration: Option<Millis>) {
        self.stop_session(now, Stop::Suspended(duration));
    }

    fn stop_session(&mut self, now: Millis, reason: Stop) {
        self.session = None;
        let suspend_for = |ms: Millis| now.saturating_add(ms.max(0));
        match reason {
            Stop::Restarting => {
                self.failed_sessions = 0;
                self.suspended_until = 0;
            }
            Stop::Completed(period) => {
                self.failed_sessions = 0;
                self.suspended_until = suspend_for(period);
            }
            Stop::Stagnated(backoff) => {
                self.failed_sessions += 1;
                self.suspended_until = suspend_for(backoff);
            }
            Stop::Suspended(duration) => {
                self.failed_sessions = 0;
                self.suspended_until = duration.map_or(Millis::MAX, suspend_for);
            }
        }
    }

    /// Runs one cycle now, starting a session if none runs (what `POST …/rebalancer/cycles`
    /// does), over the silos' latest figures; `active` counts the cluster's active silos.
    pub fn run_cycle(
        &mut self,
        now: Millis,
        options: &RebalancerOptions,
        loads: &[SiloLoad],
        active: usize,
    ) -> CycleReport {
        if self.session.is_none() {
            self.start_session(now);
        }
        let period = to_millis(options.session_cycle_period_ms);
        let session = self.session.as_mut().expect("started above");
        session.next_cycle_at = now.saturating_add(period);
        let id = session.id;
        let mut report = CycleReport {
            session: id,
            cycle: session.cycle,
            outcome: CycleOutcome::Skipped,
            entropy: 0.0,
            max_entropy: 0.0,
            deviation: self.deviation,
            allowed_deviation: options.allowed_entropy_deviation,
            moves: Vec::new(),
            at_ms: now,
        };
        let unmeasurable = active < 2
            || loads.len() < 2
            || (options.orleans_compat
                && loads.iter().any(|l| {
                    // Orleans skips a cycle when a silo reports no memory; its harmonic mean of
                    // counts would divide by a zero count (never zero there: system targets count).
                    l.memory.is_none_or(|m| m <= 0.0) || l.activations == 0
                }))
            || loads.iter().all(|l| l.activations == 0);
        if unmeasurable {
            return self.keep(report);
        }
        session.cycle += 1;
        report.cycle = session.cycle;
        if session.stagnant_cycles >= options.max_stagnant_cycles {
            report.outcome = CycleOutcome::Stopped;
            self.stop_session(now, Stop::Stagnated(period));
            return self.keep(report);
        }
        let m = measure(loads, active);
        self.deviation = m.deviation;
        report.entropy = m.entropy;
        report.max_entropy = m.max_entropy;
        report.deviation = m.deviation;
        report.allowed_deviation = options.allowed_deviation(m.activations);
        if m.deviation < report.allowed_deviation {
            report.outcome = CycleOutcome::Completed;
            self.stop_session(now, Stop::Completed(period));
            return self.keep(report);
        }
        let session = self.session.as_mut().expect("still running");
        let change = (m.entropy - session.previous_entropy).abs() / m.max_entropy;
        if change < options.entropy_quantum {
            session.stagnant_cycles += 1;
            session.previous_entropy = m.entropy;
            report.outcome = CycleOutcome::Stagnant;
            return self.keep(report);
        }
        session.stagnant_cycles = 0;
        self.failed_sessions = 0;
        let moves = if options.orleans_compat {
            orleans_moves(loads, active, &m, session.cycle, options)
        } else {
            oracle_moves(loads, options)
        };
        session.previous_entropy = m.entropy;
        if moves.is_empty() && !options.orleans_compat {
            // At the whole-number ideal already: nothing a move could improve.
            report.outcome = CycleOutcome::Completed;
            self.stop_session(now, Stop::Completed(period));
            return self.keep(report);
        }
        for m in &moves {
            let from = self.tallies.entry(m.from.clone()).or_default();
            from.dispersed += m.count;
            from.at_ms = now;
            let to = self.tallies.entry(m.to.clone()).or_default();
            to.acquired += m.count;
            to.at_ms = now;
        }
        report.outcome = CycleOutcome::Migrated;
        report.moves = moves;
        self.keep(report)
    }

    fn keep(&mut self, report: CycleReport) -> CycleReport {
        if self.reports.len() == KEPT_REPORTS {
            self.reports.pop_front();
        }
        self.reports.push_back(report.clone());
        report
    }

    /// Forgets the tallies of silos that are gone (Orleans drops dead silos' statistics).
    pub fn retain_silos(&mut self, alive: impl Fn(&str) -> bool) {
        self.tallies.retain(|silo, _| alive(silo));
    }
}

fn to_millis(ms: u64) -> Millis {
    Millis::try_from(ms).unwrap_or(Millis::MAX)
}
