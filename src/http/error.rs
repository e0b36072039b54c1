//! The HTTP layer's one error type and its RFC 9457 `application/problem+json` body.
//!
//! Every error the API returns — from a handler, an extractor, a timeout, a panic or the router
//! itself — goes out as a [`Problem`]. Internal details (database errors, panics) are logged once
//! here and never sent.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::cluster::HeartbeatRejection;
use crate::oracle::OracleError;
use crate::placement::PlacementError;
use crate::rate_limit::RateLimited;
use crate::store::{LimitReached, StoreError};
use crate::telemetry::metric;
use crate::validation::{FieldError, Invalid};

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem detail.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:placement-oracle:problem:invalid-input",
    "title": "The request has invalid fields",
    "status": 422,
    "detail": "cpu_usage: must be a number from 0 to 100",
    "errors": [{"field": "cpu_usage", "message": "must be a number from 0 to 100"}]
}))]
pub struct Problem {
    /// Identifies the kind of problem; stable, so clients can branch on it.
    #[serde(rename = "type")]
    #[schema(example = "urn:placement-oracle:problem:invalid-input")]
    pub kind: String,
    /// A short summary of the kind of problem.
    pub title: String,
    /// The HTTP status code.
    #[schema(example = 422)]
    pub status: u16,
    /// What went wrong in this occurrence, in words a person can act on.
    pub detail: String,
    /// For invalid input: every offending field.
    pub errors: Vec<FieldError>,
}

