//! Drain spread: where a drained silo's 10 000 grains end up among 9 other silos with uneven
//! counts (500, 1000, …, 4500), with each load-aware strategy, when the plan counts its own moves
//! (what `drain::plan` does) and when each grain is decided against the same figures (what a
//! silo re-placing its grains one by one between two heartbeats would get). Also: how long the plan
//! takes per grain, as a ratio to one plain placement decision measured in the same run.
//!
//!     cargo bench --bench drain_spread
//!
//! "Ideal" fills the lightest silos first, as water levels out: every silo ends at one level
//! (3 417 here) except those already above it, which get nothing. The figure reported is the worst
//! silo's count after the drain ÷ its fair share (the level, or its own count when above it).

use std::collections::BTreeMap;
use std::time::Instant;

use placement_oracle::cluster::silo::{LoadReport, SiloProfile, Smoothing};
use placement_oracle::cluster::{GrainId, Liveness, SiloId, SiloRecord, SiloStatus};
use placement_oracle::drain::{plan, Departing};
use placement_oracle::placement::{self, ClusterView, LocalDeltas, PlacementInput, Request};
use placement_oracle::policy::Policy;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

const GRAINS: usize = 10_000;
const OTHERS: usize = 9;

fn silo(i: usize, activations: u64, status: SiloStatus) -> SiloRecord {
    let memory = 1_000_000 * activations + (2 << 30);
    SiloRecord {
        id: SiloId::parse("silo", &format!("10.0.0.{i}:11111@1")).unwrap(),
        status,
        last_heartbeat_ms: 0,
        heartbeat_count: 1,
        profile: SiloProfile {
            address: format!("10.0.0.{i}:11111"),
            role: None,
            metadata: BTreeMap::new(),
            grain_types: None,
            load: LoadReport {
                cpu_usage: Some(30.0),
                memory_usage_bytes: Some(memory),
                max_available_memory_bytes: Some(32 << 30),
                activation_count: Some(activations),
                recent_activation_count: Some(activations),
                ..LoadReport::default()
            },
            smoothing: Smoothing {
                cpu_usage: Some(30.0),
                memory_usage_bytes: Some(memory),
                ..Smoothing::default()
            },
            first_seen_ms: 0,
        },
        drained_at_ms: None,
        protected_until_ms: 0,
    }
}

fn cluster() -> ClusterView {
    let mut silos: Vec<SiloRecord> = (1..=OTHERS)
        .map(|i| silo(i, 500 * i as u64, SiloStatus::Active))
        .collect();
    silos.push(silo(99, GRAINS as u64, SiloStatus::ShuttingDown));
    ClusterView {
        liveness: Liveness::at(1, 10_000),
        silos: std::sync::Arc::new(silos),
    }
}

fn policy(strategy: &str) -> Policy {
    serde_json::from_value(serde_json::json!({ "default_strategy": strategy })).unwrap()
}

/// The level water reaches when `extra` fills `counts` from the lowest up: every silo ends at
/// the level, or where it was when it was above it.
fn ideal_level(counts: &[u64], extra: u64) -> f64 {
    let mut sorted = counts.to_vec();
    sorted.sort_unstable();
    let mut sum = extra as f64;
    for (i, &c) in sorted.iter().enumerate() {
        sum += c as f64;
        let level = sum / (i + 1) as f64;
        if sorted.get(i + 1).is_none_or(|&next| level <= next as f64) {
            return level;
        }
    }
    unreachable!("the last silo always takes the rest")
}

/// How far the silo furthest above its fair share ends above it (1.00: the ideal).
fn worst_over_fair(before: &[u64], after: &[u64], level: f64) -> f64 {
    before
        .iter()
        .zip(after)
        .map(|(&b, &a)| a as f64 / level.max(b as f64))
        .fold(0.0, f64::max)
}

fn final_counts(view: &ClusterView, targets: &[SiloId]) -> Vec<u64> {
    let mut counts: BTreeMap<&SiloId, u64> = view
        .silos
        .iter()
        .filter(|s| s.status == SiloStatus::Active)
        .map(|s| (&s.id, s.profile.load.activation_count.unwrap()))
        .collect();
    for t in targets {
        *counts.get_mut(t).unwrap() += 1;
    }
    counts.into_values().collect()
}

fn main() {
    let view = cluster();
    let source = view.silos.last().unwrap().id.clone();
    let departing: Vec<Departing> = (0..GRAINS)
        .map(|i| Departing {
            grain: GrainId::parse("grain", &format!("user/{i}")).unwrap(),
            epoch: i as i64 + 1,
        })
        .collect();
    let before: Vec<u64> = (1..=OTHERS).map(|i| 500 * i as u64).collect();
    let level = ideal_level(&before, GRAINS as u64);
    println!(
        "drain of {GRAINS} grains onto {OTHERS} silos holding 500…4500; ideal level {level:.0}\n"
    );
    println!("| strategy | plan counts its moves: worst ÷ fair share | same figures for every grain: worst ÷ fair share | plan time per grain ÷ one placement decision |");
    println!("|---|---:|---:|---:|");
    for strategy in [
        "resource_optimized",
        "activation_count",
        "consistent_hash",
        "random",
    ] {
        let policy = policy(strategy);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let started = Instant::now();
        let planned = plan(&view, &policy, &source, &departing, &[], &mut rng);
        let plan_time = started.elapsed().as_secs_f64() / GRAINS as f64;
        let targets: Vec<SiloId> = planned.moves.iter().map(|m| m.to.clone()).collect();
        let counted = final_counts(&view, &targets);

        // The floor: the same decisions against unchanging figures (no tally kept).
        let resolved = policy.resolve("user", None);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let started = Instant::now();
        let blind: Vec<SiloId> = departing
            .iter()
            .map(|d| {
                let request = Request {
                    input: PlacementInput {
                        grain: &d.grain,
                        requesting_silo: Some(&source),
                        hint: None,
                    },
                    strategy: resolved.strategy,
                    options: resolved.options,
                    filters: resolved.filters,
                    chosen_by_webhook: None,
                    explain: false,
                };
                placement::place(&view, &request, &mut LocalDeltas::default(), &mut rng)
                    .unwrap()
                    .silo
            })
            .collect();
        let decision_time = started.elapsed().as_secs_f64() / GRAINS as f64;
        let blind = final_counts(&view, &blind);
        println!(
            "| {strategy} | {:.2} | {:.2} | {:.1} |",
            worst_over_fair(&before, &counted, level),
            worst_over_fair(&before, &blind, level),
            plan_time / decision_time
        );
    }
}
