//! One cycle's arithmetic: how uneven the cluster is (entropy) and which silo sends how many
//! activations to which (reference 4.4), in Orleans' way or the oracle's.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::options::RebalancerOptions;

/// A silo's figures as a cycle sees them: its activation count and its (smoothed) memory use,
/// from its latest heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub struct SiloLoad {
    pub silo: String,
    pub activations: u64,
    /// Bytes in use; `None` when the silo does not report memory.
    pub memory: Option<f64>,
}

/// How uneven the cluster is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measure {
    /// Entropy of the silos' shares of activations × memory.
    pub entropy: f64,
    /// `ln` of the number of active silos: the entropy of a perfectly even cluster.
    pub max_entropy: f64,
    /// `(max − entropy) ÷ max`: 0 when even, up to 1.
    pub deviation: f64,
    /// All activations of the silos measured.
    pub activations: u64,
}

/// Activations one silo should send to another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Move {
    #[schema(example = "10.0.0.5:11111@1")]
    pub from: String,
    #[schema(example = "10.0.0.6:11111@1")]
    pub to: String,
    #[schema(example = 8)]
    pub count: u64,
}

/// Orleans' entropy (reference 4.4 step 6): shares `p_i = (n_i/N)·(m_i/M)`, normalised, each at
/// least 1e-10. `M` (Orleans' harmonic mean of the counts) cancels in the normalisation, so the
/// shares are computed as `n_i·m_i ÷ Σ n_j·m_j`: the same numbers, and finite when a silo holds
/// no activation (a new, empty silo), where `M` would be 0. `active` silos give the maximum. Silos
/// without memory count as using 1 byte each (the oracle's planner measures counts alone then);
/// compat mode skips such cycles before measuring.
pub fn measure(loads: &[SiloLoad], active: usize) -> Measure {
    let activations: u64 = loads.iter().map(|l| l.activations).sum();
    let memory_known = loads.iter().all(|l| l.memory.is_some_and(|m| m > 0.0));
    let memory = |l: &SiloLoad| {
        if memory_known {
            l.memory.unwrap_or(1.0)
        } else {
            1.0
        }
    };
    let shares: Vec<f64> = loads
        .iter()
        .map(|l| l.activations as f64 * memory(l))
        .collect();
    let total: f64 = shares.iter().sum();
    let entropy = -shares
        .iter()
        .map(|p| {
            let p = (p / total).max(1e-10);
            p * p.ln()
        })
        .sum::<f64>();
    let max_entropy = (active as f64).ln();
    Measure {
        entropy,
        max_entropy,
        deviation: (max_entropy - entropy) / max_entropy,
        activations,
    }
}

fn harmonic_mean(values: impl Iterator<Item = f64>) -> f64 {
    let (count, reciprocals) = values.fold((0.0, 0.0), |(c, r), v| (c + 1.0, r + 1.0 / v));
    count / reciprocals
}

/// Orleans' moves (reference 4.4 steps 11–13): ideal counts from the harmonic mean of the
/// *counts* (so, with memory in bytes, nearly 0), silos sorted by count and paired lowest with
/// highest, each pair moving `trunc(α·scale·|surplus difference|/2)` from the higher to the lower,
/// at most the higher's count and `activation_migration_count_limit`. Ties in the sort keep silo-id
/// order (Orleans' is a dictionary's, unspecified). Unlike Orleans, which moves δ − 1, the plan is
/// δ.
pub fn orleans_moves(
    loads: &[SiloLoad],
    active: usize,
    measure: &Measure,
    cycle: u32,
    options: &RebalancerOptions,
) -> Vec<Move> {
    let n = measure.activations as f64;
    let s = active as f64;
    let harmonic = harmonic_mean(loads.iter().map(|l| l.activations as f64));
    let ideal = |l: &SiloLoad| (n / s) * (harmonic / l.memory.unwrap_or(1.0));
    let alpha = measure.entropy / measure.max_entropy;
    let scale = (1.0 - (-options.cycle_number_weight * f64::from(cycle)).exp())
        / (1.0 + options.silo_number_weight * (s - 1.0));
    let mut sorted: Vec<&SiloLoad> = loads.iter().collect();
    sorted.sort_by(|a, b| a.activations.cmp(&b.activations).then(a.silo.cmp(&b.silo)));
    let mut moves = Vec::new();
    for k in 0..sorted.len() / 2 {
        let (low, high) = (sorted[k], sorted[sorted.len() - 1 - k]);
        let surplus = |l: &SiloLoad| l.activations as f64 - ideal(l);
        let difference = (surplus(low) - surplus(high)).abs();
        let delta = (alpha * scale * difference / 2.0).trunc() as u64;
        let delta = delta
            .min(high.activations)
            .min(options.activation_migration_count_limit);
        if delta > 0 {
            moves.push(Move {
                from: high.silo.clone(),
                to: low.silo.clone(),
                count: delta,
            });
        }
    }
    moves
}

