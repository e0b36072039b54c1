//! Membership: `GET /v1/clusters/{cluster}/silos`, `GET` and `DELETE …/silos/{silo}`.
//! (Draining a silo is in [`super::drains`].)

use crate::oracle::Members;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::auth::Cluster;
use super::bodies::SiloResponse;
use super::error::{ApiError, Problem};
use super::extract::{ApiQuery, SiloParam};
use crate::cluster::SiloId;
use crate::validation;

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
    )
)]
pub async fn get_silo(
    State(members): State<Arc<Members>>,
    Cluster(cluster): Cluster,
    SiloParam(silo): SiloParam,
) -> Result<Json<SiloResponse>, ApiError> {
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
    )
)]
pub async fn delete_silo(
    State(members): State<Arc<Members>>,
    Cluster(cluster): Cluster,
    SiloParam(silo): SiloParam,
) -> Result<Json<SiloLeftResponse>, ApiError> {
    let departure = members.leave(&cluster, &silo).await?;
    Ok(Json(SiloLeftResponse {
        silo: silo.to_string(),
        released_activations: departure.released,
        release_pending: departure.release_pending,
    }))
}
