//! A token bucket, pure: the caller says what time it is (`now_ms`), so the same calls always get
//! the same answers and tests need no clock at all.
//!
//! The bucket holds at most one second's worth of tokens (its capacity is its rate) and refills
//! continuously at its rate. A request costs as many tokens as the work it asks for (one heartbeat,
//! the grains of a placement batch, the edges of a report); it is admitted when the bucket holds
//! that many, and takes them.
//!
//! **Requests larger than the bucket.** A batch may cost more than the capacity (an operator set a
//! rate below the batch sizes silos send). Such a request could never be admitted by the rule
//! above, so a *full* bucket admits any request and goes into debt: the level becomes negative,
//! and nothing more is admitted until the debt is repaid at the bucket's rate. The long-run rate
//! still never exceeds the limit; only the burst is larger, by that one request.
//!
//! Invariant (checked by the property tests below): over any window of `w` milliseconds, the
//! tokens admitted are at most `rate × w / 1000 + max(capacity, the largest request admitted)` —
//! `rate × window + capacity` whenever no request is larger than the bucket.

use std::num::NonZeroU32;

use crate::clock::Millis;

/// Tokens are counted in thousandths, so that a rate in tokens per second refills a whole number of
/// them every millisecond: exact integer arithmetic, no rounding drift.
const MILLI: i128 = 1_000;

/// One bucket's state: how full it is, as of when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Thousandths of a token available; negative while an oversized request is being repaid.
    level: i128,
    /// When `level` was last brought up to date; never moves backwards.
    at_ms: Millis,
}

/// What the bucket says to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Admitted,
    /// Not now: in `retry_after_ms` the bucket will hold enough for the same request (or be full,
    /// for a request larger than the bucket), if nothing else is admitted meanwhile.
    Denied {
        retry_after_ms: u64,
    },
}

impl Bucket {
    /// A full bucket: a cluster not seen before may use a whole second's worth at once.
    pub fn full(rate: NonZeroU32, now_ms: Millis) -> Self {
        Self {
            level: capacity(rate),
            at_ms: now_ms,
        }
    }

    /// Admits a request costing `cost` tokens at `now_ms`, or says how long until it would be.
    /// A request costing nothing is always admitted (it asks for no limited work).
    pub fn admit(&mut self, rate: NonZeroU32, cost: u64, now_ms: Millis) -> Decision {
        self.refill(rate, now_ms);
        let cost = i128::from(cost) * MILLI;
        let capacity = capacity(rate);
        if cost == 0 || self.level >= cost || self.level >= capacity {
            self.level -= cost;
            return Decision::Admitted;
        }
        // Denied, so the level is below both the cost and the capacity: the deficit is positive.
        let deficit = cost.min(capacity) - self.level;
        let rate = i128::from(rate.get());
        let retry_after_ms = (deficit + rate - 1) / rate;
        Decision::Denied {
            retry_after_ms: u64::try_from(retry_after_ms).unwrap_or(u64::MAX),
        }
    }

    /// Whether the bucket is full at `now_ms`: then it is the same as a new one, so it can be
    /// forgotten without changing any answer.
    pub fn is_full(&self, rate: NonZeroU32, now_ms: Millis) -> bool {
        let mut bucket = *self;
        bucket.refill(rate, now_ms);
        bucket.level >= capacity(rate)
    }

    /// Adds what the rate earned since the last update, up to the capacity. A clock reading
    /// earlier than the last one earns nothing (and does not move the bucket's time back).
    fn refill(&mut self, rate: NonZeroU32, now_ms: Millis) {
        let elapsed = i128::from(now_ms.saturating_sub(self.at_ms).max(0));
        // At most u32::MAX × i64::MAX ≈ 4e28, and the level is at least −u64::MAX × 1000 ≈ −2e22:
        // both far inside i128.
        let earned = i128::from(rate.get()) * elapsed;
        self.level = (self.level + earned).min(capacity(rate));
        self.at_ms = self.at_ms.max(now_ms);
    }
}

