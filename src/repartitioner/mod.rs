//! Which grains should move so that grains that call each other share a silo (pure): Orleans'
//! communication-locality repartitioner with the whole cluster's edges in view.
//!
//! Silos report sampled grain-to-grain call counts; [`sketch`] keeps the heaviest edges in bounded
//! memory; a round builds the [`graph`] of tracked edges over where the grains live now and plans
//! moves — [`global`] (the oracle's: every silo at once, greedy by gain within balance bounds) or
//! [`pairwise`] (Orleans' exchange between one pair of silos, `orleans_compat`). [`Repartitioner`]
//! is the state kept between rounds (under the cluster's lease): the sketch, the anchored grains,
//! the round timer and the last rounds' reports.

pub mod global;
pub mod graph;
pub mod options;
pub mod pairwise;
pub mod sketch;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use rand::Rng;
use serde::{Deserialize, Serialize};

pub use graph::{Graph, GraphInput, PlannedMove};
pub use options::RepartitionerOptions;
pub use sketch::EdgeSketch;

use crate::clock::Millis;

/// Rounds an anchored grain stays anchored (Orleans' `AnchoringFilterGenerations`).
pub const ANCHORING_GENERATIONS: usize = 3;
/// Round summaries kept.
const KEPT_REPORTS: usize = 10;

/// Which planner made a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Planner {
    /// The oracle's plan over every silo at once.
    Global,
    /// Orleans' exchange between two silos.
    Pairwise,
}

/// What a round planned, before it is issued.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundPlan {
    pub planner: Planner,
    pub moves: Vec<PlannedMove>,
    pub remote_fraction_before: f64,
    pub remote_fraction_after: f64,
    /// Activations per target silo after the moves (index as in the graph).
    pub counts_after: Vec<i64>,
    /// Grains whose home traffic outweighs their remote traffic once the moves are done.
    pub anchored: Vec<usize>,
}

/// Plans one round on `graph`. `counts` are the target silos' activations; `ci` is the
/// rebalancer's last deviation (it narrows Orleans' tolerance).
pub fn plan_round(
    graph: &Graph,
    counts: &[i64],
    options: &RepartitionerOptions,
    ci: f64,
) -> RoundPlan {
    let mut counts_after = counts.to_vec();
    let before = graph.remote_fraction(&graph.locations());
    let (planner, moves) = if options.orleans_compat {
        let tolerance = pairwise::tolerance(graph.targets, ci);
        let moves = match pairwise::choose_pair(graph) {
            Some((initiator, receiver)) => {
                pairwise::exchange(graph, initiator, receiver, &mut counts_after, tolerance)
            }
            None => Vec::new(),
        };
        (Planner::Pairwise, moves)
    } else {
        let bounds = global::Bounds::around_mean(counts, options.max_imbalance_percent);
        (
            Planner::Global,
            global::plan(graph, &mut counts_after, bounds),
        )
    };
    let mut location = graph.locations();
    for m in &moves {
        location[m.vertex] = m.to;
    }
    RoundPlan {
        planner,
        remote_fraction_before: before,
        remote_fraction_after: graph.remote_fraction(&location),
        counts_after,
        // Judged where the grains will be once the moves are done.
        anchored: graph.anchored(&location),
        moves,
    }
}

/// A round as `GET …/repartitioner` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RoundSummary {
    pub round: u64,
    pub at_ms: Millis,
    pub planner: Planner,
    /// Moves planned; the migrations issued may be fewer (a grain moved meanwhile).
    pub moves: u64,
    pub migrations: u64,
    pub remote_fraction_before: f64,
    pub remote_fraction_after: f64,
    pub counts_after: BTreeMap<String, i64>,
}

/// The repartitioner of a cluster between rounds; stored under the cluster's lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Repartitioner {
    pub sketch: EdgeSketch,
    /// Anchored grains by generation, newest first.
    pub anchored: VecDeque<BTreeSet<String>>,
    /// Rounds run so far.
    pub round: u64,
    pub next_round_at_ms: Millis,
    pub last_moves_at_ms: Option<Millis>,
    /// The last edge report counted (reports are numbered as they arrive, per cluster).
    pub absorbed_through: i64,
    pub last_absorbed_at_ms: Millis,
    pub reports: VecDeque<RoundSummary>,
}

impl Repartitioner {
    /// A fresh repartitioner; its first round comes one period after `now`.
    pub fn new(now: Millis, options: &RepartitionerOptions, rng: &mut impl Rng) -> Self {
        Self {
            sketch: EdgeSketch::new(options.max_edge_count as usize),
            anchored: VecDeque::new(),
            round: 0,
            next_round_at_ms: now + period(options, rng),
            last_moves_at_ms: None,
            absorbed_through: 0,
            // Never counted yet: the first waiting reports are counted at once.
            last_absorbed_at_ms: Millis::MIN,
            reports: VecDeque::new(),
        }
    }

