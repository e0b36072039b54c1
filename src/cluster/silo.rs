//! What the oracle knows about one silo: its last report, its smoothed load and its liveness.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::kalman::DualModeKalman;
use super::names::SiloId;
use crate::clock::Millis;

/// A silo's lifecycle status. Silos report the first three; `dead` is the oracle's verdict for a
/// silo that stayed silent longer than the cluster's `silo_ttl`, and it is final for that incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SiloStatus {
    Joining,
    #[default]
    Active,
    ShuttingDown,
    Dead,
}

impl SiloStatus {
    pub const ALL: [SiloStatus; 4] = [
        SiloStatus::Joining,
        SiloStatus::Active,
        SiloStatus::ShuttingDown,
        SiloStatus::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SiloStatus::Joining => "joining",
            SiloStatus::Active => "active",
            SiloStatus::ShuttingDown => "shutting_down",
            SiloStatus::Dead => "dead",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

/// The load figures of one heartbeat, as the silo sent them. Absent figures stay absent: a silo
/// that reports nothing is treated as Orleans treats a silo without statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LoadReport {
    /// CPU usage in percent, 0 to 100.
    #[schema(example = 37.5)]
    pub cpu_usage: Option<f64>,
    /// Memory in use, bytes.
    #[schema(example = 6_800_000_000_u64)]
    pub memory_usage_bytes: Option<u64>,
    /// Memory limit of the silo (container limit or physical memory), bytes.
    #[schema(example = 16_000_000_000_u64)]
    pub max_available_memory_bytes: Option<u64>,
    /// All activations on the silo.
    #[schema(example = 1200)]
    pub activation_count: Option<u64>,
    /// Activations used in the last few seconds (the working set).
    #[schema(example = 450)]
    pub recent_activation_count: Option<u64>,
    /// The silo's own load-shedding verdict.
    #[schema(example = false)]
    pub overloaded: bool,
    /// ESTABLISHED external client TCP connections.
    #[schema(example = 37)]
    pub connection_count: Option<u64>,
    /// Bytes per second in and out on external interfaces.
    #[schema(example = 1_250_000)]
    pub network_bytes_per_second: Option<u64>,
}

/// Smoothed load and the filter state that produced it; kept per silo across heartbeats.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Smoothing {
    pub cpu: Option<DualModeKalman>,
    pub memory: Option<DualModeKalman>,
    pub cpu_usage: Option<f64>,
    pub memory_usage_bytes: Option<u64>,
}

impl Smoothing {
    /// Feeds one report through the filters. A figure the report lacks leaves its filter untouched.
    pub fn observe(&mut self, report: &LoadReport) {
        if let Some(cpu) = report.cpu_usage {
            let filter = self.cpu.get_or_insert_with(DualModeKalman::default);
            let smoothed = filter.update(cpu as f32).clamp(0.0, 100.0);
            self.cpu_usage = Some(f64::from(smoothed));
        }
        if let Some(memory) = report.memory_usage_bytes {
            let filter = self.memory.get_or_insert_with(DualModeKalman::default);
            let smoothed = filter.update(memory as f32).max(0.0);
            // Orleans casts the filtered float back to whole bytes; so do we.
            let mut bytes = smoothed as u64;
            if let Some(max) = report.max_available_memory_bytes {
                bytes = bytes.min(max);
            }
            self.memory_usage_bytes = Some(bytes);
        }
    }
}

/// Everything a silo told the oracle that is not part of the directory's keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiloProfile {
    pub address: String,
    pub role: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Grain types the silo can host; `None` means every type.
    pub grain_types: Option<Vec<String>>,
    pub load: LoadReport,
    pub smoothing: Smoothing,
    pub first_seen_ms: Millis,
}