/// One second's worth of tokens, in thousandths.
fn capacity(rate: NonZeroU32) -> i128 {
    i128::from(rate.get()) * MILLI
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{prop_assert, prop_assert_eq, prop_assert_ne, proptest, Strategy};

    use super::*;

    fn rate(per_second: u32) -> NonZeroU32 {
        NonZeroU32::new(per_second).unwrap()
    }

    #[test]
    fn a_full_bucket_admits_one_seconds_worth_then_says_when_the_next_token_comes() {
        let r = rate(10);
        let mut bucket = Bucket::full(r, 0);
        for _ in 0..10 {
            assert_eq!(bucket.admit(r, 1, 0), Decision::Admitted);
        }
        // One token every 100 ms.
        assert_eq!(
            bucket.admit(r, 1, 0),
            Decision::Denied {
                retry_after_ms: 100
            }
        );
        assert_eq!(
            bucket.admit(r, 1, 99),
            Decision::Denied { retry_after_ms: 1 }
        );
        assert_eq!(bucket.admit(r, 1, 100), Decision::Admitted);
    }

    #[test]
    fn a_request_takes_as_many_tokens_as_it_costs() {
        let r = rate(100);
        let mut bucket = Bucket::full(r, 0);
        assert_eq!(bucket.admit(r, 60, 0), Decision::Admitted);
        assert_eq!(
            bucket.admit(r, 60, 0),
            Decision::Denied {
                retry_after_ms: 200
            }
        );
        assert_eq!(bucket.admit(r, 40, 0), Decision::Admitted);
    }

    #[test]
    fn a_request_larger_than_the_bucket_is_admitted_when_full_and_repaid_at_the_rate() {
        let r = rate(5);
        let mut bucket = Bucket::full(r, 0);
        assert_eq!(bucket.admit(r, 1, 0), Decision::Admitted);
        // Not full: the oversized batch waits until it is (one token at 5/s: 200 ms).
        assert_eq!(
            bucket.admit(r, 8, 0),
            Decision::Denied {
                retry_after_ms: 200
            }
        );
        assert_eq!(bucket.admit(r, 8, 200), Decision::Admitted);
        // Three tokens of debt, plus the one asked for: 4 tokens at 5/s.
        assert_eq!(
            bucket.admit(r, 1, 200),
            Decision::Denied {
                retry_after_ms: 800
            }
        );
        assert_eq!(bucket.admit(r, 1, 1_000), Decision::Admitted);
    }

    #[test]
    fn nothing_is_free_but_nothing_costs_nothing() {
        let r = rate(1);
        let mut bucket = Bucket::full(r, 0);
        assert_eq!(bucket.admit(r, 5, 0), Decision::Admitted);
        assert_eq!(bucket.admit(r, 0, 0), Decision::Admitted);
    }

    #[test]
    fn a_clock_going_backwards_earns_nothing_and_never_panics() {
        let r = rate(10);
        let mut bucket = Bucket::full(r, 1_000);
        assert_eq!(bucket.admit(r, 10, 1_000), Decision::Admitted);
        assert!(matches!(bucket.admit(r, 1, 0), Decision::Denied { .. }));
        assert!(matches!(
            bucket.admit(r, 1, Millis::MIN),
            Decision::Denied { .. }
        ));
        assert_eq!(bucket.admit(r, 1, 1_100), Decision::Admitted);
        assert_eq!(bucket.admit(r, u64::MAX, Millis::MAX), Decision::Admitted);
        assert!(matches!(
            bucket.admit(r, 1, Millis::MAX),
            Decision::Denied { .. }
        ));
    }

    #[test]
    fn a_bucket_left_alone_fills_and_is_then_as_good_as_new() {
        let r = rate(4);
        let mut bucket = Bucket::full(r, 0);
        assert!(bucket.is_full(r, 0));
        assert_eq!(bucket.admit(r, 2, 0), Decision::Admitted);
        assert!(!bucket.is_full(r, 499));
        assert!(bucket.is_full(r, 500));
    }

    /// Requests as (milliseconds since the previous one, cost).
    fn requests(max_cost: u64) -> impl Strategy<Value = Vec<(i64, u64)>> {
        proptest::collection::vec((0i64..1_500, 0..=max_cost), 1..60)
    }

    /// Runs the requests through a bucket; returns the admitted ones as (time, cost).
    fn run(rate: NonZeroU32, requests: &[(i64, u64)]) -> Vec<(i64, u64)> {
        let mut now = 0;
        let mut bucket = Bucket::full(rate, now);
        let mut admitted = Vec::new();
        for &(gap, cost) in requests {
            now += gap;
            if bucket.admit(rate, cost, now) == Decision::Admitted {
                admitted.push((now, cost));
            }
        }
        admitted
    }

    /// Over every window from one admitted request to a later one, the tokens admitted are at most
    /// rate × window plus an allowance: the capacity, or the largest request admitted in the
    /// window if that is larger. Compared in thousandths of a token, exactly.
    fn within_the_limit(rate: NonZeroU32, admitted: &[(i64, u64)]) -> Result<(), String> {
        for first in 0..admitted.len() {
            let mut sum = 0i128;
            let mut largest = 0u64;
            for &(at, cost) in &admitted[first..] {
                sum += i128::from(cost);
                largest = largest.max(cost);
                let window_ms = i128::from(at - admitted[first].0);
                let allowance = i128::from(u64::from(rate.get()).max(largest));
                let bound = i128::from(rate.get()) * window_ms + allowance * MILLI;
                if sum * MILLI > bound {
                    return Err(format!(
                        "{sum} tokens admitted over {window_ms} ms from request {first} at {rate}/s"
                    ));
                }
            }
        }
        Ok(())
    }

    proptest! {
        /// The brief's invariant: with requests no larger than the bucket, over any window,
        /// admitted ≤ rate × window + capacity.
        #[test]
        fn admitted_never_exceeds_rate_times_window_plus_capacity(
            per_second in 1u32..50,
            requests in requests(50),
        ) {
            let r = rate(per_second);
            let requests: Vec<_> = requests
                .into_iter()
                .map(|(gap, cost)| (gap, cost.min(u64::from(per_second))))
                .collect();
            let admitted = run(r, &requests);
            prop_assert!(within_the_limit(r, &admitted).is_ok(), "{:?}", within_the_limit(r, &admitted));
        }

        /// With oversized requests too, the burst grows by the largest one admitted, no more.
        #[test]
        fn oversized_requests_only_widen_the_burst_by_themselves(
            per_second in 1u32..50,
            requests in requests(150),
        ) {
            let r = rate(per_second);
            let admitted = run(r, &requests);
            prop_assert!(within_the_limit(r, &admitted).is_ok(), "{:?}", within_the_limit(r, &admitted));
        }

        /// Retry-After is exact: waiting one millisecond less is not enough, waiting that long is.
        #[test]
        fn a_denied_request_is_admitted_exactly_when_it_was_told(
            per_second in 1u32..2_000,
            requests in requests(3_000),
            cost in 1u64..3_000,
        ) {
            let r = rate(per_second);
            let mut now = 0;
            let mut bucket = Bucket::full(r, now);
            for (gap, c) in requests {
                now += gap;
                bucket.admit(r, c, now);
            }
            if let Decision::Denied { retry_after_ms } = bucket.admit(r, cost, now) {
                let wait = i64::try_from(retry_after_ms).unwrap();
                prop_assert!(wait >= 1);
                let mut early = bucket;
                prop_assert_ne!(early.admit(r, cost, now + wait - 1), Decision::Admitted);
                prop_assert_eq!(bucket.admit(r, cost, now + wait), Decision::Admitted);
            }
        }
    }
}
