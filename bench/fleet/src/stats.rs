//! What each stream came to in the measured window: offered and served rates, latencies counted
//! from each request's scheduled send (so that time spent queued anywhere counts), and every
//! answer that was not a success, by status.

use std::collections::BTreeMap;
use std::time::Duration;

/// One stream's record.
#[derive(Debug, Default, Clone)]
pub struct Stream {
    /// Requests scheduled in the window.
    pub offered: u64,
    /// Latencies of the successful answers, in µs from the scheduled send.
    pub served: Vec<u32>,
    /// Latencies of the answers that refused with `Retry-After` (shed or rate-limited).
    pub refused: Vec<u32>,
    /// Every answer that was not a success, by status (`timeout`, `io` when none came).
    pub failures: BTreeMap<String, u64>,
}

impl Stream {
    pub fn record(&mut self, latency: Duration, outcome: &Outcome) {
        let micros = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        match outcome {
            Outcome::Served => self.served.push(micros),
            Outcome::Refused(status) => {
                self.refused.push(micros);
                *self.failures.entry(status.to_string()).or_default() += 1;
            }
            Outcome::Failed(what) => *self.failures.entry(what.clone()).or_default() += 1,
        }
    }

    /// One line: offered and served a second, percentiles of the served (and of the refused, when
    /// there are any), failures.
    pub fn line(&mut self, name: &str, seconds: f64) -> String {
        self.served.sort_unstable();
        self.refused.sort_unstable();
        let mut line = format!(
            "{name:<10} offered {:>8.0}/s  served {:>8.0}/s ({:>5.1} %)  p50 {}  p99 {}  p99.9 {}",
            self.offered as f64 / seconds,
            self.served.len() as f64 / seconds,
            100.0 * self.served.len() as f64 / (self.offered.max(1)) as f64,
            millis(percentile(&self.served, 0.5)),
            millis(percentile(&self.served, 0.99)),
            millis(percentile(&self.served, 0.999)),
        );
        if !self.refused.is_empty() {
            line.push_str(&format!(
                "  refused with Retry-After {:.0}/s, p99 {}",
                self.refused.len() as f64 / seconds,
                millis(percentile(&self.refused, 0.99))
            ));
        }
        if !self.failures.is_empty() {
            line.push_str(&format!("  not served {:?}", self.failures));
        }
        line
    }
}

/// What came of one request.
pub enum Outcome {
    Served,
    /// A 429 or 503 with `Retry-After`: the oracle shed it, and said when to come back.
    Refused(u16),
    /// Any other answer, or none.
    Failed(String),
}

pub fn percentile(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let index = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    Some(sorted[index])
}

fn millis(micros: Option<u32>) -> String {
    match micros {
        Some(us) if us < 10_000 => format!("{:.2} ms", f64::from(us) / 1_000.0),
        Some(us) => format!("{:.0} ms", f64::from(us) / 1_000.0),
        None => "-".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_of_the_sorted_latencies() {
        let sorted: Vec<u32> = (1..=1000).collect();
        assert_eq!(percentile(&sorted, 0.5), Some(500));
        assert_eq!(percentile(&sorted, 0.99), Some(990));
        assert_eq!(percentile(&sorted, 0.999), Some(999));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
