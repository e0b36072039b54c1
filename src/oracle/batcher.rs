//! Coalesces concurrent store calls into batched ones.
//!
//! Under load many requests want a directory lookup (or a registration) at the same moment; each
//! one alone costs a database round trip, and on a small machine the round trips — not the queries
//! — are the bottleneck. A [`Batcher`] queues those calls and runs whatever has queued as one store
//! call, with at most a few batches in flight. No call waits on a timer for others to join it: an
//! idle oracle runs a call the moment it arrives (a batch of one), a busy one batches exactly as
//! much as piled up while the previous batches ran.
//!
//! Correctness is untouched: every call is still answered by the store, by a query that starts
//! after the call was made, so no answer is older than the request that asked for it.
//!
//! Bounded: at most `max_queued` calls wait; one more is refused at once with
//! [`StoreError::Overloaded`] (503 with Retry-After) rather than queueing without limit while the
//! store is slow. A call whose caller went away (its request timed out or the client hung up) is
//! dropped from its batch instead of being run for nobody.
//!
//! One batch at a time while batches are quick, more only when one is slow: a batch starts beside
//! the ones under way only once the latest of them has been out for [`Limits::overlap_after`].
//! Calls that pile up behind a quick batch then ride the next one (fewer, fuller batches: fewer
//! statements and commits per call), while a batch stuck behind a lock or a slow store holds
//! nothing up for longer than that.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use tokio::time::Instant;

use crate::store::StoreError;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// How a [`Batcher`] batches.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most inputs one run gets.
    pub max_batch: usize,
    /// Most runs under way at once.
    pub max_in_flight: usize,
    /// How long the latest run still under way must have been out before another may start
    /// beside it (at once when one ends).
    pub overlap_after: Duration,
    /// Most calls waiting; one more is refused at once.
    pub max_queued: usize,
}

/// A queue in front of one batched store operation taking `I`s and answering one `O` each.
pub struct Batcher<I, O> {
    queue: mpsc::Sender<(I, Reply<O>)>,
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the batching task. `run` gets up to `limits.max_batch` inputs and must answer one
    /// output per input, in order. The task ends with the batcher.
    pub fn spawn<F, Fut>(limits: Limits, run: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
    {
        let Limits {
            max_batch,
            max_in_flight,
            overlap_after,
            max_queued,
        } = limits;
        let (queue, mut incoming) = mpsc::channel::<(I, Reply<O>)>(max_queued);
        let run = Arc::new(run);
        let slots = Arc::new(Semaphore::new(max_in_flight));
        let runs = Arc::new(Runs::default());
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
                runs.wait_turn(overlap_after).await;
                let mut batch = Vec::new();
                while batch.is_empty() {
                    let Some(first) = incoming.recv().await else {
                        return;
                    };
                    batch.extend(Some(first).filter(|(_, reply)| !reply.is_closed()));
                    while batch.len() < max_batch {
                        match incoming.try_recv() {
                            Ok(job) if job.1.is_closed() => {}
                            Ok(job) => batch.push(job),
                            Err(_) => break,
                        }
                    }
                }
                let run = run.clone();
                let this_run = runs.start();
                tokio::spawn(async move {
                    let (inputs, replies): (Vec<I>, Vec<Reply<O>>) = batch.into_iter().unzip();
                    match run(inputs).await {
                        Ok(outputs) => {
                            debug_assert_eq!(outputs.len(), replies.len());
                            for (reply, output) in replies.into_iter().zip(outputs) {
                                let _ = reply.send(Ok(output));
                            }
                        }
                        Err(error) => {
                            for reply in replies {
                                let _ = reply.send(Err(error.clone()));
                            }
                        }
                    }
                    drop(this_run);
                    drop(slot);
                });
            }
        });
        Self { queue }
    }

    /// Queues one input and waits for its output.
    pub async fn call(&self, input: I) -> Result<O, StoreError> {
        let mut outputs = self.call_many(vec![input]).await?;
        Ok(outputs.pop().expect("one output per input"))
    }

    /// Queues several inputs at once (so they travel in as few batches as possible) and waits for
    /// their outputs, in order. Fails if any of them failed.
    pub async fn call_many(&self, inputs: Vec<I>) -> Result<Vec<O>, StoreError> {
        let mut answers = Vec::with_capacity(inputs.len());
        for input in inputs {
            let (reply, answer) = oneshot::channel();
            self.queue
                .try_send((input, reply))
                .map_err(|error| match error {
                    mpsc::error::TrySendError::Full(_) => StoreError::Overloaded,
                    mpsc::error::TrySendError::Closed(_) => {
                        StoreError::Corrupt("the batching task has stopped".into())
                    }
                })?;
            answers.push(answer);
        }
        let mut outputs = Vec::with_capacity(answers.len());
        for answer in answers {
            let output = answer
                .await
                .map_err(|_| StoreError::Corrupt("a batched store call was dropped".into()))?;
            outputs.push(output?);
        }
        Ok(outputs)
    }
}

