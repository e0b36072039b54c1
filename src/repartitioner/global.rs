//! The oracle's planner: one plan over every silo at once, greedy by gain with capacity.
//!
//! Each movable grain's gain for a silo is the weight of its edges to grains there less the weight
//! to grains on its own silo. A grain pass repeatedly moves the grain with the largest positive
//! gain to its best silo that balance allows, then updates its neighbours' gains. Single moves
//! stall where a community is split down the middle (a grain on the border has as many partners on
//! each side), so a group pass follows: the grains of a silo that call each other there (connected
//! through same-silo edges, at most [`MAX_GROUP`]) move together when the group's edges to another
//! silo outweigh its edges to the rest of its own. Passes alternate while they move something. A
//! grain moves at most once per round (no ping-pong). Balance: no silo may go above
//! `mean × (1 + p)` or below `mean × (1 − p)` activations, except that the most loaded silo, when
//! above the bound, may always send a grain to a lighter one. No move is planned whose gain, at the
//! time it is planned, is below [`MIN_GAIN`] (so never one that is not positive).

use std::collections::BinaryHeap;

use super::graph::{Graph, PlannedMove};

/// Most passes of one plan (each moves at least one grain).
const MAX_PASSES: usize = 16;
/// Largest group of grains the group pass moves as one.
pub const MAX_GROUP: usize = 64;
/// Smallest gain worth a migration: a move must bring at least two calls' weight home. A grain
/// whose one sampled call went elsewhere is noise, not locality (under a flood of random calls,
/// moving on gain 1 sent thousands of grains chasing pairs that never called again).
pub const MIN_GAIN: u64 = 2;

/// The activation-count bounds of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub low: i64,
    pub high: i64,
}

impl Bounds {
    /// `mean × (1 ± percent/100)`, rounded outwards so the mean itself is always within.
    pub fn around_mean(counts: &[i64], percent: u32) -> Self {
        let total: i64 = counts.iter().sum();
        let mean = total as f64 / counts.len().max(1) as f64;
        let slack = f64::from(percent) / 100.0;
        Self {
            low: (mean * (1.0 - slack)).floor() as i64,
            high: (mean * (1.0 + slack)).ceil() as i64,
        }
    }
}

/// Plans moves on `graph`; `counts` are the activations of each target silo (index as in
/// `graph.silos`, only the first `graph.targets`) and are updated with the moves.
pub fn plan(graph: &Graph, counts: &mut [i64], bounds: Bounds) -> Vec<PlannedMove> {
    let mut location = graph.locations();
    let mut moved = vec![false; graph.vertices.len()];
    let mut moves = Vec::new();
    for _ in 0..MAX_PASSES {
        let before = moves.len();
        let mut heap: BinaryHeap<(u64, std::cmp::Reverse<usize>)> = (0..graph.vertices.len())
            .filter(|&v| offered(graph, v))
            .filter_map(|v| {
                best(graph, v, &location, counts, bounds)
                    .map(|(gain, _)| (gain, std::cmp::Reverse(v)))
            })
            .collect();
        while let Some((gain, std::cmp::Reverse(v))) = heap.pop() {
            if moved[v] {
                continue;
            }
            match best(graph, v, &location, counts, bounds) {
                // The gain changed since it was queued: queue it again with the gain it has now.
                Some((now, _)) if now != gain => heap.push((now, std::cmp::Reverse(v))),
                Some((_, to)) => {
                    let from = location[v];
                    counts[from] -= 1;
                    counts[to] += 1;
                    location[v] = to;
                    moved[v] = true;
                    moves.push(PlannedMove {
                        vertex: v,
                        from,
                        to,
                    });
                    for &(u, _) in &graph.adjacency[v] {
                        if offered(graph, u) && !moved[u] {
                            if let Some((gain, _)) = best(graph, u, &location, counts, bounds) {
                                heap.push((gain, std::cmp::Reverse(u)));
                            }
                        }
                    }
                }
                None => {}
            }
        }
        group_pass(graph, &mut location, &mut moved, counts, bounds, &mut moves);
        if moves.len() == before {
            break;
        }
    }
    moves
}

