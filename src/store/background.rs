//! What the background work of a cluster asks the store: which replicas are alive (so that they
//! share the clusters out, `cluster::ownership`), and what is due in the clusters a replica runs.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::StoreError;
use crate::clock::Millis;
use crate::cluster::ClusterName;

/// What is due in one cluster. Read for many clusters in one statement
/// ([`BackgroundStore::due`]), so that a fleet of clusters with nothing to do costs its owner one
/// round trip a tick, not one per cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Due {
    /// A silo is past its TTL and its protection (it may have to be declared dead).
    pub silent: bool,
    /// A dead silo still has directory entries to release.
    pub unreleased: bool,
    /// A dead silo's record is older than [`super::DEAD_SILO_RETENTION_MS`] and released.
    pub expired: bool,
    /// Grains may have to move: the rebalancer or the repartitioner is enabled, a silo is being
    /// drained, or migrations, endings or edge reports are waiting.
    pub moving: bool,
    /// The cluster's silos were looked at for silence: until when none can fall silent
    /// (`None`: the look asked for said they need no look yet, so `silent` is false).
    pub looked: Option<SilenceLook>,
}

impl Due {
    /// Whether any work is due.
    pub fn any(&self) -> bool {
        self.silent || self.unreleased || self.expired || self.moving
    }
}

/// How far the silence of a cluster's silos has been looked at, so that the next read of what is
/// due skips them until a silo may have fallen silent: an idle fleet's silos are read once a TTL,
/// not every second. Heartbeats only move a silo's silence later, and a silo that joins after a
/// look falls silent no earlier than a TTL after it, so a look stays true until `until_ms` unless
/// the cluster's TTL is lowered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SilenceLook {
    /// No silo of the cluster falls silent before this instant (store clock).
    pub until_ms: Millis,
    /// The TTL the look judged under: a lower one calls for a look at once.
    pub ttl_ms: Millis,
}

impl SilenceLook {
    /// The look a read at `now` under `ttl_ms` gives, from the earliest instant one of the
    /// cluster's silos not yet dead falls silent ([`crate::cluster::SiloRecord::silent_from`];
    /// `None` when it has none): no later than a TTL from now, for the silos that join meanwhile.
    pub fn at(now: Millis, ttl_ms: Millis, earliest_silence: Option<Millis>) -> Self {
        let bound = now.saturating_add(ttl_ms);
        Self {
            until_ms: earliest_silence.map_or(bound, |at| at.min(bound)),
            ttl_ms,
        }
    }

    /// Whether a cluster whose last look is `look` must be looked at again at `now`, its TTL
    /// being `ttl_ms`.
    pub fn is_due(look: Option<&Self>, now: Millis, ttl_ms: Millis) -> bool {
        look.is_none_or(|look| now >= look.until_ms || ttl_ms < look.ttl_ms)
    }
}

/// A cluster to read what is due in, with the last look at its silos' silence (`None` for a
/// cluster not looked at yet: its silos are read).
pub type DueQuery = (ClusterName, Option<SilenceLook>);

/// The replicas and the per-cluster view the background work runs on.
#[async_trait]
pub trait BackgroundStore: Send + Sync + 'static {
    /// Says `replica` is alive now and returns every replica seen alive within `ttl_ms` (itself
    /// included), sorted.
    async fn announce_replica(
        &self,
        replica: &str,
        ttl_ms: Millis,
    ) -> Result<Vec<String>, StoreError>;

    /// `replica` stops: the others take its clusters over at once.
    async fn retire_replica(&self, replica: &str) -> Result<(), StoreError>;

    /// What is due now in each of `clusters` where anything is, or whose silos it looked at for
    /// silence (those whose last look is over, [`SilenceLook::is_due`]; the others' silos are
    /// not read): a cluster missing from the answer has nothing due (an unknown one included).
    /// As few statements as the list allows, however many clusters it names.
    async fn due(&self, clusters: &[DueQuery]) -> Result<BTreeMap<ClusterName, Due>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_holds_until_the_earliest_silence_and_no_longer_than_a_ttl() {
        let look = SilenceLook::at(1_000, 10_000, Some(4_000));
        assert_eq!((look.until_ms, look.ttl_ms), (4_000, 10_000));
        // No silo alive: a silo joining now falls silent a TTL from now at the earliest.
        assert_eq!(SilenceLook::at(1_000, 10_000, None).until_ms, 11_000);
        // A protection running past a TTL from now does not carry the look past it.
        assert_eq!(
            SilenceLook::at(1_000, 10_000, Some(50_000)).until_ms,
            11_000
        );
    }

    #[test]
    fn a_look_is_due_again_when_over_when_the_ttl_is_lowered_or_never_taken() {
        let look = SilenceLook::at(1_000, 10_000, Some(4_000));
        assert!(SilenceLook::is_due(None, 1_000, 10_000));
        assert!(!SilenceLook::is_due(Some(&look), 3_999, 10_000));
        assert!(SilenceLook::is_due(Some(&look), 4_000, 10_000));
        assert!(SilenceLook::is_due(Some(&look), 2_000, 9_999));
        assert!(
            !SilenceLook::is_due(Some(&look), 2_000, 20_000),
            "a longer TTL only delays"
        );
    }
}
