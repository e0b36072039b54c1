//! The one place requests are authorised: the [`Cluster`] extractor, which every
//! `/v1/clusters/{cluster}/…` handler takes first. It reads the cluster from the path, finds out
//! who calls (`Authorization: Bearer …`) and checks that the caller may use this route on this
//! cluster.
//!
//! What a route asks is declared once, with the route, as the `bearer` security requirement of
//! its `#[utoipa::path]` (roles `silo`, `operator` or `admin`; none means any key of the cluster).
//! The extractor reads it from the published document, so the spec Swagger UI shows is the rule
//! the server enforces. A route that declares nothing is treated as admin-only (failing closed).

use std::collections::HashMap;
use std::sync::OnceLock;

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts, MatchedPath, RawPathParams};
use axum::http::request::Parts;
use axum::http::{header, Method};

use super::error::ApiError;
use crate::auth::{self, Access, Caller, Denial};
use crate::cluster::ClusterName;
use crate::oracle::{Credentials, Unidentified};
use crate::telemetry::metric;

/// The name of the security scheme in the spec.
pub const SCHEME: &str = "bearer";

/// The cluster a request is about, once the caller is known to be allowed there.
#[derive(Debug, Clone)]
pub struct Cluster(pub ClusterName);

impl<S> FromRequestParts<S> for Cluster
where
    S: Send + Sync,
    Arc<Credentials>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|rejection| {
                ApiError::bad_request(format!("bad path: {}", rejection.body_text()))
            })?;
        let name = params
            .iter()
            .find_map(|(key, value)| (key == "cluster").then_some(value))
            .ok_or_else(|| {
                tracing::error!(
                    "a route without a {{cluster}} segment takes the Cluster extractor"
                );
                ApiError::internal()
            })?;
        let cluster = ClusterName::parse(name)?;
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|path| path.as_str())
            .unwrap_or_default();
        // A cluster route that declares no security is admin-only, never public.
        let access = match required_access(&parts.method, route) {
            Access::Public => Access::Admin,
            declared => declared,
        };
        let caller = identify(parts, &Arc::from_ref(state)).await?;
        auth::authorize(&caller, &cluster, access).map_err(|denial| {
            metric::auth_denied("forbidden");
            denied(denial)
        })?;
        Ok(Cluster(cluster))
    }
}

/// A caller of a route about no one cluster (`GET /v1/clusters`): the admin token, or anyone in
/// open mode. A cluster key is refused, as on a cluster's admin-only routes.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

impl<S> FromRequestParts<S> for Admin
where
    S: Send + Sync,
    Arc<Credentials>: FromRef<S>,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let caller = identify(parts, &Arc::from_ref(state)).await?;
        auth::authorize_admin(&caller).map_err(|denial| {
            metric::auth_denied("forbidden");
            denied(denial)
        })?;
        Ok(Admin)
    }
}

/// Who calls, from `Authorization: Bearer …`; named in the request's span (never by a secret).
async fn identify(parts: &Parts, credentials: &Credentials) -> Result<Caller, ApiError> {
    let bearer = bearer(parts);
    let caller = credentials
        .identify(bearer.as_deref())
        .await
        .map_err(|unidentified| match unidentified {
            Unidentified::Denied(denial) => denied(denial),
            Unidentified::Failed(error) => error.into(),
        })?;
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("caller", caller.log_name());
    }
    Ok(caller)
}

/// The credential of `Authorization: Bearer <credential>`, if the header says so.
fn bearer(parts: &Parts) -> Option<String> {
    let value = parts.headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credential) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| credential.trim().to_owned())
}

fn denied(denial: Denial) -> ApiError {
    match denial {
        Denial::Unauthenticated(detail) => ApiError::unauthenticated(detail),
        Denial::Forbidden(detail) => ApiError::forbidden(detail),
    }
}

/// What every operation asks, read from the published document when the app is built
/// ([`install`]): the spec Swagger UI shows is the rule the server enforces.
static ACCESS: OnceLock<HashMap<(String, String), Access>> = OnceLock::new();

/// Reads every operation's access from `doc` (the published document). Once per process.
pub fn install(doc: &serde_json::Value) {
    ACCESS.get_or_init(|| declared_access(doc));
}

/// What the route `method route` asks, as the published document declares it (admin-only for a
/// route it does not know, or before [`install`]: failing closed).
pub fn required_access(method: &Method, route: &str) -> Access {
    let Some(table) = ACCESS.get() else {
        return Access::Admin;
    };
    // axum answers HEAD with the GET handler; it asks what GET asks.
    let method = if method == Method::HEAD {
        &Method::GET
    } else {
        method
    };
    // axum spells a catch-all `{*grain}`; the document says `{grain}`.
    let key = (
        method.as_str().to_ascii_lowercase(),
        route.replace("{*", "{"),
    );
    table.get(&key).copied().unwrap_or(Access::Admin)
}

/// Every operation's access: from its `bearer` security requirement; none means public.
pub fn declared_access(spec: &serde_json::Value) -> HashMap<(String, String), Access> {
    let mut table = HashMap::new();
    let Some(paths) = spec["paths"].as_object() else {
        return table;
    };
    for (path, item) in paths {
        let Some(item) = item.as_object() else {
            continue;
        };
        for (method, operation) in item {
            let access = match operation["security"].as_array() {
                None => Access::Public,
                Some(requirements) => requirements
                    .iter()
                    .find_map(|requirement| requirement[SCHEME].as_array())
                    .and_then(|roles| {
                        let roles: Vec<&str> = roles.iter().filter_map(|r| r.as_str()).collect();
                        Access::from_roles(&roles)
                    })
                    .unwrap_or(Access::Admin),
            };
            table.insert((method.clone(), path.clone()), access);
        }
    }
    table
}
