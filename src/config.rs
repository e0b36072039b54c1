//! Configuration from flags and environment variables, validated at start-up.
//!
//! The environment variable names are part of the deployment contract (DESIGN.md, "Running it");
//! every flag has one. Secrets (the database password) never appear in `Debug` output or logs.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::rate_limit::Rates;
use crate::secret::Secret;
use crate::store::postgres::Pooling;
use crate::telemetry::LogFormat;
use crate::tls::TlsFiles;
use crate::validation::Bound;

/// The placement oracle: where grains should live, which should move, which node a client should use.
#[derive(Debug, Parser)]
#[command(name = "placement-oracle", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub config: Config,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Apply database migrations to DATABASE_URL and exit.
    Migrate,
    /// Print the OpenAPI document and exit.
    Openapi,
}

/// Everything the service can be told at start-up.
#[derive(Clone, Args)]
pub struct Config {
    /// Address the HTTP API listens on.
    #[arg(
        long,
        env = "ORACLE_LISTEN",
        default_value = "127.0.0.1:8080",
        global = true
    )]
    pub listen: SocketAddr,

    /// Postgres connection string; unset means the embedded in-memory store.
    #[arg(long, env = "DATABASE_URL", global = true)]
    pub database_url: Option<String>,

    /// The connection string migrations use (`migrate`, and `serve` when it migrates): a direct
    /// connection to the primary, with rights to change the schema, when DATABASE_URL goes
    /// through a pooler or names a role without them. Defaults to DATABASE_URL.
    #[arg(long, env = "ORACLE_MIGRATION_DATABASE_URL", global = true)]
    pub migration_database_url: Option<String>,

    /// Whether `serve` applies pending migrations before serving. With `false` (migrations run
    /// once, by `placement-oracle migrate` or a Kubernetes Job), it checks that the schema is
    /// current and refuses to start if it is not.
    #[arg(
        long,
        env = "ORACLE_MIGRATE_ON_START",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        global = true
    )]
    pub migrate_on_start: bool,

    /// Default silence (ms) after which a silo is dead; a cluster's policy may override it.
    #[arg(
        long,
        env = "ORACLE_SILO_TTL_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub silo_ttl_ms: u64,

    /// Postgres connections per replica.
    #[arg(long, env = "ORACLE_DB_POOL_SIZE", default_value_t = 16, global = true)]
    pub db_pool_size: u32,

    /// Whether DATABASE_URL goes through a transaction-mode pooler (PgBouncer `pool_mode =
    /// transaction` before 1.21): statements are then unnamed and each runs in a transaction, as
    /// such a pooler needs (four round trips instead of one). Migrations need a direct
    /// connection (ORACLE_MIGRATION_DATABASE_URL) there.
    #[arg(
        long,
        env = "ORACLE_DB_TRANSACTION_POOLING",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        global = true
    )]
    pub db_transaction_pooling: bool,

    /// Longest wait (ms) for a Postgres connection. Kept well under the request timeout so that an
    /// unreachable database is answered as such (503 `store-unavailable`), and then at once.
    #[arg(
        long,
        env = "ORACLE_DB_ACQUIRE_TIMEOUT_MS",
        default_value_t = 500,
        global = true
    )]
    pub db_acquire_timeout_ms: u64,

    /// Most clusters the oracle holds; creating another is refused (409).
    #[arg(
        long,
        env = "ORACLE_MAX_CLUSTERS",
        default_value_t = 10_000,
        global = true
    )]
    pub max_clusters: u64,

    /// Most silos that are not dead in one cluster; a new silo beyond it is refused (429) until
    /// one leaves or dies.
    #[arg(
        long,
        env = "ORACLE_MAX_SILOS_PER_CLUSTER",
        default_value_t = 5_000,
        global = true
    )]
    pub max_silos_per_cluster: u64,

    /// How old (ms) a silo's stored heartbeat gets before the replica its heartbeats reach writes
    /// those that changed only load figures: it answers them from its copy of the row, with a
    /// lease cut to end within the protection the stored heartbeat gave, and writes them every
    /// 250 ms for the silos whose stored heartbeat is this old less 250 ms, many silos a
    /// statement (a heartbeat's own request writes it when the stored one is twice this old).
    /// Figures that hardly moved from the stored ones (CPU within 5 points, counts and bytes
    /// within a twentieth) wait until the stored heartbeat is a third of the TTL old. Its own
    /// placements and rebalancer see the figures at once; other replicas see them about this much
    /// later (a third of the TTL for figures that hardly moved). 0 writes every heartbeat; never
    /// more than a third of a cluster's TTL.
    #[arg(
        long,
        env = "ORACLE_HEARTBEAT_WRITE_AFTER_MS",
        default_value_t = crate::store::DEFAULT_HEARTBEAT_WRITE_AFTER_MS as u64,
        global = true
    )]
    pub heartbeat_write_after_ms: u64,

    /// Longest time (ms) a request may take before it is answered with 503.
    #[arg(
        long,
        env = "ORACLE_REQUEST_TIMEOUT_MS",
        default_value_t = 5_000,
        global = true
    )]
    pub request_timeout_ms: u64,

    /// Largest request body accepted, in bytes.
    #[arg(
        long,
        env = "ORACLE_BODY_LIMIT_BYTES",
        default_value_t = 1_048_576,
        global = true
    )]
    pub body_limit_bytes: usize,

    /// Most requests this replica serves at once; the next is answered 503
    /// `concurrency-limit-reached` at once instead of queueing (health, readiness and metrics are
    /// never refused). 1024 is far above a healthy replica's need (about 40 in flight at its
    /// ~40k placements/s of about a millisecond each, 256 in the benchmarks' widest sweep), so it
    /// only bites when something downstream stalls (the store, a webhook): then it bounds memory
    /// (each request may hold a body of ORACLE_BODY_LIMIT_BYTES) and tells clients to back off or
    /// go elsewhere instead of letting every request wait into its timeout.
    #[arg(
        long,
        env = "ORACLE_MAX_CONCURRENT_REQUESTS",
        default_value_t = 1_024,
        global = true
    )]
    pub max_concurrent_requests: usize,

    /// When set, the latency (ms) this replica keeps nine in ten of its answers under, by
    /// admitting fewer requests at once than ORACLE_MAX_CONCURRENT_REQUESTS while they take longer
    /// (never fewer than 256): past its capacity it refuses more at once (503 with `Retry-After`)
    /// and admits fewer to wait behind the rest. Answers that waited on a placement webhook are
    /// not judged. 0 (the default) keeps the limit fixed: fewer in flight make smaller store
    /// batches, and measured at three times a fleet's capacity a target served a quarter to a
    /// half less (docs/PERFORMANCE.md); an operator who prefers shorter waits to more answers
    /// sets it.
    #[arg(
        long,
        env = "ORACLE_ADMISSION_TARGET_MS",
        default_value_t = 0,
        global = true
    )]
    pub admission_target_ms: u64,

    /// Heartbeats per second one cluster may send to this replica (0 = unlimited); beyond it, 429
    /// `rate-limited`. A cluster has at most ORACLE_MAX_SILOS_PER_CLUSTER (5,000) live silos
    /// beating about once a second, so 10,000 leaves room for a whole cluster retrying at once and
    /// only stops one that is misbehaving (a beat loop without a sleep, say).
    #[arg(
        long,
        env = "ORACLE_RATE_LIMIT_HEARTBEATS",
        default_value_t = Rates::DEFAULT.heartbeats,
        global = true
    )]
    pub rate_limit_heartbeats: u32,

    /// Grains one cluster may have placed per second by this replica, single or in batches (0 =
    /// unlimited). One replica serves about 40,000 single placements a second and batches go
    /// faster; 100,000 never limits a cluster that one replica could serve anyway, and stops a
    /// runaway batch job from taking every other cluster's share.
    #[arg(
        long,
        env = "ORACLE_RATE_LIMIT_PLACEMENTS",
        default_value_t = Rates::DEFAULT.placements,
        global = true
    )]
    pub rate_limit_placements: u32,

    /// Edges one cluster may report per second to this replica (0 = unlimited). Reports are cheap
    /// appends to a bounded buffer; 200,000 is 40 sampled edges a second from each of 5,000 silos,
    /// or twenty full reports of 10,000 edges at once.
    #[arg(
        long,
        env = "ORACLE_RATE_LIMIT_EDGES",
        default_value_t = Rates::DEFAULT.edges,
        global = true
    )]
    pub rate_limit_edges: u32,

    /// Log output: human-readable text or one JSON object per line.
    #[arg(long, env = "ORACLE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,

    /// Address of the DNS listener for connection pools (UDP); unset means off.
    #[arg(long, env = "ORACLE_DNS_LISTEN", global = true)]
    pub dns_listen: Option<SocketAddr>,

    /// The zone the DNS listener answers: `{pool}.{cluster}.{zone}`.
    #[arg(
        long,
        env = "ORACLE_DNS_ZONE",
        default_value = "oracle.internal",
        global = true
    )]
    pub dns_zone: String,

    /// This replica's name in cluster leases (who runs a cluster's background work); unset means
    /// the host name and process id.
    #[arg(long, env = "ORACLE_REPLICA_ID", global = true)]
    pub replica_id: Option<String>,

    /// How long a cluster lease lasts unless renewed (ms): the longest a dead replica's clusters
    /// wait for another replica to carry on their background work.
    #[arg(
        long,
        env = "ORACLE_LEASE_TTL_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub lease_ttl_ms: u64,

    /// How long this replica may answer a placement of a known grain from its own recent answers
    /// (ms) instead of the database; 0 turns that cache off. Another replica's change to the grain
    /// can reach this replica's answers this much later (never a second activation: see the
    /// README, "What a runtime does with an answer").
    #[arg(
        long,
        env = "ORACLE_DIRECTORY_CACHE_TTL_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub directory_cache_ttl_ms: u64,

    /// Most answers that cache keeps.
    #[arg(
        long,
        env = "ORACLE_DIRECTORY_CACHE_ENTRIES",
        default_value_t = 1_000_000,
        global = true
    )]
    pub directory_cache_entries: usize,

    /// The admin credential: issues and revokes cluster keys and may do anything. Unset (and no
    /// `ORACLE_ADMIN_TOKEN_FILE`) means open mode: no credential is asked for, and the API may
    /// only listen on a loopback address.
    #[arg(
        long,
        env = "ORACLE_ADMIN_TOKEN",
        global = true,
        hide_env_values = true
    )]
    pub admin_token: Option<Secret>,

    /// A file holding the admin credential (a mounted secret); surrounding white space is ignored.
    #[arg(long, env = "ORACLE_ADMIN_TOKEN_FILE", global = true)]
    pub admin_token_file: Option<PathBuf>,

    /// A PEM certificate chain: with ORACLE_TLS_KEY_FILE, the API is served over TLS (https).
    #[arg(long, env = "ORACLE_TLS_CERT_FILE", global = true)]
    pub tls_cert_file: Option<PathBuf>,

    /// The PEM private key of ORACLE_TLS_CERT_FILE's certificate.
    #[arg(long, env = "ORACLE_TLS_KEY_FILE", global = true)]
    pub tls_key_file: Option<PathBuf>,

    /// How often (ms) the TLS files are checked for a renewed certificate, served once it loads.
    #[arg(
        long,
        env = "ORACLE_TLS_RELOAD_CHECK_MS",
        default_value_t = 10_000,
        global = true
    )]
    pub tls_reload_check_ms: u64,

    /// The secret cluster keys are hashed under; unset means one derived from the admin token.
    /// Set it (the same on every replica) to rotate the admin token without invalidating keys.
    #[arg(
        long,
        env = "ORACLE_KEY_HASH_SECRET",
        global = true,
        hide_env_values = true
    )]
    pub key_hash_secret: Option<Secret>,

    /// A file holding ORACLE_KEY_HASH_SECRET (a mounted secret); surrounding white space is ignored.
    #[arg(long, env = "ORACLE_KEY_HASH_SECRET_FILE", global = true)]
    pub key_hash_secret_file: Option<PathBuf>,

    /// How long this replica trusts a cluster key it looked up (ms) before reading it again: a key
    /// revoked through another replica stops working here this much later. 0 reads every time.
    #[arg(
        long,
        env = "ORACLE_KEY_CACHE_TTL_MS",
        default_value_t = 5_000,
        global = true
    )]
    pub key_cache_ttl_ms: u64,

    /// Serve in open mode on a non-loopback address anyway: anyone who reaches the port may do
    /// anything. For a trusted network only; logged as a warning at start-up.
    #[arg(long, env = "ORACLE_INSECURE_OPEN", global = true)]
    pub insecure_open: bool,

    /// Hosts the `webhook` strategy may call, comma-separated: names, IP addresses or `*.` and a
    /// name (its subdomains), each optionally with `:port`. A policy naming another host is
    /// refused (422) and a stored one is not called. In open mode loopback hosts are allowed too.
    #[arg(long, env = "ORACLE_WEBHOOK_ALLOWED_HOSTS", global = true)]
    pub webhook_allowed_hosts: Option<String>,

    /// Seed for every random decision; unset seeds from the OS. With a seed, the same sequence of
    /// requests to one replica gets the same decisions.
    #[arg(long, env = "ORACLE_RNG_SEED", global = true)]
    pub rng_seed: Option<u64>,
}