/// A silo as stored: the reported status, the time of its last heartbeat (oracle clock) and how many
/// heartbeats it has sent, which doubles as the version for optimistic concurrency.
#[derive(Debug, Clone, PartialEq)]
pub struct SiloRecord {
    pub id: SiloId,
    pub status: SiloStatus,
    pub last_heartbeat_ms: Millis,
    pub heartbeat_count: i64,
    pub profile: SiloProfile,
    /// When an operator asked for the silo to be drained (`POST …/silos/{silo}/drain`), on the
    /// store's clock. A drained silo stays `shutting_down` whatever it reports afterwards: it takes
    /// no new activations while its grains move away.
    pub drained_at_ms: Option<Millis>,
    /// Until when (store clock) the silo may not be declared dead: the end of the latest lease it
    /// was granted, plus the margin ([`super::lease::protected_until_ms`]). 0 for a record no
    /// lease was granted with.
    pub protected_until_ms: Millis,
}

impl SiloRecord {
    /// The status as `liveness` judges it: a silo silent for the TTL (and past its protection) is
    /// dead whatever it last said.
    pub fn status_at(&self, liveness: &Liveness) -> SiloStatus {
        if self.status == SiloStatus::Dead
            || !liveness.is_alive(self.last_heartbeat_ms, self.protected_until_ms)
        {
            SiloStatus::Dead
        } else {
            self.status
        }
    }

    /// From when (store clock) the silo is silent under `silo_ttl_ms` if it beats no more: its
    /// TTL past its last heartbeat, and its protection over. A heartbeat only moves it later; a
    /// lower TTL moves it earlier.
    pub fn silent_from(&self, silo_ttl_ms: Millis) -> Millis {
        self.protected_until_ms
            .max(self.last_heartbeat_ms.saturating_add(silo_ttl_ms))
    }

    /// The record as a drain requested at `drained_at_ms` leaves it: shutting down whatever the
    /// silo reported, since a drained silo takes no new activations while its grains move away.
    pub fn mark_drained(&mut self, drained_at_ms: Millis) {
        self.status = SiloStatus::ShuttingDown;
        self.drained_at_ms = Some(drained_at_ms);
    }

    /// Whether the silo can host grains of this type (absent list = every type).
    pub fn hosts(&self, grain_type: &str) -> bool {
        self.profile
            .grain_types
            .as_ref()
            .is_none_or(|types| types.iter().any(|t| t == grain_type))
    }
}

/// Whether a silo's new record changes what placement decides on beyond load figures: a new silo,
/// a new status, or a change in what it hosts or how it is labelled.
pub fn changes_membership(previous: Option<&SiloRecord>, next: &SiloRecord) -> bool {
    previous.is_none_or(|previous| {
        previous.status != next.status
            || previous.profile.address != next.profile.address
            || previous.profile.role != next.profile.role
            || previous.profile.metadata != next.profile.metadata
            || previous.profile.grain_types != next.profile.grain_types
    })
}

/// How far CPU usage (percentage points) may drift from the figures stored before a heartbeat
/// carrying it is worth writing early ([`load_moved`]).
pub const CPU_POINTS_UNMOVED: f64 = 5.0;

/// How far any count or byte figure may drift from the one stored, as a share (one twentieth:
/// 5 %), before a heartbeat carrying it is worth writing early ([`load_moved`]).
pub const SHARE_UNMOVED_DENOMINATOR: u64 = 20;

/// Whether the load figures of `now` moved far enough from `stored` (the figures other replicas
/// read) to be worth a write of their own: a figure that appears or goes, an overload verdict that
/// flips, CPU usage by [`CPU_POINTS_UNMOVED`] points or more, any count or byte figure by more than
/// a twentieth of the larger of the two (any change of a figure under 20). Figures that drift less
/// change no decision by much (two silos within 5 % are near enough even for power-of-two
/// choices), so a replica leaves them unwritten until the silo's protection needs extending.
pub fn load_moved(stored: &LoadReport, now: &LoadReport) -> bool {
    fn count_moved(stored: Option<u64>, now: Option<u64>) -> bool {
        match (stored, now) {
            (Some(stored), Some(now)) => {
                stored
                    .abs_diff(now)
                    .saturating_mul(SHARE_UNMOVED_DENOMINATOR)
                    > stored.max(now)
            }
            (stored, now) => stored.is_some() != now.is_some(),
        }
    }
    let cpu_moved = match (stored.cpu_usage, now.cpu_usage) {
        (Some(stored), Some(now)) => (stored - now).abs() >= CPU_POINTS_UNMOVED,
        (stored, now) => stored.is_some() != now.is_some(),
    };
    stored.overloaded != now.overloaded
        || cpu_moved
        || count_moved(stored.memory_usage_bytes, now.memory_usage_bytes)
        || count_moved(
            stored.max_available_memory_bytes,
            now.max_available_memory_bytes,
        )
        || count_moved(stored.activation_count, now.activation_count)
        || count_moved(stored.recent_activation_count, now.recent_activation_count)
        || count_moved(stored.connection_count, now.connection_count)
        || count_moved(
            stored.network_bytes_per_second,
            now.network_bytes_per_second,
        )
}