/// An error on its way to becoming a problem response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    slug: &'static str,
    title: &'static str,
    detail: String,
    errors: Vec<FieldError>,
    retry_after_seconds: Option<u32>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        slug: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> Self {
        Self {
            status,
            slug,
            title,
            detail: detail.into(),
            errors: Vec::new(),
            retry_after_seconds: None,
        }
    }

    fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "malformed-request",
            "The request could not be read",
            detail,
        )
    }

    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "No such resource",
            detail,
        )
    }

    pub fn unsupported_media_type() -> Self {
        Self::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "The body must be JSON",
            "send the body with `Content-Type: application/json`",
        )
    }

    pub fn if_match_required() -> Self {
        Self::new(
            StatusCode::PRECONDITION_REQUIRED,
            "if-match-required",
            "If-Match is required",
            "send If-Match with the ETag of the policy you read (the `ETag` header of `GET …/policy`), or `*` to overwrite whatever is there, so that concurrent changes are not lost",
        )
    }

    pub fn timeout(after_ms: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "request-timeout",
            "The request took too long",
            format!("the oracle gave up after {after_ms} ms; nothing was left half-done, retry"),
        )
        .retry_after(1)
    }

    /// 401: no credential, or not a valid one. (The response also carries `WWW-Authenticate`.)
    pub fn unauthenticated(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "A valid credential is required",
            detail,
        )
    }

    /// 403: a valid credential that does not allow this.
    pub fn forbidden(detail: impl Into<String>) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "The credential does not allow this",
            detail,
        )
    }

    /// Load shedding (see [`super::load_shedding`]): distinct from `overloaded` (store calls
    /// queued), since raising a different setting helps.
    pub fn concurrency_limit_reached(limit: usize) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "concurrency-limit-reached",
            "Too many requests in flight",
            format!("this replica is already serving {limit} requests, as many as it admits now (at most ORACLE_MAX_CONCURRENT_REQUESTS, fewer while its answers take longer than ORACLE_ADMISSION_TARGET_MS), and answers more at once rather than queueing them; retry shortly, on another replica if there is one"),
        )
        .retry_after(1)
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            "the oracle failed unexpectedly; the failure is logged",
        )
    }

    /// The problem body for a bare status produced outside the handlers (405 from the router, …).
    pub fn from_status(status: StatusCode) -> Self {
        let title = status.canonical_reason().unwrap_or("Error");
        let slug = if status == StatusCode::NOT_FOUND {
            "not-found"
        } else {
            "http-error"
        };
        let detail = match status {
            StatusCode::METHOD_NOT_ALLOWED => {
                "this path does not accept that method; see /openapi.json".to_owned()
            }
            StatusCode::NOT_FOUND => {
                "no such route; the API is described at /openapi.json and /swagger-ui/".to_owned()
            }
            StatusCode::PAYLOAD_TOO_LARGE => {
                "the request body is larger than the configured limit".to_owned()
            }
            _ => title.to_owned(),
        };
        Self::new(status, slug, title, detail)
    }

    pub fn problem(&self) -> Problem {
        Problem {
            kind: format!("urn:placement-oracle:problem:{}", self.slug),
            title: self.title.to_owned(),
            status: self.status.as_u16(),
            detail: self.detail.clone(),
            errors: self.errors.clone(),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<Invalid> for ApiError {
    fn from(Invalid(errors): Invalid) -> Self {
        let detail = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        let mut error = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-input",
            "The request has invalid fields",
            detail,
        );
        error.errors = errors;
        error
    }
}

impl From<PlacementError> for ApiError {
    fn from(error: PlacementError) -> Self {
        match &error {
            PlacementError::NoActiveSilo { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no-active-silo",
                "No silo can take new activations",
                error.to_string(),
            )
            .retry_after(1),
            PlacementError::NoCompatibleSilo { .. } => Self::new(
                StatusCode::CONFLICT,
                "no-compatible-silo",
                "No active silo hosts this grain type",
                error.to_string(),
            ),
            PlacementError::NoSiloWithRole { .. } => Self::new(
                StatusCode::CONFLICT,
                "no-silo-with-role",
                "No active silo has the grain's role",
                error.to_string(),
            ),
            PlacementError::FilteredOut { .. } => Self::new(
                StatusCode::CONFLICT,
                "filtered-out",
                "A required metadata filter left no silo",
                error.to_string(),
            ),
            PlacementError::AllOverloaded { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "all-overloaded",
                "Every compatible silo is overloaded",
                error.to_string(),
            )
            .retry_after(1),
        }
    }
}

impl From<RateLimited> for ApiError {
    fn from(limited: RateLimited) -> Self {
        let seconds = limited.retry_after_ms.div_ceil(1_000).max(1);
        Self::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate-limited",
            "The cluster is over its rate limit",
            limited.to_string(),
        )
        .retry_after(u32::try_from(seconds).unwrap_or(u32::MAX))
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Contended(_) => {
                tracing::warn!(%error, "store contention");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "contention",
                    "Too many concurrent changes",
                    "concurrent changes to the same records kept winning over this request; retrying is safe",
                )
                .retry_after(1)
            }
            StoreError::Corrupt(_) => {
                tracing::error!(%error, "store returned unexpected data");
                Self::internal()
            }
            StoreError::Limit(limit) => {
                let detail = limit.to_string();
                metric::limit_reached(match limit {
                    LimitReached::Clusters { .. } => "clusters",
                    LimitReached::Keys { .. } => "keys",
                    LimitReached::Silos { .. } => "silos",
                });
                match limit {
                    LimitReached::Clusters { .. } => Self::new(
                        StatusCode::CONFLICT,
                        "cluster-limit-reached",
                        "No more clusters can be created",
                        detail,
                    ),
                    LimitReached::Keys { .. } => Self::new(
                        StatusCode::CONFLICT,
                        "key-limit-reached",
                        "The cluster has as many keys as it may",
                        detail,
                    ),
                    LimitReached::Silos { retry_after_ms, .. } => Self::new(
                        StatusCode::TOO_MANY_REQUESTS,
                        "silo-limit-reached",
                        "The cluster has as many silos as it may",
                        detail,
                    )
                    .retry_after(
                        u32::try_from(((retry_after_ms + 999) / 1_000).max(1)).unwrap_or(u32::MAX),
                    ),
                }
            }
            StoreError::Overloaded => Self::store_cannot_serve(
                "overloaded",
                "Too many requests are waiting for the store",
                "this replica holds as many store calls as it will queue; retry shortly (a retried placement returns whatever an earlier attempt registered)",
            ),
            // Logged once when the outage began (the call that found it carries the detail), not
            // for every request the open circuit refuses meanwhile.
            StoreError::ReadOnly(ref detail) => {
                if !detail.is_empty() {
                    tracing::error!(%error, "store read-only");
                }
                Self::store_cannot_serve(
                    "store-read-only",
                    "The store takes no writes",
                    "the oracle's database answers but is read-only (a standby not yet promoted, or a primary set read-only); the oracle reconnects so that a new primary is found as soon as one takes writes; retrying is safe",
                )
            }
            StoreError::WritesStalled(_) => {
                tracing::error!(%error, "store writes stalled");
                Self::store_cannot_serve(
                    "store-writes-stalled",
                    "The store commits no writes in time",
                    "a write to the oracle's database did not commit in time: commits may be waiting for a synchronous standby that is gone; retrying is safe",
                )
            }
            // Without a detail (the circuit refusing a call, a call past the store's deadline):
            // logged once when the outage began, not for every request refused meanwhile.
            StoreError::Unreachable(detail) | StoreError::TimedOut(detail)
                if detail.is_empty() =>
            {
                Self::store_unavailable()
            }
            // With a detail, logged here once.
            StoreError::Unreachable(_)
            | StoreError::TimedOut(_)
            | StoreError::Schema(_)
            | StoreError::Failed(_) => {
                tracing::error!(%error, "store unavailable");
                Self::store_unavailable()
            }
        }
    }
}

