//! Silo leases: how long a silo may keep running its grains on one acknowledged heartbeat.
//!
//! Orleans lets a silo that lost touch with the cluster run its grains until it hears it was
//! declared dead, so for a while a grain can run twice ("eventual" single activation). Here a
//! silo holds a lease instead. Every acknowledged heartbeat grants [`lease_ms`], counted from when
//! the silo *sent* that heartbeat; when it runs out without a newer acknowledgement, the silo
//! pauses its grains (they stay registered) and resumes them when a heartbeat is acknowledged
//! again. The oracle, for its part, never declares a silo dead before the TTL has passed since
//! the heartbeat's stamp — and the stamp is taken after the silo sent it — so every lease has run
//! out, by at least [`margin_ms`], before anyone else may start the silo's grains.
//!
//! # The margin: a tenth of the TTL (1 s at the default 10 s)
//!
//! The lease is measured on the silo's clock, the death on the database's. The margin covers:
//! - **clock rates**: over one TTL the silo's clock may run slower than the database's. We allow
//!   1 % (10,000 ppm): twenty times the 500 ppm NTP ever slews a clock by, a hundred times a
//!   free-running quartz's error;
//! - **stopping**: the rest, 9 % of the TTL (900 ms at the default), is the runtime's time to
//!   notice that the lease ran out and stop its grains (a turn in progress, a timer's tick).
//!
//! Request time needs none: the lease starts before the request leaves the silo and the stamp is
//! taken after it reaches the database, so a slow request only widens the gap. A database clock
//! that steps *forward* by more than the margin is not covered (it would end the TTL early);
//! keep the database host's clock slewed, not stepped (NTP's default).
//!
//! A later acknowledgement never shortens a lease: when the TTL shrinks (a policy change), the
//! silo keeps the longer lease it already holds, and the oracle keeps each silo protected until
//! the latest of its leases has run out ([`protected_until_ms`]).

use crate::clock::Millis;

/// The share of the TTL kept back from the lease: a tenth.
const MARGIN_DIVISOR: Millis = 10;

/// How long before the oracle may declare a silo dead its lease runs out, for a cluster TTL of
/// `silo_ttl_ms`: a tenth of it, rounded up, and at least 1 ms.
pub fn margin_ms(silo_ttl_ms: Millis) -> Millis {
    (silo_ttl_ms.max(0) + MARGIN_DIVISOR - 1) / MARGIN_DIVISOR
}

/// The lease one acknowledged heartbeat grants under a TTL of `silo_ttl_ms`: the TTL less the
/// margin.
pub fn lease_ms(silo_ttl_ms: Millis) -> Millis {
    (silo_ttl_ms - margin_ms(silo_ttl_ms)).max(0)
}

/// The lease an acknowledgement judged at `judged_at` (store clock, no earlier than the store's
/// instant when the heartbeat was taken) grants a silo protected until `protected_until_ms`:
/// [`lease_ms`], unless less than that and the margin is left of the protection — a heartbeat
/// answered without being written (the replica held it back) is protected only as far as the
/// heartbeat stored before it, and its lease ends a margin before that.
pub fn granted_ms(silo_ttl_ms: Millis, protected_until_ms: Millis, judged_at: Millis) -> Millis {
    let left = protected_until_ms
        .saturating_sub(margin_ms(silo_ttl_ms))
        .saturating_sub(judged_at);
    lease_ms(silo_ttl_ms).min(left).max(0)
}

/// Until when (store clock) a silo whose heartbeat was stamped `stamp_ms` under a TTL of
/// `silo_ttl_ms` may not be declared dead, given it was protected until `previous_ms` before: the
/// later of the two, so that no lease the silo still holds is cut short.
pub fn protected_until_ms(previous_ms: Millis, stamp_ms: Millis, silo_ttl_ms: Millis) -> Millis {
    previous_ms.max(stamp_ms.saturating_add(silo_ttl_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_lease_is_the_ttl_less_a_tenth() {
        assert_eq!((lease_ms(10_000), margin_ms(10_000)), (9_000, 1_000));
        assert_eq!((lease_ms(3_000), margin_ms(3_000)), (2_700, 300));
        // The smallest TTL a policy may set: the margin rounds up, never to nothing.
        assert_eq!((lease_ms(100), margin_ms(100)), (90, 10));
        assert_eq!((lease_ms(101), margin_ms(101)), (90, 11));
        assert_eq!((lease_ms(1), margin_ms(1)), (0, 1));
    }

    #[test]
    fn a_shorter_ttl_never_cuts_a_lease_already_granted() {
        // Granted under 60 s at 1 000; the next heartbeat at 2 000 is granted under 3 s.
        let first = protected_until_ms(0, 1_000, 60_000);
        assert_eq!(first, 61_000);
        assert_eq!(protected_until_ms(first, 2_000, 3_000), 61_000);
        // And a longer TTL extends it at once.
        assert_eq!(protected_until_ms(first, 2_000, 100_000), 102_000);
    }

    #[test]
    fn a_written_heartbeat_grants_the_whole_lease_and_a_held_one_what_its_protection_leaves() {
        // Written: stamped at the judging instant, protected a TTL on.
        assert_eq!(granted_ms(10_000, 11_000, 1_000), 9_000);
        // Protected longer by an earlier, longer TTL: still the lease of this one.
        assert_eq!(granted_ms(10_000, 61_000, 1_000), 9_000);
        // Held back 700 ms after the stored heartbeat: 700 ms less.
        assert_eq!(granted_ms(10_000, 11_000, 1_700), 8_300);
        // Nothing left: no lease.
        assert_eq!(granted_ms(10_000, 11_000, 10_500), 0);
    }

    proptest! {
        /// A lease granted from a protection stored earlier (a heartbeat held back), counted
        /// from a send no later than the judging instant, on a clock up to 1 % slow, has run out
        /// before that protection ends.
        #[test]
        fn a_held_back_heartbeat_s_lease_runs_out_before_the_stored_protection(
            ttl in 100i64..86_400_000,
            stored_stamp in 0i64..1_000_000_000_000,
            judged_after in 0i64..100_000_000,
            sent_before in 0i64..10_000,
            slow_ppm in 0i64..=10_000,
        ) {
            let protected_until = protected_until_ms(0, stored_stamp, ttl);
            let judged_at = stored_stamp + judged_after;
            let lease = granted_ms(ttl, protected_until, judged_at);
            let sent = judged_at - sent_before;
            let stops_by = sent + lease + lease * slow_ppm / 1_000_000 + 1;
            prop_assert!(lease == 0 || stops_by <= protected_until);
        }

        /// Whatever the TTL, a silo that stops when its lease runs out (counted from a send no
        /// later than the stamp, on a clock up to 1 % slow) has stopped before the oracle may
        /// declare it dead.
        #[test]
        fn a_lease_runs_out_before_the_silo_may_be_declared_dead(
            ttl in 100i64..86_400_000,
            stamp in 0i64..1_000_000_000_000,
            sent_before_stamp in 0i64..10_000,
            slow_ppm in 0i64..=10_000,
        ) {
            let sent = stamp - sent_before_stamp;
            // The lease measured on a clock `slow_ppm` slower ends this much later in real time.
            let lease = lease_ms(ttl);
            let stops_by = sent + lease + lease * slow_ppm / 1_000_000 + 1;
            prop_assert!(stops_by <= protected_until_ms(0, stamp, ttl));
        }
    }
}
