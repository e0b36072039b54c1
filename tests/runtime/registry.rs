//! The referee: every host tells it when it starts and stops running a grain, and it fails the
//! run when one grain runs on two hosts at once.
//!
//! A host records a start before the grain can serve its first call, and an end after the grain
//! served its last, so the recorded spans cover the real ones: an overlap the registry misses
//! cannot have happened.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Grain → the silos (incarnations) running it now, each with the epoch it runs under.
    running: HashMap<String, Vec<(String, i64)>>,
    activations: u64,
    resumptions: u64,
    violations: Vec<String>,
}

/// What the registry saw over a run.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Grains started under a new registration.
    pub activations: u64,
    /// Grains started again under a registration they held while paused.
    pub resumptions: u64,
    /// One line per time a grain started while another silo ran it.
    pub double_activations: Vec<String>,
}

impl Registry {
    /// `silo` starts running `grain` under `epoch`; `resumed` when it held that registration
    /// while paused.
    pub fn start(&self, grain: &str, silo: &str, epoch: i64, resumed: bool) {
        let mut inner = self.lock();
        if resumed {
            inner.resumptions += 1;
        } else {
            inner.activations += 1;
        }
        let others: Vec<String> = inner
            .running
            .get(grain)
            .into_iter()
            .flatten()
            .filter(|(other, _)| other != silo)
            .map(|(other, e)| format!("{other} (epoch {e})"))
            .collect();
        if !others.is_empty() {
            let line = format!(
                "{grain} started on {silo} (epoch {epoch}) while running on {}",
                others.join(", ")
            );
            inner.violations.push(line);
        }
        let running = inner.running.entry(grain.to_owned()).or_default();
        running.retain(|(other, _)| other != silo);
        running.push((silo.to_owned(), epoch));
    }

    /// `silo` stopped running `grain`.
    pub fn end(&self, grain: &str, silo: &str) {
        let mut inner = self.lock();
        if let Some(running) = inner.running.get_mut(grain) {
            running.retain(|(other, _)| other != silo);
            if running.is_empty() {
                inner.running.remove(grain);
            }
        }
    }

    pub fn tally(&self) -> Tally {
        let inner = self.lock();
        Tally {
            activations: inner.activations,
            resumptions: inner.resumptions,
            double_activations: inner.violations.clone(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grain_started_on_a_second_silo_before_the_first_stopped_is_a_violation() {
        let registry = Registry::default();
        registry.start("user/a", "h1@1", 1, false);
        registry.end("user/a", "h1@1");
        registry.start("user/a", "h2@1", 2, false);
        assert!(registry.tally().double_activations.is_empty());
        registry.start("user/a", "h3@1", 3, false);
        assert_eq!(registry.tally().double_activations.len(), 1);
    }
}
