//! Repartitioner locality on planted communities: 20 000 grains in 2 000 groups of 10 that call
//! within their group (a ring, weight 10 per round), plus 5 000 random cross-group calls (weight 1),
//! placed uniformly at random on 10 silos. Each round every edge is reported again, counted into
//! the sketch (30 000 edges tracked), planned on, and the moves are carried out before the next.
//!
//!     cargo bench --bench repartitioner_locality
//!
//! Reported per planner: the remote fraction of all calls (true weights, not the sketch's) before
//! and after each of 5 rounds, max ÷ mean activations after, and migrations so far; then how many
//! rounds and migrations Orleans' pairwise exchange needs to reach the global plan's third-round
//! remote fraction (at most 400 rounds).

use std::collections::{BTreeMap, HashMap};

use placement_oracle::repartitioner::{
    plan_round, Graph, GraphInput, Repartitioner, RepartitionerOptions,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SILOS: usize = 10;
const GROUPS: usize = 2_000;
const GROUP: usize = 10;
const NOISE: usize = 5_000;

struct World {
    edges: Vec<(String, String, u64)>,
    location: HashMap<String, String>,
    silos: Vec<String>,
}

fn world(seed: u64) -> World {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let silos: Vec<String> = (0..SILOS).map(|i| format!("s{i:02}@1")).collect();
    let grain = |g: usize, i: usize| format!("g{g}/{i}");
    let mut edges = Vec::new();
    let mut location = HashMap::new();
    for g in 0..GROUPS {
        for i in 0..GROUP {
            edges.push((grain(g, i), grain(g, (i + 1) % GROUP), 10));
            location.insert(grain(g, i), silos[rng.gen_range(0..SILOS)].clone());
        }
    }
    for _ in 0..NOISE {
        let (a, b) = (rng.gen_range(0..GROUPS), rng.gen_range(0..GROUPS));
        edges.push((
            grain(a, rng.gen_range(0..GROUP)),
            grain(b, rng.gen_range(0..GROUP)),
            1,
        ));
    }
    World {
        edges,
        location,
        silos,
    }
}

fn remote_fraction(world: &World) -> f64 {
    let (mut remote, mut all) = (0u64, 0u64);
    for (a, b, w) in &world.edges {
        all += w;
        if world.location[a] != world.location[b] {
            remote += w;
        }
    }
    remote as f64 / all as f64
}

fn counts(world: &World) -> Vec<i64> {
    let mut by_silo: BTreeMap<&str, i64> = world.silos.iter().map(|s| (s.as_str(), 0)).collect();
    for silo in world.location.values() {
        *by_silo.get_mut(silo.as_str()).unwrap() += 1;
    }
    by_silo.into_values().collect()
}

fn max_over_mean(counts: &[i64]) -> f64 {
    let mean = counts.iter().sum::<i64>() as f64 / counts.len() as f64;
    *counts.iter().max().unwrap() as f64 / mean
}

/// One round: report every edge, plan, carry the moves out. Returns the moves made.
fn round(
    world: &mut World,
    state: &mut Repartitioner,
    options: &RepartitionerOptions,
    seq: &mut i64,
    rng: &mut ChaCha8Rng,
) -> usize {
    let reports: Vec<(i64, &str, &str, u64)> = world
        .edges
        .iter()
        .map(|(a, b, w)| {
            *seq += 1;
            (*seq, a.as_str(), b.as_str(), *w)
        })
        .collect();
    state.absorb(0, options, reports);
    let tracked: Vec<(String, String, u64)> = state
        .sketch
        .edges()
        .iter()
        .map(|e| {
            // As the oracle plans: compat on Orleans' estimate, otherwise on known calls.
            let weight = if options.orleans_compat {
                e.count
            } else {
                e.guaranteed()
            };
            (e.a.to_owned(), e.b.to_owned(), weight)
        })
        .collect();
    let anchored = |g: &str| state.is_anchored(g);
    let graph = Graph::build(
        tracked.iter().map(|(a, b, w)| (a.as_str(), b.as_str(), *w)),
        &GraphInput {
            targets: world.silos.clone(),
            locations: &world.location,
            movable: &|_| true,
            anchored: &anchored,
        },
    );
    let plan = plan_round(&graph, &counts(world), options, 0.0);
    for m in &plan.moves {
        let grain = &graph.vertices[m.vertex].grain;
        world
            .location
            .insert(grain.clone(), graph.silos[m.to].clone());
    }
    state.finish_round(0, options, &graph, &plan, plan.moves.len() as u64, rng);
    plan.moves.len()
}

fn main() {
    println!("{GROUPS} groups of {GROUP} grains on {SILOS} silos, {NOISE} cross-group calls\n");
    let mut third_round_level = 0.0;
    for compat in [false, true] {
        let options = RepartitionerOptions {
            orleans_compat: compat,
            max_edge_count: 30_000,
            max_unprocessed_edges: 1_000_000,
            ..RepartitionerOptions::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let mut world = world(7);
        let mut state = Repartitioner::new(0, &options, &mut rng);
        let mut seq = 0;
        let before = remote_fraction(&world);
        println!(
            "{} — remote fraction before: {before:.3}, max ÷ mean {:.3}",
            if compat {
                "orleans_compat (pairwise)"
            } else {
                "global (default)"
            },
            max_over_mean(&counts(&world))
        );
        println!("| round | remote fraction after | reduction | max ÷ mean | migrations so far |");
        println!("|---:|---:|---:|---:|---:|");
        let mut migrations = 0;
        for r in 1..=5 {
            migrations += round(&mut world, &mut state, &options, &mut seq, &mut rng);
            let after = remote_fraction(&world);
            if !compat && r == 3 {
                third_round_level = after;
            }
            println!(
                "| {r} | {after:.3} | {:.1} % | {:.3} | {migrations} |",
                100.0 * (1.0 - after / before),
                max_over_mean(&counts(&world))
            );
        }
        println!();
        if compat {
            let mut rounds = 5;
            while remote_fraction(&world) > third_round_level && rounds < 400 {
                migrations += round(&mut world, &mut state, &options, &mut seq, &mut rng);
                rounds += 1;
            }
            println!(
                "pairwise to reach the global plan's round-3 remote fraction ({third_round_level:.3}): {rounds} rounds, {migrations} migrations, remote fraction {:.3}, max ÷ mean {:.3}",
                remote_fraction(&world),
                max_over_mean(&counts(&world))
            );
        }
    }
}