    /// Counts edge reports `(seq, a, b, count)` not counted yet, in order, and fits the sketch to
    /// the options' capacity.
    pub fn absorb<'r>(
        &mut self,
        now: Millis,
        options: &RepartitionerOptions,
        reports: impl IntoIterator<Item = (i64, &'r str, &'r str, u64)>,
    ) {
        let capacity = options.max_edge_count as usize;
        if self.sketch.capacity() != capacity {
            self.sketch = std::mem::replace(&mut self.sketch, EdgeSketch::new(1)).resized(capacity);
        }
        for (seq, a, b, count) in reports {
            if seq > self.absorbed_through {
                self.sketch.add(a, b, count);
                self.absorbed_through = seq;
            }
        }
        self.last_absorbed_at_ms = now;
    }

    /// Whether a round is due on the timer.
    pub fn round_due(&self, now: Millis) -> bool {
        now >= self.next_round_at_ms
    }

    /// Whether a grain is anchored (in any kept generation).
    pub fn is_anchored(&self, grain: &str) -> bool {
        self.anchored
            .iter()
            .any(|generation| generation.contains(grain))
    }

    /// Records a round: its moved grains' edges leave the sketch (they describe where the grains
    /// were), the anchored generations rotate with this round's anchored grains as the newest, and
    /// the next round is drawn from [min, max), no sooner than the recovery period after moves.
    pub fn finish_round(
        &mut self,
        now: Millis,
        options: &RepartitionerOptions,
        graph: &Graph,
        plan: &RoundPlan,
        migrations: u64,
        rng: &mut impl Rng,
    ) -> RoundSummary {
        self.round += 1;
        let moved: std::collections::HashSet<&str> = plan
            .moves
            .iter()
            .map(|m| graph.vertices[m.vertex].grain.as_str())
            .collect();
        self.sketch.remove_grains(&moved);
        if options.anchoring_filter_enabled {
            let newest: BTreeSet<String> = plan
                .anchored
                .iter()
                .map(|&v| graph.vertices[v].grain.clone())
                .collect();
            self.anchored.push_front(newest);
            self.anchored.truncate(ANCHORING_GENERATIONS);
        } else {
            self.anchored.clear();
        }
        let mut next = now + period(options, rng);
        if !plan.moves.is_empty() {
            self.last_moves_at_ms = Some(now);
            next = next.max(now + options.recovery_period_ms as Millis);
        }
        self.next_round_at_ms = next;
        let summary = RoundSummary {
            round: self.round,
            at_ms: now,
            planner: plan.planner,
            moves: plan.moves.len() as u64,
            migrations,
            remote_fraction_before: plan.remote_fraction_before,
            remote_fraction_after: plan.remote_fraction_after,
            counts_after: graph
                .silos
                .iter()
                .zip(&plan.counts_after)
                .map(|(s, &n)| (s.clone(), n))
                .collect(),
        };
        self.reports.push_front(summary.clone());
        self.reports.truncate(KEPT_REPORTS);
        summary
    }
}

/// A round period drawn from [min, max) (exactly min when they are equal).
fn period(options: &RepartitionerOptions, rng: &mut impl Rng) -> Millis {
    let (min, max) = (options.min_round_period_ms, options.max_round_period_ms);
    let drawn = if max > min {
        rng.gen_range(min..max)
    } else {
        min
    };
    Millis::try_from(drawn).unwrap_or(Millis::MAX / 2)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::repartitioner::global::tests::graph;

    #[test]
    fn rounds_follow_the_timer_and_rest_after_moves() {
        let options = RepartitionerOptions {
            min_round_period_ms: 1_000,
            max_round_period_ms: 2_000,
            recovery_period_ms: 1_000,
            ..RepartitionerOptions::default()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let mut state = Repartitioner::new(0, &options, &mut rng);
        assert!((1_000..2_000).contains(&state.next_round_at_ms));
        assert!(!state.round_due(999));
        state.absorb(
            0,
            &options,
            [
                (1, "A", "B", 4),
                (2, "A", "C", 4),
                (3, "C", "B", 4),
                (2, "A", "B", 100),
            ],
        );
        assert_eq!(state.absorbed_through, 3, "a report is counted once");
        assert_eq!(state.sketch.len(), 3);
        let g = graph(
            &[("A", "B", 4), ("A", "C", 4), ("C", "B", 4)],
            &[("A", "S1"), ("B", "S2"), ("C", "S2")],
            &[],
        );
        let plan = plan_round(&g, &[10, 10], &options, 0.0);
        assert_eq!(plan.moves.len(), 1);
        assert!((plan.remote_fraction_before - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(plan.remote_fraction_after, 0.0);
        let summary = state.finish_round(5_000, &options, &g, &plan, 1, &mut rng);
        assert_eq!(summary.round, 1);
        assert_eq!(summary.counts_after["S2"], 11);
        assert_eq!(state.sketch.len(), 1, "A's edges left with it");
        assert!(state.next_round_at_ms >= 6_000 && state.next_round_at_ms < 7_000);
        assert!(
            state.is_anchored("B") && state.is_anchored("C"),
            "B and C call each other at home"
        );
        for _ in 0..ANCHORING_GENERATIONS {
            let empty = plan_round(&Graph::default(), &[], &options, 0.0);
            state.finish_round(9_000, &options, &Graph::default(), &empty, 0, &mut rng);
        }
        assert!(!state.is_anchored("B"), "forgotten after three more rounds");
    }
}
