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
}

impl SiloRecord {
    /// The status as `liveness` judges it: a silo silent for the TTL is dead whatever it last said.
    pub fn status_at(&self, liveness: &Liveness) -> SiloStatus {
        if self.status == SiloStatus::Dead || !liveness.is_fresh(self.last_heartbeat_ms) {
            SiloStatus::Dead
        } else {
            self.status
        }
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

/// Everything that decides whether a silo is alive, read at one instant from the store: its clock
/// (the database's, the same for every replica), the cluster's TTL, and when the replica asking last
/// could not reach the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// The store's clock, ms since the Unix epoch.
    pub now: Millis,
    pub silo_ttl_ms: Millis,
    /// The replica's last store outage, on the store's clock: from when to when it could not reach
    /// the store (the end is `now` while it lasts). No heartbeat could be stored meanwhile, so that
    /// time is not a silo's silence.
    pub outage: Option<Outage>,
}

/// A span during which the store could not be reached, on the store's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outage {
    pub began: Millis,
    pub ended: Millis,
}

impl Liveness {
    /// A judge with no outage to forgive (the embedded store, which cannot be unreachable).
    pub fn at(now: Millis, silo_ttl_ms: Millis) -> Self {
        Self {
            now,
            silo_ttl_ms,
            outage: None,
        }
    }

    /// The liveness rule, in one place (the SQL function `silo_is_live` mirrors it): a heartbeat
    /// keeps a silo alive for strictly less than the TTL, counting only time during which the store
    /// was reachable — the last outage's overlap with the silence is not silence.
    pub fn is_fresh(&self, last_heartbeat_ms: Millis) -> bool {
        let forgiven = self.outage.map_or(0, |outage| {
            (outage.ended.min(self.now) - outage.began.max(last_heartbeat_ms)).max(0)
        });
        self.silent_for(last_heartbeat_ms) - forgiven < self.silo_ttl_ms
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

    #[test]
    fn a_silo_is_dead_exactly_when_its_ttl_has_passed() {
        assert!(Liveness::at(10_999, 10_000).is_fresh(1_000));
        assert!(!Liveness::at(11_000, 10_000).is_fresh(1_000));
    }

    #[test]
    fn time_the_store_was_unreachable_is_not_silence() {
        // Last heartbeat at 1 s, the store unreachable from 5 s to 25 s, TTL 10 s.
        let after_outage = Liveness {
            now: 30_000,
            silo_ttl_ms: 10_000,
            outage: Some(Outage {
                began: 5_000,
                ended: 25_000,
            }),
        };
        assert!(
            after_outage.is_fresh(1_000),
            "29 s silent, 20 s of it unreachable"
        );
        assert!(
            !after_outage.later_by(1_000).is_fresh(1_000),
            "10 s of reachable silence"
        );
        // An outage before the last heartbeat forgives nothing.
        assert!(!after_outage.later_by(9_000).is_fresh(29_000));
        assert!(after_outage.later_by(8_999).is_fresh(29_000));
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
