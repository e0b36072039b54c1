//! The rebalancer of a cluster: `GET /v1/clusters/{cluster}/rebalancer` (state, sessions, cycle
//! reports, the lease), and what an operator may ask of it: `POST …/rebalancer/cycles` (one cycle
//! now), `…/sessions` (start one now), `…/suspend`, `…/resume`.
//!
//! Changes run on the replica holding the cluster's lease, and any replica a request reaches
//! takes the lease over to serve it (the previous holder's unfinished writes are fenced off): 409
//! only when yet another replica took it over while the request ran.

use crate::oracle::Movers;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::ApiJson;
use super::limits;
use crate::clock::Millis;
use crate::oracle::{RebalancerCycle, RebalancerStatus};
use crate::rebalancer::{CycleOutcome, CycleReport, Move, SiloTally};
use crate::store::{Lease, Migration};
use crate::validation::Violations;

/// Whether sessions may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RebalancerState {
    Executing,
    Suspended,
}

/// A cluster's rebalancer.
#[derive(Debug, Serialize, ToSchema)]
pub struct RebalancerResponse {
    pub state: RebalancerState,
    /// How long the suspension still lasts; null when not suspended or suspended until resumed.
    pub suspension_remaining_ms: Option<Millis>,
    /// Suspended until `POST …/resume`.
    pub suspended_indefinitely: bool,
    /// Whether the policy lets the lease holder run sessions on their timers.
    pub enabled: bool,
    /// The running session's number; null when none runs.
    pub session: Option<u64>,
    /// The running session's cycle count (0 when none runs).
    pub cycle: u32,
    /// The last measured entropy, its maximum and the deviation (0 before the first cycle).
    pub entropy: f64,
    pub max_entropy: f64,
    pub deviation: f64,
    pub allowed_deviation: f64,
    /// What each silo gave (`dispersed`) and took (`acquired`) over the rebalancer's life.
    pub statistics: BTreeMap<String, SiloTally>,
    /// The last cycles, oldest first.
    pub reports: Vec<CycleReport>,
    /// Who runs the cluster's background work; null when no replica ever did.
    pub lease: Option<Lease>,
}

impl From<RebalancerStatus> for RebalancerResponse {
    fn from(status: RebalancerStatus) -> Self {
        let r = &status.rebalancer;
        let left = r.suspension_left(status.now);
        let measured = r
            .reports
            .iter()
            .rev()
            .find(|report| report.outcome != CycleOutcome::Skipped);
        Self {
            state: if left.is_some() {
                RebalancerState::Suspended
            } else {
                RebalancerState::Executing
            },
            suspension_remaining_ms: left.filter(|&ms| ms != Millis::MAX),
            suspended_indefinitely: left == Some(Millis::MAX),
            enabled: status.options.enabled,
            session: r.session.as_ref().map(|s| s.id),
            cycle: r.session.as_ref().map_or(0, |s| s.cycle),
            entropy: measured.map_or(0.0, |m| m.entropy),
            max_entropy: measured.map_or(0.0, |m| m.max_entropy),
            deviation: r.deviation,
            allowed_deviation: measured.map_or(status.options.allowed_entropy_deviation, |m| {
                m.allowed_deviation
            }),
            statistics: r.tallies.clone(),
            reports: r.reports.iter().cloned().collect(),
            lease: status.lease,
        }
    }
}

/// One cycle's report and the migrations it issued.
#[derive(Debug, Serialize, ToSchema)]
pub struct CycleResponse {
    pub session: u64,
    pub cycle: u32,
    pub outcome: CycleOutcome,
    pub entropy: f64,
    pub max_entropy: f64,
    pub deviation: f64,
    pub allowed_deviation: f64,
    /// Activations to move per silo pair.
    pub moves: Vec<Move>,
    /// The concrete grains, as migrations their sources will poll.
    pub migrations: Vec<Migration>,
}

impl From<RebalancerCycle> for CycleResponse {
    fn from(cycle: RebalancerCycle) -> Self {
        let r = cycle.report;
        Self {
            session: r.session,
            cycle: r.cycle,
            outcome: r.outcome,
            entropy: r.entropy,
            max_entropy: r.max_entropy,
            deviation: r.deviation,
            allowed_deviation: r.allowed_deviation,
            moves: r.moves,
            migrations: cycle.migrations,
        }
    }
}

/// How long to suspend.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"duration_ms": 600000}))]
pub struct SuspendRequest {
    /// Absent: until resumed.
    pub duration_ms: Option<u64>,
}

/// Read the rebalancer.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/rebalancer",
    tag = "rebalancer",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The rebalancer", body = RebalancerResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_rebalancer(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
) -> Result<Json<RebalancerResponse>, ApiError> {
    Ok(Json(movers.rebalancer_status(&cluster).await?.into()))
}

/// Run one rebalancing cycle now.
///
/// Measures the cluster (counts and memory from the silos' latest heartbeats), starting a session
/// if none runs, and issues the cycle's moves as migrations of concrete grains (least recently
/// placed first; immovable types never).
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/rebalancer/cycles",
    tag = "rebalancer",
    security(("bearer" = ["operator"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The cycle's report and migrations", body = CycleResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another replica took the cluster's lease over while the request ran; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_cycle(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
) -> Result<Json<CycleResponse>, ApiError> {
    Ok(Json(movers.run_rebalancer_cycle(&cluster).await?.into()))
}

/// Start a session now.
///
/// Ends any session and suspension; the first cycle is due at once (the lease holder runs it).
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/rebalancer/sessions",
    tag = "rebalancer",
    security(("bearer" = ["operator"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The rebalancer", body = RebalancerResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another replica took the cluster's lease over while the request ran; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_session(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
) -> Result<Json<RebalancerResponse>, ApiError> {
    Ok(Json(
        movers.start_rebalancer_session(&cluster).await?.into(),
    ))
}

/// Suspend the rebalancer.
///
/// Stops any session; none starts for `duration_ms` (absent: until resumed). The latest request
/// wins.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/rebalancer/suspend",
    tag = "rebalancer",
    security(("bearer" = ["operator"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    request_body = SuspendRequest,
    responses(
        (status = 200, description = "The rebalancer", body = RebalancerResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another replica took the cluster's lease over while the request ran; retry", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name or duration", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_suspend(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
    ApiJson(request): ApiJson<SuspendRequest>,
) -> Result<Json<RebalancerResponse>, ApiError> {
    if let Some(ms) = request.duration_ms {
        let mut v = Violations::default();
        limits::SUSPENSION_MS.check(&mut v, "duration_ms", ms as f64);
        v.finish(|| ())?;
    }
    let duration = request
        .duration_ms
        .map(|ms| Millis::try_from(ms).unwrap_or(Millis::MAX - 1));
    Ok(Json(
        movers.suspend_rebalancer(&cluster, duration).await?.into(),
    ))
}

/// Resume the rebalancer.
///
/// Ends the suspension and starts a session now (as Orleans' `ResumeRebalancing`).
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/rebalancer/resume",
    tag = "rebalancer",
    security(("bearer" = ["operator"])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The rebalancer", body = RebalancerResponse),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another replica took the cluster's lease over while the request ran; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn post_resume(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
) -> Result<Json<RebalancerResponse>, ApiError> {
    Ok(Json(
        movers.start_rebalancer_session(&cluster).await?.into(),
    ))
}
