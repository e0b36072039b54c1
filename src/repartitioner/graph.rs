//! The communication graph one round plans on: the tracked edges whose two grains have an
//! activation, each grain on its silo, and whether it may move.

use std::collections::HashMap;

/// A grain of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vertex {
    pub grain: String,
    /// Index into [`Graph::silos`].
    pub silo: usize,
    /// Whether a planner may move it at all (a movable type, on a silo that may receive grains).
    pub movable: bool,
    /// Whether it is anchored: its home traffic outweighed its remote traffic in a recent round.
    /// An anchored grain is not offered alone; the global plan may still move it with the
    /// same-silo group it belongs to (the group's gain counts that home traffic).
    pub anchored: bool,
}

/// Grains, their silos and the weighted edges between them.
#[derive(Debug, Clone, Default)]
pub struct Graph {
    /// Silo ids, in id order. Silos that may receive grains come first, `targets` of them.
    pub silos: Vec<String>,
    /// How many of `silos` may receive grains (active and alive).
    pub targets: usize,
    pub vertices: Vec<Vertex>,
    /// Per vertex: (neighbour, weight), each edge listed at both ends.
    pub adjacency: Vec<Vec<(usize, u64)>>,
}

/// What a graph is built from.
pub struct GraphInput<'a> {
    /// Silos that may receive grains, in id order.
    pub targets: Vec<String>,
    /// Every grain's silo, for grains with an activation (other silos than `targets` included).
    pub locations: &'a HashMap<String, String>,
    /// Whether a grain on a target silo may move at all.
    pub movable: &'a dyn Fn(&str) -> bool,
    /// Whether a grain is anchored (see [`Vertex::anchored`]).
    pub anchored: &'a dyn Fn(&str) -> bool,
}

impl Graph {
    /// The graph of `edges` (grain, grain, weight). Edges with a grain without an activation are
    /// left out; a grain on a silo outside `targets` stays where it is but still pulls.
    pub fn build<'e>(
        edges: impl IntoIterator<Item = (&'e str, &'e str, u64)>,
        input: &GraphInput<'_>,
    ) -> Self {
        let mut graph = Graph {
            silos: input.targets.clone(),
            targets: input.targets.len(),
            ..Graph::default()
        };
        let mut silo_index: HashMap<String, usize> = graph
            .silos
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i))
            .collect();
        let mut vertex_index: HashMap<String, usize> = HashMap::new();
        let mut vertex = |graph: &mut Graph, grain: &str| -> Option<usize> {
            if let Some(&i) = vertex_index.get(grain) {
                return Some(i);
            }
            let silo_id = input.locations.get(grain)?;
            let silo = *silo_index.entry(silo_id.clone()).or_insert_with(|| {
                graph.silos.push(silo_id.clone());
                graph.silos.len() - 1
            });
            let movable = silo < graph.targets && (input.movable)(grain);
            graph.vertices.push(Vertex {
                grain: grain.to_owned(),
                silo,
                movable,
                anchored: (input.anchored)(grain),
            });
            graph.adjacency.push(Vec::new());
            vertex_index.insert(grain.to_owned(), graph.vertices.len() - 1);
            Some(graph.vertices.len() - 1)
        };
        for (a, b, weight) in edges {
            if a == b || weight == 0 {
                continue;
            }
            let (Some(x), Some(y)) = (vertex(&mut graph, a), vertex(&mut graph, b)) else {
                continue;
            };
            graph.adjacency[x].push((y, weight));
            graph.adjacency[y].push((x, weight));
        }
        graph
    }

    /// Weight of `v`'s edges to grains on each silo, given where every vertex is.
    pub fn weights_by_silo(&self, v: usize, location: &[usize]) -> HashMap<usize, u64> {
        let mut by_silo: HashMap<usize, u64> = HashMap::new();
        for &(u, w) in &self.adjacency[v] {
            let sum = by_silo.entry(location[u]).or_default();
            *sum = sum.saturating_add(w);
        }
        by_silo
    }

    /// Tracked weight whose two grains are on different silos ÷ all tracked weight (0 when there
    /// is none).
    pub fn remote_fraction(&self, location: &[usize]) -> f64 {
        // Wide sums: call counts are the clients' and may be huge.
        let (mut remote, mut all) = (0u128, 0u128);
        for (v, edges) in self.adjacency.iter().enumerate() {
            for &(u, w) in edges {
                if u > v {
                    all += u128::from(w);
                    if location[u] != location[v] {
                        remote += u128::from(w);
                    }
                }
            }
        }
        if all == 0 {
            0.0
        } else {
            remote as f64 / all as f64
        }
    }

    /// Where every vertex is now.
    pub fn locations(&self) -> Vec<usize> {
        self.vertices.iter().map(|v| v.silo).collect()
    }

    /// Grains whose traffic with their own silo outweighs all their remote traffic (reference
    /// 3.6), with every vertex at `location`: they stay where they are.
    pub fn anchored(&self, location: &[usize]) -> Vec<usize> {
        (0..self.vertices.len())
            .filter(|&v| {
                let own = location[v];
                let (mut local, mut remote) = (0u128, 0u128);
                for &(u, w) in &self.adjacency[v] {
                    if location[u] == own {
                        local += u128::from(w);
                    } else {
                        remote += u128::from(w);
                    }
                }
                local > remote
            })
            .collect()
    }
}

/// One grain a plan moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMove {
    pub vertex: usize,
    pub from: usize,
    pub to: usize,
}
