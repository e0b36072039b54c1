//! Placement quality: 100 000 grains on 100 silos with each strategy, with fresh and with stale load
//! statistics, reporting how far the most loaded silo ends above the mean; and how many grains
//! `consistent_hash` and `hash_based` remap when a 101st silo joins.
//!
//!     cargo bench --bench placement_quality
//!
//! "Fresh" statistics: every placement is reflected in the silo's next reported counts at once.
//! "Stale": silos report once per 1000 placements (one heartbeat per second at 1000 placements/s);
//! in between, only this replica's own tally (its local deltas) tells the strategies what changed.
//! The power-of-two expectation is the same process with exact counts and no oracle in the way
//! (classic balls-into-bins with two choices), averaged over five seeds.

use std::collections::BTreeMap;
use std::time::Instant;

use placement_oracle::cluster::silo::{LoadReport, SiloProfile, Smoothing};
use placement_oracle::cluster::{GrainId, SiloId, SiloRecord, SiloStatus};
use placement_oracle::placement::{
    place, ClusterView, LocalDeltas, PlacementInput, Request, Strategy, StrategyOptions,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[path = "support/plot.rs"]
mod plot;

const SILOS: usize = 100;
const GRAINS: usize = 100_000;
const STALE_EVERY: usize = 1_000;

fn silo(i: usize) -> SiloRecord {
    SiloRecord {
        id: SiloId::parse("silo", &format!("10.0.{}.{}:11111@1", i / 250, i % 250)).unwrap(),
        status: SiloStatus::Active,
        last_heartbeat_ms: 0,
        heartbeat_count: 1,
        profile: SiloProfile {
            address: format!("10.0.{}.{}:11111", i / 250, i % 250),
            role: None,
            metadata: BTreeMap::new(),
            grain_types: None,
            load: LoadReport {
                cpu_usage: Some(30.0),
                memory_usage_bytes: Some(4 << 30),
                max_available_memory_bytes: Some(16 << 30),
                activation_count: Some(0),
                recent_activation_count: Some(0),
                ..LoadReport::default()
            },
            smoothing: Smoothing {
                cpu_usage: Some(30.0),
                memory_usage_bytes: Some(4 << 30),
                ..Smoothing::default()
            },
            first_seen_ms: 0,
        },
        drained_at_ms: None,
        protected_until_ms: 0,
    }
}

fn view(n: usize) -> ClusterView {
    ClusterView {
        liveness: placement_oracle::cluster::Liveness::at(1, 10_000),
        silos: std::sync::Arc::new((0..n).map(silo).collect()),
    }
}

fn grain(i: usize) -> GrainId {
    GrainId::parse("grain", &format!("user/{i}")).unwrap()
}

/// Places every grain; returns each grain's silo index and the time per decision.
fn run(strategy: Strategy, silos: usize, stale: bool, seed: u64) -> (Vec<usize>, f64) {
    run_with(strategy, &StrategyOptions::default(), silos, stale, seed)
}

fn run_with(
    strategy: Strategy,
    options: &StrategyOptions,
    silos: usize,
    stale: bool,
    seed: u64,
) -> (Vec<usize>, f64) {
    let mut view = view(silos);
    let index: BTreeMap<SiloId, usize> = view
        .silos
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    let mut actual = vec![0u64; silos];
    let mut deltas = LocalDeltas::default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut chosen = Vec::with_capacity(GRAINS);
    let started = Instant::now();
    for g in 0..GRAINS {
        let grain = grain(g);
        let requesting = view.silos[rng.gen_range(0..silos)].id.clone();
        let request = Request {
            input: PlacementInput {
                grain: &grain,
                requesting_silo: Some(&requesting),
                hint: None,
            },
            strategy,
            options,
            filters: &[],
            chosen_by_webhook: None,
            explain: false,
        };
        let decision = place(&view, &request, &mut deltas, &mut rng).expect("a silo fits");
        let i = index[&decision.silo];
        actual[i] += 1;
        chosen.push(i);
        let report = !stale || (g + 1) % STALE_EVERY == 0;
        if report {
            // Heartbeats bring the true counts (and start the replica's tally afresh).
            let silos_to_report: Vec<usize> = if stale { (0..silos).collect() } else { vec![i] };
            for s in silos_to_report {
                let record = &mut std::sync::Arc::make_mut(&mut view.silos)[s];
                record.profile.load.activation_count = Some(actual[s]);
                record.profile.load.recent_activation_count = Some(actual[s]);
                record.heartbeat_count += 1;
            }
        }
    }
    let per_decision = started.elapsed().as_secs_f64() / GRAINS as f64;
    (chosen, per_decision)
}

/// Grains per silo, most loaded first.
fn sorted_counts(chosen: &[usize], silos: usize) -> Vec<u64> {
    let mut counts = vec![0u64; silos];
    for &i in chosen {
        counts[i] += 1;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    counts
}

fn excess(chosen: &[usize], silos: usize) -> (u64, f64) {
    let max = sorted_counts(chosen, silos)[0];
    (max, max as f64 - chosen.len() as f64 / silos as f64)
}

/// Balls into bins, two choices, exact counts: the textbook process the strategy approximates.
fn power_of_two_expectation() -> f64 {
    let seeds = 5;
    let total: f64 = (0..seeds)
        .map(|seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(1_000 + seed);
            let mut counts = vec![0u64; SILOS];
            for _ in 0..GRAINS {
                let a = rng.gen_range(0..SILOS);
                let mut b = rng.gen_range(0..SILOS - 1);
                if b >= a {
                    b += 1;
                }
                let pick = if counts[b] < counts[a] { b } else { a };
                counts[pick] += 1;
            }
            *counts.iter().max().unwrap() as f64 - (GRAINS / SILOS) as f64
        })
        .sum();
    total / seeds as f64
}

fn remapped(strategy: Strategy, options: &StrategyOptions) -> f64 {
    let (before, _) = run_with(strategy, options, SILOS, false, 7);
    let (after, _) = run_with(strategy, options, SILOS + 1, false, 7);
    let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    moved as f64 / GRAINS as f64
}

fn main() {
    let mean = (GRAINS / SILOS) as f64;
    println!("placement quality: {GRAINS} grains on {SILOS} silos (mean {mean} per silo)\n");
    println!(
        "| strategy | statistics | most loaded | ÷ mean | excess over mean | µs per decision |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    let strategies = [
        Strategy::Random,
        Strategy::PreferLocal,
        Strategy::HashBased,
        Strategy::ConsistentHash,
        Strategy::ActivationCount,
        Strategy::ResourceOptimized,
    ];
    let mut activation_count_fresh = 0.0;
    let mut spreads = Vec::new();
    for strategy in strategies {
        for stale in [false, true] {
            let (chosen, per_decision) = run(strategy, SILOS, stale, 42);
            let (max, over) = excess(&chosen, SILOS);
            if !stale {
                spreads.push(plot::Series {
                    name: strategy.as_str().to_owned(),
                    points: sorted_counts(&chosen, SILOS)
                        .iter()
                        .enumerate()
                        .map(|(rank, &count)| (rank as f64 + 1.0, count as f64))
                        .collect(),
                    labels: Vec::new(),
                });
            }
            if strategy == Strategy::ActivationCount && !stale {
                activation_count_fresh = over;
            }
            println!(
                "| {} | {} | {max} | {:.3} | {over:+.0} | {:.2} |",
                strategy.as_str(),
                if stale {
                    "stale (1 report / 1000)"
                } else {
                    "fresh"
                },
                max as f64 / mean,
                per_decision * 1e6,
            );
        }
    }
    let expectation = power_of_two_expectation();
    println!(
        "\nactivation_count, fresh: {activation_count_fresh:+.0} over the mean; the power-of-two expectation is {expectation:+.1} (difference {:+.1}; goal within +3)",
        activation_count_fresh - expectation
    );
    println!(
        "\nwhen a 101st silo joins (1/N = {:.4}; goal for consistent_hash ≤ 1.1/N = {:.4}):",
        1.0 / 101.0,
        1.1 / 101.0
    );
    let hash_based_remapped = remapped(Strategy::HashBased, &StrategyOptions::default());
    println!("- hash_based: {hash_based_remapped:.4} of grains remapped");
    println!("\n| consistent_hash load_factor_percent | most loaded ÷ mean | remapped when a silo joins | ÷ (1/N) |");
    println!("|---:|---:|---:|---:|");
    let mut trade_off = plot::Series {
        name: "consistent_hash".to_owned(),
        points: Vec::new(),
        labels: Vec::new(),
    };
    for factor in [105, 110, 125, 150, 1_000] {
        let mut options = StrategyOptions::default();
        options.consistent_hash.load_factor_percent = factor;
        let (chosen, _) = run_with(Strategy::ConsistentHash, &options, SILOS, false, 42);
        let (max, _) = excess(&chosen, SILOS);
        let moved = remapped(Strategy::ConsistentHash, &options);
        println!(
            "| {factor}{} | {:.3} | {moved:.4} | {:.2} |",
            if factor == 1_000 {
                " (no bound: plain rendezvous)"
            } else {
                ""
            },
            max as f64 / mean,
            moved * (SILOS + 1) as f64,
        );
        trade_off
            .points
            .push((moved * (SILOS + 1) as f64, max as f64 / mean));
        trade_off.labels.push(if factor == 1_000 {
            "no bound".to_owned()
        } else {
            format!("{factor} %")
        });
    }
    save_plot(&spreads, trade_off, mean, hash_based_remapped);
}

/// docs/bench/placement-quality.svg: how grains spread over the silos per strategy, and what
/// consistent_hash's load bound trades between evenness and stability.
fn save_plot(spreads: &[plot::Series], trade_off: plot::Series, mean: f64, hash_based: f64) {
    let lowest = spreads
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(f64::MAX, f64::min);
    let highest = spreads
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0, f64::max);
    let mut picture = plot::Picture::new(1100.0, 380.0);
    picture.lines(
        plot::Panel {
            x: 0.0,
            y: 0.0,
            width: 620.0,
            height: 360.0,
        },
        &plot::Axes {
            title: &format!("Grains per silo, most loaded first ({GRAINS} grains, {SILOS} silos, fresh statistics)"),
            x_label: "silo rank",
            y_label: "grains",
            x: (1.0, SILOS as f64),
            y: ((lowest * 0.98).floor(), (highest * 1.02).ceil()),
        },
        spreads,
        Some((mean, "mean")),
    );
    let widest = trade_off.points.iter().map(|p| p.0).fold(0.0, f64::max);
    let tallest = trade_off.points.iter().map(|p| p.1).fold(0.0, f64::max);
    picture.lines(
        plot::Panel {
            x: 630.0,
            y: 0.0,
            width: 470.0,
            height: 360.0,
        },
        &plot::Axes {
            title: "consistent_hash: evenness against stability",
            x_label: "grains remapped when a silo joins ÷ (1/N)",
            y_label: "most loaded ÷ mean",
            x: (0.0, (widest * 1.15).ceil()),
            y: (1.0, tallest + 0.02),
        },
        &[trade_off],
        None,
    );
    picture.caption(&format!(
        "Labels: load_factor_percent. hash_based remaps {:.0} % of grains when a silo joins (off this scale). cargo bench --bench placement_quality",
        hash_based * 100.0
    ));
    picture.save("placement-quality.svg");
}
