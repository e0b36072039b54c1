//! Membership: `GET /v1/clusters/{cluster}/silos`, `GET` and `DELETE …/silos/{silo}`.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::{ApiError, Problem};
use super::extract::ApiPath;
use super::AppState;
use crate::cluster::{ClusterName, LoadReport, SiloId, SiloStatus};
use crate::oracle::SiloSnapshot;

/// Smoothed load: the dual-mode Kalman filter's output over the silo's heartbeats.
#[derive(Debug, Serialize, ToSchema)]
pub struct SmoothedLoad {
    /// Smoothed CPU usage, percent.
    #[schema(example = 41.2)]
    pub cpu_usage: Option<f64>,
    /// Smoothed memory in use, bytes.
    #[schema(example = 6_700_000_000_u64)]
    pub memory_usage_bytes: Option<u64>,
    /// Memory limit minus smoothed usage, bytes.
    #[schema(example = 9_300_000_000_u64)]
    pub available_memory_bytes: Option<u64>,
}

/// A silo as the oracle sees it now.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloResponse {
    #[schema(example = "10.0.0.5:11111@139000")]
    pub silo: String,
    #[schema(example = "10.0.0.5:11111")]
    pub address: String,
    /// Status now: what the silo reported, or `dead` once it stayed silent for `silo_ttl_ms`.
    pub status: SiloStatus,
    pub role: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Grain types it hosts; absent means every type.
    pub grain_types: Option<Vec<String>>,
    /// The last heartbeat's figures, as sent.
    pub load: LoadReport,
    pub smoothed: SmoothedLoad,
    /// Milliseconds since the last heartbeat, on the oracle's clock.
    #[schema(example = 850)]
    pub last_heartbeat_age_ms: i64,
    /// When the last heartbeat arrived, ms since the Unix epoch (oracle clock).
    pub last_heartbeat_at_ms: i64,
    /// When the oracle first heard from this silo, ms since the Unix epoch.
    pub first_seen_at_ms: i64,
    pub heartbeat_count: i64,
    /// The cluster's silence limit: heartbeat well within it.
    #[schema(example = 10000)]
    pub silo_ttl_ms: i64,
}

impl From<&SiloSnapshot> for SiloResponse {
    fn from(snapshot: &SiloSnapshot) -> Self {
        let record = &snapshot.record;
        let profile = &record.profile;
        let smoothed_memory = profile.smoothing.memory_usage_bytes;
        Self {
            silo: record.id.to_string(),
            address: profile.address.clone(),
            status: snapshot.status(),
            role: profile.role.clone(),
            metadata: profile.metadata.clone(),
            grain_types: profile.grain_types.clone(),
            load: profile.load.clone(),
            smoothed: SmoothedLoad {
                cpu_usage: profile.smoothing.cpu_usage,
                memory_usage_bytes: smoothed_memory,
                available_memory_bytes: profile
                    .load
                    .max_available_memory_bytes
                    .zip(smoothed_memory)
                    .map(|(max, used)| max.saturating_sub(used)),
            },
            // Replicas' clocks may differ slightly; an age is never negative.
            last_heartbeat_age_ms: (snapshot.now - record.last_heartbeat_ms).max(0),
            last_heartbeat_at_ms: record.last_heartbeat_ms,
            first_seen_at_ms: profile.first_seen_ms,
            heartbeat_count: record.heartbeat_count,
            silo_ttl_ms: snapshot.silo_ttl_ms,
        }
    }
}

/// A cluster's membership.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloListResponse {
    pub cluster: String,
    /// Every known silo, ordered by id; dead ones stay listed for an hour.
    pub silos: Vec<SiloResponse>,
}

/// What a graceful leave released.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloLeftResponse {
    pub silo: String,
    /// Directory entries removed with the silo; those grains are placed anew on their next call.
    pub released_activations: u64,
}

/// List a cluster's silos.
///
/// Every silo with its status now, raw and smoothed load, and heartbeat age.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/silos",
    tag = "membership",
    params(("cluster" = String, Path, description = "Cluster name", example = "prod")),
    responses(
        (status = 200, description = "The cluster's silos", body = SiloListResponse),
        (status = 404, description = "No such cluster (it has never sent a heartbeat)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_silos(
    State(state): State<AppState>,
    ApiPath(cluster): ApiPath<String>,
) -> Result<Json<SiloListResponse>, ApiError> {
    let cluster = ClusterName::parse(&cluster)?;
    let silos = state.oracle.silos(&cluster).await?;
    Ok(Json(SiloListResponse {
        cluster: cluster.to_string(),
        silos: silos.iter().map(SiloResponse::from).collect(),
    }))
}

/// Get one silo.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/silos/{silo}",
    tag = "membership",
    params(
        ("cluster" = String, Path, description = "Cluster name", example = "prod"),
        ("silo" = String, Path, description = "Silo id (percent-encoded)", example = "10.0.0.5:11111@139000"),
    ),
    responses(
        (status = 200, description = "The silo", body = SiloResponse),
        (status = 404, description = "No such cluster or silo", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name or silo id", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_silo(
    State(state): State<AppState>,
    ApiPath((cluster, silo)): ApiPath<(String, String)>,
) -> Result<Json<SiloResponse>, ApiError> {
    let cluster = ClusterName::parse(&cluster)?;
    let silo = SiloId::parse("silo", &silo)?;
    let snapshot = state.oracle.silo(&cluster, &silo).await?;
    Ok(Json(SiloResponse::from(&snapshot)))
}

/// Leave the cluster gracefully.
///
/// Marks the silo dead at once and releases its activations, so their grains are placed anew on
/// their next call. The id is spent (it cannot heartbeat again; rejoin under a new generation) and
/// stays listed as dead for an hour. A silo that stops without calling this is declared dead after
/// `silo_ttl_ms` instead.
#[utoipa::path(
    delete,
    path = "/v1/clusters/{cluster}/silos/{silo}",
    tag = "membership",
    params(
        ("cluster" = String, Path, description = "Cluster name", example = "prod"),
        ("silo" = String, Path, description = "Silo id (percent-encoded)", example = "10.0.0.5:11111@139000"),
    ),
    responses(
        (status = 200, description = "The silo left; its activations were released", body = SiloLeftResponse),
        (status = 404, description = "No such cluster or silo", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name or silo id", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_silo(
    State(state): State<AppState>,
    ApiPath((cluster, silo)): ApiPath<(String, String)>,
) -> Result<Json<SiloLeftResponse>, ApiError> {
    let cluster = ClusterName::parse(&cluster)?;
    let silo = SiloId::parse("silo", &silo)?;
    let released_activations = state.oracle.leave(&cluster, &silo).await?;
    Ok(Json(SiloLeftResponse {
        silo: silo.to_string(),
        released_activations,
    }))
}
