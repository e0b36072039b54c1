//! Logging and metrics, set up once per process.
//!
//! Metric names live in [`metric`] so that every one is declared, described and labelled in one
//! place. Application metrics share the `oracle_` prefix and use base units; HTTP metrics follow
//! the conventional `http_requests_total` / `http_request_duration_seconds` names, labelled by route
//! template, never by ids.

pub mod process;

use std::io::IsTerminal;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

/// How logs are written: `text` for people, `json` for collectors (`ORACLE_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Installs the global tracing subscriber. `RUST_LOG` filters (default `info`). Text is coloured
/// only on a terminal: escape codes in a file or a collector's pipe are noise.
pub fn init_logging(format: LogFormat) {
    // sqlx logs an error each time a new connection is refused at connect (the store's check of a
    // standby, logged by the store itself once a while): not by default.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx_core::pool::inner=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal());
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// Latency buckets in seconds: from 1 µs (a pure placement decision) to 10 s.
const LATENCY_BUCKETS: &[f64] = &[
    0.000001, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets of store outages' lengths in seconds: from a blip to half an hour.
const OUTAGE_BUCKETS: &[f64] = &[0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0];

/// The process's Prometheus recorder, installed on first use. Every app built in this process
/// (tests build many) renders the same registry.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_duration_seconds".into()),
                    LATENCY_BUCKETS,
                )
                .expect("bucket list is not empty")
                .set_buckets_for_metric(
                    Matcher::Full(metric::STORE_OUTAGE_DURATION.into()),
                    OUTAGE_BUCKETS,
                )
                .expect("bucket list is not empty")
                .install_recorder()
                .expect("no other metrics recorder is installed in this process");
            metric::describe();
            handle
        })
        .clone()
}

