//! Where a new activation goes: compatibility, the placement hint and the strategies.
//!
//! [`place`] is a pure function of a cluster view, a request, the strategy and an RNG. The caller
//! (the oracle service) has already looked the grain up in the directory; this module only decides
//! among live silos and says why.

pub mod hash;
pub mod random;

use rand::Rng;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::clock::Millis;
use crate::cluster::{GrainId, SiloId, SiloRecord, SiloStatus};

/// A placement strategy. Orleans' remaining strategies arrive with their own modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// Uniformly random among compatible silos (Orleans `RandomPlacement`).
    #[default]
    Random,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Random => "random",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        [Strategy::Random].into_iter().find(|s| s.as_str() == value)
    }
}

/// The membership a decision is made against: every known silo and the clock reading that decides
/// which of them are alive.
#[derive(Debug, Clone)]
pub struct ClusterView {
    pub now: Millis,
    pub silo_ttl_ms: Millis,
    /// Ordered by silo id, so a seeded decision does not depend on storage order.
    pub silos: Vec<SiloRecord>,
}

/// What is being placed and on whose behalf.
#[derive(Debug, Clone, Copy)]
pub struct PlacementInput<'a> {
    pub grain: &'a GrainId,
    /// The silo asking ("local" to Orleans' directors).
    pub requesting_silo: Option<&'a SiloId>,
    /// A silo the caller would like; honoured when it is compatible (Orleans §1.4).
    pub hint: Option<&'a SiloId>,
}

/// Which rule made the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// The placement hint named a compatible silo.
    Hint,
    /// Uniform random pick among the candidates.
    Random,
}

/// A silo left out of the candidates, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Excluded {
    pub silo: String,
    #[schema(example = "status is joining; only active silos take new activations")]
    pub reason: String,
}

/// Why a placement went where it did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Explanation {
    /// Compatible silos, in the order the strategy saw them.
    pub candidates: Vec<String>,
    /// Known silos that were not candidates, with the reason.
    pub excluded: Vec<Excluded>,
    /// What the placement hint did, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    pub rule: Rule,
}

/// A placement decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub silo: SiloId,
    pub address: String,
    pub rule: Rule,
    pub explanation: Option<Explanation>,
}

/// Why no silo could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("the cluster has no active silo: {known} known silo(s), none active and alive")]
    NoActiveSilo { known: usize },
    #[error("no active silo can host grain type `{grain_type}`: active silos {active:?} declare grain types that do not include it")]
    NoCompatibleSilo {
        grain_type: String,
        active: Vec<String>,
    },
}

/// Candidates for a grain type: active, alive silos that host it, in view order.
pub fn compatible<'v>(view: &'v ClusterView, grain_type: &str) -> Vec<&'v SiloRecord> {
    view.silos
        .iter()
        .filter(|silo| {
            silo.status_at(view.now, view.silo_ttl_ms) == SiloStatus::Active
                && silo.hosts(grain_type)
        })
        .collect()
}

fn exclusion_reason(view: &ClusterView, silo: &SiloRecord, grain_type: &str) -> Option<String> {
    match silo.status_at(view.now, view.silo_ttl_ms) {
        SiloStatus::Active if silo.hosts(grain_type) => None,
        SiloStatus::Active => Some(format!("does not host grain type `{grain_type}`")),
        SiloStatus::Dead => Some(format!(
            "dead: no heartbeat for {} ms (silo_ttl {} ms)",
            (view.now - silo.last_heartbeat_ms).max(0),
            view.silo_ttl_ms
        )),
        other => Some(format!(
            "status is {}; only active silos take new activations",
            other.as_str()
        )),
    }
}

