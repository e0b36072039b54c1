//! How many requests a replica admits at once, moved by how long its answers take. Pure: the
//! caller says what time it is and how long each answer took.
//!
//! A fixed limit (`ORACLE_MAX_CONCURRENT_REQUESTS`) refuses only what comes past that many in
//! flight. Past its capacity a replica reaches it with every admitted request queued behind the
//! others for CPU and connections: measured at three times a fleet's capacity, 1,024 in flight and
//! answers 0.7–1.2 s late, each of them a request the client may already have given up on. Here
//! the limit follows the answers instead, as a congestion window does: in each window of
//! [`WINDOW_MS`], when more than one answer in [`SLOW_SHARE`] took longer than the target, the
//! limit is cut to three quarters of what was in flight; when the answers were quick and the
//! limit was what stopped more coming in, it grows by an eighth. So requests are refused at once
//! (`503` with `Retry-After`) rather than admitted to wait, and the admitted ones are answered
//! within about the target.
//!
//! Bounds: never above the configured maximum, never below [`FLOOR`] (or the maximum, if lower),
//! so a replica whose every answer is slow for a reason of its own (a slow database) still serves
//! enough at once for its store's batches. A window of fewer than [`MIN_ANSWERS`] answers says
//! nothing. A target of zero keeps the limit at the maximum, and that is the default
//! (`ORACLE_ADMISSION_TARGET_MS`): fewer in flight make smaller store batches and more database
//! work a request, so a lower limit buys shorter waits with fewer answers (measured in
//! `docs/PERFORMANCE.md`).

use std::time::Duration;

use crate::clock::Millis;

/// How long each judgement looks back.
pub const WINDOW_MS: Millis = 100;

/// The limit never goes below this many requests in flight. The store batches what is in flight
/// together (lookups, registrations), so fewer in flight means smaller batches and more database
/// work a request: measured with a floor of 64, a fleet at three times its capacity was served at
/// half the rate it was with 1,024.
pub const FLOOR: usize = 256;

/// A window with fewer answers than this is not judged (one slow answer in three is no trend).
pub const MIN_ANSWERS: u32 = 10;

/// More than one answer in this many over the target is a slow window (the 90th percentile above
/// it).
pub const SLOW_SHARE: u32 = 10;

/// The limit and the window being counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionLimit {
    max: usize,
    floor: usize,
    /// `None`: the limit stays at `max`.
    target: Option<Duration>,
    limit: usize,
    window: Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    started: Millis,
    answers: u32,
    slow: u32,
}

impl Window {
    fn at(started: Millis) -> Self {
        Self {
            started,
            answers: 0,
            slow: 0,
        }
    }
}

impl AdmissionLimit {
    /// Starts at `max` (a replica that has not been slow admits everything it may).
    pub fn new(max: usize, target: Duration, now: Millis) -> Self {
        let max = max.max(1);
        Self {
            max,
            floor: FLOOR.min(max),
            target: (!target.is_zero()).then_some(target),
            limit: max,
            window: Window::at(now),
        }
    }

