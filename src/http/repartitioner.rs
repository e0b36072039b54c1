//! Communication locality: `POST /v1/clusters/{cluster}/edges` (silos report sampled
//! grain-to-grain call counts), `GET …/repartitioner` (the sketch, the buffer, the last rounds,
//! the estimated remote fraction) and `POST …/repartitioner/rounds` (one round now).

use crate::oracle::Movers;
use crate::rate_limit::RateLimits;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::ApiJson;
use super::limits;
use crate::clock::Millis;
use crate::cluster::GrainId;
use crate::oracle::{RepartitionerRound, RepartitionerStatus};
use crate::repartitioner::{Planner, RoundSummary};
use crate::store::{EdgeReport, Lease, Migration};
use crate::validation::Violations;

/// Calls between two grains since the silo's last report (either direction is the same edge).
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Edge {
    #[schema(example = "user/alice")]
    pub from: String,
    #[schema(example = "cart/alice")]
    pub to: String,
    /// Calls counted (sampled calls, or all of them), 1 to 1,000,000,000.
    #[schema(example = 12)]
    pub count: u64,
}

/// A silo's edge report.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({ "edges": [
    { "from": "user/alice", "to": "cart/alice", "count": 12 },
    { "from": "user/alice", "to": "user/bob", "count": 3 }
] }))]
pub struct EdgeBatch {
    /// 1 to 10,000 edges.
    pub edges: Vec<Edge>,
}

/// What became of a report.
#[derive(Debug, Serialize, ToSchema)]
pub struct EdgesAccepted {
    /// Edges stored for the next round (a pair listed twice, in either direction, counts once).
    #[schema(example = 2)]
    pub accepted: u64,
    /// Edges left out: a grain calling itself, or two grains of types the repartitioner never
    /// moves (immovable for it, or stateless workers).
    #[schema(example = 0)]
    pub ignored: u64,
    /// Older waiting edges dropped to make room: the cluster's buffer
    /// (`repartitioner.max_unprocessed_edges`) was full.
    #[schema(example = 0)]
    pub dropped: u64,
}

/// One grain a round moves.
#[derive(Debug, Serialize, ToSchema)]
pub struct RoundMove {
    #[schema(example = "user/alice")]
    pub grain: String,
    #[schema(example = "10.0.0.5:11111@139000")]
    pub from: String,
    #[schema(example = "10.0.0.6:11111@139000")]
    pub to: String,
}

/// A round: what it planned and issued.
#[derive(Debug, Serialize, ToSchema)]
pub struct RoundResponse {
    #[schema(example = 3)]
    pub round: u64,
    pub planner: Planner,
    pub moves: Vec<RoundMove>,
    /// The migrations issued (a grain that moved meanwhile gets none).
    pub migrations: Vec<Migration>,
    /// Tracked call weight between grains on different silos ÷ all tracked weight, before and
    /// after the moves.
    #[schema(example = 0.62)]
    pub remote_fraction_before: f64,
    #[schema(example = 0.04)]
    pub remote_fraction_after: f64,
    /// Activations per active silo once the moves are done.
    pub counts_after: BTreeMap<String, i64>,
}

/// A cluster's repartitioner.
#[derive(Debug, Serialize, ToSchema)]
pub struct RepartitionerResponse {
    /// Whether the policy lets the lease holder run rounds on their timer.
    pub enabled: bool,
    pub planner: Planner,
    /// Edges the sketch tracks, and how many it may.
    pub tracked_edges: u64,
    pub max_edge_count: u64,
    /// Edge reports waiting to be counted, and those ever dropped because the buffer was full.
    pub pending_edges: u64,
    pub dropped_edges: u64,
    /// Grains kept where they are because their home traffic outweighs their remote traffic.
    pub anchored_grains: u64,
    /// Rounds run so far, and when the next is due on the timer (ms since the Unix epoch).
    pub rounds: u64,
    pub next_round_at_ms: Millis,
    /// Tracked call weight between grains on different silos ÷ all tracked weight, now.
    #[schema(example = 0.31)]
    pub estimated_remote_fraction: f64,
    /// The last rounds, newest first.
    pub last_rounds: Vec<RoundSummary>,
    /// Who runs the cluster's background work; null when no replica ever did.
    pub lease: Option<Lease>,
}