/// When each run under way began.
#[derive(Default)]
struct Runs {
    starts: Mutex<Vec<Instant>>,
    ended: Notify,
}

impl Runs {
    /// Returns when a new run may start: at once when none is under way, else when one ends or
    /// the latest of those under way has been out for `overlap_after`.
    async fn wait_turn(&self, overlap_after: Duration) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the check, so an end between the check and the wait is not missed.
            ended.as_mut().enable();
            let Some(latest) = self.starts().iter().max().copied() else {
                return;
            };
            match latest.checked_add(overlap_after) {
                Some(turn) if Instant::now() >= turn => return,
                Some(turn) => {
                    tokio::select! {
                        () = ended => {}
                        () = tokio::time::sleep_until(turn) => {}
                    }
                }
                None => ended.await,
            }
        }
    }

    /// Counts a run as under way from now until the returned guard is dropped.
    fn start(self: &Arc<Self>) -> RunUnderWay {
        let started = Instant::now();
        self.starts().push(started);
        RunUnderWay {
            runs: self.clone(),
            started,
        }
    }

    fn starts(&self) -> std::sync::MutexGuard<'_, Vec<Instant>> {
        self.starts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A run under way; its end is counted when dropped (also if the run panics).
struct RunUnderWay {
    runs: Arc<Runs>,
    started: Instant,
}