/// Decides where `input.grain` goes. Errors say why nothing fits.
pub fn place(
    view: &ClusterView,
    input: PlacementInput<'_>,
    strategy: Strategy,
    explain: bool,
    rng: &mut impl Rng,
) -> Result<Decision, PlacementError> {
    let grain_type = input.grain.grain_type();
    let candidates = compatible(view, grain_type);
    if candidates.is_empty() {
        let active: Vec<String> = view
            .silos
            .iter()
            .filter(|s| s.status_at(view.now, view.silo_ttl_ms) == SiloStatus::Active)
            .map(|s| s.id.to_string())
            .collect();
        return Err(if active.is_empty() {
            PlacementError::NoActiveSilo {
                known: view.silos.len(),
            }
        } else {
            PlacementError::NoCompatibleSilo {
                grain_type: grain_type.to_owned(),
                active,
            }
        });
    }

    let hinted = input
        .hint
        .and_then(|hint| candidates.iter().copied().find(|c| &c.id == hint));
    let (chosen, rule) = match hinted {
        Some(silo) => (silo, Rule::Hint),
        None => match strategy {
            Strategy::Random => (random::choose(&candidates, rng), Rule::Random),
        },
    };

    let explanation = explain.then(|| Explanation {
        candidates: candidates.iter().map(|c| c.id.to_string()).collect(),
        excluded: view
            .silos
            .iter()
            .filter_map(|silo| {
                exclusion_reason(view, silo, grain_type).map(|reason| Excluded {
                    silo: silo.id.to_string(),
                    reason,
                })
            })
            .collect(),
        hint: input.hint.map(|hint| match hinted {
            Some(_) => format!("{hint} is compatible: used"),
            None => format!("{hint} is not a compatible silo: ignored"),
        }),
        rule,
    });

    Ok(Decision {
        silo: chosen.id.clone(),
        address: chosen.profile.address.clone(),
        rule,
        explanation,
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Small builders for placement tests.
    use std::collections::BTreeMap;

    use super::ClusterView;
    use crate::cluster::silo::{LoadReport, SiloProfile, Smoothing};
    use crate::cluster::{SiloId, SiloRecord, SiloStatus};

    pub fn silo(id: &str, status: SiloStatus, grain_types: Option<&[&str]>) -> SiloRecord {
        SiloRecord {
            id: SiloId::parse("silo", id).unwrap(),
            status,
            last_heartbeat_ms: 0,
            heartbeat_count: 1,
            profile: SiloProfile {
                address: id.to_owned(),
                role: None,
                metadata: BTreeMap::new(),
                grain_types: grain_types.map(|t| t.iter().map(|s| s.to_string()).collect()),
                load: LoadReport::default(),
                smoothing: Smoothing::default(),
                first_seen_ms: 0,
            },
        }
    }

    pub fn view(silos: Vec<SiloRecord>) -> ClusterView {
        ClusterView {
            now: 1_000,
            silo_ttl_ms: 10_000,
            silos,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just};
    use proptest::strategy::Strategy as Generator;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::testing::{silo, view};
    use super::*;

    fn grain(id: &str) -> GrainId {
        GrainId::parse("grain", id).unwrap()
    }

    fn input<'a>(grain: &'a GrainId, hint: Option<&'a SiloId>) -> PlacementInput<'a> {
        PlacementInput {
            grain,
            requesting_silo: None,
            hint,
        }
    }

    #[test]
    fn only_active_silos_that_host_the_type_are_candidates() {
        let v = view(vec![
            silo("a", SiloStatus::Active, None),
            silo("b", SiloStatus::Joining, None),
            silo("c", SiloStatus::ShuttingDown, None),
            silo("d", SiloStatus::Active, Some(&["order"])),
            silo("e", SiloStatus::Dead, None),
        ]);
        let ids: Vec<_> = compatible(&v, "user")
            .iter()
            .map(|s| s.id.as_str())
            .collect();
        assert_eq!(ids, ["a"]);
    }

    #[test]
    fn a_compatible_hint_wins_and_an_incompatible_one_is_ignored() {
        let v = view(vec![
            silo("a", SiloStatus::Active, None),
            silo("b", SiloStatus::Active, None),
            silo("j", SiloStatus::Joining, None),
        ]);
        let g = grain("user/alice");
        let b = SiloId::parse("hint", "b").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let hinted = place(&v, input(&g, Some(&b)), Strategy::Random, true, &mut rng).unwrap();
        assert_eq!((hinted.silo.as_str(), hinted.rule), ("b", Rule::Hint));

        let j = SiloId::parse("hint", "j").unwrap();
        let ignored = place(&v, input(&g, Some(&j)), Strategy::Random, true, &mut rng).unwrap();
        assert_eq!(ignored.rule, Rule::Random);
        assert_ne!(ignored.silo.as_str(), "j");
        let explanation = ignored.explanation.unwrap();
        assert_eq!(explanation.candidates, ["a", "b"]);
        assert_eq!(explanation.excluded.len(), 1);
        assert!(explanation.hint.unwrap().contains("ignored"));
    }

    #[test]
    fn errors_say_whether_no_silo_is_active_or_none_hosts_the_type() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let g = grain("user/alice");
        let none_active = view(vec![silo("a", SiloStatus::Joining, None)]);
        assert_eq!(
            place(
                &none_active,
                input(&g, None),
                Strategy::Random,
                false,
                &mut rng
            ),
            Err(PlacementError::NoActiveSilo { known: 1 })
        );
        let wrong_type = view(vec![silo("a", SiloStatus::Active, Some(&["order"]))]);
        assert!(matches!(
            place(
                &wrong_type,
                input(&g, None),
                Strategy::Random,
                false,
                &mut rng
            ),
            Err(PlacementError::NoCompatibleSilo { .. })
        ));
    }

    fn arbitrary_silo() -> impl Generator<Value = SiloRecord> {
        (
            0u32..20,
            prop_oneof![
                Just(SiloStatus::Joining),
                Just(SiloStatus::Active),
                Just(SiloStatus::ShuttingDown),
                Just(SiloStatus::Dead)
            ],
            any::<bool>(),
            0i64..20_000,
        )
            .prop_map(|(n, status, hosts_user, last)| {
                let types: &[&str] = if hosts_user { &["user"] } else { &["order"] };
                let mut s = silo(&format!("s{n}"), status, Some(types));
                s.last_heartbeat_ms = last;
                s
            })
    }

    proptest! {
        #[test]
        fn never_places_on_a_dead_inactive_or_incompatible_silo(
            silos in proptest::collection::vec(arbitrary_silo(), 0..12),
            now in 0i64..30_000,
            seed in any::<u64>(),
        ) {
            let mut silos = silos;
            silos.sort_by(|a, b| a.id.cmp(&b.id));
            silos.dedup_by(|a, b| a.id == b.id);
            let v = ClusterView { now, silo_ttl_ms: 10_000, silos };
            let g = grain("user/x");
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            if let Ok(decision) = place(&v, input(&g, None), Strategy::Random, false, &mut rng) {
                let chosen = v.silos.iter().find(|s| s.id == decision.silo).unwrap();
                prop_assert_eq!(chosen.status_at(now, 10_000), SiloStatus::Active);
                prop_assert!(chosen.hosts("user"));
            } else {
                prop_assert!(compatible(&v, "user").is_empty());
            }
        }

        #[test]
        fn the_same_seed_gives_the_same_answer(seed in any::<u64>(), n in 1usize..20) {
            let v = view((0..n).map(|i| silo(&format!("s{i}"), SiloStatus::Active, None)).collect());
            let g = grain("user/x");
            let first = place(&v, input(&g, None), Strategy::Random, false, &mut ChaCha8Rng::seed_from_u64(seed));
            let second = place(&v, input(&g, None), Strategy::Random, false, &mut ChaCha8Rng::seed_from_u64(seed));
            prop_assert_eq!(first, second);
        }
    }
}