/// The counts after `moves` are carried out (each silo's completing its migrations).
pub fn apply_moves(loads: &mut [SiloLoad], moves: &[Move]) {
    for m in moves {
        if let Some(from) = loads.iter_mut().find(|l| l.silo == m.from) {
            from.activations = from.activations.saturating_sub(m.count);
        }
        if let Some(to) = loads.iter_mut().find(|l| l.silo == m.to) {
            to.activations += m.count;
        }
    }
}

/// Each silo's ideal count, whole numbers that sum to the activations measured: in proportion
/// to `1 ÷ memory` (a silo using twice the memory should hold half the activations — Orleans'
/// intended formula, with the harmonic mean of memory), or equal shares when some silo reports
/// no memory. Rounded by largest remainder, ties to the lower silo id.
pub fn ideal_counts(loads: &[SiloLoad]) -> Vec<u64> {
    let total: u64 = loads.iter().map(|l| l.activations).sum();
    let memory_known = loads.iter().all(|l| l.memory.is_some_and(|m| m > 0.0));
    let weights: Vec<f64> = loads
        .iter()
        .map(|l| match (memory_known, l.memory) {
            (true, Some(m)) => 1.0 / m,
            _ => 1.0,
        })
        .collect();
    let sum: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| total as f64 * w / sum).collect();
    let mut ideal: Vec<u64> = exact.iter().map(|x| x.floor() as u64).collect();
    let mut left = total.saturating_sub(ideal.iter().sum());
    let mut by_remainder: Vec<usize> = (0..loads.len()).collect();
    by_remainder.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(loads[a].silo.cmp(&loads[b].silo))
    });
    for i in by_remainder {
        if left == 0 {
            break;
        }
        ideal[i] += 1;
        left -= 1;
    }
    ideal
}

