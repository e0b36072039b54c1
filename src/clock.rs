//! Time as the oracle sees it.
//!
//! Every decision that depends on time (silo liveness, heartbeat stamps, activation ages) reads an
//! injected [`Clock`], never the caller's timestamps and never `SystemTime` directly, so tests can
//! move time exactly and replicas agree as far as their host clocks do.

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