impl ApiError {
    /// A store that cannot serve now, for the reason `kind` names: 503, retry in a second.
    fn store_cannot_serve(kind: &'static str, title: &'static str, detail: &str) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, kind, title, detail).retry_after(1)
    }

    /// The answer for a store that cannot be reached: 503 `store-unavailable`.
    fn store_unavailable() -> Self {
        Self::store_cannot_serve(
            "store-unavailable",
            "The store is unavailable",
            "the oracle could not reach its store; retrying is safe (a retried placement returns whatever an earlier attempt registered)",
        )
    }
}

impl From<OracleError> for ApiError {
    fn from(error: OracleError) -> Self {
        let detail = error.to_string();
        match error {
            OracleError::NoAvailableNode { .. } | OracleError::NoNodeOfFamily { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "no-available-node",
                "No member of the pool is available",
                detail,
            )
            .retry_after(1),
            OracleError::ClusterNotFound(_)
            | OracleError::PoolNotFound { .. }
            | OracleError::SiloNotFound { .. }
            | OracleError::ActivationNotFound(_)
            | OracleError::MigrationNotFound(_) => Self::not_found(detail),
            OracleError::LeaseExpired => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "lease-expired",
                "The cluster's lease ran out during the request",
                detail,
            )
            .retry_after(1),
            OracleError::LeaseHeldElsewhere { .. } => Self::new(
                StatusCode::CONFLICT,
                "lease-held-elsewhere",
                "Another replica runs this cluster's background work",
                detail,
            ),
            OracleError::SiloDead(_) => Self::new(
                StatusCode::CONFLICT,
                "silo-dead",
                "The silo is dead",
                detail,
            ),
            OracleError::MigrationEnded { .. } => Self::new(
                StatusCode::CONFLICT,
                "migration-ended",
                "The migration was ended by the other call",
                detail,
            ),
            OracleError::MigrationRefused { .. } => Self::new(
                StatusCode::CONFLICT,
                "migration-refused",
                "The migration no longer applies and is cancelled",
                detail,
            ),
            OracleError::ActivationElsewhere { .. } => Self::new(
                StatusCode::CONFLICT,
                "activation-elsewhere",
                "The activation is on another silo",
                detail,
            ),
            OracleError::HeartbeatRejected(
                HeartbeatRejection::DeclaredDead { .. } | HeartbeatRejection::Retired { .. },
            ) => Self::new(
                StatusCode::CONFLICT,
                "silo-declared-dead",
                "This silo incarnation was declared dead",
                detail,
            ),
            OracleError::HeartbeatRejected(HeartbeatRejection::StatusRegression { .. }) => {
                Self::new(
                    StatusCode::CONFLICT,
                    "status-regression",
                    "A silo's status cannot move backwards",
                    detail,
                )
            }
            OracleError::PolicyVersionMismatch { .. } => Self::new(
                StatusCode::PRECONDITION_FAILED,
                "policy-version-mismatch",
                "The policy changed since it was read",
                detail,
            ),
            OracleError::Invalid(invalid) => invalid.into(),
            OracleError::Unplaceable(error) => error.into(),
            OracleError::Store(error) => error.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, axum::Json(self.problem())).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(seconds) = self.retry_after_seconds {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            headers.insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"placement-oracle\""),
            );
        }
        response
    }
}