/// The highest rate limit accepted: beyond it a limit means nothing (no replica serves that much),
/// and 0 says "unlimited" plainly.
const MAX_RATE_PER_SECOND: u32 = 100_000_000;

impl Config {
    /// Every problem with the configuration, one line each, naming the variable.
    /// Every numeric setting, its value, its bound and a note for the message — each bound
    /// declared once (the silo TTL's is the policy's own).
    fn numbers(&self) -> Vec<(&'static str, f64, Bound, &'static str)> {
        let rate = Bound::new(0.0, MAX_RATE_PER_SECOND as f64);
        vec![
            (
                "ORACLE_SILO_TTL_MS",
                self.silo_ttl_ms as f64,
                crate::policy::bounds::SILO_TTL_MS,
                " (0.1 s to one day)",
            ),
            (
                "ORACLE_DB_POOL_SIZE",
                f64::from(self.db_pool_size),
                Bound::new(1.0, 1_000.0),
                "",
            ),
            (
                "ORACLE_REQUEST_TIMEOUT_MS",
                self.request_timeout_ms as f64,
                Bound::new(1.0, 600_000.0),
                " (ten minutes)",
            ),
            (
                "ORACLE_DB_ACQUIRE_TIMEOUT_MS",
                self.db_acquire_timeout_ms as f64,
                Bound::new(10.0, 60_000.0),
                "",
            ),
            (
                "ORACLE_MAX_CLUSTERS",
                self.max_clusters as f64,
                Bound::new(1.0, 1_000_000.0),
                "",
            ),
            (
                "ORACLE_MAX_SILOS_PER_CLUSTER",
                self.max_silos_per_cluster as f64,
                Bound::new(1.0, 100_000.0),
                "",
            ),
            (
                "ORACLE_HEARTBEAT_WRITE_AFTER_MS",
                self.heartbeat_write_after_ms as f64,
                Bound::new(0.0, 60_000.0),
                " (a minute)",
            ),
            (
                "ORACLE_BODY_LIMIT_BYTES",
                self.body_limit_bytes as f64,
                Bound::new(1_024.0, 64.0 * 1_048_576.0),
                " (64 MiB)",
            ),
            (
                "ORACLE_MAX_CONCURRENT_REQUESTS",
                self.max_concurrent_requests as f64,
                Bound::new(1.0, 1_000_000.0),
                "",
            ),
            (
                "ORACLE_ADMISSION_TARGET_MS",
                self.admission_target_ms as f64,
                Bound::new(0.0, 60_000.0),
                " (a minute; 0: a fixed limit)",
            ),
            (
                "ORACLE_RATE_LIMIT_HEARTBEATS",
                f64::from(self.rate_limit_heartbeats),
                rate,
                " per second (0: unlimited)",
            ),
            (
                "ORACLE_RATE_LIMIT_PLACEMENTS",
                f64::from(self.rate_limit_placements),
                rate,
                " per second (0: unlimited)",
            ),
            (
                "ORACLE_RATE_LIMIT_EDGES",
                f64::from(self.rate_limit_edges),
                rate,
                " per second (0: unlimited)",
            ),
            (
                "ORACLE_LEASE_TTL_MS",
                self.lease_ttl_ms as f64,
                Bound::new(1_000.0, 600_000.0),
                " (ten minutes)",
            ),
            (
                "ORACLE_DIRECTORY_CACHE_TTL_MS",
                self.directory_cache_ttl_ms as f64,
                Bound::new(0.0, 3_600_000.0),
                " (0: off; an hour)",
            ),
            (
                "ORACLE_DIRECTORY_CACHE_ENTRIES",
                self.directory_cache_entries as f64,
                Bound::new(0.0, 100_000_000.0),
                " (0: off)",
            ),
            (
                "ORACLE_KEY_CACHE_TTL_MS",
                self.key_cache_ttl_ms as f64,
                Bound::new(0.0, 600_000.0),
                " (0: read every time; ten minutes)",
            ),
        ]
    }

