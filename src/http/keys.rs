//! `…/keys`: the admin issues, lists and revokes a cluster's keys.

use crate::oracle::Credentials;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::{ApiJson, KeyParam};
use super::limits;
use crate::auth::{Scope, KEY_PREFIX};
use crate::clock::Millis;
use crate::store::StoredKey;
use crate::validation::{self, Violations};

/// A key to issue.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"scopes": ["silo"], "label": "frontend silos, 2026-12"}))]
pub struct NewKeyRequest {
    /// What the key may do besides reading its cluster: `silo` (heartbeats, placements, lookups,
    /// deactivations, edges, migrations, connections) and/or `operator` (policy, pools, drains,
    /// rebalancer and repartitioner control, silo removal).
    pub scopes: Vec<Scope>,
    /// Who or what the key is for, to recognise it in the list (at most 200 characters).
    pub label: Option<String>,
}

/// A key as listed: never the key itself.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "id": "3f9c0a7d51e2b846",
    "starts_with": "pok_3f9c0a7d51e2b846_",
    "cluster": "demo",
    "scopes": ["silo"],
    "label": "frontend silos, 2026-12",
    "created_at_ms": 1_764_547_200_000_i64
}))]
pub struct KeyResponse {
    /// Names the key in the list, in logs (`key:<id>`) and to revoke it.
    pub id: String,
    /// How the key begins, to match a leaked one against this list.
    pub starts_with: String,
    pub cluster: String,
    pub scopes: Vec<Scope>,
    pub label: String,
    pub created_at_ms: Millis,
}

impl From<StoredKey> for KeyResponse {
    fn from(key: StoredKey) -> Self {
        let scopes = crate::oracle::scopes_of(&key);
        Self {
            starts_with: format!("{KEY_PREFIX}{}_", key.id),
            id: key.id,
            cluster: key.cluster.to_string(),
            scopes,
            label: key.label,
            created_at_ms: key.created_at_ms,
        }
    }
}

/// A key just issued: the only time the key itself is shown.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "key": "pok_3f9c0a7d51e2b846_9b1d5e0c2a7f48e3b6d1c0a9f8e7d6c5b4a39281706f5e4d3c2b1a0918273645",
    "id": "3f9c0a7d51e2b846",
    "starts_with": "pok_3f9c0a7d51e2b846_",
    "cluster": "demo",
    "scopes": ["silo"],
    "label": "frontend silos, 2026-12",
    "created_at_ms": 1_764_547_200_000_i64
}))]
pub struct IssuedKeyResponse {
    /// Send it as `Authorization: Bearer <key>`. Only its hash is kept: store it now, it cannot
    /// be shown again.
    pub key: String,
    #[serde(flatten)]
    pub record: KeyResponse,
}

/// The cluster's keys.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyList {
    /// Oldest first.
    pub keys: Vec<KeyResponse>,
}

/// Issue a cluster key (admin).
///
/// The answer holds the key itself, shown this once. A cluster holds at most 100 keys. Needs an
/// admin token configured: in open mode there are no credentials to issue.
#[utoipa::path(
    post,
    path = "/v1/clusters/{cluster}/keys",
    tag = "credentials",
    params(("cluster" = String, Path, description = "Cluster name")),
    request_body = NewKeyRequest,
    security(("bearer" = ["admin"])),
    responses(
        (status = 201, description = "The key, shown once", body = IssuedKeyResponse),
        (status = 409, description = "The cluster holds its limit of keys, or the oracle runs in open mode", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid cluster, scopes or label", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn issue_key(
    State(credentials): State<Arc<Credentials>>,
    Cluster(cluster): Cluster,
    ApiJson(body): ApiJson<NewKeyRequest>,
) -> Result<(StatusCode, Json<IssuedKeyResponse>), ApiError> {
    let mut v = Violations::default();
    limits::KEY_SCOPES.check_count(&mut v, "scopes", body.scopes.len());
    let label = body.label.unwrap_or_default();
    if !label.is_empty() {
        v.check(validation::label(
            "label",
            &label,
            limits::MAX_KEY_LABEL_CHARS,
        ));
    }
    v.finish(|| ())?;
    let issued = credentials.issue_key(&cluster, body.scopes, label)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                "open-mode",
                "The oracle runs in open mode",
                "no admin token is configured, so no request needs a key and there is nothing to hash one with; start the oracle with ORACLE_ADMIN_TOKEN to issue keys",
            )
        })?;
    Ok((
        StatusCode::CREATED,
        Json(IssuedKeyResponse {
            key: issued.key.expose().to_owned(),
            record: issued.record.into(),
        }),
    ))
}

/// List a cluster's keys (admin).
///
/// Ids, scopes and labels; never the keys themselves.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/keys",
    tag = "credentials",
    params(("cluster" = String, Path, description = "Cluster name")),
    security(("bearer" = ["admin"])),
    responses(
        (status = 200, description = "The cluster's keys", body = KeyList),
    )
)]
pub async fn list_keys(
    State(credentials): State<Arc<Credentials>>,
    Cluster(cluster): Cluster,
) -> Result<Json<KeyList>, ApiError> {
    let keys = credentials.keys(&cluster).await?;
    Ok(Json(KeyList {
        keys: keys.into_iter().map(KeyResponse::from).collect(),
    }))
}

/// Revoke a cluster key (admin).
///
/// At once on the replica that answers; on the others within `ORACLE_KEY_CACHE_TTL_MS`.
#[utoipa::path(
    delete,
    path = "/v1/clusters/{cluster}/keys/{id}",
    tag = "credentials",
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("id" = String, Path, description = "The key's id", example = "3f9c0a7d51e2b846"),
    ),
    security(("bearer" = ["admin"])),
    responses(
        (status = 204, description = "Revoked"),
        (status = 404, description = "The cluster has no such key", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn revoke_key(
    State(credentials): State<Arc<Credentials>>,
    Cluster(cluster): Cluster,
    KeyParam(id): KeyParam,
) -> Result<StatusCode, ApiError> {
    // An id that no key could have is not looked up (nor sent to the database as it is).
    if crate::auth::is_key_id(&id) && credentials.revoke_key(&cluster, &id).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(format!(
            "cluster `{cluster}` has no key `{id}`"
        )))
    }
}