impl From<RepartitionerStatus> for RepartitionerResponse {
    fn from(status: RepartitionerStatus) -> Self {
        let state = status.state;
        Self {
            enabled: status.options.enabled,
            planner: if status.options.orleans_compat {
                Planner::Pairwise
            } else {
                Planner::Global
            },
            tracked_edges: state.sketch.len() as u64,
            max_edge_count: u64::from(status.options.max_edge_count),
            pending_edges: status.intake.pending,
            dropped_edges: status.intake.dropped,
            anchored_grains: state.anchored.iter().map(|g| g.len() as u64).sum(),
            rounds: state.round,
            next_round_at_ms: state.next_round_at_ms,
            estimated_remote_fraction: status.remote_fraction,
            last_rounds: state.reports.into_iter().collect(),
            lease: status.lease,
        }
    }
}

impl From<RepartitionerRound> for RoundResponse {
    fn from(round: RepartitionerRound) -> Self {
        let s = round.summary;
        Self {
            round: s.round,
            planner: s.planner,
            moves: round
                .moves
                .into_iter()
                .map(|(grain, from, to)| RoundMove { grain, from, to })
                .collect(),
            migrations: round.migrations,
            remote_fraction_before: s.remote_fraction_before,
            remote_fraction_after: s.remote_fraction_after,
            counts_after: s.counts_after,
        }
    }
}

/// Report grain-to-grain calls.
///
/// Silos send the calls they sampled between grains since their last report, from any replica;
/// the report is visible to the next round whichever replica runs it. Self-calls and calls
/// between two grains that never move are left out. Waiting reports are bounded per cluster
/// (`repartitioner.max_unprocessed_edges`): beyond it the oldest are dropped, and counted.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/edges",
    tag = "repartitioner",
    security(("bearer" = ["silo"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    request_body = EdgeBatch,
    responses(
        (status = 202, description = "Stored for the next round", body = EdgesAccepted),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The cluster is over ORACLE_RATE_LIMIT_EDGES on this replica (each edge of the report counts); retry after Retry-After", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_edges(
    State(movers): State<Arc<Movers>>,
    State(limits): State<Arc<RateLimits>>,
    Cluster(cluster): Cluster,
    ApiJson(batch): ApiJson<EdgeBatch>,
) -> Result<(StatusCode, Json<EdgesAccepted>), ApiError> {
    limits.edges(&cluster, batch.edges.len())?;
    let mut v = Violations::default();
    limits::EDGES.check_count(&mut v, "edges", batch.edges.len());
    let mut edges = Vec::with_capacity(batch.edges.len());
    for (i, edge) in batch.edges.iter().enumerate() {
        let from = v.check(GrainId::parse(&format!("edges[{i}].from"), &edge.from));
        let to = v.check(GrainId::parse(&format!("edges[{i}].to"), &edge.to));
        limits::EDGE_COUNT.check(&mut v, format!("edges[{i}].count"), edge.count as f64);
        if let (Some(from), Some(to)) = (from, to) {
            edges.push(EdgeReport {
                from,
                to,
                count: edge.count,
            });
        }
    }
    v.finish(|| ())?;
    let taken = movers.report_edges(&cluster, &edges).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(EdgesAccepted {
            accepted: taken.accepted,
            ignored: taken.ignored,
            dropped: taken.dropped,
        }),
    ))
}

/// Get the repartitioner.
///
/// The sketch (tracked edges and their bound), the buffer of waiting reports and what it dropped,
/// anchored grains, the round timer, the last rounds and the remote fraction of the tracked calls
/// as the grains are placed now.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/repartitioner",
    tag = "repartitioner",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The repartitioner", body = RepartitionerResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_repartitioner(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
) -> Result<Json<RepartitionerResponse>, ApiError> {
    Ok(Json(movers.repartitioner_status(&cluster).await?.into()))
}

/// Run one repartitioning round now.
///
/// Counts every waiting edge report, then plans on the tracked edges where their grains live now:
/// the global plan (every silo at once, each within `max_imbalance_percent` of the mean) or, with
/// `orleans_compat`, Orleans' exchange between one pair of silos. The moves become `repartitioner`
/// migrations for the source silos to carry out; the moved grains' edges leave the sketch. Runs
/// on whichever replica the request reaches: it takes the cluster's lease over.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/repartitioner/rounds",
    tag = "repartitioner",
    security(("bearer" = ["operator"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The round's moves and migrations", body = RoundResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another replica took the cluster's lease over while the request ran; retry", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable, or the lease ran out meanwhile; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_round(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
) -> Result<Json<RoundResponse>, ApiError> {
    Ok(Json(movers.run_repartitioner_round(&cluster).await?.into()))
}
