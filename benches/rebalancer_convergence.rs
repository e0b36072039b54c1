//! Rebalancer convergence: how many cycles a skewed cluster needs to come within the allowed
//! deviation, and how many migrations that takes against the minimum (Σ max(0, nᵢ − idealᵢ) with
//! whole-number ideals), in Orleans' arithmetic (`orleans_compat`) and the oracle's planner.
//!
//!     cargo bench --bench rebalancer_convergence
//!
//! Every planned move is carried out before the next cycle (silos complete their migrations and
//! heartbeat their counts), memory is equal on every silo (100 MiB), options are Orleans'
//! defaults. Skews: Orleans' 300/30/180/100, 3000/300/1800/1000, 10 silos from 100 to 1000 with the
//! load on one silo, and 100 silos with counts drawn from a seeded Pareto-like spread. A run stops
//! when the session completes, stops (stagnant) or after 200 cycles.

use placement_oracle::rebalancer::plan::{apply_moves, ideal_counts, measure};
use placement_oracle::rebalancer::{CycleOutcome, Rebalancer, RebalancerOptions, SiloLoad};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const MEMORY: f64 = 100.0 * 1_048_576.0;
const MAX_CYCLES: u32 = 200;

fn cluster(counts: &[u64]) -> Vec<SiloLoad> {
    counts
        .iter()
        .enumerate()
        .map(|(i, &n)| SiloLoad {
            silo: format!("S{:03}", i + 1),
            activations: n,
            memory: Some(MEMORY),
        })
        .collect()
}

struct Run {
    cycles: u32,
    outcome: CycleOutcome,
    moved: u64,
    minimum: u64,
    final_deviation: f64,
    spread: (u64, u64),
}

fn converge(counts: &[u64], compat: bool) -> Run {
    let options = RebalancerOptions {
        orleans_compat: compat,
        ..RebalancerOptions::default()
    };
    let mut loads = cluster(counts);
    let ideal = ideal_counts(&loads);
    let minimum = loads
        .iter()
        .zip(&ideal)
        .map(|(l, i)| l.activations.saturating_sub(*i))
        .sum();
    let mut rebalancer = Rebalancer::new(0, &options);
    let (mut cycles, mut moved) = (0, 0);
    let outcome = loop {
        let report =
            rebalancer.run_cycle(i64::from(cycles) * 15_000, &options, &loads, loads.len());
        cycles += 1;
        apply_moves(&mut loads, &report.moves);
        moved += report.moves.iter().map(|m| m.count).sum::<u64>();
        if report.outcome != CycleOutcome::Migrated && report.outcome != CycleOutcome::Stagnant
            || cycles == MAX_CYCLES
        {
            break report.outcome;
        }
    };
    let measured = measure(&loads, loads.len());
    let counts: Vec<u64> = loads.iter().map(|l| l.activations).collect();
    Run {
        cycles,
        outcome,
        moved,
        minimum,
        final_deviation: measured.deviation,
        spread: (*counts.iter().min().unwrap(), *counts.iter().max().unwrap()),
    }
}

fn main() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let pareto: Vec<u64> = (0..100)
        .map(|_| (100.0 / rng.gen::<f64>().max(0.01).powf(0.8)) as u64)
        .collect();
    let mut ten = vec![100; 10];
    ten[0] = 1_000;
    let skews: [(&str, Vec<u64>); 4] = [
        ("4 silos 300/30/180/100", vec![300, 30, 180, 100]),
        ("4 silos 3000/300/1800/1000", vec![3000, 300, 1800, 1000]),
        ("10 silos 1000 + 9×100", ten),
        ("100 silos Pareto-like", pareto),
    ];
    println!("| skew | mode | cycles | outcome | migrations | minimum | ÷ minimum | final deviation | min–max after |");
    println!("|---|---|---:|---|---:|---:|---:|---:|---|");
    for (name, counts) in &skews {
        for compat in [true, false] {
            let run = converge(counts, compat);
            println!(
                "| {name} | {} | {} | {:?} | {} | {} | {:.3} | {:.6} | {}–{} |",
                if compat { "orleans_compat" } else { "oracle" },
                run.cycles,
                run.outcome,
                run.moved,
                run.minimum,
                run.moved as f64 / run.minimum.max(1) as f64,
                run.final_deviation,
                run.spread.0,
                run.spread.1,
            );
        }
    }
}
