//! The HTTP API: one module per resource, each a thin shell over the oracle's component it uses
//! ([`crate::oracle`]): a handler takes that component as its state (`State<Arc<Directory>>`, …).
//!
//! Routes and the OpenAPI document come from the same declarations (`#[utoipa::path]` handlers
//! registered with `routes!`), so the spec cannot drift from the router.

pub mod auth;
mod bodies;
mod body_check;
mod contract;
pub mod error;
mod examples;
pub mod extract;
mod limits;
pub mod load_shedding;
mod middleware;

mod activations;
mod clusters;
mod drains;
mod heartbeats;
mod keys;
mod migrations;
mod ops;
mod placements;
mod policy;
mod pools;
mod rebalancer;
mod repartitioner;
mod silos;
mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request};
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use axum::extract::FromRef;

use crate::oracle::{
    Connections, Credentials, Directory, Members, Movers, Oracle, Policies, Readiness,
};
use crate::rate_limit::RateLimits;

/// What the router serves from; each handler takes the part it uses (see the `FromRef`s below).
/// Axum clones it for every request, so each field is one `Arc`: the oracle's components are
/// reached through one, not cloned one by one.
#[derive(Clone)]
pub struct AppState {
    pub oracle: Arc<Oracle>,
    pub metrics: PrometheusHandle,
    /// Per-cluster rate limits, shared by every handler of the replica (each limited handler asks
    /// it right after parsing the cluster name).
    pub rate_limits: Arc<RateLimits>,
}

/// Lets handlers take one of the oracle's components as their state.
macro_rules! component_state {
    ($($component:ident: $type:ty),* $(,)?) => {
        $(impl FromRef<AppState> for Arc<$type> {
            fn from_ref(state: &AppState) -> Self {
                state.oracle.$component.clone()
            }
        })*
    };
}

component_state!(
    members: Members,
    policies: Policies,
    directory: Directory,
    movers: Movers,
    connections: Connections,
    credentials: Credentials,
    readiness: Readiness,
);

impl FromRef<AppState> for Arc<RateLimits> {
    fn from_ref(state: &AppState) -> Self {
        state.rate_limits.clone()
    }
}

impl FromRef<AppState> for PrometheusHandle {
    fn from_ref(state: &AppState) -> Self {
        state.metrics.clone()
    }
}

/// Limits applied to every request.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub request_timeout: Duration,
    pub body_limit_bytes: usize,
    /// Requests in flight beyond which the next is shed (503), except health, readiness and
    /// metrics ([`load_shedding`]).
    pub max_concurrent_requests: usize,
    /// The latency nine in ten answers are kept under by admitting fewer at once (zero: the
    /// limit stays at `max_concurrent_requests`; [`load_shedding`]).
    pub admission_target: Duration,
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Placement oracle",
        description = "Tells clusters of servers where work should live: where a grain should be \
                       activated (Orleans placement), which grains should move, and which node a client \
                       should connect to. Errors are RFC 9457 problem+json.",
        license(name = "MIT OR Apache-2.0")
    ),
    tags(
        (name = "membership", description = "Silo heartbeats and cluster membership"),
        (name = "directory", description = "Where grains live: placement, lookup, deactivation"),
        (name = "migrations", description = "Which grains should move: a silo's migrations, completed or failed"),
        (name = "rebalancer", description = "Evening out activations across silos: sessions, cycles, suspension"),
        (name = "repartitioner", description = "Bringing grains that call each other onto one silo: edge reports, rounds"),
        (name = "policy", description = "How grains are placed: strategies, options and filters per grain type"),
        (name = "connections", description = "Which node a client should connect to: SmartConnect-style pools and rules"),
        (name = "credentials", description = "Cluster keys: the admin issues, lists and revokes them"),
        (name = "operations", description = "Health, readiness and metrics")
    )
)]
struct ApiDoc;

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The span every request's logs carry: method, route template and request id.
fn request_span<B>(request: &Request<B>) -> tracing::Span {
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_default();
    let request_id = request
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    // `caller` is filled in by the `Cluster` extractor: `admin`, `key:<id>` or `open`, never a secret.
    tracing::info_span!("request", method = %request.method(), route, request_id, caller = tracing::field::Empty)
}

