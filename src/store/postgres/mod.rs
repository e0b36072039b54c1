//! The production store: Postgres through sqlx, shared by any number of oracle replicas.
//!
//! Every invariant is enforced by the database, not by a replica: the directory's primary key makes
//! registration first-writer-wins across replicas, registration checks the chosen silo's liveness in
//! the same statement that inserts and holds the silo row (`FOR KEY SHARE`, which every death's
//! `FOR UPDATE` waits for) until it commits, heartbeats
//! use optimistic concurrency on the row version, and the sweep that declares silos dead is
//! idempotent. Liveness is always the SQL function `silo_is_alive` (a migration), judged at the
//! database's clock `oracle_now_ms()` (or an injected time in tests), the same rule as
//! `cluster::silo::Liveness`. A directory entry is only ever released after its silo is marked dead,
//! and dead is final, so a late heartbeat cannot revive a silo whose grains moved.
//!
//! Every call goes through [`StoreHealth`]: calls fail fast while the database is unreachable, and
//! silence is only counted from when this replica last began reaching the store without a break.
//!
//! The statements live by aggregate, each file beside its trait's `impl` (`membership.rs` with
//! its heartbeat writes in `membership/heartbeats.rs`, `directory.rs`, `policy.rs`, `pools.rs`,
//! `leases.rs`, `migrations.rs`, `edges.rs`, `keys.rs`); `error.rs` says what Postgres' errors
//! mean in the store's words, and [`health`] is the circuit. This file holds the store itself:
//! connecting, migrating, the circuit every call goes through (`guard`), the helpers the
//! aggregates share, and [`Store`].

mod background;
mod clock_estimate;
mod deaths;
mod directory;
mod edges;
mod error;
pub mod health;
mod keys;
mod leases;
mod membership;
mod migrations;
mod policy;
mod pools;
mod readiness;
pub mod servers;
mod statements;

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgPool, Row};

use self::error::lost_a_race;
use self::health::{StoreHealth, Verdict};
use self::servers::Servers;
use self::statements::Db;
pub use self::statements::Pooling;
use super::stalls::StallWatch;
use super::{
    DatabaseServer, LimitReached, PoolStats, Reach, Store, StoreError, StoreSettings, StoreStats,
    StoreTime,
};
use crate::clock::{Clock, Millis, MonotonicClock};
use crate::cluster::{ClusterName, Liveness, SiloStatus};
use crate::telemetry::metric;

/// Longest a store call may take before the database is taken for unreachable (below the default
/// request timeout, so that the circuit sees it).
const STATEMENT_DEADLINE: Duration = Duration::from_secs(3);

/// Exact directory counts for the gauge up to this many entries; the planner's estimate beyond
/// (counting ten million rows every five seconds would cost more than the gauge is worth).
const EXACT_COUNT_UP_TO: i64 = 100_000;

/// Times a cluster's creation is made again after losing a race the database broke (see
/// `ensure_cluster`).
const CREATE_ATTEMPTS: u32 = 8;

/// Which pooled connections may be handed out or given back: none made before the last outage
/// began, or before the last call that got no answer in time. A server that stopped or crashed
/// ended every session it had; each such connection would fail one call when the server is back
/// (reopening the circuit, and restarting the count of reachable time), so they are dropped unused
/// instead. And one to a server that stopped answering (frozen, cut off) would hang sqlx's ping
/// when given back.
#[derive(Debug, Default)]
pub struct ConnectionTrust {
    outage_began: Mutex<Option<std::time::Instant>>,
}

impl ConnectionTrust {
    fn distrust_older(&self) {
        *self.lock() = Some(std::time::Instant::now());
    }

