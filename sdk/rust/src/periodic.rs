//! A task run every `interval` until stopped, or until its owner is gone (it holds the owner
//! weakly); what a round gets from the oracle is logged and the next round tries again.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::error::OracleError;

#[derive(Default)]
pub(crate) struct Periodic {
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Periodic {
    /// Runs `round` on `owner` every `interval` (replacing a loop already running), until
    /// [`Self::stop`] or until every other handle of `owner` is dropped.
    pub fn start<T, F, R>(&self, name: &'static str, interval: Duration, owner: Weak<T>, round: F)
    where
        T: Send + Sync + 'static,
        F: Fn(Arc<T>) -> R + Send + 'static,
        R: Future<Output = Result<usize, OracleError>> + Send,
    {
        let task = tokio::spawn(async move {
            let mut ticks = tokio::time::interval(interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                let Some(owner) = owner.upgrade() else { return };
                if let Err(error) = round(owner).await {
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
