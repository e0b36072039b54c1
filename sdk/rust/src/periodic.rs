//! A task run every `interval` until stopped, or until its owner is gone (a round is `None`);
//! what it gets from the oracle is logged and the next round tries again.

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::error::OracleError;

#[derive(Default)]
pub(crate) struct Periodic {
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Periodic {
    /// Runs `round` every `interval` (replacing a loop already running), until it gives `None`.
    pub fn start<F, R>(&self, name: &'static str, interval: Duration, round: F)
    where
        F: Fn() -> Option<R> + Send + 'static,
        R: Future<Output = Result<usize, OracleError>> + Send,
    {
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(this_round) = round() else { return };
                if let Err(error) = this_round.await {
                    tracing::debug!(task = name, %error, "round failed; the next one tries again");
                }
            }
        });
        if let Some(old) = self.lock().replace(task) {
            old.abort();
        }
    }

    /// Stops the loop (a round under way is dropped at its next await).
    pub fn stop(&self) {
        if let Some(task) = self.lock().take() {
            task.abort();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<JoinHandle<()>>> {
        self.task.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.stop();
    }
}