    pub fn validate(&self) -> Result<(), Vec<String>> {
        let mut problems: Vec<String> = self
            .numbers()
            .into_iter()
            .filter(|(_, value, bound, _)| !bound.allows(*value))
            .map(|(variable, _, bound, note)| {
                format!("{variable} must be {}{note}", bound.describe())
            })
            .collect();
        let mut check = |ok: bool, message: &str| {
            if !ok {
                problems.push(message.to_owned());
            }
        };
        check(
            self.db_acquire_timeout_ms < self.request_timeout_ms,
            "ORACLE_DB_ACQUIRE_TIMEOUT_MS must be less than ORACLE_REQUEST_TIMEOUT_MS",
        );
        if let Some(id) = &self.replica_id {
            check(
                crate::validation::token("ORACLE_REPLICA_ID", id, 128).is_ok(),
                "ORACLE_REPLICA_ID must be 1 to 128 characters without white space or control characters",
            );
        }
        let zone = self.dns_zone.trim_end_matches('.');
        check(
            !zone.is_empty()
                && zone.len() <= 200
                && zone.split('.').all(|label| {
                    !label.is_empty()
                        && label.len() <= 63
                        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                }),
            "ORACLE_DNS_ZONE must be a DNS name such as oracle.example.com",
        );
        check(
            self.admin_token.is_none() || self.admin_token_file.is_none(),
            "set ORACLE_ADMIN_TOKEN or ORACLE_ADMIN_TOKEN_FILE, not both",
        );
        check(
            self.key_hash_secret.is_none() || self.key_hash_secret_file.is_none(),
            "set ORACLE_KEY_HASH_SECRET or ORACLE_KEY_HASH_SECRET_FILE, not both",
        );
        check(
            self.key_hash_secret_file.is_none() || !self.open_mode(),
            "ORACLE_KEY_HASH_SECRET_FILE is set but no admin token is: without one there are no \
             keys to hash (set ORACLE_ADMIN_TOKEN or ORACLE_ADMIN_TOKEN_FILE, or unset it)",
        );
        if let Some(secret) = &self.key_hash_secret {
            check(
                secret.is_strong(),
                "ORACLE_KEY_HASH_SECRET must be 24 to 512 printable characters without white space \
                 (e.g. `openssl rand -hex 32`)",
            );
            check(
                !self.open_mode(),
                "ORACLE_KEY_HASH_SECRET is set but no admin token is: without one there are no \
                 keys to hash (set ORACLE_ADMIN_TOKEN or ORACLE_ADMIN_TOKEN_FILE, or unset it)",
            );
        }
        if let Some(token) = &self.admin_token {
            check(
                token.is_strong(),
                "ORACLE_ADMIN_TOKEN must be 24 to 512 printable characters without white space \
                 (e.g. `openssl rand -hex 32`)",
            );
        }
        for (name, url) in [
            ("DATABASE_URL", &self.database_url),
            (
                "ORACLE_MIGRATION_DATABASE_URL",
                &self.migration_database_url,
            ),
        ] {
            if let Some(url) = url {
                check(
                    url.starts_with("postgres://") || url.starts_with("postgresql://"),
                    &format!("{name} must be a postgres:// or postgresql:// URL"),
                );
            }
        }
        check(
            self.tls_cert_file.is_some() == self.tls_key_file.is_some(),
            "ORACLE_TLS_CERT_FILE and ORACLE_TLS_KEY_FILE go together: set both, or neither",
        );
        check(
            (100..=3_600_000).contains(&self.tls_reload_check_ms),
            "ORACLE_TLS_RELOAD_CHECK_MS must be 100 to 3600000",
        );
        check(
            self.migration_database_url.is_none() || self.database_url.is_some(),
            "ORACLE_MIGRATION_DATABASE_URL is set but DATABASE_URL is not: the embedded store has \
             no schema to migrate",
        );
        check(
            !(self.migrate_on_start && self.migrations_go_through_a_transaction_pooler()),
            "ORACLE_DB_TRANSACTION_POOLING is on and `serve` would migrate through the pooler, \
             which cannot hold the migrator's session lock: set ORACLE_MIGRATION_DATABASE_URL to \
             a direct URL, or ORACLE_MIGRATE_ON_START=false and run `migrate` directly",
        );
        if let Err(problem) = self.webhook_hosts() {
            problems.push(format!("ORACLE_WEBHOOK_ALLOWED_HOSTS: {problem}"));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// No admin credential is configured: every request is allowed (see [`Config::validate`]
    /// for where that may listen).
    pub fn open_mode(&self) -> bool {
        self.admin_token.is_none() && self.admin_token_file.is_none()
    }

    /// The hosts webhooks may call: the configured list, and loopback hosts in open mode on a
    /// loopback address (where anyone who can write a policy is already on this machine). With an
    /// admin token, or open on a public address (`--insecure-open`), only the list: a caller must
    /// not reach the oracle's own neighbours.
    pub fn webhook_hosts(&self) -> Result<crate::placement::webhook_hosts::WebhookHosts, String> {
        crate::placement::webhook_hosts::WebhookHosts::parse(
            self.webhook_allowed_hosts.as_deref().unwrap_or_default(),
            self.open_mode() && !self.insecure_open,
        )
    }

    /// Why serving on `address` is refused: open mode on an address that is not loopback, unless
    /// `--insecure-open` says the network is trusted. (Only `serve` listens; `migrate` and
    /// `openapi` are never refused.)
    pub fn refuses_to_listen(&self, address: SocketAddr) -> Option<String> {
        (self.open_mode() && !address.ip().is_loopback() && !self.insecure_open).then(|| {
            format!(
                "ORACLE_LISTEN is {}, which is not a loopback address, and no admin token is set: \
                 anyone reaching the port could do anything. Set ORACLE_ADMIN_TOKEN (or \
                 ORACLE_ADMIN_TOKEN_FILE) to require credentials, or pass --insecure-open \
                 (ORACLE_INSECURE_OPEN=true) if the network itself is trusted",
                address
            )
        })
    }

    /// Reads the admin token from `ORACLE_ADMIN_TOKEN_FILE` when that is how it is given, so
    /// that afterwards `admin_token` alone says it. Fails naming the file (never its content).
    pub fn load_secrets(&mut self) -> Result<(), String> {
        if self.admin_token.is_some() && self.admin_token_file.is_some() {
            return Err("set ORACLE_ADMIN_TOKEN or ORACLE_ADMIN_TOKEN_FILE, not both".to_owned());
        }
        if self.key_hash_secret.is_some() && self.key_hash_secret_file.is_some() {
            return Err(
                "set ORACLE_KEY_HASH_SECRET or ORACLE_KEY_HASH_SECRET_FILE, not both".to_owned(),
            );
        }
        if let Some(path) = self.admin_token_file.take() {
            self.admin_token = Some(read_secret_file(&path, "ORACLE_ADMIN_TOKEN_FILE")?);
        }
        if let Some(path) = self.key_hash_secret_file.take() {
            self.key_hash_secret = Some(read_secret_file(&path, "ORACLE_KEY_HASH_SECRET_FILE")?);
        }
        Ok(())
    }

    /// This replica's name in cluster leases.
    pub fn replica(&self) -> String {
        self.replica_id.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
                .unwrap_or_else(|| "oracle".to_owned());
            format!("{host}-{}", std::process::id())
        })
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }

