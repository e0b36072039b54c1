//! "Where should grain X go": `POST /v1/clusters/{cluster}/placements` and `…/placements/batch`.

use crate::oracle::Directory;
use crate::rate_limit::RateLimits;
use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Cluster;
use super::bodies::ActivationResponse;
use super::error::{ApiError, Problem};
use super::extract::ApiJson;
use super::limits;
use crate::cluster::{GrainId, SiloId};
use crate::oracle::{Outcome, PlaceRequest, Placement, Preview};
use crate::placement::{Explanation, Strategy};
use crate::validation::{Invalid, Violations};

/// Where should this grain go?
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"grain": "user/alice", "requesting_silo": "10.0.0.5:11111@139000", "explain": true}))]
pub struct PlacementRequest {
    /// `type/key`; the type decides which silos can host it. At most 400 characters.
    #[schema(example = "user/alice")]
    pub grain: String,
    /// The silo asking (Orleans' "local" silo).
    pub requesting_silo: Option<String>,
    /// A preferred silo, used when it is compatible.
    pub hint: Option<String>,
    /// Overrides the default strategy for this call.
    pub strategy: Option<Strategy>,
    /// Return the candidates and the rule that decided.
    #[serde(default)]
    pub explain: bool,
}

impl PlacementRequest {
    fn validate(self, prefix: &str) -> Result<PlaceRequest, Invalid> {
        let mut v = Violations::default();
        let grain = v.check(GrainId::parse(&format!("{prefix}grain"), &self.grain));
        let requesting_silo = self
            .requesting_silo
            .map(|s| v.check(SiloId::parse(&format!("{prefix}requesting_silo"), &s)));
        let hint = self
            .hint
            .map(|s| v.check(SiloId::parse(&format!("{prefix}hint"), &s)));
        v.finish(|| PlaceRequest {
            grain: grain.expect("checked"),
            requesting_silo: requesting_silo.flatten(),
            hint: hint.flatten(),
            strategy: self.strategy,
            explain: self.explain,
        })
    }
}

/// Where the grain lives.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "grain": "user/alice",
    "silo": "10.0.0.6:11111@139000",
    "address": "10.0.0.6:11111",
    "outcome": "placed",
    "strategy": "resource_optimized",
    "epoch": 1,
    "max_local": null,
    "explanation": {
        "strategy": "resource_optimized",
        "candidates": ["10.0.0.5:11111@139000", "10.0.0.6:11111@139000"],
        "excluded": [{
            "silo": "10.0.0.7:11111@139000",
            "reason": "status is joining; only active silos take new activations"
        }],
        "filters": [],
        "hint": null,
        "scores": [
            {
                "silo": "10.0.0.5:11111@139000",
                "score": 0.695,
                "terms": {"activation_count": 0.15, "available_memory": 0.1, "cpu_usage": 0.32,
                          "max_available_memory": 0.025, "memory_usage": 0.1},
                "missing": []
            },
            {
                "silo": "10.0.0.6:11111@139000",
                "score": 0.275,
                "terms": {"activation_count": 0.075, "available_memory": 0.06, "cpu_usage": 0.08,
                          "max_available_memory": 0.0, "memory_usage": 0.06},
                "missing": []
            }
        ],
        "rule": "lowest_score"
    }
}))]
pub struct PlacementResponse {
    #[schema(example = "user/alice")]
    pub grain: String,
    #[schema(example = "10.0.0.7:11111@139002")]
    pub silo: String,
    #[schema(example = "10.0.0.7:11111")]
    pub address: String,
    pub outcome: Outcome,
    /// The strategy that placed the activation.
    #[schema(example = "resource_optimized")]
    pub strategy: String,
    /// Identifies this activation; a grain placed again gets a larger epoch. Null for stateless
    /// workers, which are never registered.
    #[schema(example = 1)]
    pub epoch: Option<i64>,
    /// For stateless workers: the most instances per silo (0 = the silo's processor count).
    pub max_local: Option<u32>,
    /// Null unless `explain` was set and this call placed the grain.
    pub explanation: Option<Explanation>,
}