    /// Requests in flight admitted now.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// One answer, `took` long, at `now`; `peak` is the most requests in flight, or asking to be,
    /// since the window began (more than the limit when some were refused). When this answer
    /// closed a window, the limit from now on (moved or not), and a new window begins.
    pub fn answered(&mut self, now: Millis, took: Duration, peak: usize) -> Option<usize> {
        let target = self.target?;
        self.window.answers += 1;
        if took > target {
            self.window.slow += 1;
        }
        if now - self.window.started < WINDOW_MS {
            return None;
        }
        let Window { answers, slow, .. } = std::mem::replace(&mut self.window, Window::at(now));
        if answers < MIN_ANSWERS {
            return Some(self.limit);
        }
        if slow * SLOW_SHARE > answers {
            self.limit = (self.limit.min(peak) * 3 / 4).max(self.floor);
        } else if peak >= self.limit {
            self.limit = (self.limit + (self.limit / 8).max(1)).min(self.max);
        }
        Some(self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TARGET: Duration = Duration::from_millis(25);
    const QUICK: Duration = Duration::from_millis(2);
    const SLOW: Duration = Duration::from_millis(80);

    /// A whole window's answers, `slow` of `answers` slow, the last one closing it.
    fn window(
        limit: &mut AdmissionLimit,
        start: Millis,
        answers: u32,
        slow: u32,
        peak: usize,
    ) -> Option<usize> {
        let mut moved = None;
        for i in 0..answers {
            let at = if i + 1 == answers {
                start + WINDOW_MS
            } else {
                start
            };
            let took = if i < slow { SLOW } else { QUICK };
            moved = limit.answered(at, took, peak);
        }
        moved
    }

    #[test]
    fn slow_answers_cut_the_limit_to_three_quarters_of_what_was_in_flight() {
        let mut limit = AdmissionLimit::new(1024, TARGET, 0);
        assert_eq!(window(&mut limit, 0, 100, 20, 800), Some(600));
        assert_eq!(window(&mut limit, 100, 100, 20, 601), Some(450));
    }

    #[test]
    fn the_limit_never_goes_below_the_floor() {
        let mut limit = AdmissionLimit::new(1024, TARGET, 0);
        assert_eq!(window(&mut limit, 0, 50, 50, 20), Some(FLOOR));
        assert_eq!(window(&mut limit, 100, 50, 50, 65), Some(FLOOR));
        assert_eq!(limit.limit(), FLOOR);
        let mut small = AdmissionLimit::new(8, TARGET, 0);
        assert_eq!(window(&mut small, 0, 50, 50, 9), Some(8), "8 is the floor");
    }

    #[test]
    fn one_slow_answer_in_ten_is_not_a_slow_window() {
        let mut limit = AdmissionLimit::new(1024, TARGET, 0);
        assert_eq!(window(&mut limit, 0, 100, 10, 500), Some(1024));
        assert_eq!(window(&mut limit, 100, 100, 11, 500), Some(375));
    }

    #[test]
    fn quick_answers_grow_the_limit_only_when_it_turned_requests_away() {
        let mut limit = AdmissionLimit::new(1024, TARGET, 0);
        window(&mut limit, 0, 100, 100, 400);
        assert_eq!(limit.limit(), 300);
        assert_eq!(
            window(&mut limit, 100, 100, 0, 120),
            Some(300),
            "not at the limit"
        );
        assert_eq!(window(&mut limit, 200, 100, 0, 301), Some(337));
        assert_eq!(window(&mut limit, 300, 100, 0, 338), Some(379));
    }

    #[test]
    fn growth_stops_at_the_maximum() {
        let mut limit = AdmissionLimit::new(400, TARGET, 0);
        window(&mut limit, 0, 100, 100, 400);
        assert_eq!(limit.limit(), 300);
        let mut start = 100;
        let mut grown = vec![];
        while grown.last() != Some(&400) {
            grown.extend(window(&mut limit, start, 20, 0, 1_000));
            start += 100;
        }
        assert_eq!(grown, [337, 379, 400]);
        assert_eq!(window(&mut limit, start, 20, 0, 1_000), Some(400));
    }

    #[test]
    fn a_window_of_few_answers_is_not_judged() {
        let mut limit = AdmissionLimit::new(1024, TARGET, 0);
        let few = MIN_ANSWERS - 1;
        assert_eq!(window(&mut limit, 0, few, few, 500), Some(1024));
        assert_eq!(limit.limit(), 1024);
    }

    #[test]
    fn answers_within_a_window_are_counted_not_judged() {
        let mut limit = AdmissionLimit::new(1024, TARGET, 0);
        for _ in 0..1_000 {
            assert_eq!(limit.answered(WINDOW_MS - 1, SLOW, 900), None);
        }
        assert_eq!(limit.answered(WINDOW_MS, SLOW, 900), Some(675));
    }

    #[test]
    fn a_target_of_zero_keeps_the_limit_at_the_maximum() {
        let mut limit = AdmissionLimit::new(1024, Duration::ZERO, 0);
        assert_eq!(window(&mut limit, 0, 100, 100, 2_000), None);
        assert_eq!(limit.limit(), 1024);
    }

    proptest! {
        /// Whatever the answers, the limit stays within the floor and the maximum, and only a
        /// slow window lowers it.
        #[test]
        fn the_limit_stays_within_its_bounds(
            max in 1usize..5_000,
            windows in prop::collection::vec((1u32..200, 0u32..200, 0usize..10_000), 1..60),
        ) {
            let mut limit = AdmissionLimit::new(max, TARGET, 0);
            for (i, (answers, slow, peak)) in windows.into_iter().enumerate() {
                let slow = slow.min(answers);
                let before = limit.limit();
                window(&mut limit, i as Millis * WINDOW_MS, answers, slow, peak);
                prop_assert!(limit.limit() <= max);
                prop_assert!(limit.limit() >= FLOOR.min(max));
                if limit.limit() < before {
                    prop_assert!(slow * SLOW_SHARE > answers);
                }
            }
        }
    }
}
