//! Time as the oracle sees it.
//!
//! What is stored and judged across replicas (heartbeat stamps, silo liveness, activation ages)
//! uses the store's time: the database's clock for Postgres (so replicas with skewed clocks agree),
//! or an injected [`Clock`] for the embedded store and for tests. A replica's own clock only
//! measures its own durations. Never the caller's timestamps, never `SystemTime` directly.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch.
pub type Millis = i64;

/// A source of the current time in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> Millis;
}

/// The host's wall clock; what production uses.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> Millis {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Millis::try_from(since_epoch.as_millis()).unwrap_or(Millis::MAX)
    }
}

/// A clock that only moves when told to; tests share one between the app and the assertions.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn starting_at(now_ms: Millis) -> Self {
        Self(Arc::new(AtomicI64::new(now_ms)))
    }

    pub fn advance_ms(&self, by: Millis) {
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

/// A clock that never goes backwards: the wall clock's reading when it was made, plus the time
/// elapsed since on the monotonic clock. For measuring durations on one replica (how long the
/// store could not be reached) where a wall-clock step must not count as time passing.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    started_ms: Millis,
    started: std::time::Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self {
            started_ms: SystemClock.now_ms(),
            started: std::time::Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now_ms(&self) -> Millis {
        let elapsed = Millis::try_from(self.started.elapsed().as_millis()).unwrap_or(Millis::MAX);
        self.started_ms.saturating_add(elapsed)
    }
}
