//! An upper bound on the database's clock, read from this replica's own.
//!
//! A heartbeat is stamped with the database's clock, and the lease it grants counts from no
//! earlier than the silo's send. The read that precedes a heartbeat's write is where that clock
//! usually comes from; a replica that skips the read (it wrote the silo's row itself, see
//! `membership::written_silos`) must name an instant that is surely no earlier than the database's
//! own when the write runs — the write then checks it, and refuses one that is not.
//!
//! Every statement that returns the database's instant gives a sample: the replica's clock when the
//! statement was sent, and the database's instant while it ran (later than the send). The
//! database's clock then reads at most `instant - sent + 1` ahead of the replica's (one for the
//! millisecond the database truncated), until either clock jumps. The tightest of the recent
//! samples is kept; older ones age out so that a clock that was set forward is followed.

use crate::clock::Millis;

/// How many recent samples the bound is the tightest of.
const SAMPLES: usize = 8;

/// The recent samples of how far the database's clock reads ahead of the replica's.
#[derive(Debug, Default)]
pub struct ClockEstimate {
    /// Upper bounds of (database clock − replica clock), newest last.
    offsets: Vec<Millis>,
}

impl ClockEstimate {
    /// Records a statement sent at `sent` (the replica's clock) that ran at `instant` (the
    /// database's).
    pub fn observe(&mut self, sent: Millis, instant: Millis) {
        if self.offsets.len() == SAMPLES {
            self.offsets.remove(0);
        }
        self.offsets
            .push(instant.saturating_sub(sent).saturating_add(1));
    }

    /// An instant on the database's clock no earlier than its reading at the replica's `now`, if
    /// a sample says how the clocks stand.
    pub fn no_earlier_than(&self, now: Millis) -> Option<Millis> {
        let offset = self.offsets.iter().min()?;
        Some(now.saturating_add(*offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_sample_there_is_no_bound() {
        assert_eq!(ClockEstimate::default().no_earlier_than(1_000), None);
    }

    #[test]
    fn the_bound_is_the_tightest_recent_sample() {
        let mut clocks = ClockEstimate::default();
        // The database reads 5,000 ahead; one statement answered quickly, one after a wait.
        clocks.observe(100, 5_102);
        clocks.observe(200, 5_200);
        assert_eq!(clocks.no_earlier_than(300), Some(5_301));
    }

    #[test]
    fn a_clock_set_forward_is_followed_once_the_old_samples_age_out() {
        let mut clocks = ClockEstimate::default();
        clocks.observe(0, 1_000);
        for sent in 1..=SAMPLES as Millis {
            clocks.observe(sent, sent + 61_000);
        }
        assert_eq!(clocks.no_earlier_than(100), Some(61_101));
    }

    #[test]
    fn a_clock_set_back_is_followed_at_once() {
        let mut clocks = ClockEstimate::default();
        clocks.observe(0, 61_000);
        clocks.observe(1, 1_001);
        assert_eq!(clocks.no_earlier_than(10), Some(1_011));
    }
}
