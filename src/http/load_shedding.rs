//! Load shedding: a replica with `ORACLE_MAX_CONCURRENT_REQUESTS` requests in flight answers the
//! next one at once with 503 `concurrency-limit-reached` instead of queueing it.
//!
//! Queueing (tower's `ConcurrencyLimit`) would hide overload: waiting requests hold their sockets
//! and bodies, each one waits longer than the last, and clients time out on work the replica still
//! does. An immediate 503 with `Retry-After` costs nothing, tells the client to back off or try
//! another replica, and keeps the latency of admitted requests what it was. A replica that sheds
//! does not judge silence meanwhile: what it shed may be heartbeats.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::error::ApiError;
use crate::telemetry::metric;

/// Never shed: an orchestrator probing a busy replica must not conclude that it is dead (and
/// restart it, making things worse), and metrics are most needed exactly when it is busy.
pub const EXEMPT_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The requests in flight on one app, as permits, and who is told when one is shed.
#[derive(Clone)]
pub struct InFlight {
    permits: Arc<Semaphore>,
    max: usize,
    /// A request shed may be a heartbeat the replica could not keep up with: its silo's silence
    /// is then not the silo's (`Members::could_not_keep_up`).
    on_shed: Arc<dyn Fn() + Send + Sync>,
}

impl InFlight {
    pub fn new(max: usize, on_shed: Arc<dyn Fn() + Send + Sync>) -> Self {
        let max = max.min(Semaphore::MAX_PERMITS);
        Self {
            permits: Arc::new(Semaphore::new(max)),
            max,
            on_shed,
        }
    }
}

/// Takes a permit for the request, holding it until the response is produced, or sheds the
/// request when there is none.
pub async fn shed_load(
    State(in_flight): State<InFlight>,
    request: Request,
    next: Next,
) -> Response {
    if EXEMPT_PATHS.contains(&request.uri().path()) {
        return next.run(request).await;
    }
    match in_flight.permits.try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => {
            metric::request_shed();
            (in_flight.on_shed)();
            ApiError::concurrency_limit_reached(in_flight.max).into_response()
        }
    }
}