impl Drop for RunUnderWay {
    fn drop(&mut self) {
        let mut starts = self.runs.starts();
        if let Some(i) = starts.iter().position(|&s| s == self.started) {
            starts.swap_remove(i);
        }
        drop(starts);
        self.runs.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Limits under which a run may start beside another at once.
    fn limits(max_batch: usize, max_in_flight: usize, max_queued: usize) -> Limits {
        Limits {
            max_batch,
            max_in_flight,
            overlap_after: Duration::ZERO,
            max_queued,
        }
    }

    /// A batcher of two runs in flight whose runs each wait for their own release, and the
    /// inputs of each run as it starts.
    #[allow(clippy::type_complexity)]
    fn held_runs(
        overlap_after: Duration,
    ) -> (
        Arc<Batcher<u32, u32>>,
        mpsc::UnboundedReceiver<(Vec<u32>, oneshot::Sender<()>)>,
    ) {
        let (started, runs) = mpsc::unbounded_channel();
        let limits = Limits {
            max_batch: 100,
            max_in_flight: 2,
            overlap_after,
            max_queued: 100,
        };
        let batcher = Batcher::spawn(limits, move |inputs: Vec<u32>| {
            let (release, released) = oneshot::channel();
            started.send((inputs.clone(), release)).unwrap();
            async move {
                let _ = released.await;
                Ok(inputs)
            }
        });
        (Arc::new(batcher), runs)
    }

    /// The next run to start, with what releases it; fails instead of hanging.
    async fn next_run(
        runs: &mut mpsc::UnboundedReceiver<(Vec<u32>, oneshot::Sender<()>)>,
    ) -> (Vec<u32>, oneshot::Sender<()>) {
        tokio::time::timeout(Duration::from_secs(60), runs.recv())
            .await
            .expect("a run started")
            .expect("the batcher is running")
    }

    fn call(batcher: &Arc<Batcher<u32, u32>>, input: u32) -> tokio::task::JoinHandle<u32> {
        let batcher = batcher.clone();
        tokio::spawn(async move { batcher.call(input).await.unwrap() })
    }

    #[tokio::test(start_paused = true)]
    async fn calls_behind_a_quick_run_wait_for_it_and_then_ride_one_run_together() {
        let (batcher, mut runs) = held_runs(Duration::from_millis(5));
        let first = call(&batcher, 0);
        let (inputs, release_first) = next_run(&mut runs).await;
        let started = Instant::now();
        assert_eq!(inputs, vec![0]);
        let behind: Vec<_> = (1..=3).map(|i| call(&batcher, i)).collect();
        tokio::time::sleep(Duration::from_millis(4)).await;
        assert!(
            runs.try_recv().is_err(),
            "a second run started beside a quick one"
        );
        release_first.send(()).unwrap();
        assert_eq!(first.await.unwrap(), 0);
        let (inputs, release) = next_run(&mut runs).await;
        assert_eq!(inputs, vec![1, 2, 3], "the calls that waited share one run");
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(4),
            "the next run starts when the quick one ends"
        );
        release.send(()).unwrap();
        for (i, call) in (1..=3).zip(behind) {
            assert_eq!(call.await.unwrap(), i);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_run_holds_the_next_calls_up_only_for_the_overlap_delay() {
        let (batcher, mut runs) = held_runs(Duration::from_millis(5));
        let _stuck = call(&batcher, 0);
        let (_, _never_released) = next_run(&mut runs).await;
        let started = Instant::now();
        let next = call(&batcher, 1);
        let (inputs, release) = next_run(&mut runs).await;
        assert_eq!(inputs, vec![1]);
        assert_eq!(started.elapsed(), Duration::from_millis(5));
        release.send(()).unwrap();
        assert_eq!(next.await.unwrap(), 1);

        // Beside the stuck run, the quick one ended: the next starts at once, not 5 ms after the
        // quick one began.
        let started = Instant::now();
        let after = call(&batcher, 2);
        let (inputs, release) = next_run(&mut runs).await;
        assert_eq!(inputs, vec![2]);
        assert_eq!(started.elapsed(), Duration::ZERO);
        release.send(()).unwrap();
        assert_eq!(after.await.unwrap(), 2);
    }

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_answer() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let batcher = Arc::new(Batcher::spawn(
            limits(64, 1, 1_000),
            move |inputs: Vec<u32>| {
                counted.fetch_add(1, Ordering::SeqCst);
                async move {
                    tokio::task::yield_now().await;
                    Ok(inputs.into_iter().map(|i| i * 2).collect())
                }
            },
        ));
        let calls: Vec<_> = (0..200u32)
            .map(|i| {
                let batcher = batcher.clone();
                tokio::spawn(async move { (i, batcher.call(i).await.unwrap()) })
            })
            .collect();
        for call in calls {
            let (i, doubled) = call.await.unwrap();
            assert_eq!(doubled, i * 2);
        }
        let runs = runs.load(Ordering::SeqCst);
        assert!(runs < 200, "200 concurrent calls ran in {runs} batches");
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_and_abandoned_calls_are_never_run() {
        let (release, released) = tokio::sync::watch::channel(false);
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = ran.clone();
        let batcher = Arc::new(Batcher::spawn(limits(1, 1, 2), move |inputs: Vec<u32>| {
            seen.lock().unwrap().extend(inputs.iter().copied());
            let mut released = released.clone();
            async move {
                let _ = released.wait_for(|go| *go).await;
                Ok(inputs)
            }
        }));
        // Call 0 runs and blocks the only slot; calls 1 and 2 fill the queue of two.
        let first = tokio::spawn({
            let batcher = batcher.clone();
            async move { batcher.call(0).await }
        });
        while ran.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let abandoned = tokio::spawn({
            let batcher = batcher.clone();
            async move { batcher.call(1).await }
        });
        let waiting = tokio::spawn({
            let batcher = batcher.clone();
            async move { batcher.call(2).await }
        });
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(matches!(batcher.call(3).await, Err(StoreError::Overloaded)));

        abandoned.abort();
        let _ = abandoned.await;
        release.send(true).unwrap();
        assert_eq!(first.await.unwrap().unwrap(), 0);
        assert_eq!(waiting.await.unwrap().unwrap(), 2);
        assert_eq!(
            *ran.lock().unwrap(),
            vec![0, 2],
            "the abandoned call was not run"
        );
    }

    #[tokio::test]
    async fn a_failed_batch_fails_every_call_in_it() {
        let batcher = Batcher::spawn(limits(8, 1, 8), |_inputs: Vec<u32>| async {
            Err::<Vec<u32>, _>(StoreError::Contended(1))
        });
        assert!(matches!(
            batcher.call(1).await,
            Err(StoreError::Contended(1))
        ));
    }
}