/// Everything that decides whether a silo is alive, read at one instant from the store: its clock
/// (the database's, the same for every replica), the cluster's TTL, and since when the replica
/// asking has reached the store without a break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// The store's clock, ms since the Unix epoch.
    pub now: Millis,
    pub silo_ttl_ms: Millis,
    /// Since when (on the store's clock) the replica judging has reached the store without a
    /// break: it saw no heartbeat fail before then, so silence before then is not counted.
    /// `Millis::MIN` for a store that cannot be unreachable (the embedded one).
    pub reachable_since: Millis,
}

impl Liveness {
    /// A judge that has always reached its store (the embedded store, which cannot be unreachable).
    pub fn at(now: Millis, silo_ttl_ms: Millis) -> Self {
        Self {
            now,
            silo_ttl_ms,
            reachable_since: Millis::MIN,
        }
    }

    /// The death rule, in one place (the SQL function `silo_is_alive` mirrors it). A silo that is
    /// not marked dead is alive while either
    /// - its protection lasts (`protected_until_ms`: every lease it was granted, plus the margin,
    ///   has not yet run out — see [`super::lease`]), or
    /// - less than a TTL has passed since its last stamp *while this replica reached the store*:
    ///   silence is counted from the later of the stamp and `reachable_since`. A replica that
    ///   could not reach the store could not see the heartbeats that failed meanwhile, so every
    ///   outage it saw (not just the last) is forgiven, and a silo gets a whole TTL after the store
    ///   answers again to send one.
    pub fn is_alive(&self, last_heartbeat_ms: Millis, protected_until_ms: Millis) -> bool {
        self.now < protected_until_ms
            || self
                .now
                .saturating_sub(last_heartbeat_ms.max(self.reachable_since))
                < self.silo_ttl_ms
    }

    /// How long since the heartbeat, never negative.
    pub fn silent_for(&self, last_heartbeat_ms: Millis) -> Millis {
        self.now.saturating_sub(last_heartbeat_ms).max(0)
    }

