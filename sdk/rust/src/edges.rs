//! Calls between grains, counted locally in bounded memory and handed out in report-sized
//! batches.
//!
//! At most `max_pairs` distinct pairs are kept; calls of pairs beyond that are counted as dropped
//! (the repartitioner needs the heavy pairs, and a pair seen early keeps counting). A pair and its
//! reverse are one edge, as the oracle counts them.

use std::collections::HashMap;

/// Edges per report: the oracle's limit on one `POST …/edges`.
pub const MAX_EDGES_PER_REPORT: usize = 10_000;
/// Bytes of JSON per report, well inside the oracle's request body limit (1 MiB by default).
pub const MAX_REPORT_BYTES: usize = 768 * 1024;
/// What one edge costs in a report beside its two ids (names, quotes, the count).
const EDGE_OVERHEAD_BYTES: usize = 48;
/// The largest count of one edge the oracle takes.
pub const MAX_COUNT: u64 = 1_000_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub count: u64,
}

#[derive(Debug)]
pub struct EdgeCounter {
    max_pairs: usize,
    counts: HashMap<(String, String), u64>,
    /// Calls not counted because `max_pairs` pairs were already kept.
    pub dropped: u64,
}

impl EdgeCounter {
    /// A counter of at most `max_pairs` pairs (at least one).
    pub fn new(max_pairs: usize) -> Self {
        Self {
            max_pairs: max_pairs.max(1),
            counts: HashMap::new(),
            dropped: 0,
        }
    }

    pub fn record(&mut self, from: &str, to: &str, calls: u64) {
        if from == to || calls == 0 {
            return;
        }
        let pair = if from <= to { (from, to) } else { (to, from) };
        let key = (pair.0.to_owned(), pair.1.to_owned());
        if let Some(count) = self.counts.get_mut(&key) {
            *count = (*count + calls).min(MAX_COUNT);
        } else if self.counts.len() < self.max_pairs {
            self.counts.insert(key, calls.min(MAX_COUNT));
        } else {
            self.dropped += calls;
        }
    }

    pub fn len(&self) -> usize {
        self.counts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Everything counted so far, emptied, in batches of at most [`MAX_EDGES_PER_REPORT`] edges
    /// and about [`MAX_REPORT_BYTES`] of JSON.
    pub fn take_batches(&mut self) -> Vec<Vec<Edge>> {
        let mut batches = Vec::new();
        let (mut batch, mut bytes) = (Vec::new(), 0);
        for ((from, to), count) in std::mem::take(&mut self.counts) {
            let size = from.len() + to.len() + EDGE_OVERHEAD_BYTES;
            if batch.len() == MAX_EDGES_PER_REPORT
                || (!batch.is_empty() && bytes + size > MAX_REPORT_BYTES)
            {
                batches.push(std::mem::take(&mut batch));
                bytes = 0;
            }
            bytes += size;
            batch.push(Edge { from, to, count });
        }
        if !batch.is_empty() {
            batches.push(batch);
        }
        batches
    }

    /// A batch that could not be reported, counted again (within the bound).
    pub fn put_back(&mut self, batch: &[Edge]) {
        for edge in batch {
            self.record(&edge.from, &edge.to, edge.count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_and_its_reverse_are_one_edge_and_self_calls_are_not_edges() {
        let mut counter = EdgeCounter::new(10);
        counter.record("user/b", "user/a", 2);
        counter.record("user/a", "user/b", 3);
        counter.record("user/a", "user/a", 5);
        counter.record("user/a", "user/c", 0);
        assert_eq!(
            counter.take_batches(),
            vec![vec![Edge {
                from: "user/a".into(),
                to: "user/b".into(),
                count: 5
            }]]
        );
        assert!(counter.is_empty(), "taking empties it");
    }

    #[test]
    fn memory_is_bounded_and_what_does_not_fit_is_counted_as_dropped() {
        let mut counter = EdgeCounter::new(2);
        counter.record("a", "b", 1);
        counter.record("a", "c", 1);
        counter.record("a", "d", 4);
        counter.record("b", "a", 1);
        assert_eq!(counter.len(), 2);
        assert_eq!(counter.dropped, 4);
        let edges: u64 = counter
            .take_batches()
            .concat()
            .iter()
            .map(|e| e.count)
            .sum();
        assert_eq!(edges, 3, "kept pairs keep counting");
    }

    #[test]
    fn counts_stop_at_the_oracle_limit() {
        let mut counter = EdgeCounter::new(1);
        counter.record("a", "b", MAX_COUNT - 1);
        counter.record("a", "b", 5);
        assert_eq!(counter.take_batches()[0][0].count, MAX_COUNT);
    }

    #[test]
    fn batches_hold_at_most_the_report_limit_and_a_failed_batch_is_put_back() {
        let mut counter = EdgeCounter::new(30_000);
        for i in 0..25_000 {
            counter.record(&format!("g/{i}"), "hub", 1);
        }
        let batches = counter.take_batches();
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 25_000);
        assert!(
            sizes.iter().all(|&n| n <= MAX_EDGES_PER_REPORT),
            "{sizes:?}"
        );
        counter.put_back(&batches[0]);
        assert_eq!(counter.len(), batches[0].len());
    }

    #[test]
    fn batches_of_long_ids_stay_within_the_report_size() {
        let mut counter = EdgeCounter::new(20_000);
        let long = "x".repeat(200);
        for i in 0..5_000 {
            counter.record(&format!("{long}/{i}"), "hub", 1);
        }
        let batches = counter.take_batches();
        assert!(
            batches.len() > 1,
            "5,000 edges of ~210-byte ids do not fit one report"
        );
        for batch in &batches {
            let body = serde_json::to_vec(
                &batch
                    .iter()
                    .map(|e| serde_json::json!({"from": e.from, "to": e.to, "count": e.count}))
                    .collect::<Vec<_>>(),
            )
            .unwrap();
            assert!(body.len() <= MAX_REPORT_BYTES, "{} bytes", body.len());
        }
        assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), 5_000);
    }
}
