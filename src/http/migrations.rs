//! Which grains should move, as a silo sees it: `GET /v1/clusters/{cluster}/migrations?silo=S`
//! (what it should send away), `POST …/migrations/{id}/complete` and `…/fail`.
//!
//! A source silo polls its migrations, hands each grain over (deactivates it, letting the target
//! activate it), then completes the migration: the directory entry moves to the target as a new
//! activation, with the epoch the answer carries. If the grain, a silo or the clock no longer allow
//! it, the answer is 409 saying why and the migration is cancelled; a silo that cannot carry one
//! out fails it, and the grain stays.

use crate::oracle::Movers;
use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::{IntoParams, ToSchema};

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::{ApiQuery, MigrationParam};
use super::limits;
use crate::cluster::SiloId;
use crate::store::Migration;
use crate::validation::{self, Violations};

/// Which silo's migrations, and where to resume.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MigrationQuery {
    /// The source silo: the migrations it should carry out.
    pub silo: String,
    /// Page size, 1 to 1000 (default 100).
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<i64>,
}

/// A page of a silo's open migrations, by id.
#[derive(Debug, Serialize, ToSchema)]
pub struct MigrationPage {
    pub migrations: Vec<Migration>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<i64>,
}

/// A completed migration: the grain is now activation `epoch` on the target.
#[derive(Debug, Serialize, ToSchema)]
pub struct MigrationCompleted {
    pub migration: Migration,
    /// The grain's new activation epoch (on `migration.to`).
    #[schema(example = 42)]
    pub epoch: i64,
}

/// A failed migration, removed; the grain stays on its source.
#[derive(Debug, Serialize, ToSchema)]
pub struct MigrationFailed {
    pub migration: Migration,
}

/// Migrations a silo should carry out.
///
/// Open migrations whose source is `silo`, by id, paged with `limit` and `cursor`. Each names a
/// grain, the activation (`epoch`) that should move and its target.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/migrations",
    tag = "migrations",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name"), MigrationQuery),
    responses(
        (status = 200, description = "A page of open migrations", body = MigrationPage),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster, silo, limit or cursor", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn list_migrations(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
    ApiQuery(query): ApiQuery<MigrationQuery>,
) -> Result<Json<MigrationPage>, ApiError> {
    let silo = SiloId::parse("silo", &query.silo)?;
    let limit = validation::page_limit(query.limit)?;
    if let Some(cursor) = query.cursor {
        let mut v = Violations::default();
        limits::MIGRATION_CURSOR.check(&mut v, "cursor", cursor as f64);
        v.finish(|| ())?;
    }
    let listing = movers
        .pending_migrations(&cluster, &silo, query.cursor, limit)
        .await?;
    Ok(Json(MigrationPage {
        migrations: listing.migrations,
        next_cursor: listing.next_cursor,
    }))
}

/// Complete a migration.
///
/// The source handed the grain over: the directory entry moves to the target as a new activation,
/// in the same transaction that closes the migration. Only if the grain is still that activation
/// on the source, the source is alive, the target active and alive, and the migration younger than
/// the policy's `migration_ttl_ms`; otherwise 409 says why, and the migration is cancelled.
///
/// Retrying is safe: for an hour after a silo completes or fails a migration, a retried call gets
/// the first answer (the same activation, or the same refusal), so a lost response costs nothing.
/// Completing one that was failed is 409 `migration-ended`.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/migrations/{id}/complete",
    tag = "migrations",
    security(("bearer" = ["silo"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("id" = i64, Path, description = "Migration id"),
    ),
    responses(
        (status = 200, description = "Moved: the grain's new activation", body = MigrationCompleted),
        (status = 404, description = "No such cluster, and no migration open or ended by a silo within the hour", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The migration no longer applies and is cancelled, or its source failed it", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster or id", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn complete_migration(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
    MigrationParam(id): MigrationParam,
) -> Result<Json<MigrationCompleted>, ApiError> {
    let moved = movers.complete_migration(&cluster, id).await?;
    Ok(Json(MigrationCompleted {
        migration: moved.migration,
        epoch: moved.epoch,
    }))
}

/// Fail a migration.
///
/// The source could not hand the grain over; the migration is removed and the grain stays.
/// Retrying is safe: for an hour a retried call gets the first answer. Failing one that was
/// completed is 409 `migration-ended`.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/migrations/{id}/fail",
    tag = "migrations",
    security(("bearer" = ["silo"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("id" = i64, Path, description = "Migration id"),
    ),
    responses(
        (status = 200, description = "Removed (or removed already by a call within the hour)", body = MigrationFailed),
        (status = 404, description = "No such cluster, and no migration open or ended by a silo within the hour", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The migration was completed already", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster or id", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn fail_migration(
    State(movers): State<Arc<Movers>>,
    Cluster(cluster): Cluster,
    MigrationParam(id): MigrationParam,
) -> Result<Json<MigrationFailed>, ApiError> {
    let migration = movers.fail_migration(&cluster, id).await?;
    Ok(Json(MigrationFailed { migration }))
}