    pub fn admission_target(&self) -> Duration {
        Duration::from_millis(self.admission_target_ms)
    }

    /// The silo TTL in the oracle's time unit.
    pub fn silo_ttl(&self) -> crate::clock::Millis {
        crate::clock::Millis::try_from(self.silo_ttl_ms).unwrap_or(crate::clock::Millis::MAX)
    }

    /// What the store is told: the TTL new clusters start with, and the limits.
    pub fn store_settings(&self) -> crate::store::StoreSettings {
        crate::store::StoreSettings {
            default_silo_ttl_ms: self.silo_ttl(),
            max_clusters: self.max_clusters,
            max_silos_per_cluster: self.max_silos_per_cluster,
            heartbeat_write_after_ms: crate::clock::Millis::try_from(self.heartbeat_write_after_ms)
                .unwrap_or(crate::clock::Millis::MAX),
        }
    }

    /// The per-cluster rate limits (0 = unlimited).
    pub fn rates(&self) -> Rates {
        Rates {
            heartbeats: self.rate_limit_heartbeats,
            placements: self.rate_limit_placements,
            edges: self.rate_limit_edges,
        }
    }

    pub fn db_acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.db_acquire_timeout_ms)
    }

    /// The database URL with any password replaced, for logs.
    pub fn database_url_redacted(&self) -> Option<String> {
        self.database_url.as_deref().map(redact_url)
    }

    /// The TLS files, when the API is served over TLS.
    pub fn tls_files(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            certificate: self.tls_cert_file.clone()?,
            key: self.tls_key_file.clone()?,
            check_every: Duration::from_millis(self.tls_reload_check_ms),
        })
    }

    /// Whether migrations would take DATABASE_URL through a transaction-mode pooler, which cannot
    /// hold the migrator's session lock.
    pub fn migrations_go_through_a_transaction_pooler(&self) -> bool {
        self.db_transaction_pooling && self.migration_database_url.is_none()
    }

    /// How DATABASE_URL's connections reach Postgres sessions.
    pub fn db_pooling(&self) -> Pooling {
        if self.db_transaction_pooling {
            Pooling::Transaction
        } else {
            Pooling::Session
        }
    }

    /// The URL migrations use: `ORACLE_MIGRATION_DATABASE_URL`, else `DATABASE_URL`.
    pub fn migration_url(&self) -> Option<&str> {
        self.migration_database_url
            .as_deref()
            .or(self.database_url.as_deref())
    }

    /// The configuration with no flags: defaults, overridden by any `ORACLE_*`/`DATABASE_URL`
    /// variables in the environment. For tests and tools that build an app in-process.
    pub fn defaults() -> Self {
        Cli::parse_from(["placement-oracle"]).config
    }
}