impl From<Placement> for PlacementResponse {
    fn from(placement: Placement) -> Self {
        Self {
            grain: placement.grain,
            silo: placement.silo,
            address: placement.address,
            outcome: placement.outcome,
            strategy: placement.strategy,
            epoch: placement.epoch,
            max_local: placement.max_local,
            explanation: placement.explanation,
        }
    }
}

/// A placement to try out.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"grain": "user/alice", "requesting_silo": "10.0.0.5:11111@139000"}))]
pub struct PlacementPreviewRequest {
    /// `type/key`; the type decides which silos can host it. At most 400 characters.
    #[schema(example = "user/alice")]
    pub grain: String,
    /// The silo asking (Orleans' "local" silo).
    pub requesting_silo: Option<String>,
    /// A preferred silo, used when it is compatible.
    pub hint: Option<String>,
    /// Overrides the default strategy for this call.
    pub strategy: Option<Strategy>,
}

/// What a placement of the grain would decide now, and why. Nothing was registered.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlacementPreviewResponse {
    #[schema(example = "user/alice")]
    pub grain: String,
    /// The strategy that decided.
    #[schema(example = "resource_optimized")]
    pub strategy: String,
    /// Whether a placement would register the grain (false for stateless workers).
    pub registers: bool,
    /// The grain's live activation: a placement now would answer it (`outcome: existing`) rather
    /// than the decision below. Null when it has none (or is a stateless worker).
    pub existing: Option<ActivationResponse>,
    /// Where the strategy would place a new activation now.
    #[schema(example = "10.0.0.6:11111@139000")]
    pub silo: String,
    #[schema(example = "10.0.0.6:11111")]
    pub address: String,
    pub explanation: Explanation,
}

impl From<(String, Preview)> for PlacementPreviewResponse {
    fn from((grain, preview): (String, Preview)) -> Self {
        Self {
            grain,
            strategy: preview.strategy.as_str().to_owned(),
            registers: preview.strategy.registers(),
            existing: preview.existing.map(ActivationResponse::from),
            silo: preview.silo,
            address: preview.address,
            explanation: preview.explanation,
        }
    }
}

/// Many grains at once.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"placements": [{"grain": "user/alice"}, {"grain": "order/12345"}]}))]
pub struct PlacementBatchRequest {
    /// 1 to 1000 grains. A grain listed more than once is placed once; each listing gets that
    /// answer (with the first listing's options).
    pub placements: Vec<PlacementRequest>,
}

/// One grain's answer: exactly one of `placement` and `error` is not null.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlacementBatchItem {
    pub grain: String,
    pub placement: Option<PlacementResponse>,
    pub error: Option<Problem>,
}

/// Answers in request order.
#[derive(Debug, Serialize, ToSchema)]
pub struct PlacementBatchResponse {
    pub results: Vec<PlacementBatchItem>,
}

