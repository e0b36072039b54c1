//! # The placement oracle
//!
//! An HTTP service that tells clusters of servers where work should live. Silos (servers hosting
//! virtual actors, "grains") send heartbeats with their load; the oracle keeps membership and a
//! single-activation grain directory, and answers "where should grain X go".
//!
//! A guided tour, in the direction the arrows run (`http → oracle → domain ← store`):
//!
//! - [`config`]: flags and environment variables, validated at start-up.
//! - [`http`]: the REST API, one module per resource, the OpenAPI document and Swagger UI. Thin:
//!   it validates input, calls the oracle and shapes the answer; every error is problem+json.
//! - [`oracle`]: the use cases (heartbeat, place, look up, deactivate, sweep). The only code that
//!   combines the store, the clock, the RNG and the domain.
//! - The domain, pure and I/O-free: [`cluster`] (names, silos, lifecycle, Kalman smoothing) and
//!   [`placement`] (compatibility, hints, strategies, explanations).
//! - [`store`]: the storage interface with its Postgres and in-memory implementations.
//! - [`connect`]: SmartConnect-style connection rules (pure); [`dns`]: the DNS listener, a thin
//!   shell beside `http` that answers pools over DNS.
//! - [`listener`] and [`tls`]: the API's listeners; a connection that cannot be accepted counts
//!   as work the replica could not keep up with.
//! - [`background`]: every periodic task of a replica (the membership sweep, the movers' driver),
//!   started and stopped together.
//! - [`rebalancer`]: which grains should move to even out a cluster (pure: options, cycles,
//!   sessions); [`drain`]: where a drained silo's grains go (pure).
//! - [`auth`]: cluster keys, the admin token and what each may do (pure).
//! - [`rate_limit`]: per-cluster rate limits (a pure token bucket and the table of them); load
//!   shedding is [`http::load_shedding`].
//! - [`clock`], [`validation`], [`telemetry`]: time, input checks, logs and metrics.
//!
//! [`app`] builds the router for a given state (tests drive it in-process); [`serve`] runs it on
//! a listener until a shutdown signal.

#![forbid(unsafe_code)]

pub mod auth;
pub mod background;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod connect;
pub mod dns;
pub mod drain;
pub mod http;
pub mod listener;
pub mod oracle;
pub mod placement;
pub mod policy;
pub mod rate_limit;
pub mod rebalancer;
pub mod repartitioner;
pub mod secret;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod validation;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

pub use http::{app, AppState, Limits};

use crate::background::Background;
use crate::clock::MonotonicClock;
use crate::config::Config;
use crate::oracle::Oracle;
use crate::store::memory::MemoryStore;
use crate::store::postgres::{Pooling, PostgresStore};
use crate::store::Store;

/// Applies pending migrations through the migration URL (`ORACLE_MIGRATION_DATABASE_URL`, else
/// `DATABASE_URL`), on a connection of its own.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    let Some(url) = config.migration_url() else {
        anyhow::bail!("`migrate` needs DATABASE_URL: the embedded store has no schema to migrate");
    };
    if config.migrations_go_through_a_transaction_pooler() {
        anyhow::bail!(
            "ORACLE_DB_TRANSACTION_POOLING is on: migrations need a direct connection to the \
             primary (the migrator holds a session lock), so set ORACLE_MIGRATION_DATABASE_URL"
        );
    }
    // The migration URL is a direct connection (a session-mode pooler also holds one session).
    let store = PostgresStore::connect(
        url,
        1,
        config.db_acquire_timeout(),
        Pooling::Session,
        config.store_settings(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("cannot connect to Postgres to migrate: {e}"))?;
    store.migrate().await?;
    store.pool().close().await;
    Ok(())
}

/// Fails when the database lacks migrations of this version (a replica that does not migrate).
async fn refuse_a_schema_behind(store: &PostgresStore) -> anyhow::Result<()> {
    let pending = store.pending_migrations().await.map_err(|e| {
        anyhow::anyhow!(
            "cannot read which migrations the database has applied ({e}); the serving role \
             needs SELECT on _sqlx_migrations and data rights on the oracle's tables \
             (docs/CONFIGURATION.md, \"Roles\")"
        )
    })?;
    match pending.first() {
        Some(first) => anyhow::bail!(
            "the database's schema lacks {} migration(s) of this version, the first {first}: run \
             `placement-oracle migrate` (ORACLE_MIGRATE_ON_START is false)",
            pending.len()
        ),
        None => Ok(()),
    }
}

/// Opens the store the configuration asks for. On Postgres, applies pending migrations first
/// (`ORACLE_MIGRATE_ON_START`, the default), or checks that none is pending.
pub async fn open_store(config: &Config) -> anyhow::Result<Arc<dyn Store>> {
    match &config.database_url {
        Some(url) => {
            if config.migrate_on_start {
                migrate(config).await?;
            }
            let store = PostgresStore::connect(
                url,
                config.db_pool_size,
                config.db_acquire_timeout(),
                config.db_pooling(),
                config.store_settings(),
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot connect to Postgres at {}: {e}",
                    config.database_url_redacted().unwrap_or_default()
                )
            })?;
            if !config.migrate_on_start {
                refuse_a_schema_behind(&store).await?;
            }
            tracing::info!(database = %config.database_url_redacted().unwrap_or_default(), "using the Postgres store; its schema is current");
            Ok(Arc::new(store))
        }
        None => {
            tracing::warn!(
                "DATABASE_URL is not set: using the embedded in-memory store. State is lost when the \
                 process exits and replicas cannot share it; set DATABASE_URL for production"
            );
            // The embedded store's clock is the process's monotonic one: a step of the host's wall
            // clock must not age every silo past its TTL at once.
            Ok(Arc::new(MemoryStore::new(
                config.store_settings(),
                Arc::new(MonotonicClock::default()),
                store::stalls::StallWatch::process(),
            )))
        }
    }
}

