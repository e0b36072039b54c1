//! Connection pools: `PUT · GET /v1/clusters/{cluster}/pools/{pool}` and
//! `POST …/pools/{pool}/connections` — which node should this client connect to.

use crate::oracle::Connections;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::{ApiJson, ApiQuery, PoolParam};
use crate::connect::{ConnectRule, Pool};
use crate::oracle::ConnectionExplanation;

/// Where a client should connect.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "silo": "10.0.0.6:11111@139000",
    "address": "10.0.0.6:11111",
    "rule": "connection_count",
    "valid_for_ms": 5000,
    "explanation": {
        "candidates": ["10.0.0.5:11111@139000", "10.0.0.6:11111@139000"],
        "figures": [
            {"silo": "10.0.0.5:11111@139000", "value": 41.5},
            {"silo": "10.0.0.6:11111@139000", "value": 12.0}
        ],
        "kept": false,
        "burst_aware": true
    }
}))]
pub struct ConnectionResponse {
    #[schema(example = "10.0.0.7:11111@139002")]
    pub silo: String,
    #[schema(example = "10.0.0.7:11111")]
    pub address: String,
    pub rule: ConnectRule,
    /// How long the client may reuse this answer.
    #[schema(example = 5000)]
    pub valid_for_ms: u64,
    pub explanation: Option<ConnectionExplanation>,
}

/// Options of a connection request.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ConnectQuery {
    /// Return the candidates, each one's figure and whether the answer was a kept decision.
    #[serde(default)]
    pub explain: bool,
}

/// Create or replace a connection pool.
///
/// Members by silo list, role or metadata (or every silo); the rule; the answer's TTL. Creates the
/// cluster if it does not exist yet.
#[utoipa::path(
    put,
    path = "/v1/clusters/{cluster}/pools/{pool}",
    tag = "connections",
    security(("bearer" = ["operator"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("pool" = String, Path, description = "Pool name: [a-z0-9][a-z0-9-]{0,62}", example = "frontend"),
    ),
    request_body = Pool,
    responses(
        (status = 200, description = "The pool as stored", body = Pool),
        (status = 409, description = "A new cluster would exceed ORACLE_MAX_CLUSTERS", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_pool(
    State(connections): State<Arc<Connections>>,
    Cluster(cluster): Cluster,
    PoolParam(name): PoolParam,
    ApiJson(pool): ApiJson<Pool>,
) -> Result<Json<Pool>, ApiError> {
    pool.validate()?;
    connections.put_pool(&cluster, &name, &pool).await?;
    Ok(Json(pool))
}

/// Read a connection pool.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/pools/{pool}",
    tag = "connections",
    security(("bearer" = [])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("pool" = String, Path, description = "Pool name", example = "frontend"),
    ),
    responses(
        (status = 200, description = "The pool", body = Pool),
        (status = 404, description = "No such pool", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster or pool name", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_pool(
    State(connections): State<Arc<Connections>>,
    Cluster(cluster): Cluster,
    PoolParam(name): PoolParam,
) -> Result<Json<Pool>, ApiError> {
    Ok(Json(connections.pool(&cluster, &name).await?))
}

/// Which node should this client connect to?
///
/// One answer per new client connection, by the pool's rule: round robin (a counter all replicas
/// share), lowest connection count (10 s samples, 1 min average), lowest network throughput or
/// lowest CPU (decision kept for 5 s), or their burst-aware variants. Dead, joining and
/// shutting-down nodes are never returned.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/pools/{pool}/connections",
    tag = "connections",
    security(("bearer" = ["silo"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("pool" = String, Path, description = "Pool name", example = "frontend"),
        ConnectQuery,
    ),
    responses(
        (status = 200, description = "The node to connect to", body = ConnectionResponse),
        (status = 404, description = "No such cluster or pool", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster, pool or query", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No member is active and alive, or the store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_connection(
    State(connections): State<Arc<Connections>>,
    Cluster(cluster): Cluster,
    PoolParam(name): PoolParam,
    ApiQuery(query): ApiQuery<ConnectQuery>,
) -> Result<Json<ConnectionResponse>, ApiError> {
    let connection = connections
        .connect(&cluster, &name, query.explain, None)
        .await?;
    Ok(Json(ConnectionResponse {
        silo: connection.silo,
        address: connection.address,
        rule: connection.rule,
        valid_for_ms: connection.valid_for_ms,
        explanation: connection.explanation,
    }))
}
