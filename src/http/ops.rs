//! Operations: liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use super::error::{ApiError, Problem};
use crate::oracle::{Directory, Readiness};
use crate::telemetry::{metric, process};

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    #[schema(example = "ok")]
    pub status: &'static str,
    /// `memory` or `postgres`.
    #[schema(example = "postgres")]
    pub store: &'static str,
    /// On Postgres, the server the store's last new connection reached (`/readyz` only; `null`
    /// otherwise).
    pub database: Option<Database>,
}

/// The database server a replica writes to.
#[derive(Debug, Serialize, ToSchema)]
pub struct Database {
    /// `address:port` of the server itself: behind a proxy, the one it chose.
    #[schema(example = "10.0.0.12:5432")]
    pub server: String,
    /// The server's WAL timeline, one more at each promotion (a failover or a switchover).
    #[schema(example = 3)]
    pub timeline: i64,
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
pub async fn healthz(State(readiness): State<Arc<Readiness>>) -> Json<Health> {
    Json(Health {
        status: "ok",
        store: readiness.store_kind(),
        database: None,
    })
}

/// Readiness: the store is reachable and takes writes, so requests can be served.
///
/// On Postgres this commits a one-row write (at most one every 250 ms however often it is asked;
/// the answer stands that long): 503 `store-read-only` when the database refuses writes (a standby
/// not yet promoted, a primary set read-only), `store-writes-stalled` when the write does not
/// commit within 500 ms while a read is answered (commits waiting for a synchronous standby that
/// is gone), `store-unavailable` when it cannot be reached (neither answers). Ready, it names the
/// database server and its timeline.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 405, description = "Only GET is served on this path", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unreachable, read-only, or commits no writes in time", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn readyz(State(readiness): State<Arc<Readiness>>) -> Result<Json<Health>, ApiError> {
    readiness.check().await?;
    Ok(Json(Health {
        status: "ready",
        store: readiness.store_kind(),
        database: readiness.database_server().map(|db| Database {
            server: db.server,
            timeline: db.timeline,
        }),
    }))
}

/// Prometheus metrics.
///
/// Each scrape first refreshes what is cheap to read now: readiness (`oracle_ready`, through the
/// same check as `/readyz`, whose answer stands 250 ms), the directory cache's size, and the
/// process's figures (`process_*`).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "Metrics in the Prometheus text format", body = String, content_type = "text/plain"),
        (status = 405, description = "Only GET is served on this path", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn metrics(
    State(metrics): State<PrometheusHandle>,
    State(readiness): State<Arc<Readiness>>,
    State(directory): State<Arc<Directory>>,
) -> impl IntoResponse {
    // Its outcome is recorded as `oracle_ready`; the scrape itself succeeds either way.
    let _ = readiness.check().await;
    metric::directory_cache_entries(directory.cached_answers());
    let mut text = metrics.render();
    text.push_str(&process::render());
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
}
