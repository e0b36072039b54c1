//! Coalesces concurrent store calls into batched ones.
//!
//! Under load many requests want a directory lookup (or a registration) at the same moment; each
//! one alone costs a database round trip, and on a small machine the round trips — not the queries
//! — are the bottleneck. A [`Batcher`] queues those calls and runs whatever has queued as one store
//! call, with at most a few batches in flight. Nothing waits on a timer: an idle oracle runs a call
//! the moment it arrives (a batch of one), a busy one batches exactly as much as piled up while the
//! previous batches ran.
//!
//! Correctness is untouched: every call is still answered by the store, by a query that starts
//! after the call was made, so no answer is older than the request that asked for it.
//!
//! Bounded: at most `max_queued` calls wait; one more is refused at once with
//! [`StoreError::Overloaded`] (503 with Retry-After) rather than queueing without limit while the
//! store is slow. A call whose caller went away (its request timed out or the client hung up) is
//! dropped from its batch instead of being run for nobody.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::store::StoreError;

type Reply<O> = oneshot::Sender<Result<O, StoreError>>;

/// A queue in front of one batched store operation taking `I`s and answering one `O` each.
pub struct Batcher<I, O> {
    queue: mpsc::Sender<(I, Reply<O>)>,
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the batching task. `run` gets up to `max_batch` inputs and must answer one output per
    /// input, in order; at most `max_in_flight` runs overlap and at most `max_queued` calls wait.
    /// The task ends with the batcher.
    pub fn spawn<F, Fut>(max_batch: usize, max_in_flight: usize, max_queued: usize, run: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<O>, StoreError>> + Send + 'static,
    {
        let (queue, mut incoming) = mpsc::channel::<(I, Reply<O>)>(max_queued);
        let run = Arc::new(run);
        let slots = Arc::new(Semaphore::new(max_in_flight));
        tokio::spawn(async move {
            loop {
                let Ok(slot) = slots.clone().acquire_owned().await else {
                    return;
                };
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn concurrent_calls_share_batches_and_each_gets_its_own_answer() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let batcher = Arc::new(Batcher::spawn(64, 1, 1_000, move |inputs: Vec<u32>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::task::yield_now().await;
                Ok(inputs.into_iter().map(|i| i * 2).collect())
            }
        }));
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
        let batcher = Arc::new(Batcher::spawn(1, 1, 2, move |inputs: Vec<u32>| {
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
        let batcher = Batcher::spawn(8, 1, 8, |_inputs: Vec<u32>| async {
            Err::<Vec<u32>, _>(StoreError::Contended(1))
        });
        assert!(matches!(
            batcher.call(1).await,
            Err(StoreError::Contended(1))
        ));
    }
}
