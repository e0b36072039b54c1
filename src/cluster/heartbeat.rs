//! Applying a heartbeat to what the oracle knew of a silo.

use std::collections::BTreeMap;

use super::lease;
use super::names::SiloId;
use super::silo::{Liveness, LoadReport, SiloProfile, SiloRecord, SiloStatus, Smoothing};
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
    /// The id is not newer than an incarnation that died at the same address (dead is final for a
    /// silo id for ever, also after the dead silo's listing is forgotten).
    #[error("silo {silo} is not newer than generation {dead_generation}, which was declared dead at address {address}: a silo that died cannot come back under its id or an older one; rejoin under a newer generation")]
    Retired {
        silo: String,
        address: String,
        dead_generation: i64,
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

/// The silo's record after this heartbeat, stamped with the store's clock (`liveness.now`) and
/// protected from being declared dead until the lease its acknowledgement grants has run out. The
/// stamp never moves backwards, even if that clock does.
pub fn apply(
    heartbeat: &Heartbeat,
    previous: Option<&SiloRecord>,
    liveness: &Liveness,
) -> Result<SiloRecord, HeartbeatRejection> {
    let now = liveness.now;
    let drained_at_ms = previous.and_then(|p| p.drained_at_ms);
    let protected_until = previous.map_or(0, |p| p.protected_until_ms);
    let (mut smoothing, first_seen_ms, heartbeat_count, stamp) = match previous {
        None => (Smoothing::default(), now, 1, now),
        Some(previous) => {
            let current = previous.status_at(liveness);
            if current == SiloStatus::Dead {
                return Err(HeartbeatRejection::DeclaredDead {
                    silo: heartbeat.silo.to_string(),
                    last_heartbeat_ms: previous.last_heartbeat_ms,
                    silo_ttl_ms: liveness.silo_ttl_ms,
                });
            }
            // A drained silo is kept shutting down (below) whatever it says: the operator's
            // request stands over a silo that does not know of it yet.
            if drained_at_ms.is_none() && lifecycle_rank(heartbeat.status) < lifecycle_rank(current)
            {
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
                now.max(previous.last_heartbeat_ms),
            )
        }
    };
    smoothing.observe(&heartbeat.load);
    let status = match drained_at_ms {
        Some(_) => SiloStatus::ShuttingDown,
        None => heartbeat.status,
    };
    Ok(SiloRecord {
        id: heartbeat.silo.clone(),
        status,
        last_heartbeat_ms: stamp,
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
        drained_at_ms,
        // The lease this acknowledgement grants (see `lease`) runs out before this.
        protected_until_ms: lease::protected_until_ms(protected_until, stamp, liveness.silo_ttl_ms),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now: Millis) -> Liveness {
        Liveness::at(now, 10_000)
    }

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
        let first = apply(&heartbeat(SiloStatus::Active, 50.0), None, &at(1_000)).unwrap();
        assert_eq!((first.last_heartbeat_ms, first.heartbeat_count), (1_000, 1));
        let second = apply(
            &heartbeat(SiloStatus::Active, 20.0),
            Some(&first),
            &at(2_000),
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
        let first = apply(&heartbeat(SiloStatus::Active, 1.0), None, &at(0)).unwrap();
        let late = apply(
            &heartbeat(SiloStatus::Active, 1.0),
            Some(&first),
            &at(10_000),
        );
        assert!(matches!(late, Err(HeartbeatRejection::DeclaredDead { .. })));
    }

    #[test]
    fn a_clock_that_steps_back_never_moves_the_stamp_back() {
        let first = apply(&heartbeat(SiloStatus::Active, 1.0), None, &at(5_000)).unwrap();
        let second = apply(
            &heartbeat(SiloStatus::Active, 1.0),
            Some(&first),
            &at(4_000),
        )
        .unwrap();
        assert_eq!(second.last_heartbeat_ms, 5_000);
    }

    #[test]
    fn a_drained_silo_stays_shutting_down_whatever_it_reports() {
        let active = apply(&heartbeat(SiloStatus::Active, 1.0), None, &at(0)).unwrap();
        let drained = SiloRecord {
            status: SiloStatus::ShuttingDown,
            drained_at_ms: Some(500),
            ..active
        };
        let next = apply(
            &heartbeat(SiloStatus::Active, 2.0),
            Some(&drained),
            &at(1_000),
        )
        .unwrap();
        assert_eq!(next.status, SiloStatus::ShuttingDown);
        assert_eq!(next.drained_at_ms, Some(500));
        assert_eq!(
            next.profile.load.cpu_usage,
            Some(2.0),
            "its load is still taken"
        );
    }

    #[test]
    fn an_acknowledged_heartbeat_protects_the_silo_until_its_lease_and_the_margin_have_passed() {
        let first = apply(&heartbeat(SiloStatus::Active, 1.0), None, &at(1_000)).unwrap();
        assert_eq!(first.protected_until_ms, 11_000);
        // The TTL drops to 3 s: the lease granted under 10 s still stands.
        let shorter = Liveness::at(2_000, 3_000);
        let second = apply(&heartbeat(SiloStatus::Active, 1.0), Some(&first), &shorter).unwrap();
        assert_eq!(second.protected_until_ms, 11_000);
        assert_eq!(
            second.status_at(&Liveness::at(10_999, 3_000)),
            SiloStatus::Active
        );
        assert_eq!(
            second.status_at(&Liveness::at(11_000, 3_000)),
            SiloStatus::Dead
        );
    }

    #[test]
    fn status_only_moves_forward() {
        let leaving = apply(&heartbeat(SiloStatus::ShuttingDown, 1.0), None, &at(0)).unwrap();
        let back = apply(&heartbeat(SiloStatus::Active, 1.0), Some(&leaving), &at(1));
        assert!(matches!(
            back,
            Err(HeartbeatRejection::StatusRegression { .. })
        ));
    }
}