/// The oracle's moves: from silos above their ideal count to silos below it, the largest surplus
/// to the largest deficit, never past an ideal, at most `activation_migration_count_limit` in all.
/// Unlimited, the moves total exactly `Σ max(0, n_i − ideal_i)`, the fewest that reach the ideal.
pub fn oracle_moves(loads: &[SiloLoad], options: &RebalancerOptions) -> Vec<Move> {
    let ideal = ideal_counts(loads);
    let mut givers: Vec<(usize, u64)> = Vec::new();
    let mut takers: Vec<(usize, u64)> = Vec::new();
    for (i, load) in loads.iter().enumerate() {
        match load.activations.cmp(&ideal[i]) {
            std::cmp::Ordering::Greater => givers.push((i, load.activations - ideal[i])),
            std::cmp::Ordering::Less => takers.push((i, ideal[i] - load.activations)),
            std::cmp::Ordering::Equal => {}
        }
    }
    let largest_first = |list: &mut Vec<(usize, u64)>| {
        list.sort_by(|a, b| b.1.cmp(&a.1).then(loads[a.0].silo.cmp(&loads[b.0].silo)))
    };
    largest_first(&mut givers);
    largest_first(&mut takers);
    let mut budget = options.activation_migration_count_limit;
    let mut moves = Vec::new();
    let (mut g, mut t) = (0, 0);
    while g < givers.len() && t < takers.len() && budget > 0 {
        let count = givers[g].1.min(takers[t].1).min(budget);
        moves.push(Move {
            from: loads[givers[g].0].silo.clone(),
            to: loads[takers[t].0].silo.clone(),
            count,
        });
        givers[g].1 -= count;
        takers[t].1 -= count;
        budget -= count;
        if givers[g].1 == 0 {
            g += 1;
        }
        if takers[t].1 == 0 {
            t += 1;
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    pub(crate) fn loads(counts: &[u64], memory: Option<f64>) -> Vec<SiloLoad> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &n)| SiloLoad {
                silo: format!("S{}", i + 1),
                activations: n,
                memory,
            })
            .collect()
    }

    #[test]
    fn ideal_counts_sum_to_the_total_and_follow_inverse_memory() {
        let mut l = loads(&[10, 10, 10], Some(100.0));
        l[2].memory = Some(200.0);
        // Weights 1/100, 1/100, 1/200 → 12, 12, 6.
        assert_eq!(ideal_counts(&l), [12, 12, 6]);
        assert_eq!(ideal_counts(&loads(&[3, 0, 0], None)), [1, 1, 1]);
        assert_eq!(
            ideal_counts(&loads(&[5, 0], None)),
            [3, 2],
            "ties to the lower id"
        );
    }

    #[test]
    fn an_empty_silo_is_measured_and_filled() {
        // A silo that just joined holds nothing: the measure stays finite and the plan fills it.
        let l = loads(&[100, 0], None);
        let m = measure(&l, 2);
        assert!(m.entropy.is_finite() && m.deviation.is_finite(), "{m:?}");
        assert!(m.deviation > 0.9);
        let moves = oracle_moves(&l, &RebalancerOptions::default());
        assert_eq!(moves.iter().map(|m| m.count).sum::<u64>(), 50);
    }

    proptest! {
        /// Unlimited, the plan moves exactly the total surplus over the ideal, reaches the ideal,
        /// and never sends from a silo at or below its ideal nor to one at or above it.
        #[test]
        fn the_oracles_plan_is_minimal_and_reaches_the_ideal(
            counts in prop::collection::vec(0u64..5_000, 2..40),
            memories in prop::collection::vec(1u64..64, 40),
            with_memory in any::<bool>(),
        ) {
            let mut l = loads(&counts, None);
            if with_memory {
                for (load, m) in l.iter_mut().zip(&memories) {
                    load.memory = Some(*m as f64 * 1e6);
                }
            }
            let ideal = ideal_counts(&l);
            prop_assert_eq!(ideal.iter().sum::<u64>(), counts.iter().sum::<u64>());
            let minimum: u64 = l.iter().zip(&ideal).map(|(x, i)| x.activations.saturating_sub(*i)).sum();
            let moves = oracle_moves(&l, &RebalancerOptions::default());
            prop_assert_eq!(moves.iter().map(|m| m.count).sum::<u64>(), minimum);
            let mut after: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
            let index = |id: &str| l.iter().position(|x| x.silo == id).unwrap();
            for m in &moves {
                let (from, to) = (index(&m.from), index(&m.to));
                prop_assert!(counts[from] > ideal[from] && counts[to] < ideal[to]);
                after[from] -= m.count as i64;
                after[to] += m.count as i64;
            }
            let ideal: Vec<i64> = ideal.iter().map(|&i| i as i64).collect();
            prop_assert_eq!(after, ideal);
        }

        /// With a limit, the plan moves at most the limit and every silo ends between where it was
        /// and its ideal: no move makes any silo's distance to its ideal larger.
        #[test]
        fn a_limited_plan_only_narrows_the_gaps(
            counts in prop::collection::vec(0u64..5_000, 2..20),
            limit in 1u64..2_000,
        ) {
            let l = loads(&counts, None);
            let ideal = ideal_counts(&l);
            let options = RebalancerOptions { activation_migration_count_limit: limit, ..Default::default() };
            let moves = oracle_moves(&l, &options);
            prop_assert!(moves.iter().map(|m| m.count).sum::<u64>() <= limit);
            let mut after: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
            for m in &moves {
                after[l.iter().position(|x| x.silo == m.from).unwrap()] -= m.count as i64;
                after[l.iter().position(|x| x.silo == m.to).unwrap()] += m.count as i64;
            }
            for i in 0..counts.len() {
                let (before, now, goal) = (counts[i] as i64, after[i], ideal[i] as i64);
                prop_assert!((now - goal).abs() <= (before - goal).abs());
                prop_assert!((now - before).signum() != (before - goal).signum() || now == before);
            }
        }
    }
}
