//! Cross-cutting request handling: metrics, timeouts and problem bodies for bare errors.

use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, PROBLEM_JSON};
use crate::telemetry::metric;

/// Counts and times every request by method, route template and status, and counts it in flight
/// while it is served. It runs inside routing, so requests for unknown routes (answered by the
/// fallback) are not measured.
pub async fn record_metrics(request: Request, next: Next) -> Response {
    let _in_flight = metric::request_in_flight();
    let started = Instant::now();
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let response = next.run(request).await;
    metric::http_request(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// Answers 503 with a problem when the handler takes longer than the configured timeout. The
/// handler's future is dropped. Every write it may have made is one that a retry would make or
/// find (a registration answers the retry as `existing`; a heartbeat is simply newer), so a
/// timed-out request leaves nothing that a retry cannot reconcile.
pub async fn enforce_timeout(
    State(timeout): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::timeout(timeout.as_millis() as u64).into_response(),
    }
}

/// Gives error responses made outside the handlers (the router's 404 and 405, a body-limit 413) the
/// same problem+json body as every other error.
pub async fn problem_for_bare_errors(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_problem = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(PROBLEM_JSON.as_bytes()));
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return response;
    }
    let allow = response.headers().get(header::ALLOW).cloned();
    let mut problem = ApiError::from_status(status).into_response();
    if let Some(allow) = allow {
        problem.headers_mut().insert(header::ALLOW, allow);
    }
    problem
}

/// The response for a panicking handler: logged here, a generic 500 problem to the client.
pub fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    tracing::error!(panic = %message, "request handler panicked");
    ApiError::internal().into_response()
}
