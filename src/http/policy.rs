//! `GET · PUT /v1/clusters/{cluster}/policy`: the placement policy, versioned with ETag / If-Match.

use crate::oracle::Policies;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use std::sync::Arc;
use utoipa::ToSchema;

use super::auth::Cluster;
use super::error::{ApiError, Problem};
use super::extract::ApiJson;
use crate::policy::Policy;
use crate::validation::FieldError;

/// The policy and its version (also sent as the `ETag`).
#[derive(Debug, Serialize, ToSchema)]
pub struct PolicyResponse {
    /// Increases with every change; 0 for a policy never written.
    #[schema(example = 3)]
    pub version: i64,
    pub policy: Policy,
    /// What is valid but probably not meant, each naming its field: a webhook strategy without a
    /// URL (its fallback then decides every placement).
    pub warnings: Vec<FieldError>,
}

fn respond(version: i64, policy: Policy) -> Response {
    let etag = HeaderValue::from_str(&format!("\"{version}\"")).expect("digits are a valid header");
    let warnings = policy.warnings();
    let mut response = Json(PolicyResponse {
        version,
        policy,
        warnings,
    })
    .into_response();
    response.headers_mut().insert(header::ETAG, etag);
    response
}

/// Reads `If-Match`: `"3"` (or `W/"3"`) means "only if still version 3", `*` means "whatever it is".
fn expected_version(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get(header::IF_MATCH) else {
        return Err(ApiError::if_match_required());
    };
    let text = value.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    let quoted = text.strip_prefix("W/").unwrap_or(text);
    quoted
        .strip_prefix('"')
        .and_then(|rest| rest.strip_suffix('"'))
        .filter(|digits| {
            (1..=18).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
        })
        .and_then(|digits| digits.parse::<i64>().ok())
        .map(Some)
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "If-Match must be an ETag this API issued (like \"3\") or *, got {text:?}"
            ))
        })
}

/// Read the placement policy.
///
/// The default strategy and options, per grain type overrides and filters, and the silo TTL. The
/// `ETag` header carries the version to send back in `If-Match` when changing it.
#[utoipa::path(
    get,
    path = "/v1/clusters/{cluster}/policy",
    tag = "policy",
    security(("bearer" = [])),
    params(("cluster" = String, Path, description = "Cluster name")),
    responses(
        (status = 200, description = "The policy", body = PolicyResponse, headers(("ETag" = String, description = "The policy's version, quoted"))),
        (status = 404, description = "No such cluster", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn get_policy(
    State(policies): State<Arc<Policies>>,
    Cluster(cluster): Cluster,
) -> Result<Response, ApiError> {
    let (policy, version) = policies.policy(&cluster).await?;
    Ok(respond(version, policy))
}

/// Replace the placement policy.
///
/// Needs `If-Match`: the `ETag` response header of `GET …/policy` (or of the previous `PUT`), so
/// that a writer that lost a race gets 412 instead of overwriting the other's change; `*` replaces
/// whatever is there. In Swagger UI, run `GET …/policy` first and copy its `ETag` here. Creates the cluster if it does not exist yet. Every replica
/// places with the new policy within a quarter of a second.
#[utoipa::path(
    put,
    path = "/v1/clusters/{cluster}/policy",
    tag = "policy",
    security(("bearer" = ["operator"])),
    params(
        ("cluster" = String, Path, description = "Cluster name"),
        ("If-Match" = String, Header, description = "The `ETag` header of the `GET …/policy` (or of the last `PUT`) this change is based on, e.g. `\"3\"`; or `*` to replace whatever is there", example = "*"),
    ),
    request_body = Policy,
    responses(
        (status = 200, description = "The new policy", body = PolicyResponse, headers(("ETag" = String, description = "The new version, quoted"))),
        (status = 400, description = "Malformed JSON or If-Match", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "A new cluster would exceed ORACLE_MAX_CLUSTERS", body = Problem, content_type = "application/problem+json"),
        (status = 412, description = "The policy changed since it was read", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Invalid fields, each named", body = Problem, content_type = "application/problem+json"),
        (status = 428, description = "If-Match is missing", body = Problem, content_type = "application/problem+json"),
    )
)]
pub async fn put_policy(
    State(policies): State<Arc<Policies>>,
    Cluster(cluster): Cluster,
    headers: HeaderMap,
    ApiJson(policy): ApiJson<Policy>,
) -> Result<Response, ApiError> {
    let expected = expected_version(&headers)?;
    policy.validate()?;
    let version = policies.put_policy(&cluster, &policy, expected).await?;
    Ok(respond(version, policy))
}