/// Where should grain X go?
///
/// Returns the grain's live activation if it has one (`outcome: existing`); otherwise places it
/// among the active silos that host its type and registers it (`outcome: placed`). Concurrent
/// callers on any replica get the same silo: the directory keeps exactly one activation per grain.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/placements",
    tag = "directory",
    security(("bearer" = ["silo"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    request_body = PlacementRequest,
    responses(
        (status = 200, description = "Where the grain lives", body = PlacementResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No active silo hosts the grain's type", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The cluster is over ORACLE_RATE_LIMIT_PLACEMENTS on this replica; retry after Retry-After", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No active silo at all, or the store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_placement(
    State(directory): State<Arc<Directory>>,
    State(limits): State<Arc<RateLimits>>,
    Cluster(cluster): Cluster,
    ApiJson(request): ApiJson<PlacementRequest>,
) -> Result<Json<PlacementResponse>, ApiError> {
    limits.placements(&cluster, 1)?;
    let request = request.validate("")?;
    let placement = directory.place(&cluster, request).await?;
    Ok(Json(placement.into()))
}

/// Try a placement out.
///
/// What a placement of the grain would decide now, with the whole explanation (candidates, silos
/// left out and why, filters, scores, the rule), and the grain's live activation if it has one.
/// Registers nothing, leaves no tally behind and calls nothing outside the oracle (a `webhook`
/// type is decided by its fallback), so any key of the cluster may ask; it does not count against
/// the cluster's placement rate.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/placements/preview",
    tag = "directory",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name")),
    request_body = PlacementPreviewRequest,
    responses(
        (status = 200, description = "What a placement would decide now", body = PlacementPreviewResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "No active silo hosts the grain's type", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "No active silo at all, or the store is unavailable; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_placement_preview(
    State(directory): State<Arc<Directory>>,
    Cluster(cluster): Cluster,
    ApiJson(request): ApiJson<PlacementPreviewRequest>,
) -> Result<Json<PlacementPreviewResponse>, ApiError> {
    let request = PlacementRequest {
        grain: request.grain,
        requesting_silo: request.requesting_silo,
        hint: request.hint,
        strategy: request.strategy,
        explain: true,
    }
    .validate("")?;
    let grain = request.grain.to_string();
    let preview = directory.preview(&cluster, request).await?;
    Ok(Json((grain, preview).into()))
}

/// Place many grains in one call.
///
/// Same answers as one call per grain, with a few store round trips for the whole batch. Each grain
/// gets its own result; a grain that cannot be placed carries a problem instead.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/placements/batch",
    tag = "directory",
    security(("bearer" = ["silo"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    request_body = PlacementBatchRequest,
    responses(
        (status = 200, description = "One result per grain, in request order", body = PlacementBatchResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named (e.g. `placements[3].grain`)", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The cluster is over ORACLE_RATE_LIMIT_PLACEMENTS on this replica (each grain of the batch counts); retry after Retry-After", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_placement_batch(
    State(directory): State<Arc<Directory>>,
    State(limits): State<Arc<RateLimits>>,
    Cluster(cluster): Cluster,
    ApiJson(batch): ApiJson<PlacementBatchRequest>,
) -> Result<Json<PlacementBatchResponse>, ApiError> {
    limits.placements(&cluster, batch.placements.len())?;
    let (requests, listings) = validate_batch(batch)?;
    let results = directory.place_many(&cluster, &requests).await?;
    let items: Vec<PlacementBatchItem> = requests
        .iter()
        .zip(results)
        .map(|(request, result)| match result {
            Ok(placement) => PlacementBatchItem {
                grain: request.grain.to_string(),
                placement: Some(placement.into()),
                error: None,
            },
            Err(error) => PlacementBatchItem {
                grain: request.grain.to_string(),
                placement: None,
                error: Some(ApiError::from(error).problem()),
            },
        })
        .collect();
    let results = listings.into_iter().map(|i| items[i].clone()).collect();
    Ok(Json(PlacementBatchResponse { results }))
}

/// The distinct grains to place (a grain listed again is placed once, with its first listing's
/// options), and for each listing the index of its grain among them.
fn validate_batch(
    batch: PlacementBatchRequest,
) -> Result<(Vec<PlaceRequest>, Vec<usize>), Invalid> {
    let mut v = Violations::default();
    limits::BATCH.check_count(&mut v, "placements", batch.placements.len());
    let mut index_of = HashMap::new();
    let mut requests = Vec::with_capacity(batch.placements.len());
    let mut listings = Vec::with_capacity(batch.placements.len());
    for (i, item) in batch.placements.into_iter().enumerate() {
        if let Some(request) = v.check(item.validate(&format!("placements[{i}]."))) {
            let next = requests.len();
            let index = *index_of.entry(request.grain.clone()).or_insert(next);
            if index == next {
                requests.push(request);
            }
            listings.push(index);
        }
    }
    v.finish(|| (requests, listings))
}
