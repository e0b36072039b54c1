//! Every periodic task of a replica, in one place, started and stopped together: the clusters'
//! background work on the clusters this replica owns (the membership sweep, stale migrations,
//! drains, the rebalancer and the repartitioner, [`clusters`]), the write of the heartbeats it
//! held back ([`run_heartbeat_flush`]), and the DNS listener beside it.
//!
//! [`Background::stop`] signals every task and waits for each to finish its current step; `serve`
//! calls it whether serving ended by a shutdown signal or by an error. Dropping a [`Background`]
//! without stopping it still signals the tasks (they finish on their own), so no path leaves them
//! running unasked.

mod clusters;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use clusters::{run_clusters, run_stamps, ClusterWork, SWEEP_EVERY, TICK};

use crate::oracle::Members;
use crate::store::FLUSH_HELD_EVERY_MS;

/// Writes the heartbeats this replica held back every [`FLUSH_HELD_EVERY_MS`], in a task of its
/// own (the clusters' ticks may run long), and once more when `shutdown` completes so that the
/// latest load figures are stored before the replica goes. A failure is the store's (the guard
/// counts it); the copies it took are dropped, and their silos' next heartbeats read their rows.
pub async fn run_heartbeat_flush(members: Arc<Members>, shutdown: impl Future<Output = ()>) {
    let every = Duration::from_millis(FLUSH_HELD_EVERY_MS.unsigned_abs());
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        let stopping = tokio::select! {
            _ = &mut shutdown => true,
            _ = ticks.tick() => false,
        };
        if let Err(error) = members.flush_held_heartbeats().await {
            tracing::debug!(%error, "cannot write the heartbeats held back; their silos read again");
        }
        if stopping {
            return;
        }
    }
}

/// The replica's background tasks.
pub struct Background {
    stop: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<()>)>,
}

impl Default for Background {
    fn default() -> Self {
        Self::new()
    }
}

impl Background {
    pub fn new() -> Self {
        Self {
            stop: watch::channel(false).0,
            tasks: Vec::new(),
        }
    }

    /// Completes when the tasks are told to stop: hand it to each task's loop.
    pub fn stopping(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut watch = self.stop.subscribe();
        async move {
            // An error means the sender is gone: stopping too.
            let _ = watch.wait_for(|stop| *stop).await;
        }
    }

    /// Runs `task` until it returns; it should return soon after [`Self::stopping`] completes.
    pub fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push((name, tokio::spawn(task)));
    }

    /// Tells every task to stop and waits for them; a task that panicked is logged.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        for (name, task) in std::mem::take(&mut self.tasks) {
            if let Err(error) = task.await {
                tracing::error!(task = name, %error, "background task failed");
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;

    /// A task that loops until told to stop, then records that it finished its step.
    fn looping(background: &Background, finished: Arc<AtomicBool>) -> impl Future<Output = ()> {
        let stopping = background.stopping();
        async move {
            tokio::pin!(stopping);
            loop {
                tokio::select! {
                    _ = &mut stopping => break,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(5)) => {}
                }
            }
            finished.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn stop_signals_every_task_and_waits_for_each() {
        let mut background = Background::new();
        let flags: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::default()).collect();
        for flag in &flags {
            let task = looping(&background, flag.clone());
            background.spawn("looping", task);
        }
        background.stop().await;
        assert!(flags.iter().all(|f| f.load(Ordering::SeqCst)));
    }

    #[tokio::test]
    async fn dropping_without_stop_still_stops_the_tasks() {
        let mut background = Background::new();
        let flag = Arc::new(AtomicBool::new(false));
        let task = looping(&background, flag.clone());
        background.spawn("looping", task);
        let handle = background.tasks[0].1.abort_handle();
        drop(background);
        for _ in 0..200 {
            if handle.is_finished() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(flag.load(Ordering::SeqCst), "the task ran to its end");
    }
}
