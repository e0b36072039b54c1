//! How long to wait before trying again: what `Retry-After` says, else exponential with full
//! jitter from a seeded RNG (so tests are exact and silos that failed together do not retry
//! together).

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The longest wait a `Retry-After` may ask for, as a multiple of the cap: an oracle asking for
/// more is taken at this word, so a bad header cannot silence a silo for hours.
const RETRY_AFTER_CAP_FACTOR: u32 = 30;

#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    rng: ChaCha8Rng,
    attempt: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            Duration::from_millis(50),
            Duration::from_secs(2),
            rand::random(),
        )
    }
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration, seed: u64) -> Self {
        Self {
            base,
            cap,
            rng: ChaCha8Rng::seed_from_u64(seed),
            attempt: 0,
        }
    }

    /// The next wait: `retry_after` when the oracle gave one (bounded), else a uniform draw in
    /// `[ceiling / 2, ceiling]` where the ceiling doubles from `base` up to `cap`.
    pub fn next_delay(&mut self, retry_after: Option<Duration>) -> Duration {
        self.attempt = self.attempt.saturating_add(1);
        if let Some(wait) = retry_after {
            return wait.min(self.cap * RETRY_AFTER_CAP_FACTOR);
        }
        let doubling = 2u32.saturating_pow((self.attempt - 1).min(30));
        let ceiling = self.base.saturating_mul(doubling).min(self.cap);
        self.rng.gen_range(ceiling / 2..=ceiling)
    }

    /// After a success: the next failure starts from `base` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Seconds from a `Retry-After` header (the oracle sends whole seconds); `None` when absent or
/// not a number of seconds.
pub fn parse_retry_after(value: Option<&str>) -> Option<Duration> {
    let seconds: f64 = value?.trim().parse().ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_wins_and_otherwise_the_wait_grows_within_the_cap() {
        let (base, cap) = (Duration::from_millis(100), Duration::from_secs(1));
        let mut backoff = Backoff::new(base, cap, 7);
        assert_eq!(
            backoff.next_delay(Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        for attempt in 2..10u32 {
            let ceiling = (base * 2u32.pow(attempt - 1)).min(cap);
            let delay = backoff.next_delay(None);
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{attempt}: {delay:?}"
            );
        }
        backoff.reset();
        assert!(backoff.next_delay(None) <= base);
    }

    #[test]
    fn the_same_seed_gives_the_same_waits() {
        let draws = |seed| {
            let mut b = Backoff::new(Duration::from_millis(50), Duration::from_secs(2), seed);
            (0..6).map(|_| b.next_delay(None)).collect::<Vec<_>>()
        };
        assert_eq!(draws(11), draws(11));
        assert_ne!(draws(11), draws(12));
    }

    #[test]
    fn a_retry_after_beyond_reason_is_bounded() {
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2), 1);
        assert_eq!(
            backoff.next_delay(Some(Duration::from_secs(86_400))),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn retry_after_is_read_as_seconds() {
        assert_eq!(parse_retry_after(Some("2")), Some(Duration::from_secs(2)));
        assert_eq!(
            parse_retry_after(Some(" 0.5 ")),
            Some(Duration::from_millis(500))
        );
        assert_eq!(parse_retry_after(Some("-1")), None);
        assert_eq!(
            parse_retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            None
        );
        assert_eq!(parse_retry_after(None), None);
        assert_eq!(parse_retry_after(Some("NaN")), None);
        assert_eq!(
            parse_retry_after(Some("99999999999999999999999")),
            None,
            "no panic"
        );
    }
}
