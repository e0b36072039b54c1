//! `POST /v1/clusters/{cluster}/silos/{silo}/drain`: move a silo's grains away before it stops.

use crate::oracle::Movers;
use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::auth::Cluster;
use super::bodies::SiloResponse;
use super::error::{ApiError, Problem};
use super::extract::SiloParam;

/// What a drain request did.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrainResponse {
    /// The silo now: `shutting_down`, with its drain's progress.
    pub silo: SiloResponse,
    /// The replica that issues the drain's migrations (the holder of the cluster's lease). It
    /// issues more every half second, up to 10,000 open at a time, until every movable grain
    /// has left; a migration that fails or expires is issued again.
    #[schema(example = "oracle-7c9f-4211")]
    pub planner: String,
    /// Migrations this request issued, by target silo; empty when another replica holds the
    /// lease (its next step issues them).
    pub issued: Vec<DrainTarget>,
    /// Grain types with activations that no other silo can take now, and why. They stay until a
    /// silo that can take them is active.
    pub stuck: Vec<StuckActivations>,
}

/// Migrations issued to one target.
#[derive(Debug, Serialize, ToSchema)]
pub struct DrainTarget {
    #[schema(example = "10.0.0.6:11111@139000")]
    pub silo: String,
    #[schema(example = 61)]
    pub migrations: u64,
}

/// Activations of one grain type that cannot move now.
#[derive(Debug, Serialize, ToSchema)]
pub struct StuckActivations {
    #[schema(example = "ledger")]
    pub grain_type: String,
    #[schema(example = 2)]
    pub activations: u64,
    /// Why placement found no silo for them.
    #[schema(
        example = "no active silo can host grain type `ledger`: active silos [\"10.0.0.6:11111@139000\"] declare grain types that do not include it"
    )]
    pub reason: String,
}

/// Drain a silo before it stops.
///
/// Marks the silo drained: it is `shutting_down` from now on, whatever its heartbeats say, so no
/// new activation is placed there. Its grains then move: each movable activation (every grain
/// type but those `immovable: any`) gets a `drain` migration to the silo its grain type's
/// placement strategy picks among the others, with the drained silo as the requesting silo for
/// metadata filters. The silo polls `GET …/migrations?silo=` and completes them as for the
/// rebalancer; `GET …/silos/{silo}` shows how many activations remain. When none do, leave with
/// `DELETE …/silos/{silo}`. Asking again is harmless: the drain keeps its first time and is
/// planned again.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/silos/{silo}/drain",
    tag = "membership",
    security(("bearer" = ["operator"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("silo" = String, Path, description = "Silo id (percent-encoded)", example = "10.0.0.5:11111@139000"),
    ),
    responses(
        (status = 200, description = "The silo is drained; its grains are moving", body = DrainResponse),
        (status = 404, description = "No such cluster or silo", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The silo is dead: its activations were released already", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster name or silo id", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The store is unavailable, or the lease ran out meanwhile; retry", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn drain_silo(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
    SiloParam(silo): SiloParam,
) -> Result<Json<DrainResponse>, ApiError> {
    let drained = movers.drain(&cluster, &silo).await?;
    let mut by_target: BTreeMap<String, u64> = BTreeMap::new();
    let (migrations, stuck) = drained
        .issued
        .map(|issued| (issued.migrations, issued.stuck))
        .unwrap_or_default();
    for migration in migrations {
        *by_target.entry(migration.to).or_default() += 1;
    }
    Ok(Json(DrainResponse {
        silo: SiloResponse::from(&drained.silo),
        planner: drained.planner,
        issued: by_target
            .into_iter()
            .map(|(silo, migrations)| DrainTarget { silo, migrations })
            .collect(),
        stuck: stuck
            .into_iter()
            .map(|s| StuckActivations {
                grain_type: s.grain_type,
                activations: s.activations,
                reason: s.reason,
            })
            .collect(),
    }))
}