/// Moves whole same-silo groups of unmoved, movable grains whose edges to another silo outweigh
/// their edges to the rest of their own, best gain first.
fn group_pass(
    graph: &Graph,
    location: &mut [usize],
    moved: &mut [bool],
    counts: &mut [i64],
    bounds: Bounds,
    moves: &mut Vec<PlannedMove>,
) {
    let free = |v: usize, moved: &[bool]| graph.vertices[v].movable && !moved[v];
    // Union-find over same-silo edges between free grains.
    let mut parent: Vec<usize> = (0..graph.vertices.len()).collect();
    fn root(parent: &mut [usize], mut v: usize) -> usize {
        while parent[v] != v {
            parent[v] = parent[parent[v]];
            v = parent[v];
        }
        v
    }
    for v in 0..graph.vertices.len() {
        if !free(v, moved) {
            continue;
        }
        for &(u, _) in &graph.adjacency[v] {
            if u > v && free(u, moved) && location[u] == location[v] {
                let (a, b) = (root(&mut parent, v), root(&mut parent, u));
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for v in (0..graph.vertices.len()).filter(|&v| free(v, moved)) {
        groups.entry(root(&mut parent, v)).or_default().push(v);
    }
    let groups: Vec<Vec<usize>> = groups
        .into_values()
        .filter(|g| g.len() > 1 && g.len() <= MAX_GROUP)
        .collect();
    let mut ranked: Vec<(u64, usize)> = groups
        .iter()
        .enumerate()
        .filter_map(|(i, g)| {
            best_for_group(graph, g, location, counts, bounds).map(|(gain, _)| (gain, i))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in ranked {
        let group = &groups[i];
        // Neighbours may have moved since it was ranked: judge it again.
        let Some((_, to)) = best_for_group(graph, group, location, counts, bounds) else {
            continue;
        };
        let from = location[group[0]];
        let n = group.len() as i64;
        counts[from] -= n;
        counts[to] += n;
        for &v in group {
            location[v] = to;
            moved[v] = true;
            moves.push(PlannedMove {
                vertex: v,
                from,
                to,
            });
        }
    }
}

/// The silo where a same-silo group gains most that balance allows, and the gain.
fn best_for_group(
    graph: &Graph,
    group: &[usize],
    location: &[usize],
    counts: &[i64],
    bounds: Bounds,
) -> Option<(u64, usize)> {
    let from = location[group[0]];
    let members: std::collections::HashSet<usize> = group.iter().copied().collect();
    let mut by_silo: std::collections::HashMap<usize, u64> = Default::default();
    for &v in group {
        for &(u, w) in &graph.adjacency[v] {
            if !members.contains(&u) {
                let sum = by_silo.entry(location[u]).or_default();
                *sum = sum.saturating_add(w);
            }
        }
    }
    let n = group.len() as i64;
    best_target(graph, from, &by_silo, counts, |to| {
        counts[to] + n <= bounds.high && counts[from] - n >= bounds.low
    })
}

/// Whether the grain pass may offer `v` alone.
fn offered(graph: &Graph, v: usize) -> bool {
    graph.vertices[v].movable && !graph.vertices[v].anchored
}

/// The silo where `v` gains most that balance allows, and the gain; `None` without one of at
/// least [`MIN_GAIN`].
fn best(
    graph: &Graph,
    v: usize,
    location: &[usize],
    counts: &[i64],
    bounds: Bounds,
) -> Option<(u64, usize)> {
    let from = location[v];
    let by_silo = graph.weights_by_silo(v, location);
    let heaviest = counts.iter().copied().max().unwrap_or(0);
    best_target(graph, from, &by_silo, counts, |to| {
        let within = counts[to] < bounds.high && counts[from] > bounds.low;
        let sheds_the_largest_excess =
            counts[from] == heaviest && counts[from] > bounds.high && counts[to] + 1 < counts[from];
        within || sheds_the_largest_excess
    })
}

/// Among the target silos `weights` (edge weight by silo) reach, the one whose weight beats the
/// weight at `from` by the most, at least [`MIN_GAIN`], that `allowed` lets in; with that gain.
/// Among equal gains, the silo with fewer activations, then the lower index.
fn best_target(
    graph: &Graph,
    from: usize,
    weights: &std::collections::HashMap<usize, u64>,
    counts: &[i64],
    allowed: impl Fn(usize) -> bool,
) -> Option<(u64, usize)> {
    let here = weights.get(&from).copied().unwrap_or(0);
    let mut choice: Option<(u64, usize)> = None;
    for (&to, &weight) in weights {
        if to == from || to >= graph.targets || weight < here.saturating_add(MIN_GAIN) {
            continue;
        }
        if !allowed(to) {
            continue;
        }
        let gain = weight - here;
        let better = match choice {
            None => true,
            Some((g, t)) => gain > g || (gain == g && (counts[to], to) < (counts[t], t)),
        };
        if better {
            choice = Some((gain, to));
        }
    }
    choice
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use proptest::prelude::{prop_assert, proptest};

    use super::*;
    use crate::repartitioner::graph::GraphInput;

    pub(crate) fn graph(edges: &[(&str, &str, u64)], at: &[(&str, &str)], fixed: &[&str]) -> Graph {
        let locations: HashMap<String, String> = at
            .iter()
            .map(|(g, s)| (g.to_string(), s.to_string()))
            .collect();
        let mut targets: Vec<String> = at.iter().map(|(_, s)| s.to_string()).collect();
        targets.sort();
        targets.dedup();
        let movable = |g: &str| !fixed.contains(&g);
        Graph::build(
            edges.iter().map(|&(a, b, w)| (a, b, w)),
            &GraphInput {
                targets,
                locations: &locations,
                movable: &movable,
                anchored: &|_| false,
            },
        )
    }

    fn placed(graph: &Graph, moves: &[PlannedMove]) -> Vec<(String, String)> {
        let mut location = graph.locations();
        for m in moves {
            location[m.vertex] = m.to;
        }
        let mut out: Vec<(String, String)> = graph
            .vertices
            .iter()
            .enumerate()
            .map(|(i, v)| (v.grain.clone(), graph.silos[location[i]].clone()))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn a_grain_joins_the_silo_it_calls_most() {
        // Orleans scenario 1: A@S1 calls B and C on S2; C calls B.
        let g = graph(
            &[("A", "B", 4), ("A", "C", 4), ("C", "B", 4)],
            &[("A", "S1"), ("B", "S2"), ("C", "S2")],
            &[],
        );
        let mut counts = vec![10, 10];
        let moves = plan(&g, &mut counts, Bounds { low: 0, high: 100 });
        assert_eq!(
            placed(&g, &moves),
            [
                ("A".into(), "S2".into()),
                ("B".into(), "S2".into()),
                ("C".into(), "S2".into())
            ]
        );
        assert_eq!(counts, [9, 11]);
    }

    #[test]
    fn one_call_is_not_worth_a_migration_two_are() {
        let bounds = Bounds { low: 0, high: 100 };
        let once = graph(&[("A", "B", 1)], &[("A", "S1"), ("B", "S2")], &[]);
        assert!(plan(&once, &mut [10, 10], bounds).is_empty());
        let twice = graph(&[("A", "B", 2)], &[("A", "S1"), ("B", "S2")], &[]);
        assert_eq!(plan(&twice, &mut [10, 10], bounds).len(), 1);
    }

    #[test]
    fn balance_bounds_hold_and_only_the_heaviest_silo_may_shed_past_them() {
        // Four pairs split across two silos; a bound of 5 lets only one more grain onto S1.
        let edges: Vec<(String, String)> =
            (0..4).map(|i| (format!("e{i}"), format!("f{i}"))).collect();
        let e: Vec<(&str, &str, u64)> = edges
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str(), 4))
            .collect();
        let at: Vec<(&str, &str)> = edges
            .iter()
            .flat_map(|(a, b)| [(a.as_str(), "S1"), (b.as_str(), "S2")])
            .collect();
        let g = graph(&e, &at, &[]);
        let mut counts = vec![4, 4];
        let moves = plan(&g, &mut counts, Bounds { low: 3, high: 5 });
        assert!(counts.iter().all(|&c| (3..=5).contains(&c)), "{counts:?}");
        let remote = g.remote_fraction(&{
            let mut l = g.locations();
            moves.iter().for_each(|m| l[m.vertex] = m.to);
            l
        });
        assert_eq!(remote, 0.0, "every pair ends together: {moves:?}");
    }

    proptest! {
        /// Whatever the graph: the remote fraction never rises, no grain moves twice, fixed
        /// grains stay, and silos within the bounds before stay within them.
        #[test]
        fn plans_only_help_and_keep_balance(
            edges in proptest::collection::vec((0usize..40, 0usize..40, 1u64..10), 1..120),
            homes in proptest::collection::vec(0usize..4, 40),
        ) {
            let names: Vec<String> = (0..40).map(|i| format!("g{i}")).collect();
            let e: Vec<(&str, &str, u64)> = edges.iter().map(|&(a, b, w)| (names[a].as_str(), names[b].as_str(), w)).collect();
            let silos = ["S0", "S1", "S2", "S3"];
            let at: Vec<(&str, &str)> = (0..40).map(|i| (names[i].as_str(), silos[homes[i]])).collect();
            let fixed = [names[0].as_str(), names[1].as_str()];
            let g = graph(&e, &at, &fixed);
            let mut counts: Vec<i64> = vec![100; g.targets];
            let bounds = Bounds::around_mean(&counts, 10);
            let before = g.remote_fraction(&g.locations());
            let moves = plan(&g, &mut counts, bounds);
            let mut location = g.locations();
            let mut seen = std::collections::HashSet::new();
            for m in &moves {
                prop_assert!(seen.insert(m.vertex));
                prop_assert!(g.vertices[m.vertex].movable);
                location[m.vertex] = m.to;
            }
            prop_assert!(g.remote_fraction(&location) <= before + 1e-12);
            prop_assert!(counts.iter().all(|&c| c >= bounds.low && c <= bounds.high), "{:?}", counts);
        }
    }
}