fn api_router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(heartbeats::post_heartbeat))
        .routes(routes!(silos::list_silos))
        .routes(routes!(silos::get_silo, silos::delete_silo))
        .routes(routes!(drains::drain_silo))
        .routes(routes!(placements::post_placement))
        .routes(routes!(placements::post_placement_batch))
        .routes(routes!(placements::post_placement_preview))
        .routes(routes!(clusters::list_clusters))
        .routes(routes!(clusters::get_distribution))
        .routes(routes!(policy::get_policy, policy::put_policy))
        .routes(routes!(pools::get_pool, pools::put_pool))
        .routes(routes!(pools::post_connection))
        .routes(routes!(activations::list_activations))
        .routes(routes!(
            activations::get_activation,
            activations::delete_activation
        ))
        .routes(routes!(migrations::list_migrations))
        .routes(routes!(migrations::complete_migration))
        .routes(routes!(migrations::fail_migration))
        .routes(routes!(rebalancer::get_rebalancer))
        .routes(routes!(rebalancer::post_cycle))
        .routes(routes!(rebalancer::post_session))
        .routes(routes!(rebalancer::post_suspend))
        .routes(routes!(rebalancer::post_resume))
        .routes(routes!(repartitioner::post_edges))
        .routes(routes!(repartitioner::get_repartitioner))
        .routes(routes!(repartitioner::post_round))
        .routes(routes!(keys::issue_key, keys::list_keys))
        .routes(routes!(keys::revoke_key))
        .routes(routes!(ops::healthz))
        .routes(routes!(ops::readyz))
        .routes(routes!(ops::metrics))
}

/// The published OpenAPI document, as served at `/openapi.json` (built once).
pub fn openapi() -> &'static serde_json::Value {
    static DOCUMENT: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let (_, api) = api_router().split_for_parts();
        let derived = serde_json::to_value(without_wildcards(api)).expect("the spec serialises");
        contract::publish(derived)
    })
}

/// axum spells a catch-all segment `{*grain}` (it may contain '/'); OpenAPI has no such syntax, so
/// the spec names it `{grain}` and documents that the value may hold '/'.
fn without_wildcards(mut api: utoipa::openapi::OpenApi) -> utoipa::openapi::OpenApi {
    api.paths.paths = std::mem::take(&mut api.paths.paths)
        .into_iter()
        .map(|(path, item)| (path.replace("{*", "{"), item))
        .collect();
    api
}

/// The document this oracle serves at `/openapi.json`: the published one, or in open mode the same
/// with every credential optional, since that oracle asks for none.
pub fn served_openapi(open_mode: bool) -> serde_json::Value {
    if open_mode {
        contract::open_mode(openapi())
    } else {
        openapi().clone()
    }
}

/// The whole application: API routes, spec, Swagger UI and every cross-cutting layer.
pub fn app(state: AppState, limits: Limits) -> Router {
    // Request bodies are checked against the published schemas, compiled now rather than on the
    // first request.
    body_check::install(openapi());
    // What each route asks of its caller, as the published document declares it (open mode
    // serves it with optional credentials but checks nothing anyway).
    auth::install(openapi());
    let served = served_openapi(state.oracle.credentials.open_mode());
    let (router, _) = api_router().split_for_parts();
    let router = router
        .merge(SwaggerUi::new("/swagger-ui").external_url_unchecked("/openapi.json", served))
        .merge(ui::router())
        .fallback(|| async { error::ApiError::from_status(axum::http::StatusCode::NOT_FOUND) });

    // Per-route layers, outermost first. They sit inside routing so that the span and the metrics
    // see the matched route template (ids never reach logs or labels), and they wrap the panic catcher and the timeout so that panics and
    // timeouts are counted like any other answer. Load shedding comes next, so that shed requests
    // are logged and counted too, but before anything that does work for the request.
    let per_route = ServiceBuilder::new()
        // Each answer is counted in the metrics; a log line per 5xx (tower-http's default) would
        // cost the most exactly when a replica sheds load or its store is down.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_failure(()),
        )
        .layer(axum::middleware::from_fn(middleware::record_metrics))
        .layer(axum::middleware::from_fn_with_state(
            load_shedding::InFlight::new(
                limits.max_concurrent_requests,
                limits.admission_target,
                {
                    let members = state.oracle.members.clone();
                    Arc::new(move || members.could_not_keep_up())
                },
            ),
            load_shedding::shed_load,
        ))
        .layer(CatchPanicLayer::custom(middleware::panic_response))
        .layer(axum::middleware::from_fn_with_state(
            limits.request_timeout,
            middleware::enforce_timeout,
        ));

    // Whole-app layers, outermost first.
    let around = ServiceBuilder::new()
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(axum::middleware::from_fn(
            middleware::problem_for_bare_errors,
        ))
        .layer(DefaultBodyLimit::max(limits.body_limit_bytes));

    router
        .route_layer(per_route)
        .layer(around)
        .with_state(state)
}
