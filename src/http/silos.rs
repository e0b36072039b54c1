//! Membership: `GET /v1/clusters/{cluster}/silos`, `GET` and `DELETE …/silos/{silo}`.
//! (Draining a silo is in [`super::drains`].)

use crate::oracle::Members;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::{ApiPath, ApiQuery};
use crate::cluster::{LoadReport, SiloId, SiloStatus};
use crate::oracle::SiloSnapshot;
use crate::validation;

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
    /// Grain types it hosts; null means every type.
    pub grain_types: Option<Vec<String>>,
    /// The last heartbeat's figures, as sent.
    pub load: LoadReport,
    pub smoothed: SmoothedLoad,
    /// Milliseconds since the last heartbeat, on the store's clock.
    #[schema(example = 850)]
    pub last_heartbeat_age_ms: i64,
    /// When the last heartbeat arrived, ms since the Unix epoch (the store's clock: the database's,
    /// the same for every replica).
    pub last_heartbeat_at_ms: i64,
    /// When the oracle first heard from this silo, ms since the Unix epoch.
    pub first_seen_at_ms: i64,
    pub heartbeat_count: i64,
    /// The cluster's silence limit: heartbeat well within it.
    #[schema(example = 10000)]
    pub silo_ttl_ms: i64,
    /// The drain's progress while the silo is drained (`POST …/drain`) and alive; null otherwise.
    pub drain: Option<DrainProgress>,
}

/// How far a silo's drain has got. It is done when `remaining_activations` is 0; activations that
/// stay are of immovable types (`immovable: any`) or of types no other silo can take.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrainProgress {
    /// When the drain was asked for, ms since the Unix epoch (the store's clock).
    #[schema(example = 1_764_547_200_000_i64)]
    pub requested_at_ms: i64,
    /// Activations still on the silo.
    #[schema(example = 120)]
    pub remaining_activations: u64,
    /// Of those, how many have an open migration (see `GET …/migrations?silo=`).
    #[schema(example = 118)]
    pub migrating: u64,
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
            last_heartbeat_age_ms: snapshot.liveness.silent_for(record.last_heartbeat_ms),
            last_heartbeat_at_ms: record.last_heartbeat_ms,
            first_seen_at_ms: profile.first_seen_ms,
            heartbeat_count: record.heartbeat_count,
            silo_ttl_ms: snapshot.liveness.silo_ttl_ms,
            drain: snapshot.drain.map(|drain| DrainProgress {
                requested_at_ms: drain.requested_at_ms,
                remaining_activations: drain.remaining_activations,
                migrating: drain.migrating,
            }),
        }
    }
}

/// One page of a cluster's membership.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloListResponse {
    pub cluster: String,
    /// Silos ordered by id; dead ones stay listed for an hour.
    pub silos: Vec<SiloResponse>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Which page of silos.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct SiloListQuery {
    /// Page size, 1 to 1000 (default 100).
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page (a silo id: the page starts after it).
    pub cursor: Option<String>,
}

/// What a graceful leave released.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloLeftResponse {
    pub silo: String,
    /// Directory entries removed with this call; those grains are placed anew on their next call.
    pub released_activations: u64,
    /// Whether the silo had more entries than one call releases; the rest are released in the
    /// background within seconds, and none of them is answered as live meanwhile.
    pub release_pending: bool,
}

/// List a cluster's silos.
///
/// A page of silos in id order, each with its status now, raw and smoothed load, and heartbeat
/// age. Follow `next_cursor` for the rest.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/silos",
    tag = "membership",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name"), SiloListQuery),
    responses(
        (status = 200, description = "A page of the cluster's silos", body = SiloListResponse),
        (status = 404, description = "No such cluster (it has never sent a heartbeat)", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name, limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_silos(
    State(members): State<Arc<Members>>,
    Cluster(cluster): Cluster,
    ApiQuery(query): ApiQuery<SiloListQuery>,
) -> Result<Json<SiloListResponse>, ApiError> {
    let limit = validation::page_limit(query.limit)?;
    let cursor = query
        .cursor
        .as_deref()
        .map(|cursor| SiloId::parse("cursor", cursor))
        .transpose()?;
    let listing = members.silos(&cluster, cursor.as_ref(), limit).await?;
    Ok(Json(SiloListResponse {
        cluster: cluster.to_string(),
        silos: listing.silos.iter().map(SiloResponse::from).collect(),
        next_cursor: listing.next_cursor,
    }))
}

/// Get one silo.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/silos/{silo}",
    tag = "membership",
    security(("bearer" = [])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
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
    State(members): State<Arc<Members>>,
    Cluster(cluster): Cluster,
    ApiPath((_cluster, silo)): ApiPath<(String, String)>,
) -> Result<Json<SiloResponse>, ApiError> {
    let silo = SiloId::parse("silo", &silo)?;
    let snapshot = members.silo(&cluster, &silo).await?;
    Ok(Json(SiloResponse::from(&snapshot)))
}

/// Leave the cluster gracefully.
///
/// Marks the silo dead at once and releases its activations, so their grains are placed anew on
/// their next call (a silo with more than 5,000 has the rest released in the background within
/// seconds; `release_pending` says so, and none of them is answered as live meanwhile). The id is spent (it cannot heartbeat again; rejoin under a new generation) and
/// stays listed as dead for an hour. A silo that stops without calling this is declared dead after
/// `silo_ttl_ms` instead.
///
/// Call it only once the silo's grains have stopped: it is the silo's own goodbye, or an
/// operator's word that the process is gone. It does not wait for the silo's lease to run out,
/// so a silo still running would run its grains beside their new activations. To move a live
/// silo's grains, drain it (`POST …/drain`).
#[utoipa::path(
    delete,
    path = "/v1/clusters/{cluster}/silos/{silo}",
    tag = "membership",
    security(("bearer" = ["operator"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
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
    State(members): State<Arc<Members>>,
    Cluster(cluster): Cluster,
    ApiPath((_cluster, silo)): ApiPath<(String, String)>,
) -> Result<Json<SiloLeftResponse>, ApiError> {
    let silo = SiloId::parse("silo", &silo)?;
    let departure = members.leave(&cluster, &silo).await?;
    Ok(Json(SiloLeftResponse {
        silo: silo.to_string(),
        released_activations: departure.released,
        release_pending: departure.release_pending,
    }))
}
