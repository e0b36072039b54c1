//! The silo lease as pure arithmetic on one monotonic clock.
//!
//! Every acknowledged heartbeat grants `lease_ms`, counted from when the silo *sent* it: the
//! oracle may have judged the silo at any moment after the send, so counting from the answer
//! would let the silo run grains past what the oracle granted. A later acknowledgement never
//! shortens a lease already held (answers can arrive out of order), and one that arrives after
//! its own lease ran out grants nothing.

use std::time::Duration;

use tokio::time::Instant;

/// Until when the silo may run its grains; `None` until a heartbeat is acknowledged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lease {
    until: Option<Instant>,
}

impl Lease {
    /// Records the acknowledgement of a heartbeat sent at `sent_at` granting `lease`; says
    /// whether it extended the lease.
    pub fn grant(&mut self, sent_at: Instant, lease: Duration, now: Instant) -> bool {
        let granted = sent_at + lease;
        if granted <= now || self.until.is_some_and(|held| granted <= held) {
            return false;
        }
        self.until = Some(granted);
        true
    }

    pub fn holds(&self, now: Instant) -> bool {
        self.until.is_some_and(|until| now < until)
    }

    /// When the lease runs out, if one was ever granted.
    pub fn until(&self) -> Option<Instant> {
        self.until
    }

    pub fn remaining(&self, now: Instant) -> Duration {
        self.until
            .map_or(Duration::ZERO, |until| until.saturating_duration_since(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_lease_counts_from_when_the_heartbeat_was_sent() {
        let t0 = Instant::now();
        let mut lease = Lease::default();
        assert!(!lease.holds(t0));
        assert!(lease.grant(
            t0 + 10 * S,
            Duration::from_millis(9000),
            t0 + 10 * S + S / 2
        ));
        assert!(lease.holds(t0 + 19 * S - Duration::from_millis(1)));
        assert!(!lease.holds(t0 + 19 * S));
        assert_eq!(lease.remaining(t0 + 15 * S), 4 * S);
        assert_eq!(lease.remaining(t0 + 30 * S), Duration::ZERO);
    }

    #[test]
    fn a_later_acknowledgement_never_shortens_it() {
        let t0 = Instant::now();
        let mut lease = Lease::default();
        assert!(lease.grant(t0 + 10 * S, 9 * S, t0 + 10 * S));
        assert!(
            !lease.grant(t0 + 9 * S, 9 * S, t0 + 10 * S),
            "an older send"
        );
        assert_eq!(lease.until(), Some(t0 + 19 * S));
        assert!(lease.grant(t0 + 11 * S, 9 * S, t0 + 11 * S));
        assert_eq!(lease.until(), Some(t0 + 20 * S));
    }

    #[test]
    fn an_acknowledgement_after_its_lease_ran_out_grants_nothing() {
        let t0 = Instant::now();
        let mut lease = Lease::default();
        assert!(!lease.grant(t0, S, t0 + S + S / 2));
        assert!(!lease.holds(t0 + S + S / 2));
        assert!(
            !lease.grant(t0, S, t0 + S),
            "exactly at the end is too late"
        );
    }
}