/// Serves the API on `listener` until `shutdown` completes, then finishes in-flight requests.
/// The [`background`] tasks (the membership sweep; the DNS listener when configured) run alongside
/// and stop with it, also when serving fails.
pub async fn serve(
    mut config: Config,
    store: Arc<dyn Store>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    config
        .load_secrets()
        .map_err(|problem| anyhow::anyhow!("{problem}"))?;
    let address = listener.local_addr()?;
    if let Some(refusal) = config.refuses_to_listen(address) {
        tracing::error!("{refusal}");
        anyhow::bail!("{refusal}");
    }
    let replica = oracle::Replica {
        id: config.replica(),
        lease_ttl_ms: clock::Millis::try_from(config.lease_ttl_ms).unwrap_or(10_000),
    };
    tracing::info!(replica = %replica.id, "this replica's name in cluster leases");
    let cache = oracle::CacheSettings {
        ttl: std::time::Duration::from_millis(config.directory_cache_ttl_ms),
        capacity: config.directory_cache_entries,
    };
    let webhook_hosts = config
        .webhook_hosts()
        .map_err(|e| anyhow::anyhow!("invalid ORACLE_WEBHOOK_ALLOWED_HOSTS: {e}"))?;
    let credentials = config
        .admin_token
        .as_ref()
        .map(|token| oracle::AdminCredentials {
            admin_token: token.clone(),
            key_hash_secret: config.key_hash_secret.clone(),
            key_cache_ttl: std::time::Duration::from_millis(config.key_cache_ttl_ms),
        });
    if credentials.is_some() {
        tracing::info!(
            "credentials required: the admin token or a cluster key on every cluster route"
        );
    }
    let oracle = Oracle::new(
        store,
        oracle::OracleSettings {
            seed: config.rng_seed,
            replica,
            directory_cache: cache,
            webhook_hosts,
            credentials,
        },
    );
    // Rate limits measure this replica's own durations: the monotonic clock, which a step of the
    // wall clock cannot fill or empty every bucket with.
    let rate_limits = rate_limit::RateLimits::new(
        config.rates(),
        usize::try_from(config.max_clusters).unwrap_or(usize::MAX),
        Arc::new(MonotonicClock::default()),
    );
    let state = AppState {
        oracle: Arc::new(oracle.clone()),
        metrics: telemetry::metrics_handle(),
        rate_limits: Arc::new(rate_limits),
    };
    let limits = Limits {
        request_timeout: config.request_timeout(),
        body_limit_bytes: config.body_limit_bytes,
        max_concurrent_requests: config.max_concurrent_requests,
        admission_target: config.admission_target(),
    };
    let background = start_background(&oracle, &config).await?;

    if config.open_mode() && !address.ip().is_loopback() {
        tracing::warn!(%address, "OPEN MODE ON A NON-LOOPBACK ADDRESS (--insecure-open): no credential is asked for; anyone who reaches this port can change every cluster");
    } else if config.open_mode() {
        tracing::info!(
            "open mode: no credential is asked for (set ORACLE_ADMIN_TOKEN to require keys)"
        );
    }
    let router = app(state, limits);
    let on_refused: listener::OnRefused = {
        let members = oracle.members.clone();
        Arc::new(move || members.could_not_keep_up())
    };
    let served = match config.tls_files() {
        Some(files) => match tls::TlsListener::new(listener, files, on_refused) {
            Ok(listener) => {
                tracing::info!(%address, "serving over TLS; Swagger UI at https://{address}/swagger-ui/");
                axum::serve(listener, router)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            Err(problem) => Err(std::io::Error::other(format!("TLS: {problem}"))),
        },
        None => {
            tracing::info!(%address, "serving; Swagger UI at http://{address}/swagger-ui/");
            axum::serve(listener::Listener::new(listener, on_refused), router)
                .with_graceful_shutdown(shutdown)
                .await
        }
    };
    // Stopped whether serving ended by the signal or by an error; then this replica retires and
    // its cluster leases go, so that the others carry on at once.
    background.stop().await;
    oracle.ownership.retire().await;
    oracle.movers.release_leases().await;
    served?;
    tracing::info!("stopped");
    Ok(())
}

/// Starts the replica's periodic tasks: the clusters' background work on the clusters this
/// replica owns, the write of the heartbeats it held back, and the DNS listener when one is
/// configured.
async fn start_background(oracle: &Oracle, config: &Config) -> anyhow::Result<Background> {
    let mut background = Background::new();
    if let Some(address) = config.dns_listen {
        let socket = tokio::net::UdpSocket::bind(address)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen for DNS on {address}: {e}"))?;
        tracing::info!(%address, zone = %config.dns_zone, "DNS listener for connection pools");
        let dns = dns::serve_dns(
            oracle.connections.clone(),
            socket,
            config.dns_zone.clone(),
            background.stopping(),
        );
        background.spawn("dns", dns);
    }
    let work = background::ClusterWork {
        ownership: oracle.ownership.clone(),
        members: oracle.members.clone(),
        movers: oracle.movers.clone(),
    };
    background.spawn(
        "stamps",
        background::run_stamps(oracle.ownership.clone(), background.stopping()),
    );
    background.spawn(
        "clusters",
        background::run_clusters(work, background.stopping()),
    );
    background.spawn(
        "heartbeat flush",
        background::run_heartbeat_flush(oracle.members.clone(), background.stopping()),
    );

    Ok(background)
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown signal received; finishing in-flight requests");
}
