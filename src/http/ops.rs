//! Operations: liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, Problem};
use super::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// `memory` or `postgres`.
    #[schema(example = "postgres")]
    pub store: &'static str,
}

/// Liveness: the process is up and serving.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses(
        (status = 200, description = "The process is alive", body = Health),
        (status = 405, description = "Only GET is served on this path", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok",
        store: state.oracle.store().kind(),
    })
}

/// Readiness: the store is reachable, so requests can be served.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 405, description = "Only GET is served on this path", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unreachable", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    let store = state.oracle.store();
    store.ping().await?;
    Ok(Json(Health {
        status: "ready",
        store: store.kind(),
    }))
}

/// Prometheus metrics.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "Metrics in the Prometheus text format", body = String, content_type = "text/plain"),
        (status = 405, description = "Only GET is served on this path", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
}