    /// The same judge `elapsed_ms` later (a cached read used a moment after it was made).
    pub fn later_by(self, elapsed_ms: Millis) -> Self {
        Self {
            now: self.now.saturating_add(elapsed_ms),
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A judge at `now` that has reached the store since `reachable_since`, TTL 10 s.
    fn judge(now: Millis, reachable_since: Millis) -> Liveness {
        Liveness {
            now,
            silo_ttl_ms: 10_000,
            reachable_since,
        }
    }

    #[test]
    fn a_silo_is_dead_exactly_when_its_ttl_has_passed() {
        assert!(Liveness::at(10_999, 10_000).is_alive(1_000, 0));
        assert!(!Liveness::at(11_000, 10_000).is_alive(1_000, 0));
    }

    #[test]
    fn silence_counts_only_from_when_the_replica_reached_the_store_again() {
        // Last stamp at 1 s; the store unreachable from 5 s to 25 s (the replica reaches it again
        // at 25 s). The silo may have sent heartbeats all along: it gets a whole TTL from 25 s.
        assert!(judge(34_999, 25_000).is_alive(1_000, 0));
        assert!(!judge(35_000, 25_000).is_alive(1_000, 0));
        // The old rule forgave only the outage's 20 s and killed it at 31 s.
        assert!(judge(31_000, 25_000).is_alive(1_000, 0));
        // A stamp after the outage counts from the stamp.
        assert!(judge(39_999, 25_000).is_alive(30_000, 0));
        assert!(!judge(40_000, 25_000).is_alive(30_000, 0));
    }

    #[test]
    fn every_outage_is_forgiven_not_only_the_last() {
        // Stamp at 0; outages 2–6 s and 8–9 s: silence counts from 9 s. Under the old rule (the
        // last outage's 1 s forgiven) the silo died at 11 s.
        assert!(judge(11_000, 9_000).is_alive(0, 0));
        assert!(judge(18_999, 9_000).is_alive(0, 0));
        assert!(!judge(19_000, 9_000).is_alive(0, 0));
    }

    #[test]
    fn a_replica_that_just_reached_the_store_judges_no_silence_it_did_not_see() {
        // A replica that started (or reached the store again) a moment ago judges a silo silent
        // for an hour alive, until it has itself watched a whole TTL go by.
        assert!(judge(3_600_000, 3_599_000).is_alive(0, 0));
        assert!(!judge(3_609_000, 3_599_000).is_alive(0, 0));
    }

    #[test]
    fn a_protected_silo_is_alive_whatever_its_silence() {
        // Granted a lease under a 60 s TTL at 0, then a heartbeat under a 10 s TTL at 1 s.
        assert!(Liveness::at(59_999, 10_000).is_alive(1_000, 60_000));
        assert!(!Liveness::at(60_000, 10_000).is_alive(1_000, 60_000));
    }

    fn load(cpu: f64, activations: u64) -> LoadReport {
        LoadReport {
            cpu_usage: Some(cpu),
            memory_usage_bytes: Some(4_000_000_000),
            activation_count: Some(activations),
            ..LoadReport::default()
        }
    }

    #[test]
    fn load_drifting_within_the_band_has_not_moved() {
        assert!(!load_moved(&load(40.0, 1_000), &load(44.9, 1_050)));
        assert!(!load_moved(&load(40.0, 1_000), &load(35.1, 953)));
    }

    #[test]
    fn load_past_the_band_or_changing_shape_has_moved() {
        let stored = load(40.0, 1_000);
        assert!(load_moved(&stored, &load(45.0, 1_000)), "five CPU points");
        assert!(load_moved(&stored, &load(40.0, 1_053)), "over a twentieth");
        assert!(load_moved(&load(10.0, 3), &load(10.0, 4)), "a small count");
        let overloaded = LoadReport {
            overloaded: true,
            ..stored.clone()
        };
        assert!(load_moved(&stored, &overloaded), "the silo's own verdict");
        let without_cpu = LoadReport {
            cpu_usage: None,
            ..stored.clone()
        };
        assert!(load_moved(&stored, &without_cpu), "a figure that goes");
        let with_connections = LoadReport {
            connection_count: Some(0),
            ..stored.clone()
        };
        assert!(
            load_moved(&stored, &with_connections),
            "a figure that comes"
        );
    }

    proptest::proptest! {
        #[test]
        fn load_moved_is_symmetric_and_nothing_moved_from_itself(
            a in 0.0f64..100.0, b in 0.0f64..100.0, x in 0u64..u64::MAX, y in 0u64..u64::MAX,
        ) {
            let (first, second) = (load(a, x), load(b, y));
            proptest::prop_assert!(!load_moved(&first, &first));
            proptest::prop_assert_eq!(load_moved(&first, &second), load_moved(&second, &first));
        }
    }

    #[test]
    fn smoothing_follows_rises_and_keeps_memory_within_the_limit() {
        let mut smoothing = Smoothing::default();
        let report = LoadReport {
            cpu_usage: Some(50.0),
            memory_usage_bytes: Some(1_000),
            max_available_memory_bytes: Some(2_000),
            ..LoadReport::default()
        };
        smoothing.observe(&report);
        assert_eq!(smoothing.cpu_usage, Some(50.0));
        assert_eq!(smoothing.memory_usage_bytes, Some(1_000));
        smoothing.observe(&LoadReport {
            cpu_usage: None,
            ..report
        });
        assert_eq!(
            smoothing.cpu_usage,
            Some(50.0),
            "absent figures keep the last estimate"
        );
    }
}
