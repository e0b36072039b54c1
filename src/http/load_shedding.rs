//! Load shedding: a replica with as many requests in flight as it admits now answers the next one
//! at once with 503 `concurrency-limit-reached` instead of queueing it.
//!
//! Queueing (tower's `ConcurrencyLimit`) would hide overload: waiting requests hold their sockets
//! and bodies, each one waits longer than the last, and clients time out on work the replica still
//! does. An immediate 503 with `Retry-After` costs nothing, tells the client to back off or try
//! another replica, and keeps the latency of admitted requests what it was. How many it admits
//! follows how long its answers take ([`crate::rate_limit::admission`]): up to
//! `ORACLE_MAX_CONCURRENT_REQUESTS`, fewer while more than one answer in ten takes longer than
//! `ORACLE_ADMISSION_TARGET_MS`. A replica that sheds does not judge silence meanwhile: what it
//! shed may be heartbeats.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::clock::Millis;
use crate::oracle::outside_waits;
use crate::rate_limit::admission::AdmissionLimit;
use crate::telemetry::metric;

/// Never shed: an orchestrator probing a busy replica must not conclude that it is dead (and
/// restart it, making things worse), and metrics are most needed exactly when it is busy.
pub const EXEMPT_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The requests in flight on one app, the limit they are held to, and who is told when one is
/// shed.
#[derive(Clone)]
pub struct InFlight(Arc<Shared>);

struct Shared {
    /// Requests admitted and not yet answered.
    count: AtomicUsize,
    /// The most in flight, or asking to be, since the admission window began.
    peak: AtomicUsize,
    /// What [`AdmissionLimit`] last decided, read by every request without a lock.
    limit: AtomicUsize,
    admission: Mutex<AdmissionLimit>,
    /// Whether the limit moves (`ORACLE_ADMISSION_TARGET_MS` set): a fixed one needs no answer's
    /// latency.
    moving: bool,
    /// The origin of the admission windows' times.
    started: Instant,
    /// A request shed may be a heartbeat the replica could not keep up with: its silo's silence
    /// is then not the silo's (`Members::could_not_keep_up`).
    on_shed: Arc<dyn Fn() + Send + Sync>,
}

impl InFlight {
    pub fn new(max: usize, target: Duration, on_shed: Arc<dyn Fn() + Send + Sync>) -> Self {
        let admission = AdmissionLimit::new(max, target, 0);
        metric::admission_limit(admission.limit());
        Self(Arc::new(Shared {
            count: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            limit: AtomicUsize::new(admission.limit()),
            admission: Mutex::new(admission),
            moving: !target.is_zero(),
            started: Instant::now(),
            on_shed,
        }))
    }

    /// Counts one request in, or refuses it (`None`) when the replica admits no more now.
    fn admit(&self) -> Option<Admitted<'_>> {
        let shared = &self.0;
        let asking = shared.count.fetch_add(1, Ordering::AcqRel) + 1;
        shared.peak.fetch_max(asking, Ordering::AcqRel);
        let admitted = Admitted(shared);
        (asking <= shared.limit.load(Ordering::Acquire)).then_some(admitted)
    }

    /// One admitted request answered after `took`: the admission limit takes it in.
    fn answered(&self, took: Duration) {
        let shared = &self.0;
        let now = Millis::try_from(shared.started.elapsed().as_millis()).unwrap_or(Millis::MAX);
        let mut admission = shared
            .admission
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let peak = shared.peak.load(Ordering::Acquire);
        let Some(limit) = admission.answered(now, took, peak) else {
            return;
        };
        // A new window counts its own peak, from what is in flight now.
        shared
            .peak
            .store(shared.count.load(Ordering::Acquire), Ordering::Release);
        if shared.limit.swap(limit, Ordering::AcqRel) != limit {
            metric::admission_limit(limit);
        }
    }

    fn limit(&self) -> usize {
        self.0.limit.load(Ordering::Acquire)
    }
}

/// One request counted in flight, until it is dropped (answered, refused or cancelled).
struct Admitted<'a>(&'a Shared);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Admits the request, counting it in flight until its response is produced, or sheds it when
/// the replica admits no more now.
pub async fn shed_load(
    State(in_flight): State<InFlight>,
    request: Request,
    next: Next,
) -> Response {
    if EXEMPT_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    let Some(_admitted) = in_flight.admit() else {
        metric::request_shed();
        (in_flight.0.on_shed)();
        return ApiError::concurrency_limit_reached(in_flight.limit()).into_response();
    };
    if !in_flight.0.moving {
        return next.run(request).await;
    }
    let started = Instant::now();
    let (response, waited_outside) = outside_waits::waited_outside(next.run(request)).await;
    if !waited_outside {
        in_flight.answered(started.elapsed());
    }
    response
}
