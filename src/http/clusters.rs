//! The clusters themselves: `GET /v1/clusters` (which exist; the admin's) and
//! `GET /v1/clusters/{cluster}/distribution` (how a cluster's grains are spread over its silos,
//! and where open migrations take them).

use crate::oracle::{Directory, Members};
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::auth::{Admin, Cluster};
use super::error::{ApiError, Problem};
use super::extract::ApiQuery;
use crate::cluster::ClusterName;
use crate::oracle::{Distribution, Flow, SiloShare};
use crate::validation::{self, Invalid};

/// One page of cluster names.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"clusters": ["demo", "payments"], "next_cursor": null}))]
pub struct ClusterList {
    /// In byte order.
    pub clusters: Vec<String>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Which page of clusters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ClusterListQuery {
    /// Page size, 1 to 1000 (default 100).
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page (a cluster name: the page starts after it).
    pub cursor: Option<String>,
}

/// List the clusters (admin).
///
/// Every cluster the store holds, by name. A cluster key cannot list them: it names one cluster,
/// and other clusters' names are not its business.
#[utoipa::path(
    get,
    path = "/v1/clusters",
    tag = "membership",
    security(("bearer" = ["admin"])),
    params(ClusterListQuery),
    responses(
        (status = 200, description = "A page of cluster names", body = ClusterList),
        (status = 422, description = "Invalid limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_clusters(
    State(members): State<Arc<Members>>,
    _admin: Admin,
    ApiQuery(query): ApiQuery<ClusterListQuery>,
) -> Result<Json<ClusterList>, ApiError> {
    let limit = validation::page_limit(query.limit)?;
    let cursor = query
        .cursor
        .as_deref()
        .map(|cursor| {
            ClusterName::parse(cursor).map_err(|_| {
                Invalid::one(
                    "cursor",
                    "must be a cluster name: the `next_cursor` of a page",
                )
            })
        })
        .transpose()?;
    let (names, next_cursor) = members.clusters(cursor.as_ref(), limit).await?;
    Ok(Json(ClusterList {
        clusters: names.iter().map(ClusterName::to_string).collect(),
        next_cursor,
    }))
}

/// A silo's share of the directory.
#[derive(Debug, Serialize, ToSchema)]
pub struct SiloShareResponse {
    #[schema(example = "10.0.0.5:11111@139000")]
    pub silo: String,
    /// Directory entries naming the silo.
    #[schema(example = 1200)]
    pub activations: u64,
    /// Open migrations taking grains away from the silo.
    #[schema(example = 40)]
    pub migrating_out: u64,
    /// Open migrations bringing grains to the silo.
    #[schema(example = 0)]
    pub migrating_in: u64,
}

/// Open migrations from one silo to another.
#[derive(Debug, Serialize, ToSchema)]
pub struct FlowResponse {
    #[schema(example = "10.0.0.5:11111@139000")]
    pub from: String,
    #[schema(example = "10.0.0.6:11111@139000")]
    pub to: String,
    #[schema(example = 40)]
    pub count: u64,
}

/// How a cluster's grains are spread over its silos.
#[derive(Debug, Serialize, ToSchema)]
pub struct DistributionResponse {
    pub cluster: String,
    /// Every directory entry of the cluster.
    #[schema(example = 1200)]
    pub activations: u64,
    /// Every member silo that is not dead (with or without grains), and any other silo an entry
    /// or an open migration still names, by id.
    pub silos: Vec<SiloShareResponse>,
    /// Open migrations per pair of silos, by source then target.
    pub migrations: Vec<FlowResponse>,
}

impl DistributionResponse {
    fn new(cluster: &ClusterName, distribution: Distribution) -> Self {
        Self {
            cluster: cluster.to_string(),
            activations: distribution.activations,
            silos: distribution
                .silos
                .into_iter()
                .map(|share: SiloShare| SiloShareResponse {
                    silo: share.silo,
                    activations: share.activations,
                    migrating_out: share.migrating_out,
                    migrating_in: share.migrating_in,
                })
                .collect(),
            migrations: distribution
                .flows
                .into_iter()
                .map(|flow: Flow| FlowResponse {
                    from: flow.from,
                    to: flow.to,
                    count: flow.count,
                })
                .collect(),
        }
    }
}

/// How the cluster's grains are spread.
///
/// Directory entries per silo and the open migrations between silos: what the directory holds,
/// where silos' own `activation_count` says what they run. It counts the cluster's whole
/// directory, so poll it every few seconds, not on every request.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/distribution",
    tag = "directory",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The directory's spread over the silos", body = DistributionResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_distribution(
    State(directory): State<Arc<Directory>>,
    Cluster(cluster): Cluster,
) -> Result<Json<DistributionResponse>, ApiError> {
    let distribution = directory.distribution(&cluster).await?;
    Ok(Json(DistributionResponse::new(&cluster, distribution)))
}
