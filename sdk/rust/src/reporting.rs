//! Edge reports on a timer: [`EdgeReporter::record_call`] counts locally (bounded),
//! [`EdgeReporter::report_once`] sends what was counted in batches within the oracle's limit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::client::OracleClient;
use crate::edges::EdgeCounter;
use crate::error::OracleError;
use crate::periodic::Periodic;

/// Cheap to clone: clones count into the same counter.
#[derive(Clone)]
pub struct EdgeReporter {
    inner: Arc<Inner>,
}

struct Inner {
    client: OracleClient,
    counter: Mutex<EdgeCounter>,
    reported: AtomicU64,
    periodic: Periodic,
}

impl EdgeReporter {
    /// Keeps at most `max_pairs` distinct pairs between reports.
    pub fn new(client: OracleClient, max_pairs: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                counter: Mutex::new(EdgeCounter::new(max_pairs)),
                reported: AtomicU64::new(0),
                periodic: Periodic::default(),
            }),
        }
    }

    fn counter(&self) -> MutexGuard<'_, EdgeCounter> {
        self.inner
            .counter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// One call from grain `from` to grain `to`.
    pub fn record_call(&self, from: &str, to: &str) {
        self.counter().record(from, to, 1);
    }

    /// Calls not counted because the bound was reached.
    pub fn dropped(&self) -> u64 {
        self.counter().dropped
    }

    /// Edges reported so far.
    pub fn reported(&self) -> u64 {
        self.inner.reported.load(Ordering::Relaxed)
    }

    /// Sends what was counted; a batch the oracle did not take is counted again.
    pub async fn report_once(&self) -> Result<usize, OracleError> {
        let batches = self.counter().take_batches();
        let mut sent = 0;
        for (i, batch) in batches.iter().enumerate() {
            let edges: Vec<_> = batch
                .iter()
                .map(|e| json!({ "from": e.from, "to": e.to, "count": e.count }))
                .collect();
            let body = json!({ "edges": edges });
            if let Err(error) = self
                .inner
                .client
                .call_value(Method::POST, "/edges", Some(&body))
                .await
            {
                // A batch the oracle refused as such (422, 413) would fail for ever: it is
                // dropped, and counted. One that could not be delivered is counted again.
                let refused = !error.is_retryable();
                let mut counter = self.counter();
                if refused {
                    counter.dropped += batch.iter().map(|e| e.count).sum::<u64>();
                    tracing::warn!(%error, edges = batch.len(), "an edge report was refused; its edges are dropped");
                }
                let retry = if refused { i + 1 } else { i };
                for rest in &batches[retry..] {
                    counter.put_back(rest);
                }
                return Err(error);
            }
            sent += batch.len();
        }
        self.inner
            .reported
            .fetch_add(sent as u64, Ordering::Relaxed);
        Ok(sent)
    }

    /// Reports every `interval` until [`Self::stop`] (or every handle is dropped).
    pub fn start(&self, interval: Duration) {
        let owner = Arc::downgrade(&self.inner);
        self.inner
            .periodic
            .start("edges", interval, owner, |inner| async move {
                EdgeReporter { inner }.report_once().await
            });
    }

    pub fn stop(&self) {
        self.inner.periodic.stop();
    }
}