/// A secret from a mounted file (`setting` names it in errors), without surrounding white space.
fn read_secret_file(path: &std::path::Path, setting: &str) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {setting} {}: {e}", path.display()))?;
    let secret = Secret::new(text.trim());
    if !secret.is_strong() {
        return Err(format!(
            "{setting} {}: it must hold 24 to 512 printable characters without white space (e.g. \
             `openssl rand -hex 32`)",
            path.display()
        ));
    }
    Ok(secret)
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("database_url", &self.database_url_redacted())
            .field(
                "migration_database_url",
                &self.migration_database_url.as_deref().map(redact_url),
            )
            .field("migrate_on_start", &self.migrate_on_start)
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .field("tls_reload_check_ms", &self.tls_reload_check_ms)
            .field("silo_ttl_ms", &self.silo_ttl_ms)
            .field("db_pool_size", &self.db_pool_size)
            .field("db_transaction_pooling", &self.db_transaction_pooling)
            .field("db_acquire_timeout_ms", &self.db_acquire_timeout_ms)
            .field("max_clusters", &self.max_clusters)
            .field("max_silos_per_cluster", &self.max_silos_per_cluster)
            .field("request_timeout_ms", &self.request_timeout_ms)
            .field("body_limit_bytes", &self.body_limit_bytes)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("admission_target_ms", &self.admission_target_ms)
            .field("rate_limit_heartbeats", &self.rate_limit_heartbeats)
            .field("rate_limit_placements", &self.rate_limit_placements)
            .field("rate_limit_edges", &self.rate_limit_edges)
            .field("log_format", &self.log_format)
            .field("dns_listen", &self.dns_listen)
            .field("dns_zone", &self.dns_zone)
            .field("admin_token", &self.admin_token)
            .field("admin_token_file", &self.admin_token_file)
            .field("key_hash_secret", &self.key_hash_secret)
            .field("key_hash_secret_file", &self.key_hash_secret_file)
            .field("key_cache_ttl_ms", &self.key_cache_ttl_ms)
            .field("insecure_open", &self.insecure_open)
            .field("webhook_allowed_hosts", &self.webhook_allowed_hosts)
            .field("rng_seed", &self.rng_seed)
            .finish()
    }
}