    /// Whether a connection opened `age` ago may be used.
    fn trusts(&self, age: Duration) -> bool {
        match *self.lock() {
            None => true,
            Some(outage) => std::time::Instant::now()
                .checked_sub(age)
                .is_none_or(|opened| opened > outage),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<std::time::Instant>> {
        self.outage_began
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The migrations in `migrations/`, compiled into the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The Postgres store.
#[derive(Debug)]
pub struct PostgresStore {
    /// Where every statement runs (see [`statements`]).
    db: Db,
    settings: StoreSettings,
    time: StoreTime,
    health: StoreHealth,
    /// Which pooled connections may still be handed out.
    connections: Arc<ConnectionTrust>,
    /// Whether the database takes writes, as `/readyz` asks.
    readiness: readiness::Readiness,
    /// Clusters this process has seen exist. Clusters are never deleted, so a hit saves the insert
    /// round trip on every heartbeat; a miss only costs one idempotent insert. Bounded: only
    /// clusters that exist enter it, and there are at most `max_clusters`.
    known_clusters: Mutex<HashSet<ClusterName>>,
    /// How far the database's clock may read ahead of this replica's, from the instants its
    /// heartbeat statements returned.
    clock_estimate: Mutex<clock_estimate::ClockEstimate>,
    /// The silo rows this replica's heartbeats wrote last.
    written_silos: membership::WrittenSilos,
    /// DATABASE_URL's hosts, the one connected to, and what connections found there.
    servers: Arc<Servers>,
}

impl PostgresStore {
    /// Connects a pool of `pool_size` connections that waits at most `acquire_timeout` for one,
    /// reaching Postgres sessions as `pooling` says. On the database's clock. Does not touch the
    /// schema; see [`Self::migrate`] (which needs [`Pooling::Session`]).
    pub async fn connect(
        url: &str,
        pool_size: u32,
        acquire_timeout: Duration,
        pooling: Pooling,
        settings: StoreSettings,
    ) -> Result<Self, StoreError> {
        // No startup parameter a default PgBouncer refuses ("unsupported startup parameter"):
        // sqlx would send `extra_float_digits` (text-format floats only; every query here is
        // binary) and `options`, so the session setting below is made once per new connection
        // instead, which also survives a pooler that drops startup options.
        let options = |url: &str| {
            let options = PgConnectOptions::from_str(url)?.extra_float_digits(None);
            // Nothing cached on a connection whose next transaction may run elsewhere. (This alone
            // does not stop sqlx naming a statement: the executor's `Unnamed` does, and anything
            // that goes around the executor, like `pool()`, must not run statements there.)
            Ok(match pooling {
                Pooling::Transaction => options.statement_cache_capacity(0),
                Pooling::Session => options,
            })
        };
        let hosts = servers::host_list(url).map_err(StoreError::Failed)?;
        let servers = Arc::new(Servers::new(hosts, options)?);
        // Several hosts: start on the first found to take writes (else the first, which fails).
        servers.choose_at_start().await;
        let admitting = servers.clone();
        let connections = Arc::new(ConnectionTrust::default());
        let (trust, released) = (connections.clone(), connections.clone());
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(acquire_timeout)
            // sqlx pings every connection before handing it out by default: a second round trip
            // on every query. A connection that broke since its last use fails its query instead
            // (answered 503, retried by the client) and is replaced — and after an outage, none
            // made before it is handed out at all (a restarted server ended their sessions).
            .test_before_acquire(false)
            .before_acquire(move |_, connection| {
                let trusted = trust.trusts(connection.age);
                Box::pin(async move { Ok(trusted) })
            })
            // sqlx pings every connection given back, with no deadline: one to a frozen server
            // (a paused VM) would hang until it thaws, holding its place in the pool, until no
            // connection to anywhere else could be opened. Connections no longer trusted are
            // closed instead (a close waits for nothing), and a call that got no answer in time
            // distrusts the connections older than it before it gives its own back.
            .after_release(move |_, connection| {
                let trusted = released.trusts(connection.age);
                Box::pin(async move { Ok(trusted) })
            })
            // Every query here is a short indexed statement whose best plan does not depend on
            // its parameters. Postgres would otherwise keep planning some of them afresh on each
            // call (its cost model prefers custom plans for `= ANY($array)`), which measured as
            // 2.4× the database CPU per directory lookup.
            // (Through a transaction-mode pooler the setting would stay on whichever session the
            // pooler chose, and unnamed statements are planned for their parameters anyway.)
            // Before that, the session is checked (`Servers::admit`): a server in recovery, or on
            // an older timeline than one written on, is refused, and sqlx connects again. Behind
            // a transaction-mode pooler a connection is bound to no server, so nothing is checked.
            .after_connect(move |connection, _| {
                let admitting = admitting.clone();
                Box::pin(async move {
                    if pooling == Pooling::Transaction {
                        return Ok(());
                    }
                    admitting.admit(connection).await?;
                    sqlx::Executor::execute(
                        &mut *connection,
                        "SET plan_cache_mode = force_generic_plan",
                    )
                    .await?;
                    Ok(())
                })
            })
            .connect_with(servers.chosen())
            .await
            .map_err(|error| servers.explain(error))?;
        let mut store = Self::from_pool(
            pool,
            pooling,
            settings,
            StoreTime::Database,
            Arc::new(MonotonicClock::default()),
            StallWatch::process(),
        );
        store.connections = connections;
        store.servers = servers;
        Ok(store)
    }

    /// A store on `pool`, taking time from `time`; `local_clock` measures this replica's own
    /// durations (how long the database has been reachable), and `stalls` says when its process
    /// did not run.
    pub fn from_pool(
        pool: PgPool,
        pooling: Pooling,
        settings: StoreSettings,
        time: StoreTime,
        local_clock: Arc<dyn Clock>,
        stalls: Arc<StallWatch>,
    ) -> Self {
        let servers = Arc::new(Servers::of_pool(&pool));
        Self {
            servers,
            db: Db::new(pool, pooling),
            settings,
            time,
            health: StoreHealth::new(local_clock, stalls),
            connections: Arc::default(),
            readiness: readiness::Readiness::default(),
            known_clusters: Mutex::default(),
            clock_estimate: Mutex::default(),
            written_silos: membership::WrittenSilos::default(),
        }
    }

    /// Applies pending migrations. Safe when several replicas start at once: sqlx serialises
    /// migrators with a database lock and each one skips what is already applied.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        // Clusters created before the TTL was stored with them were judged by the replicas'
        // configured default: keep that for them before the migration makes the TTL required.
        let has_clusters: bool = sqlx::query_scalar("SELECT to_regclass('clusters') IS NOT NULL")
            .fetch_one(&self.db)
            .await?;
        if has_clusters {
            sqlx::query("UPDATE clusters SET silo_ttl_ms = $1 WHERE silo_ttl_ms IS NULL")
                .bind(self.settings.default_silo_ttl_ms)
                .execute(&self.db)
                .await?;
        }
        MIGRATOR.run(self.db.pool()).await?;
        Ok(())
    }

    /// The migrations of this version the database has not applied (`version description`), in
    /// order: none when its schema is current.
    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
                .fetch_all(&self.db)
                .await
                .or_else(|error| match &error {
                    // No migration was ever applied: the table does not exist.
                    sqlx::Error::Database(e) if e.code().as_deref() == Some("42P01") => {
                        Ok(Vec::new())
                    }
                    _ => Err(error),
                })?;
        Ok(MIGRATOR
            .iter()
            .filter(|m| !applied.contains(&m.version))
            .map(|m| format!("{} {}", m.version, m.description))
            .collect())
    }

    pub fn pool(&self) -> &PgPool {
        self.db.pool()
    }

    /// The injected time, or `NULL` for the database's clock: statements read
    /// `COALESCE($n::int8, oracle_now_ms())`.
    fn now(&self) -> Option<Millis> {
        match &self.time {
            StoreTime::Database => None,
            StoreTime::Clock(clock) => Some(clock.now_ms()),
        }
    }

    /// Records that a statement sent at `sent` (this replica's clock) ran at `instant` (the
    /// store's).
    fn observe_clock(&self, sent: Millis, instant: Millis) {
        self.clock_estimate
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(sent, instant);
    }

    /// The judge of one statement's instant: the store's clock and the cluster's TTL from `row`
    /// (columns `now` and `ttl`), and how long this replica had reached the store when it asked
    /// (measured before the statement, so it errs towards counting less silence).
    fn liveness_from_row(
        &self,
        row: &PgRow,
        reachable_for: Millis,
    ) -> Result<Liveness, StoreError> {
        let now: Millis = row.try_get("now")?;
        Ok(Liveness {
            now,
            silo_ttl_ms: row.try_get("ttl")?,
            reachable_since: now - reachable_for,
        })
    }

    /// Runs one store call through the circuit ([`StoreHealth`]). A call that takes longer than
    /// [`STATEMENT_DEADLINE`] got no answer in time, like a wait for a connection that timed out
    /// (a connection black-holed by the network never errors by itself): an outage if no other
    /// call got an answer meanwhile. When an outage begins, the pool's connections are no longer
    /// trusted: a server that stopped ended their sessions, and each would fail one call after it
    /// comes back. A call that succeeded without taking a connection is no answer from the
    /// database: it neither ends an outage nor counts as reaching the store.
    async fn guard<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.health.admit()?;
        let started = self.health.now();
        let timer = std::time::Instant::now();
        let mut call = std::pin::pin!(statements::sent_anything(call));
        let (outcome, reach) = match tokio::time::timeout(STATEMENT_DEADLINE, &mut call).await {
            Err(_) => {
                // Before the call (and its connection) is dropped: its connection, and every
                // one opened before it, may lead to a server that no longer answers.
                self.connections.distrust_older();
                (Err(StoreError::TimedOut(String::new())), Reach::NoAnswer)
            }
            Ok((Ok(answer), true)) => (Ok(answer), Reach::Answered),
            // Answered from this replica's own copies: no news of the database. (The flush of
            // held heartbeats, every 250 ms with nothing due, ended real outages as the probe.)
            Ok((Ok(answer), false)) => (Ok(answer), Reach::Unknown),
            Ok((Err(error), _)) => {
                // A wait for a connection that timed out while connections were refused at
                // connect (a standby, an older primary) is answered with why they were.
                let error = match error {
                    StoreError::TimedOut(_) => self.servers.refused_since(timer).unwrap_or(error),
                    error => error,
                };
                let reach = error.reach();
                (Err(error), reach)
            }
        };
        metric::store_call(timer.elapsed());
        let (outcome, verdict) = self.health.settle(started, reach, outcome);
        if verdict == Verdict::OutageBegan {
            self.connections.distrust_older();
        }
        if matches!(verdict, Verdict::OutageBegan | Verdict::StillDown) {
            self.servers.search_in_background(self.db.pool());
        }
        outcome
    }

    /// Makes sure the cluster exists, creating it (with this replica's default TTL) unless that
    /// would exceed the cluster limit.
    async fn ensure_cluster(&self, cluster: &ClusterName) -> Result<(), StoreError> {
        if self.known().contains(cluster) {
            return Ok(());
        }
        // Creations of different clusters at once each count every cluster: an engine that runs
        // transactions serializable fails all but one of them, and they are made again.
        let mut attempts = 0;
        let exists: bool = loop {
            let created = sqlx::query_scalar(
                "WITH created AS (
                    INSERT INTO clusters (name, silo_ttl_ms, created_ms)
                    SELECT $1, $2, COALESCE($3::int8, oracle_now_ms())
                    WHERE NOT EXISTS (SELECT 1 FROM clusters WHERE name = $1)
                      AND (SELECT count(*) FROM clusters) < $4
                    ON CONFLICT DO NOTHING
                    RETURNING name
                 )
                 SELECT EXISTS (SELECT 1 FROM created) OR EXISTS (SELECT 1 FROM clusters WHERE name = $1)",
            )
            .bind(cluster.as_str())
            .bind(self.settings.default_silo_ttl_ms)
            .bind(self.now())
            .bind(i64::try_from(self.settings.max_clusters).unwrap_or(i64::MAX))
            .fetch_one(&self.db)
            .await;
            match created {
                Err(error) if lost_a_race(&error) && attempts < CREATE_ATTEMPTS => attempts += 1,
                created => break created?,
            }
        };
        // A concurrent creation of the same name is invisible to this statement's snapshot.
        let exists = exists
            || sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM clusters WHERE name = $1)")
                .bind(cluster.as_str())
                .fetch_one(&self.db)
                .await?;
        if !exists {
            return Err(LimitReached::Clusters {
                max: self.settings.max_clusters,
            }
            .into());
        }
        self.known().insert(cluster.clone());
        Ok(())
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashSet<ClusterName>> {
        self.known_clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Cluster names as the database holds them (each was checked on its way in).
fn cluster_names(names: &[String]) -> Result<Vec<ClusterName>, StoreError> {
    names
        .iter()
        .map(|n| ClusterName::parse(n).map_err(|e| StoreError::Corrupt(e.to_string())))
        .collect()
}

/// Decodes a stored document (policy, pool) that a newer version may have written: fields this
/// version does not know are kept in the database and ignored here (requests still refuse them).
fn decode_stored<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, StoreError> {
    crate::validation::from_stored_json(value).map_err(StoreError::Corrupt)
}

/// The statements behind [`Store::stats`], before the circuit (see the `Store` impl below).
impl PostgresStore {
    async fn try_stats(&self) -> Result<StoreStats, StoreError> {
        let rows =
            sqlx::query("SELECT status, count(*) AS n FROM silos GROUP BY status ORDER BY status")
                .fetch_all(&self.db)
                .await?;
        let mut silos_by_status = Vec::with_capacity(rows.len());
        for row in &rows {
            let status: String = row.try_get("status")?;
            let n: i64 = row.try_get("n")?;
            if let Some(status) = SiloStatus::parse(&status) {
                silos_by_status.push((status, u64::try_from(n).unwrap_or(0)));
            }
        }
        let entries: i64 = sqlx::query_scalar(
            "SELECT CASE WHEN exact.n <= $1 THEN exact.n
                         ELSE GREATEST((SELECT reltuples FROM pg_class WHERE oid = 'activations'::regclass)::int8, exact.n)
                    END
             FROM (SELECT count(*) AS n FROM (SELECT 1 FROM activations LIMIT $1 + 1) x) exact",
        )
        .bind(EXACT_COUNT_UP_TO)
        .fetch_one(&self.db)
        .await?;
        let open_migrations: i64 = sqlx::query_scalar("SELECT count(*) FROM migrations")
            .fetch_one(&self.db)
            .await?;
        let pool = self.db.pool();
        let size = pool.size();
        let idle = u32::try_from(pool.num_idle()).unwrap_or(u32::MAX);
        Ok(StoreStats {
            silos_by_status,
            directory_entries: u64::try_from(entries).unwrap_or(0),
            open_migrations: u64::try_from(open_migrations).unwrap_or(0),
            pool: Some(PoolStats {
                in_use: size.saturating_sub(idle),
                idle,
                max: pool.options().get_max_connections(),
            }),
        })
    }
}

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn local_now(&self) -> Option<Millis> {
        self.now()
    }

    /// A small write that must commit in time ([`readiness`]), through the circuit like every
    /// call: a read-only database opens it, and a stalled commit is answered without opening it
    /// (reads may still be served).
    async fn ping(&self) -> Result<(), StoreError> {
        self.readiness
            .answer(|| self.guard(self.readiness.write(&self.db)))
            .await
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.guard(self.try_stats()).await
    }

    fn outages_seen(&self) -> u64 {
        self.health.outages_seen()
    }

    fn could_not_keep_up(&self) {
        self.health.could_not_keep_up();
    }

    fn database_server(&self) -> Option<DatabaseServer> {
        self.servers.admitted().map(|session| DatabaseServer {
            server: session.server,
            timeline: session.timeline,
        })
    }
}
