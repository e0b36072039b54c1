//! Applying a heartbeat to what the oracle knew of a silo.

use std::collections::BTreeMap;

use super::names::SiloId;
use super::silo::{LoadReport, SiloProfile, SiloRecord, SiloStatus, Smoothing};
use crate::clock::Millis;

/// A validated heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    pub silo: SiloId,
    pub address: String,
    pub status: SiloStatus,
    pub role: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub grain_types: Option<Vec<String>>,
    pub load: LoadReport,
}

/// Why a heartbeat was refused; the silo must act on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatRejection {
    /// The incarnation was declared dead; its activations were released. Orleans makes such a silo
    /// stop, and so do we: it must come back under a new id (a new generation).
    #[error("silo {silo} was declared dead after no heartbeat since {last_heartbeat_ms} ms (silo_ttl {silo_ttl_ms} ms); its activations were released, so it must rejoin under a new silo id (e.g. a new generation)")]
    DeclaredDead {
        silo: String,
        last_heartbeat_ms: Millis,
        silo_ttl_ms: Millis,
    },
    /// Lifecycles only move forward: joining → active → shutting_down.
    #[error("silo {silo} cannot go from {from} back to {to}: a silo's status only moves forward (joining → active → shutting_down)")]
    StatusRegression {
        silo: String,
        from: &'static str,
        to: &'static str,
    },
}

fn lifecycle_rank(status: SiloStatus) -> u8 {
    match status {
        SiloStatus::Joining => 0,
        SiloStatus::Active => 1,
        SiloStatus::ShuttingDown => 2,
        SiloStatus::Dead => 3,
    }
}

/// The silo's record after this heartbeat, stamped with the oracle's `now`.
pub fn apply(
    heartbeat: &Heartbeat,
    previous: Option<&SiloRecord>,
    now: Millis,
    silo_ttl_ms: Millis,
) -> Result<SiloRecord, HeartbeatRejection> {
    let (mut smoothing, first_seen_ms, heartbeat_count) = match previous {
        None => (Smoothing::default(), now, 1),
        Some(previous) => {
            let current = previous.status_at(now, silo_ttl_ms);
            if current == SiloStatus::Dead {
                return Err(HeartbeatRejection::DeclaredDead {
                    silo: heartbeat.silo.to_string(),
                    last_heartbeat_ms: previous.last_heartbeat_ms,
                    silo_ttl_ms,
                });
            }
            if lifecycle_rank(heartbeat.status) < lifecycle_rank(current) {
                return Err(HeartbeatRejection::StatusRegression {
                    silo: heartbeat.silo.to_string(),
                    from: current.as_str(),
                    to: heartbeat.status.as_str(),
                });
            }
            (
                previous.profile.smoothing.clone(),
                previous.profile.first_seen_ms,
                previous.heartbeat_count + 1,
            )
        }
    };
    smoothing.observe(&heartbeat.load);
    Ok(SiloRecord {
        id: heartbeat.silo.clone(),
        status: heartbeat.status,
        last_heartbeat_ms: now,
        heartbeat_count,
        profile: SiloProfile {
            address: heartbeat.address.clone(),
            role: heartbeat.role.clone(),
            metadata: heartbeat.metadata.clone(),
            grain_types: heartbeat.grain_types.clone(),
            load: heartbeat.load.clone(),
            smoothing,
            first_seen_ms,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heartbeat(status: SiloStatus, cpu: f64) -> Heartbeat {
        Heartbeat {
            silo: SiloId::parse("silo", "a@1").unwrap(),
            address: "a".into(),
            status,
            role: None,
            metadata: BTreeMap::new(),
            grain_types: None,
            load: LoadReport {
                cpu_usage: Some(cpu),
                ..LoadReport::default()
            },
        }
    }

    #[test]
    fn heartbeats_are_stamped_with_the_oracle_clock_and_smoothed_across_calls() {
        let first = apply(&heartbeat(SiloStatus::Active, 50.0), None, 1_000, 10_000).unwrap();
        assert_eq!((first.last_heartbeat_ms, first.heartbeat_count), (1_000, 1));
        let second = apply(
            &heartbeat(SiloStatus::Active, 20.0),
            Some(&first),
            2_000,
            10_000,
        )
        .unwrap();
        assert_eq!(second.heartbeat_count, 2);
        assert_eq!(second.profile.first_seen_ms, 1_000);
        let smoothed = second.profile.smoothing.cpu_usage.unwrap();
        assert!(
            smoothed > 20.0 && smoothed < 50.0,
            "drops decay: {smoothed}"
        );
    }

    #[test]
    fn a_silo_past_its_ttl_cannot_come_back_under_the_same_id() {
        let first = apply(&heartbeat(SiloStatus::Active, 1.0), None, 0, 10_000).unwrap();
        let late = apply(
            &heartbeat(SiloStatus::Active, 1.0),
            Some(&first),
            10_000,
            10_000,
        );
        assert!(matches!(late, Err(HeartbeatRejection::DeclaredDead { .. })));
    }

    #[test]
    fn status_only_moves_forward() {
        let leaving = apply(&heartbeat(SiloStatus::ShuttingDown, 1.0), None, 0, 10_000).unwrap();
        let back = apply(
            &heartbeat(SiloStatus::Active, 1.0),
            Some(&leaving),
            1,
            10_000,
        );
        assert!(matches!(
            back,
            Err(HeartbeatRejection::StatusRegression { .. })
        ));
    }
}
