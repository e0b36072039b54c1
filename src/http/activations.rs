//! The directory itself: look up, deactivate and list activations.

use crate::oracle::Directory;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::auth::Cluster;
use super::bodies::ActivationResponse;
use super::error::{ApiError, Problem};
use super::extract::{ApiQuery, GrainParam};
use super::limits;
use crate::cluster::names::MAX_STORED_GRAIN_ID_CHARS;
use crate::cluster::SiloId;
use crate::validation::{self, Invalid};

/// Which silo is deactivating.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct DeactivateQuery {
    /// The silo that hosted the activation; the entry is removed only if it is still there.
    pub silo: String,
    /// The activation's epoch (from its placement), required: the entry is removed only if it is
    /// still that activation, so a late or retried deactivation cannot remove a newer one.
    pub epoch: i64,
}

/// Which silo's activations, and where to resume.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// The silo whose activations to list.
    pub silo: String,
    /// Page size, 1 to 1000 (default 100).
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A page of a silo's activations.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActivationPage {
    pub activations: Vec<ActivationResponse>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<String>,
}

/// Look a grain up in the directory.
///
/// The grain id may be sent with its '/' as is (`…/activations/user/alice`) or percent-encoded.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/activations/{*grain}",
    tag = "directory",
    security(("bearer" = [])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("grain" = String, Path, description = "Grain id `type/key`", example = "user/alice"),
    ),
    responses(
        (status = 200, description = "The grain's live activation", body = ActivationResponse),
        (status = 404, description = "The grain has no live activation", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name or grain id", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_activation(
    State(directory): State<Arc<Directory>>,
    Cluster(cluster): Cluster,
    GrainParam(grain): GrainParam,
) -> Result<Json<ActivationResponse>, ApiError> {
    let activation = directory.lookup(&cluster, &grain).await?;
    Ok(Json(activation.into()))
}

/// Deactivate a grain.
///
/// Removes the grain's directory entry only if it is still activation `epoch` on `silo`, so a silo
/// can never remove an activation that has since been placed elsewhere, and a late or retried
/// deactivation never removes a newer activation. `epoch` is required (the placement answer carries
/// it). The grain id may be sent with its '/' as is or percent-encoded.
#[utoipa::path(
    delete,
    path = "/v1/clusters/{cluster}/activations/{*grain}",
    tag = "directory",
    security(("bearer" = ["silo"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("grain" = String, Path, description = "Grain id `type/key`", example = "user/alice"),
        DeactivateQuery,
    ),
    responses(
        (status = 204, description = "The entry was removed"),
        (status = 404, description = "The grain has no activation", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The grain is now another activation (on another silo, or a newer epoch); nothing was removed", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster, grain or silo, or no epoch", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn delete_activation(
    State(directory): State<Arc<Directory>>,
    Cluster(cluster): Cluster,
    GrainParam(grain): GrainParam,
    ApiQuery(query): ApiQuery<DeactivateQuery>,
) -> Result<StatusCode, ApiError> {
    let silo = SiloId::parse("silo", &query.silo)?;
    if !limits::EPOCH.allows(query.epoch as f64) {
        return Err(Invalid::one(
            "epoch",
            format!(
                "must be an epoch a placement answered, {}, got {}",
                limits::EPOCH.describe(),
                query.epoch
            ),
        )
        .into());
    }
    directory
        .deactivate(&cluster, &grain, &silo, query.epoch)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List a silo's activations.
///
/// Ordered by grain id, paged with `limit` and `cursor`.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/activations",
    tag = "directory",
    security(("bearer" = [])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ListQuery,
    ),
    responses(
        (status = 200, description = "A page of activations", body = ActivationPage),
        (status = 422, description = "Invalid cluster, silo, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_activations(
    State(directory): State<Arc<Directory>>,
    Cluster(cluster): Cluster,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ActivationPage>, ApiError> {
    let silo = SiloId::parse("silo", &query.silo)?;
    let limit = validation::page_limit(query.limit)?;
    if let Some(cursor) = &query.cursor {
        // Any printable grain id up to the longest ever stored (1024, before ids were limited to
        // 400 characters), so that paging goes past an older, longer id it answered as a cursor.
        validation::label("cursor", cursor, MAX_STORED_GRAIN_ID_CHARS)?;
    }
    let page = directory
        .activations_on(&cluster, &silo, query.cursor.as_deref(), limit)
        .await?;
    Ok(Json(ActivationPage {
        activations: page.activations.into_iter().map(Into::into).collect(),
        next_cursor: page.next_cursor,
    }))
}
