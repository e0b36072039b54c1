//! Where a drained silo's grains go: each one where its grain type's placement strategy would put
//! it now, among the other silos (pure).
//!
//! Two things set a drain apart from one placement after another:
//! - The plan sees its own moves. Strategies read load figures that only change with the next
//!   heartbeat, so a thousand grains placed against the same figures would all go to the silo that
//!   looked lightest. Each planned arrival is added to its target's figures (activation counts,
//!   and memory at the drained silo's average per activation) before the next grain is decided,
//!   as the target's heartbeat will show once the grain is there. Migrations still open count the
//!   same way.
//! - The drained silo is the requesting silo. It is `shutting_down`, so it is never a candidate;
//!   metadata filters compare the candidates with its metadata (a grain stays in its zone when the
//!   policy prefers the caller's zone), and `prefer_local` falls back to a random silo.
//!
//! A `webhook` strategy is not asked once per grain; its fallback decides. Grains no silo can take
//! (no other silo hosts their type, or the filters leave none) are not moved, and the plan says why,
//! by grain type.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::Rng;

use crate::cluster::{GrainId, SiloId, SiloRecord};
use crate::placement::{self, ClusterView, LocalDeltas, PlacementInput};
use crate::policy::Policy;

/// One activation of the drained silo, to be moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departing {
    pub grain: GrainId,
    /// The activation's epoch: its migration applies to this activation only.
    pub epoch: i64,
}

/// Where one activation goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    pub grain: GrainId,
    pub epoch: i64,
    pub to: SiloId,
}

/// Activations of one grain type that no silo can take, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    pub grain_type: String,
    pub activations: u64,
    /// The placement error of the first of them.
    pub reason: String,
}

/// A drain's plan for a batch of activations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub moves: Vec<Destination>,
    /// By grain type, in name order.
    pub stuck: Vec<Stuck>,
}

/// A migration still open: `count` activations planned from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arriving {
    pub from: String,
    pub to: String,
    pub count: u64,
}

/// Decides a target for each of `departing` (activations of `source`, in the order given),
/// counting `arriving` and the plan's own moves in the targets' figures.
pub fn plan(
    view: &ClusterView,
    policy: &Policy,
    source: &SiloId,
    departing: &[Departing],
    arriving: &[Arriving],
    rng: &mut impl Rng,
) -> DrainPlan {
    let mut figures = Figures::new(view, source);
    for open in arriving {
        figures.shift(&open.from, &open.to, open.count);
    }
    let mut moves = Vec::with_capacity(departing.len());
    let mut stuck: BTreeMap<String, Stuck> = BTreeMap::new();
    // The strategies' own tallies would count the plan's moves a second time; they are cleared
    // after each decision.
    let mut no_tally = LocalDeltas::default();
    for activation in departing {
        let grain_type = activation.grain.grain_type();
        let resolved = policy.resolve(grain_type, None);
        let request = placement::Request {
            input: PlacementInput {
                grain: &activation.grain,
                requesting_silo: Some(source),
                hint: None,
            },
            strategy: resolved.strategy,
            options: resolved.options,
            filters: resolved.filters,
            chosen_by_webhook: None,
            explain: false,
        };
        let decided = placement::place(&figures.view, &request, &mut no_tally, rng);
        no_tally.0.clear();
        match decided {
            Ok(decision) => {
                figures.shift(source.as_str(), decision.silo.as_str(), 1);
                moves.push(Destination {
                    grain: activation.grain.clone(),
                    epoch: activation.epoch,
                    to: decision.silo,
                });
            }
            Err(error) => {
                let entry = stuck.entry(grain_type.to_owned()).or_insert_with(|| Stuck {
                    grain_type: grain_type.to_owned(),
                    activations: 0,
                    reason: error.to_string(),
                });
                entry.activations += 1;
            }
        }
    }
    DrainPlan {
        moves,
        stuck: stuck.into_values().collect(),
    }
}

/// The plan's copy of the view, whose load figures move with each planned migration.
struct Figures {
    view: ClusterView,
    /// Memory an activation of the drained silo takes, on average (none when it does not say).
    bytes_per_activation: Option<u64>,
}