/// Every metric the oracle records.
pub mod metric {
    use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, Unit};

    pub const HTTP_REQUESTS: &str = "oracle_http_requests_total";
    pub const HTTP_DURATION: &str = "oracle_http_request_duration_seconds";
    pub const BUILD_INFO: &str = "oracle_build_info";
    pub const STORE_POOL: &str = "oracle_store_pool_connections";
    pub const STORE_POOL_WAITERS: &str = "oracle_store_pool_waiters";
    pub const STORE_POOL_WAIT: &str = "oracle_store_pool_wait_duration_seconds";
    pub const STORE_CALL_DURATION: &str = "oracle_store_call_duration_seconds";
    pub const STORE_CIRCUIT_OPEN: &str = "oracle_store_circuit_open";
    pub const OPEN_MIGRATIONS: &str = "oracle_open_migrations";
    pub const HEARTBEATS: &str = "oracle_heartbeats_total";
    pub const PLACEMENTS: &str = "oracle_placements_total";
    pub const DIRECTORY_CACHE: &str = "oracle_directory_cache_total";
    pub const SILOS: &str = "oracle_silos";
    pub const SILOS_DECLARED_DEAD: &str = "oracle_silos_declared_dead_total";
    pub const DIRECTORY_ENTRIES: &str = "oracle_directory_entries";
    pub const STORE_ERRORS: &str = "oracle_store_errors_total";
    pub const DECISION_DURATION: &str = "oracle_placement_decision_duration_seconds";
    pub const WEBHOOK_CALLS: &str = "oracle_webhook_calls_total";
    pub const CONNECTIONS: &str = "oracle_connections_total";
    pub const WEBHOOK_DURATION: &str = "oracle_webhook_duration_seconds";
    pub const MIGRATIONS: &str = "oracle_migrations_total";
    pub const REBALANCER_CYCLES: &str = "oracle_rebalancer_cycles_total";
    pub const LEASES_TAKEN: &str = "oracle_cluster_leases_taken_total";
    pub const CLUSTERS_OWNED: &str = "oracle_background_clusters_owned";
    pub const CLUSTERS_RUN: &str = "oracle_background_clusters_run";
    pub const REBALANCER_DEVIATION: &str = "oracle_rebalancer_entropy_deviation";
    pub const REBALANCER_ENTROPY: &str = "oracle_rebalancer_entropy";
    pub const EDGES: &str = "oracle_edges_total";
    pub const REPARTITIONER_MOVES: &str = "oracle_repartitioner_moves_planned_total";
    pub const REPARTITIONER_TRACKED: &str = "oracle_repartitioner_tracked_edges";
    pub const REPARTITIONER_REMOTE: &str = "oracle_repartitioner_remote_fraction";
    pub const AUTH_DENIED: &str = "oracle_auth_denied_total";
    pub const REQUESTS_SHED: &str = "oracle_requests_shed_total";
    pub const RATE_LIMITED: &str = "oracle_rate_limited_total";
    pub const STORE_OUTAGES: &str = "oracle_store_outages_total";
    pub const STORE_OUTAGE_DURATION: &str = "oracle_store_outage_duration_seconds";
    pub const DEATHS_DEFERRED: &str = "oracle_silo_deaths_deferred_total";
    pub const LEASES_LAPSED: &str = "oracle_silo_leases_lapsed_total";
    pub const HEARTBEAT_COPIES: &str = "oracle_heartbeat_copies_total";
    pub const READY: &str = "oracle_ready";
    pub const REQUESTS_IN_FLIGHT: &str = "oracle_requests_in_flight";
    pub const ADMISSION_LIMIT: &str = "oracle_admission_limit";
    pub const DIRECTORY_CACHE_ENTRIES: &str = "oracle_directory_cache_entries";
    pub const STORE_POOL_MAX: &str = "oracle_store_pool_max_connections";
    pub const STORE_SERVER: &str = "oracle_store_server_info";
    pub const STORE_TIMELINE: &str = "oracle_store_timeline";
    pub const STORE_TIMELINE_REGRESSIONS: &str = "oracle_store_timeline_regressions_total";
    pub const BACKGROUND_TICKS: &str = "oracle_background_ticks_total";
    pub const TLS_RELOADS: &str = "oracle_tls_reloads_total";
    pub const LIMITS_REACHED: &str = "oracle_limits_reached_total";
    pub const REPLICA_STALLS: &str = "oracle_replica_stalls_total";
    pub const REPLICA_STALL_DURATION: &str = "oracle_replica_stall_duration_seconds";

    /// Every metric above, and whether it is a histogram (exported as its `_bucket`, `_sum` and
    /// `_count` series): what a dashboard may query (`tests/api/dashboard.rs` holds the shipped
    /// one to it).
    pub const ALL: &[(&str, bool)] = &[
        (HTTP_REQUESTS, false),
        (HTTP_DURATION, true),
        (HEARTBEATS, false),
        (PLACEMENTS, false),
        (DIRECTORY_CACHE, false),
        (SILOS, false),
        (SILOS_DECLARED_DEAD, false),
        (DIRECTORY_ENTRIES, false),
        (STORE_ERRORS, false),
        (DECISION_DURATION, true),
        (WEBHOOK_CALLS, false),
        (CONNECTIONS, false),
        (WEBHOOK_DURATION, true),
        (MIGRATIONS, false),
        (REBALANCER_CYCLES, false),
        (LEASES_TAKEN, false),
        (CLUSTERS_OWNED, false),
        (CLUSTERS_RUN, false),
        (REBALANCER_DEVIATION, false),
        (REBALANCER_ENTROPY, false),
        (EDGES, false),
        (REPARTITIONER_MOVES, false),
        (REPARTITIONER_TRACKED, false),
        (REPARTITIONER_REMOTE, false),
        (AUTH_DENIED, false),
        (REQUESTS_SHED, false),
        (RATE_LIMITED, false),
        (STORE_OUTAGES, false),
        (STORE_OUTAGE_DURATION, true),
        (DEATHS_DEFERRED, false),
        (LEASES_LAPSED, false),
        (HEARTBEAT_COPIES, false),
        (REPLICA_STALLS, false),
        (REPLICA_STALL_DURATION, true),
        (READY, false),
        (REQUESTS_IN_FLIGHT, false),
        (ADMISSION_LIMIT, false),
        (DIRECTORY_CACHE_ENTRIES, false),
        (STORE_POOL_MAX, false),
        (STORE_SERVER, false),
        (STORE_TIMELINE, false),
        (STORE_TIMELINE_REGRESSIONS, false),
        (BACKGROUND_TICKS, false),
        (TLS_RELOADS, false),
        (LIMITS_REACHED, false),
        (BUILD_INFO, false),
        (STORE_POOL, false),
        (STORE_POOL_WAITERS, false),
        (STORE_POOL_WAIT, true),
        (STORE_CALL_DURATION, true),
        (STORE_CIRCUIT_OPEN, false),
        (OPEN_MIGRATIONS, false),
    ];

    /// Why a credential was refused (`oracle_auth_denied_total{reason}`).
    pub const AUTH_DENIED_REASONS: [&str; 3] = ["missing", "invalid", "forbidden"];
    /// The rate limits' kinds (`oracle_rate_limited_total{kind}`; `rate_limit::Kind` holds them).
    pub const RATE_LIMITED_KINDS: [&str; 3] = ["heartbeats", "placements", "edges"];
    /// The limits a write can reach (`oracle_limits_reached_total{limit}`).
    pub const LIMITS: [&str; 3] = ["clusters", "silos", "keys"];
    /// Every operation whose failure `oracle_store_errors_total{operation}` counts
    /// (`tests/api/ops.rs` holds the call sites to it).
    pub const STORE_OPERATIONS: [&str; 29] = [
        "activation_counts",
        "activations_on",
        "append_edges",
        "clusters",
        "complete_migration",
        "deactivate",
        "drain_silo",
        "due",
        "fail_migration",
        "flush_held_heartbeats",
        "forget_expired",
        "lookup",
        "lookup_or_register",
        "membership",
        "next_round_robin",
        "open_migration_counts",
        "pending_migrations",
        "pool",
        "put_policy",
        "put_pool",
        "reap",
        "record_heartbeat",
        "register",
        "release_dead",
        "remove_silo",
        "silo",
        "silo_counts",
        "silos",
        "stats",
    ];

    pub(super) fn describe() {
        describe_requests();
        describe_movers();
        describe_store();
        gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
        export_at_zero();
    }

    /// Every series of an event that may not have happened yet, at zero: a restarted replica's
    /// counters are there from its first scrape, so an alert's `rate()` or `increase()` sees the
    /// first event rather than a series appearing (which it cannot tell from a gap), and a
    /// dashboard shows 0, not "no data".
    fn export_at_zero() {
        gauge!(STORE_CIRCUIT_OPEN).set(0.0);
        for name in [
            REQUESTS_SHED,
            STORE_OUTAGES,
            SILOS_DECLARED_DEAD,
            DEATHS_DEFERRED,
            LEASES_LAPSED,
            REPLICA_STALLS,
            STORE_TIMELINE_REGRESSIONS,
            BACKGROUND_TICKS,
        ] {
            counter!(name).increment(0);
        }
        for reason in AUTH_DENIED_REASONS {
            counter!(AUTH_DENIED, "reason" => reason).increment(0);
        }
        for kind in RATE_LIMITED_KINDS {
            counter!(RATE_LIMITED, "kind" => kind).increment(0);
        }
        for limit in LIMITS {
            counter!(LIMITS_REACHED, "limit" => limit).increment(0);
        }
        for outcome in ["reloaded", "failed"] {
            counter!(TLS_RELOADS, "outcome" => outcome).increment(0);
        }
        for operation in STORE_OPERATIONS {
            counter!(STORE_ERRORS, "operation" => operation).increment(0);
        }
    }

    fn describe_requests() {
        describe_gauge!(
            BUILD_INFO,
            "Always 1; the label `version` is the oracle's version"
        );
        describe_counter!(
            HTTP_REQUESTS,
            "HTTP requests by method, route template and status"
        );
        describe_histogram!(
            HTTP_DURATION,
            Unit::Seconds,
            "HTTP request latency by method, route template and status"
        );
        describe_counter!(
            HEARTBEATS,
            "Silo heartbeats by outcome (accepted, rejected)"
        );
        describe_counter!(
            PLACEMENTS,
            "Placement answers by strategy and outcome (existing, placed, stateless, unplaceable)"
        );
        describe_counter!(
            DIRECTORY_CACHE,
            "Placements of registered grains by whether this replica's recent answers served them (hit) or the store did (miss)"
        );
        describe_gauge!(
            SILOS,
            "Silos by stored status, all clusters, as of the last gauge refresh (every 5 s)"
        );
        describe_counter!(
            SILOS_DECLARED_DEAD,
            "Silos this replica declared dead: by its sweeps, or when a placement or a heartbeat found one dead by the death rule"
        );
        describe_gauge!(
            DIRECTORY_ENTRIES,
            "Grain directory entries, all clusters, as of the last gauge refresh (every 5 s)"
        );
        describe_counter!(CONNECTIONS, "Connection answers by rule");
        describe_gauge!(
            READY,
            "1 when this replica's last readiness check (every /readyz, and every scrape of /metrics) found its store reachable and writable, else 0"
        );
        describe_gauge!(
            REQUESTS_IN_FLIGHT,
            "HTTP requests this replica is serving now"
        );
        describe_gauge!(
            ADMISSION_LIMIT,
            "HTTP requests this replica admits at once now: ORACLE_MAX_CONCURRENT_REQUESTS, or fewer while its answers take longer than ORACLE_ADMISSION_TARGET_MS"
        );
        describe_gauge!(
            DIRECTORY_CACHE_ENTRIES,
            "Answers in this replica's cache of recent directory answers, as of the last scrape"
        );
        describe_counter!(
            LIMITS_REACHED,
            "Writes refused because a limit was reached, by limit (clusters: ORACLE_MAX_CLUSTERS; silos: ORACLE_MAX_SILOS_PER_CLUSTER; keys: per cluster)"
        );
        describe_counter!(
            TLS_RELOADS,
            "Reloads of the TLS certificate and key after their files changed, by outcome (reloaded, failed: the old ones stay in use)"
        );
        describe_counter!(
            AUTH_DENIED,
            "Requests refused for their credential, by reason (missing, invalid: 401; forbidden: 403)"
        );
        describe_counter!(
            REQUESTS_SHED,
            "Requests answered 503 at once because this replica had ORACLE_MAX_CONCURRENT_REQUESTS in flight"
        );
        describe_counter!(
            RATE_LIMITED,
            "Requests refused (429) because their cluster was over a rate limit, by kind (heartbeats, placements, edges)"
        );
        describe_histogram!(
            DECISION_DURATION,
            Unit::Seconds,
            "Time to decide one placement (the pure strategy, without store calls), by strategy"
        );
        describe_counter!(
            WEBHOOK_CALLS,
            "Placement webhook calls by outcome (chosen; or timeout, error, invalid, too_large, unconfigured, forbidden: the fallback decided)"
        );
    }

    fn describe_movers() {
        describe_counter!(
            MIGRATIONS,
            "Migrations by reason (rebalancer, drain, repartitioner) and what became of them (issued, completed, failed, cancelled)"
        );
        describe_counter!(
            REBALANCER_CYCLES,
            "Rebalancer cycles this replica ran, by outcome (migrated, completed, stagnant, stopped, skipped)"
        );
        describe_counter!(
            LEASES_TAKEN,
            "Cluster leases this replica took with a new token (a takeover, or the cluster's first)"
        );
        describe_gauge!(
            CLUSTERS_OWNED,
            "Clusters whose background work falls to this replica among the live ones (rendezvous hashing)"
        );
        describe_counter!(
            BACKGROUND_TICKS,
            "Passes of this replica's background loop (two a second): if none advances on any replica, no silo is declared dead"
        );
        describe_gauge!(
            CLUSTERS_RUN,
            "Clusters whose background work this replica ran at its last tick (owned, and their lease held)"
        );
        describe_gauge!(
            REBALANCER_DEVIATION,
            "The last measured entropy deviation per cluster (0 even, up to 1)"
        );
        describe_gauge!(
            REBALANCER_ENTROPY,
            "The last measured entropy of activations × memory per cluster"
        );
        describe_counter!(
            EDGES,
            "Edge reports by what became of them (accepted, ignored: self or between immovable grains, dropped: the buffer was full)"
        );
        describe_counter!(
            REPARTITIONER_MOVES,
            "Moves the repartitioner's rounds planned on this replica (completed ones are in oracle_migrations_total)"
        );
        describe_gauge!(
            REPARTITIONER_TRACKED,
            "Edges the repartitioner's sketch tracks, per cluster"
        );
        describe_gauge!(
            REPARTITIONER_REMOTE,
            "Tracked call weight between grains on different silos ÷ all tracked weight, per cluster (last estimate)"
        );
        describe_gauge!(
            OPEN_MIGRATIONS,
            "Open migrations, all clusters, as of the last gauge refresh (every 5 s): moves planned but not yet completed, failed or cancelled"
        );
        describe_counter!(
            LEASES_LAPSED,
            "Heartbeats that came a whole lease after the silo's previous one: its lease ran out meanwhile and it had to pause its grains"
        );
    }

    fn describe_store() {
        describe_counter!(STORE_ERRORS, "Store operations that failed, by operation");
        describe_counter!(
            HEARTBEAT_COPIES,
            "Silos whose heartbeats were folded onto this replica's copy of their row instead of a read, by whether they were answered without a write (held: only load figures changed, the stored heartbeat younger than twice ORACLE_HEARTBEAT_WRITE_AFTER_MS, or than a third of the TTL for figures that hardly moved; the flush writes them later), or a write from the copy, a heartbeat's or the flush's, found it current (written) or changed (stale: read and folded again, or dropped); mostly stale means a silo's heartbeats are spread over replicas"
        );
        describe_gauge!(
            STORE_POOL,
            "This replica's Postgres connections by state (in_use, idle), as of the last gauge refresh (every 5 s)"
        );
        describe_gauge!(
            STORE_POOL_MAX,
            "The most Postgres connections this replica's pool opens (ORACLE_DB_POOL_SIZE)"
        );
        describe_gauge!(
            STORE_SERVER,
            "Always 1; the label `server` is the host:port of the database server this replica's last new connection reached (one of DATABASE_URL's hosts)"
        );
        describe_gauge!(
            STORE_TIMELINE,
            "The WAL timeline of the primary this replica's last new connection reached: it grows by one at each promotion"
        );
        describe_counter!(
            STORE_TIMELINE_REGRESSIONS,
            "New connections that reached a server on a lower timeline than one this replica had written on: two primaries took writes (a split brain), and writes acknowledged on one may be lost"
        );
        describe_gauge!(
            STORE_POOL_WAITERS,
            "Store calls on this replica waiting for a Postgres connection now"
        );
        describe_histogram!(
            STORE_POOL_WAIT,
            Unit::Seconds,
            "How long each store call waited for a Postgres connection"
        );
        describe_histogram!(
            STORE_CALL_DURATION,
            Unit::Seconds,
            "Time of each Postgres store call, connection wait included"
        );
        describe_gauge!(
            STORE_CIRCUIT_OPEN,
            "1 while this replica's circuit to the store is open (the database cannot be reached or written; calls fail at once), else 0"
        );
        describe_histogram!(
            WEBHOOK_DURATION,
            Unit::Seconds,
            "Placement webhook call latency by outcome"
        );
        describe_counter!(
            STORE_OUTAGES,
            "Outages of the store this replica saw begin: it could not reach or write the database (the log says when each began and how long it lasted)"
        );
        describe_histogram!(
            STORE_OUTAGE_DURATION,
            Unit::Seconds,
            "How long each outage of the store lasted, from the last answer before it to the first after, as this replica saw it"
        );
        describe_counter!(
            REPLICA_STALLS,
            "Stalls of this replica's process longer than a second (frozen, paused, starved of CPU): it did not watch its silos meanwhile, so their silence is counted again from each stall's end"
        );
        describe_histogram!(
            REPLICA_STALL_DURATION,
            Unit::Seconds,
            "How long each stall of this replica's process lasted"
        );
        describe_counter!(
            DEATHS_DEFERRED,
            "Silos silent past their TTL that this replica did not declare dead because it had not reached the store for a whole TTL since their last heartbeat (each counted once per outage): a store outage, not a death"
        );
    }

    pub fn http_request(method: &str, route: &str, status: u16, seconds: f64) {
        let labels = [
            ("method", method.to_owned()),
            ("route", route.to_owned()),
            ("status", status.to_string()),
        ];
        counter!(HTTP_REQUESTS, &labels).increment(1);
        metrics::histogram!(HTTP_DURATION, &labels).record(seconds);
    }

    pub fn heartbeat(outcome: &'static str) {
        counter!(HEARTBEATS, "outcome" => outcome).increment(1);
    }

    pub fn placement(strategy: &str, outcome: &'static str) {
        counter!(PLACEMENTS, "strategy" => strategy.to_owned(), "outcome" => outcome).increment(1);
    }

    /// A placement of a registered grain served by this replica's recent answers, or not.
    pub fn directory_cache(result: &'static str) {
        counter!(DIRECTORY_CACHE, "result" => result).increment(1);
    }

    pub fn placement_decision(strategy: &'static str, took: std::time::Duration) {
        metrics::histogram!(DECISION_DURATION, "strategy" => strategy).record(took.as_secs_f64());
    }

    /// One webhook call, by outcome: `chosen`, or a fallback because of `timeout`, `error` (also
    /// a redirect, which is not followed), `invalid` (an answer that is not a candidate),
    /// `too_large` (an answer over the size cap), `unconfigured` (no URL in the policy) or
    /// `forbidden` (a host not on the allow-list: not called).
    pub fn webhook_call(outcome: &'static str, took: std::time::Duration) {
        counter!(WEBHOOK_CALLS, "outcome" => outcome).increment(1);
        metrics::histogram!(WEBHOOK_DURATION, "outcome" => outcome).record(took.as_secs_f64());
    }

    /// A request refused for its credential: `missing`, `invalid` (401) or `forbidden` (403).
    pub fn auth_denied(reason: &'static str) {
        counter!(AUTH_DENIED, "reason" => reason).increment(1);
    }

    /// One connection answer, by pool, rule and node (pools and their members are few and named
    /// by operators, so these labels stay bounded).
    /// By rule only: pool names and silo ids are chosen by callers, so labels carrying them would
    /// let any caller mint unbounded series (silo ids change with every restart).
    pub fn connection(rule: &'static str) {
        counter!(CONNECTIONS, "rule" => rule).increment(1);
    }

    pub fn migrations(reason: &'static str, event: &'static str, n: u64) {
        counter!(MIGRATIONS, "reason" => reason, "event" => event).increment(n);
    }

    /// By outcome; the gauges by cluster (clusters are bounded by ORACLE_MAX_CLUSTERS, and only
    /// those with a rebalancer running get one).
    /// A rebalancer cycle with its outcome; a cycle that measured (`measured`: not skipped)
    /// also sets the cluster's deviation and entropy.
    pub fn rebalancer_cycle(cluster: &str, outcome: String, measured: Option<(f64, f64)>) {
        counter!(REBALANCER_CYCLES, "outcome" => outcome).increment(1);
        if let Some((deviation, entropy)) = measured {
            gauge!(REBALANCER_DEVIATION, "cluster" => cluster.to_owned()).set(deviation);
            gauge!(REBALANCER_ENTROPY, "cluster" => cluster.to_owned()).set(entropy);
        }
    }

    pub fn edges(accepted: u64, ignored: u64, dropped: u64) {
        counter!(EDGES, "event" => "accepted").increment(accepted);
        counter!(EDGES, "event" => "ignored").increment(ignored);
        counter!(EDGES, "event" => "dropped").increment(dropped);
    }

    pub fn repartitioner_round(moves: u64) {
        counter!(REPARTITIONER_MOVES).increment(moves);
    }

    /// Per cluster (bounded by ORACLE_MAX_CLUSTERS; only clusters whose repartitioner ran).
    pub fn repartitioner_state(cluster: &str, tracked: usize, remote: f64) {
        gauge!(REPARTITIONER_TRACKED, "cluster" => cluster.to_owned()).set(tracked as f64);
        gauge!(REPARTITIONER_REMOTE, "cluster" => cluster.to_owned()).set(remote);
    }

    /// The requests in flight the replica admits now (set when the limit moves).
    pub fn admission_limit(limit: usize) {
        gauge!(ADMISSION_LIMIT).set(limit as f64);
    }

    /// One request shed: the replica was at its concurrency limit.
    pub fn request_shed() {
        counter!(REQUESTS_SHED).increment(1);
    }

    /// One request over its cluster's rate limit. By kind only: a cluster label would let callers
    /// mint series with every name they make up.
    pub fn rate_limited(kind: &'static str) {
        counter!(RATE_LIMITED, "kind" => kind).increment(1);
    }

    pub fn lease_taken() {
        counter!(LEASES_TAKEN).increment(1);
    }

    pub fn clusters_owned(n: usize) {
        gauge!(CLUSTERS_OWNED).set(n as f64);
    }

    pub fn clusters_run(n: usize) {
        gauge!(CLUSTERS_RUN).set(n as f64);
    }

    /// One pass of the background loop, whatever it found.
    pub fn background_tick() {
        counter!(BACKGROUND_TICKS).increment(1);
    }

    /// The outcome of a readiness check.
    pub fn ready(ready: bool) {
        gauge!(READY).set(if ready { 1.0 } else { 0.0 });
    }

    pub fn directory_cache_entries(n: usize) {
        gauge!(DIRECTORY_CACHE_ENTRIES).set(n as f64);
    }

    /// A write refused by `limit` (one of [`LIMITS`]).
    pub fn limit_reached(limit: &'static str) {
        counter!(LIMITS_REACHED, "limit" => limit).increment(1);
    }

    /// A reload of the TLS files: `reloaded` or `failed`.
    pub fn tls_reload(outcome: &'static str) {
        counter!(TLS_RELOADS, "outcome" => outcome).increment(1);
    }

    /// What a new connection to the store found: the server it reached (the one of the URL's
    /// hosts) and that server's timeline, and whether the timeline was lower than one written on.
    pub fn store_server(server: &str, timeline: i64, regressed: bool) {
        static LAST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);
        let mut last = LAST
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.as_deref() != Some(server) {
            if let Some(previous) = last.take() {
                gauge!(STORE_SERVER, "server" => previous).set(0.0);
            }
            gauge!(STORE_SERVER, "server" => server.to_owned()).set(1.0);
            *last = Some(server.to_owned());
        }
        gauge!(STORE_TIMELINE).set(timeline as f64);
        if regressed {
            counter!(STORE_TIMELINE_REGRESSIONS).increment(1);
        }
    }

    /// One of something under way, counted in a gauge while it lives.
    pub struct UnderWay(&'static str);

    impl UnderWay {
        fn counted_in(gauge: &'static str) -> Self {
            gauge!(gauge).increment(1.0);
            Self(gauge)
        }
    }

    impl Drop for UnderWay {
        fn drop(&mut self) {
            gauge!(self.0).decrement(1.0);
        }
    }

    /// An HTTP request being served (`oracle_requests_in_flight`).
    pub fn request_in_flight() -> UnderWay {
        UnderWay::counted_in(REQUESTS_IN_FLIGHT)
    }

    /// A store call waiting for a Postgres connection (`oracle_store_pool_waiters`).
    pub fn pool_waiter() -> UnderWay {
        UnderWay::counted_in(STORE_POOL_WAITERS)
    }

    pub fn store_error(operation: &'static str) {
        counter!(STORE_ERRORS, "operation" => operation).increment(1);
    }

    pub fn silos_declared_dead(n: u64) {
        counter!(SILOS_DECLARED_DEAD).increment(n);
    }

    pub fn store_outage_began() {
        counter!(STORE_OUTAGES).increment(1);
    }

    pub fn store_outage_ended(down_ms: i64) {
        metrics::histogram!(STORE_OUTAGE_DURATION).record(down_ms as f64 / 1_000.0);
    }

    pub fn silo_deaths_deferred(n: u64) {
        counter!(DEATHS_DEFERRED).increment(n);
    }

    /// The process did not run for `gap_ms` (see `store::stalls`).
    pub fn replica_stalled(gap_ms: i64) {
        counter!(REPLICA_STALLS).increment(1);
        metrics::histogram!(REPLICA_STALL_DURATION).record(gap_ms as f64 / 1_000.0);
    }

    pub fn silo_lease_lapsed() {
        counter!(LEASES_LAPSED).increment(1);
    }

    /// Silos of a heartbeat batch folded onto this replica's copies: how many the write changed,
    /// and how many it found changed since.
    pub fn heartbeat_copies(written: usize, stale: usize) {
        counter!(HEARTBEAT_COPIES, "result" => "written").increment(written as u64);
        counter!(HEARTBEAT_COPIES, "result" => "stale").increment(stale as u64);
    }

    /// Silos of a heartbeat batch whose heartbeats were folded onto this replica's copies and
    /// answered without a write (they changed only load figures, and the stored heartbeat was
    /// young enough: `heartbeats::held::holds_back`).
    pub fn heartbeats_held(held: usize) {
        counter!(HEARTBEAT_COPIES, "result" => "held").increment(held as u64);
    }

    /// A replica's Postgres connections: in use, idle, and the pool's size.
    #[derive(Debug, Clone, Copy)]
    pub struct PoolGauges {
        pub in_use: u32,
        pub idle: u32,
        pub max: u32,
    }

    /// The membership and directory gauges: silos by status (every status named, zeros too),
    /// directory entries, open migrations, and this replica's Postgres pool when it has one.
    pub fn store_gauges(
        silos_by_status: &[(&'static str, u64)],
        directory_entries: u64,
        open_migrations: u64,
        pool: Option<PoolGauges>,
    ) {
        for &(status, n) in silos_by_status {
            gauge!(SILOS, "status" => status).set(n as f64);
        }
        gauge!(DIRECTORY_ENTRIES).set(directory_entries as f64);
        gauge!(OPEN_MIGRATIONS).set(open_migrations as f64);
        if let Some(pool) = pool {
            gauge!(STORE_POOL, "state" => "in_use").set(f64::from(pool.in_use));
            gauge!(STORE_POOL, "state" => "idle").set(f64::from(pool.idle));
            gauge!(STORE_POOL_MAX).set(f64::from(pool.max));
        }
    }

    /// How long a store call waited for a Postgres connection.
    pub fn pool_wait(took: std::time::Duration) {
        metrics::histogram!(STORE_POOL_WAIT).record(took.as_secs_f64());
    }

    pub fn store_call(took: std::time::Duration) {
        metrics::histogram!(STORE_CALL_DURATION).record(took.as_secs_f64());
    }

    pub fn store_circuit(open: bool) {
        gauge!(STORE_CIRCUIT_OPEN).set(if open { 1.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::metric;

    /// A metric declared in [`metric`] but missing from [`metric::ALL`] would be one a dashboard
    /// could not be checked against.
    #[test]
    fn every_declared_metric_is_listed_once_with_its_kind() {
        let source = include_str!("mod.rs");
        let declared: Vec<&str> = source
            .lines()
            .filter_map(|line| line.trim().strip_prefix("pub const "))
            .filter_map(|rest| rest.split_once(": &str = \"").map(|(_, value)| value))
            .filter_map(|value| value.split('"').next())
            .collect();
        let mut listed: Vec<&str> = metric::ALL.iter().map(|(name, _)| *name).collect();
        assert_eq!(declared.len(), listed.len(), "{declared:?}");
        listed.sort_unstable();
        listed.dedup();
        assert_eq!(listed.len(), declared.len(), "a metric is listed twice");
        for name in declared {
            let histogram = metric::ALL
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, h)| *h);
            assert_eq!(
                histogram,
                Some(name.ends_with("_duration_seconds")),
                "{name}: listed, as a histogram exactly when it is a duration"
            );
        }
    }
}