/// Replaces the password of `scheme://user:password@host/…` with `***`.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "***".to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((credentials, host)) => match credentials.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_at_start_is_on_unless_turned_off_in_any_usual_spelling() {
        let parse = |args: &[&str]| {
            let mut all = vec!["placement-oracle"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all).map(|cli| cli.config.migrate_on_start)
        };
        assert!(parse(&[]).unwrap());
        assert!(parse(&["--migrate-on-start"]).unwrap());
        for off in ["false", "no", "0", "off"] {
            assert!(!parse(&["--migrate-on-start", off]).unwrap(), "{off}");
        }
        assert!(parse(&["--migrate-on-start", "maybe"]).is_err());
    }

    #[test]
    fn passwords_never_show_in_debug_output() {
        let mut config = Config::defaults();
        config.database_url =
            Some("postgres://oracle:s3cret@db:5432/oracle?sslmode=disable".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("postgres://oracle:***@db:5432/oracle?sslmode=disable"));
    }

    #[test]
    fn open_mode_refuses_a_public_address_unless_told_it_is_trusted() {
        let mut config = Config::defaults();
        config.admin_token = None;
        config.listen = "0.0.0.0:8080".parse().unwrap();
        let refusal = config.refuses_to_listen(config.listen).unwrap();
        assert!(refusal.contains("ORACLE_ADMIN_TOKEN") && refusal.contains("--insecure-open"));
        config.insecure_open = true;
        assert_eq!(config.refuses_to_listen(config.listen), None);
        config.insecure_open = false;
        config.admin_token = Some(Secret::new("0123456789abcdef0123456789abcdef"));
        assert_eq!(config.refuses_to_listen(config.listen), None);
        config.listen = "[::1]:8080".parse().unwrap();
        config.admin_token = None;
        assert_eq!(config.refuses_to_listen(config.listen), None);
    }

    #[test]
    fn the_admin_token_never_shows_and_must_be_strong() {
        let mut config = Config::defaults();
        config.admin_token = Some(Secret::new("0123456789abcdef0123456789abcdef"));
        assert!(!format!("{config:?}").contains("0123456789abcdef"));
        config.admin_token = Some(Secret::new("short"));
        assert!(config.validate().unwrap_err()[0].contains("ORACLE_ADMIN_TOKEN"));
    }

    #[test]
    fn a_key_hash_secret_needs_an_admin_token_and_never_shows() {
        let mut config = Config::defaults();
        config.admin_token = None;
        config.admin_token_file = None;
        config.key_hash_secret = Some(Secret::new("fedcba9876543210fedcba9876543210"));
        assert!(config.validate().unwrap_err()[0].contains("no admin token"));
        config.admin_token = Some(Secret::new("0123456789abcdef0123456789abcdef"));
        assert_eq!(config.validate(), Ok(()));
        assert!(!format!("{config:?}").contains("fedcba9876543210"));
        config.key_hash_secret = Some(Secret::new("short"));
        assert!(config.validate().unwrap_err()[0].contains("ORACLE_KEY_HASH_SECRET"));
    }

    #[test]
    fn the_admin_token_can_come_from_a_file() {
        let path = std::env::temp_dir().join(format!("oracle-token-{}", std::process::id()));
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").unwrap();
        let mut config = Config::defaults();
        config.admin_token = None;
        config.admin_token_file = Some(path.clone());
        assert!(!config.open_mode());
        config.load_secrets().unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(
            config.admin_token.as_ref().map(Secret::expose),
            Some("0123456789abcdef0123456789abcdef")
        );
        config.admin_token_file = Some(path.clone());
        assert!(config.load_secrets().unwrap_err().contains("not both"));
        config.admin_token = None;
        assert!(config
            .load_secrets()
            .unwrap_err()
            .contains("ORACLE_ADMIN_TOKEN_FILE"));
    }

    #[test]
    fn the_key_hash_secret_can_come_from_a_file_and_needs_an_admin_token_there_too() {
        let path = std::env::temp_dir().join(format!("oracle-hash-{}", std::process::id()));
        std::fs::write(&path, " fedcba9876543210fedcba9876543210\n").unwrap();
        let mut config = Config::defaults();
        config.admin_token = None;
        config.admin_token_file = None;
        config.key_hash_secret_file = Some(path.clone());
        assert!(config.validate().unwrap_err()[0].contains("no admin token"));
        config.admin_token = Some(Secret::new("0123456789abcdef0123456789abcdef"));
        assert_eq!(config.validate(), Ok(()));
        config.load_secrets().unwrap();
        assert_eq!(
            config.key_hash_secret.as_ref().map(Secret::expose),
            Some("fedcba9876543210fedcba9876543210")
        );
        config.key_hash_secret_file = Some(path.clone());
        assert!(config.load_secrets().unwrap_err().contains("not both"));
        config.key_hash_secret = None;
        std::fs::write(&path, "short").unwrap();
        assert!(config
            .load_secrets()
            .unwrap_err()
            .contains("ORACLE_KEY_HASH_SECRET_FILE"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn webhook_hosts_are_the_list_plus_loopback_in_open_mode_and_bad_entries_are_named() {
        let url = |u: &str| url::Url::parse(u).unwrap();
        let mut config = Config::defaults();
        config.admin_token = None;
        config.admin_token_file = None;
        config.webhook_allowed_hosts = Some("hook.internal:9000".into());
        let open = config.webhook_hosts().unwrap();
        assert!(open.allows(&url("http://127.0.0.1:1/")).is_ok());
        assert!(open.allows(&url("http://hook.internal:9000/")).is_ok());
        config.insecure_open = true;
        let public = config.webhook_hosts().unwrap();
        assert!(
            public.allows(&url("http://127.0.0.1:1/")).is_err(),
            "open on a public address"
        );
        config.insecure_open = false;
        config.admin_token = Some(Secret::new("0123456789abcdef0123456789abcdef"));
        let admin = config.webhook_hosts().unwrap();
        assert!(admin.allows(&url("http://127.0.0.1:1/")).is_err());
        assert!(admin.allows(&url("http://hook.internal:9000/")).is_ok());
        assert!(format!("{config:?}").contains("hook.internal:9000"));
        config.webhook_allowed_hosts = Some("hook.internal, http://evil.example/".into());
        let problems = config.validate().unwrap_err();
        assert!(
            problems[0].contains("ORACLE_WEBHOOK_ALLOWED_HOSTS")
                && problems[0].contains("http://evil.example/"),
            "{problems:?}"
        );
    }

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        assert_eq!(Config::defaults().validate(), Ok(()));
        let mut config = Config::defaults();
        config.silo_ttl_ms = 0;
        config.db_pool_size = 0;
        let problems = config.validate().unwrap_err();
        assert!(problems[0].contains("ORACLE_SILO_TTL_MS"));
        assert!(problems[1].contains("ORACLE_DB_POOL_SIZE"));
    }

    #[test]
    fn load_limits_are_checked_by_name_and_zero_rates_mean_unlimited() {
        let mut config = Config::defaults();
        config.rate_limit_heartbeats = 0;
        config.rate_limit_placements = 0;
        config.rate_limit_edges = 0;
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.rates(), Rates::UNLIMITED);
        config.max_concurrent_requests = 0;
        config.rate_limit_edges = u32::MAX;
        let problems = config.validate().unwrap_err();
        assert!(problems[0].contains("ORACLE_MAX_CONCURRENT_REQUESTS"));
        assert!(problems[1].contains("ORACLE_RATE_LIMIT_EDGES"));
        let shown = format!("{config:?}");
        assert!(shown.contains("max_concurrent_requests: 0"));
        assert!(shown.contains("rate_limit_edges: 4294967295"));
    }
}