impl Figures {
    fn new(view: &ClusterView, source: &SiloId) -> Self {
        let bytes_per_activation = view.find(source).and_then(|silo| {
            let memory = silo.profile.smoothing.memory_usage_bytes?;
            let count = silo.profile.load.activation_count.filter(|&n| n > 0)?;
            Some(memory / count)
        });
        Self {
            // A copy of its own: the shared membership read must not see the plan's figures.
            view: ClusterView {
                liveness: view.liveness,
                silos: Arc::new(view.silos.as_ref().clone()),
            },
            bytes_per_activation,
        }
    }

    /// Moves `count` activations' worth of figures from `from` to `to` (either may be unknown).
    fn shift(&mut self, from: &str, to: &str, count: u64) {
        let bytes = self.bytes_per_activation.map(|b| b.saturating_mul(count));
        // The plan holds the only reference, so this never copies.
        let silos = Arc::make_mut(&mut self.view.silos);
        if let Some(source) = silos.iter_mut().find(|s| s.id.as_str() == from) {
            adjust(source, count, bytes, u64::saturating_sub);
        }
        if let Some(target) = silos.iter_mut().find(|s| s.id.as_str() == to) {
            adjust(target, count, bytes, u64::saturating_add);
        }
    }
}

fn adjust(silo: &mut SiloRecord, count: u64, bytes: Option<u64>, by: fn(u64, u64) -> u64) {
    let load = &mut silo.profile.load;
    for figure in [
        &mut load.activation_count,
        &mut load.recent_activation_count,
    ] {
        *figure = Some(by(figure.unwrap_or(0), count));
    }
    if let (Some(memory), Some(bytes)) = (silo.profile.smoothing.memory_usage_bytes, bytes) {
        silo.profile.smoothing.memory_usage_bytes = Some(by(memory, bytes));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::cluster::SiloStatus;
    use crate::placement::testing::{silo, view};

    fn departing(grains: &[&str]) -> Vec<Departing> {
        grains
            .iter()
            .enumerate()
            .map(|(i, g)| Departing {
                grain: GrainId::parse("grain", g).unwrap(),
                epoch: i as i64 + 1,
            })
            .collect()
    }

    fn counted(id: &str, status: SiloStatus, activations: u64) -> SiloRecord {
        let mut record = silo(id, status, None);
        record.profile.load.activation_count = Some(activations);
        record.profile.load.recent_activation_count = Some(activations);
        record
    }

    fn policy(strategy: &str) -> Policy {
        serde_json::from_value(serde_json::json!({ "default_strategy": strategy })).unwrap()
    }

    fn targets(plan: &DrainPlan) -> BTreeMap<String, usize> {
        let mut by_target = BTreeMap::new();
        for m in &plan.moves {
            *by_target.entry(m.to.to_string()).or_default() += 1;
        }
        by_target
    }

    #[test]
    fn the_plan_counts_its_own_moves_so_load_aware_strategies_fill_the_light_silos_evenly() {
        let source = SiloId::parse("silo", "d").unwrap();
        let cluster = view(vec![
            counted("a", SiloStatus::Active, 100),
            counted("b", SiloStatus::Active, 0),
            counted("c", SiloStatus::Active, 0),
            counted("d", SiloStatus::ShuttingDown, 300),
        ]);
        let grains: Vec<String> = (0..300).map(|i| format!("user/{i}")).collect();
        let grains: Vec<&str> = grains.iter().map(String::as_str).collect();
        for strategy in ["activation_count", "resource_optimized"] {
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            let plan = plan(
                &cluster,
                &policy(strategy),
                &source,
                &departing(&grains),
                &[],
                &mut rng,
            );
            let by_target = targets(&plan);
            // 400 activations over three silos: about 133 each, so b and c take far more than a.
            for light in ["b", "c"] {
                let n = by_target[light];
                assert!(
                    (110..=150).contains(&n),
                    "{strategy}: {light} got {n}: {by_target:?}"
                );
            }
            assert_eq!(by_target.values().sum::<usize>(), 300, "{strategy}");
        }
    }

    #[test]
    fn open_migrations_count_as_arrived() {
        let source = SiloId::parse("silo", "d").unwrap();
        let cluster = view(vec![
            counted("a", SiloStatus::Active, 0),
            counted("b", SiloStatus::Active, 0),
            counted("d", SiloStatus::ShuttingDown, 200),
        ]);
        let arriving = [Arriving {
            from: "d".into(),
            to: "a".into(),
            count: 100,
        }];
        let grains: Vec<String> = (0..100).map(|i| format!("user/{i}")).collect();
        let grains: Vec<&str> = grains.iter().map(String::as_str).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let plan = plan(
            &cluster,
            &policy("activation_count"),
            &source,
            &departing(&grains),
            &arriving,
            &mut rng,
        );
        assert!(targets(&plan)["b"] >= 95, "{:?}", targets(&plan));
    }

    #[test]
    fn grains_no_other_silo_hosts_stay_and_the_plan_says_why() {
        let source = SiloId::parse("silo", "d").unwrap();
        let mut only_here = silo("d", SiloStatus::ShuttingDown, Some(&["user", "ledger"]));
        only_here.profile.load.activation_count = Some(3);
        let cluster = view(vec![
            silo("a", SiloStatus::Active, Some(&["user"])),
            only_here,
        ]);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let plan = plan(
            &cluster,
            &Policy::default(),
            &source,
            &departing(&["ledger/1", "user/1", "ledger/2"]),
            &[],
            &mut rng,
        );
        assert_eq!(plan.moves.len(), 1);
        assert_eq!(plan.moves[0].to.as_str(), "a");
        assert_eq!(plan.stuck.len(), 1);
        assert_eq!(plan.stuck[0].grain_type, "ledger");
        assert_eq!(plan.stuck[0].activations, 2);
        assert!(plan.stuck[0].reason.contains("ledger"), "{:?}", plan.stuck);
    }

    #[test]
    fn filters_compare_the_candidates_with_the_drained_silo() {
        let source = SiloId::parse("silo", "d").unwrap();
        let zoned = |id: &str, status, zone: &str| {
            let mut record = silo(id, status, None);
            record.profile.metadata.insert("zone".into(), zone.into());
            record
        };
        let cluster = view(vec![
            zoned("a", SiloStatus::Active, "east"),
            zoned("b", SiloStatus::Active, "west"),
            zoned("d", SiloStatus::ShuttingDown, "west"),
        ]);
        let policy: Policy = serde_json::from_value(serde_json::json!({
            "default_strategy": "random",
            "grain_types": { "user": { "filters": [
                { "kind": "required_match", "keys": ["zone"], "order": 0 }
            ] } }
        }))
        .unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let plan = plan(
            &cluster,
            &policy,
            &source,
            &departing(&["user/1", "user/2", "user/3"]),
            &[],
            &mut rng,
        );
        assert_eq!(targets(&plan), BTreeMap::from([("b".to_owned(), 3)]));
    }

    proptest! {
        /// Whatever the membership, every activation is either moved once or counted as stuck,
        /// and no move targets the drained silo or a silo that is not active and alive.
        #[test]
        fn every_activation_is_moved_once_or_counted_stuck(
            statuses in proptest::collection::vec(0u8..4, 1..8),
            hosts_user in proptest::collection::vec(proptest::bool::ANY, 8),
            grains in 0usize..60,
            strategy in 0usize..5,
            seed in proptest::prelude::any::<u64>(),
        ) {
            let mut silos = vec![counted("src", SiloStatus::ShuttingDown, grains as u64)];
            for (i, status) in statuses.iter().enumerate() {
                let status = [SiloStatus::Joining, SiloStatus::Active, SiloStatus::ShuttingDown, SiloStatus::Dead][*status as usize];
                let types: Option<&[&str]> = if hosts_user[i] { None } else { Some(&["order"]) };
                let mut record = silo(&format!("s{i}"), status, types);
                record.profile.load.activation_count = Some(i as u64 * 10);
                silos.push(record);
            }
            let cluster = view(silos);
            let source = SiloId::parse("silo", "src").unwrap();
            let names: Vec<String> = (0..grains)
                .map(|i| if i % 3 == 0 { format!("order/{i}") } else { format!("user/{i}") })
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let strategy = ["random", "activation_count", "resource_optimized", "hash_based", "consistent_hash"][strategy];
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let plan = plan(&cluster, &policy(strategy), &source, &departing(&names), &[], &mut rng);
            let stuck: u64 = plan.stuck.iter().map(|s| s.activations).sum();
            prop_assert_eq!(plan.moves.len() as u64 + stuck, grains as u64);
            let mut seen = std::collections::HashSet::new();
            for m in &plan.moves {
                prop_assert!(seen.insert(m.grain.clone()));
                let target = cluster.find(&m.to).unwrap();
                prop_assert!(m.to != source);
                prop_assert_eq!(cluster.status(target), SiloStatus::Active);
                prop_assert!(target.hosts(m.grain.grain_type()));
            }
        }
    }
}
