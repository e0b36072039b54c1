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

mod edges;
mod error;
pub mod health;
mod keys;
mod leases;
mod migrations;

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{PgPool, Row};

use self::error::{
    deadlock_as_contention, has_sqlstate, PgError, DEADLOCK_DETECTED, FOREIGN_KEY_VIOLATION,
};
use self::health::{StoreHealth, Verdict};
use super::{
    Activation, Departure, DirectoryStore, HeartbeatOutcome, HeartbeatUpdate, HeartbeatUpdates,
    LimitReached, Located, Membership, MembershipStore, NewActivation, PolicyStore, PoolStore,
    Proposal, Reach, Reaped, Reaping, Registration, SiloPage, Store, StoreError, StoreSettings,
    StoreStats, StoreTime, DEAD_SILO_RETENTION_MS, RELEASE_CHUNK,
};
use crate::clock::{Clock, Millis, MonotonicClock};
use crate::cluster::silo::SiloProfile;
use crate::cluster::{
    ClusterName, GrainId, HeartbeatRejection, Liveness, PoolName, SiloId, SiloRecord, SiloStatus,
};
use crate::connect::Pool;
use crate::policy::Policy;

/// Optimistic heartbeat writes retry this many times before giving up (only a silo hammering the
/// oracle with concurrent heartbeats for itself could lose this often).
const MAX_HEARTBEAT_ATTEMPTS: u32 = 8;

/// Silos of one heartbeat batch taking the one-by-one path at once (each holds a connection).
const SILOS_ONE_BY_ONE_AT_ONCE: usize = 4;

/// Longest a store call may take before the database is taken for unreachable (below the default
/// request timeout, so that the circuit sees it).
const STATEMENT_DEADLINE: Duration = Duration::from_secs(3);

/// Most expired tombstones one sweep forgets.
const FORGET_CHUNK: i64 = 1_000;
/// Exact directory counts for the gauge up to this many entries; the planner's estimate beyond
/// (counting ten million rows every ten seconds would cost more than the gauge is worth).
const EXACT_COUNT_UP_TO: i64 = 100_000;

/// Which pooled connections may be handed out: none made before the last outage began. A server
/// that stopped or crashed ended every session it had; each such connection would fail one call
/// when the server is back (reopening the circuit, and restarting the count of reachable time),
/// so they are dropped unused instead.
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
    pool: PgPool,
    settings: StoreSettings,
    time: StoreTime,
    health: StoreHealth,
    /// Which pooled connections may still be handed out.
    connections: Arc<ConnectionTrust>,
    /// Clusters this process has seen exist. Clusters are never deleted, so a hit saves the insert
    /// round trip on every heartbeat; a miss only costs one idempotent insert. Bounded: only
    /// clusters that exist enter it, and there are at most `max_clusters`.
    known_clusters: Mutex<HashSet<ClusterName>>,
}

impl PostgresStore {
    /// Connects a pool of `pool_size` connections that waits at most `acquire_timeout` for one. On
    /// the database's clock. Does not touch the schema; see [`Self::migrate`].
    pub async fn connect(
        url: &str,
        pool_size: u32,
        acquire_timeout: Duration,
        settings: StoreSettings,
    ) -> Result<Self, StoreError> {
        // Every query here is a short indexed statement whose best plan does not depend on its
        // parameters. Postgres would otherwise keep planning some of them afresh on each call
        // (its cost model prefers custom plans for `= ANY($array)`), which measured as 2.4× the
        // database CPU per directory lookup.
        let options =
            PgConnectOptions::from_str(url)?.options([("plan_cache_mode", "force_generic_plan")]);
        let connections = Arc::new(ConnectionTrust::default());
        let trust = connections.clone();
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
            .connect_with(options)
            .await?;
        let mut store = Self::from_pool(
            pool,
            settings,
            StoreTime::Database,
            Arc::new(MonotonicClock::default()),
        );
        store.connections = connections;
        Ok(store)
    }

    /// A store on `pool`, taking time from `time`; `local_clock` measures this replica's own
    /// durations (how long the database has been reachable).
    pub fn from_pool(
        pool: PgPool,
        settings: StoreSettings,
        time: StoreTime,
        local_clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            pool,
            settings,
            time,
            health: StoreHealth::new(local_clock),
            connections: Arc::default(),
            known_clusters: Mutex::default(),
        }
    }

    /// Applies pending migrations. Safe when several replicas start at once: sqlx serialises
    /// migrators with a database lock and each one skips what is already applied.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        // Clusters created before the TTL was stored with them were judged by the replicas'
        // configured default: keep that for them before the migration makes the TTL required.
        let has_clusters: bool = sqlx::query_scalar("SELECT to_regclass('clusters') IS NOT NULL")
            .fetch_one(&self.pool)
            .await?;
        if has_clusters {
            sqlx::query("UPDATE clusters SET silo_ttl_ms = $1 WHERE silo_ttl_ms IS NULL")
                .bind(self.settings.default_silo_ttl_ms)
                .execute(&self.pool)
                .await?;
        }
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The injected time, or `NULL` for the database's clock: statements read
    /// `COALESCE($n::int8, oracle_now_ms())`.
    fn now(&self) -> Option<Millis> {
        match &self.time {
            StoreTime::Database => None,
            StoreTime::Clock(clock) => Some(clock.now_ms()),
        }
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
    /// comes back.
    async fn guard<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.health.admit()?;
        let started = self.health.now();
        let (outcome, reach) = match tokio::time::timeout(STATEMENT_DEADLINE, call).await {
            Err(_) => (Err(StoreError::TimedOut(String::new())), Reach::NoAnswer),
            Ok(Ok(answer)) => (Ok(answer), Reach::Answered),
            Ok(Err(error)) => {
                let reach = error.reach();
                (Err(error), reach)
            }
        };
        let (outcome, verdict) = self.health.settle(started, reach, outcome);
        if verdict == Verdict::OutageBegan {
            self.connections.distrust_older();
        }
        outcome
    }

    /// Makes sure the cluster exists, creating it (with this replica's default TTL) unless that
    /// would exceed the cluster limit.
    async fn ensure_cluster(&self, cluster: &ClusterName) -> Result<(), StoreError> {
        if self.known().contains(cluster) {
            return Ok(());
        }
        let exists: bool = sqlx::query_scalar(
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
        .fetch_one(&self.pool)
        .await?;
        // A concurrent creation of the same name is invisible to this statement's snapshot.
        let exists = exists
            || sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM clusters WHERE name = $1)")
                .bind(cluster.as_str())
                .fetch_one(&self.pool)
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

    /// Inserts a new silo unless the cluster is at its silo limit or the id is retired; `false`
    /// when nothing was inserted (the caller reads again to find out why).
    async fn insert_silo(
        &self,
        cluster: &ClusterName,
        record: &SiloRecord,
    ) -> Result<bool, StoreError> {
        let (address, generation) = record.id.incarnation();
        let done = sqlx::query(
            "INSERT INTO silos (cluster, silo, address, status, last_heartbeat_ms, heartbeat_count, profile,
                                protected_until_ms)
             SELECT $1, $2, $3, $4, $5, $6, $7, $11
             WHERE (SELECT count(*) FROM silos WHERE cluster = $1 AND status <> 'dead') < $8
               AND NOT EXISTS (SELECT 1 FROM retired_generations
                               WHERE cluster = $1 AND address = $9 AND generation >= $10)
             ON CONFLICT (cluster, silo) DO NOTHING",
        )
        .bind(cluster.as_str())
        .bind(record.id.as_str())
        .bind(&record.profile.address)
        .bind(record.status.as_str())
        .bind(record.last_heartbeat_ms)
        .bind(record.heartbeat_count)
        .bind(Json(&record.profile))
        .bind(i64::try_from(self.settings.max_silos_per_cluster).unwrap_or(i64::MAX))
        .bind(address)
        .bind(generation)
        .bind(record.protected_until_ms)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Whether the cluster has reached its silo limit.
    async fn silos_full(&self, cluster: &ClusterName) -> Result<bool, StoreError> {
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM silos WHERE cluster = $1 AND status <> 'dead'",
        )
        .bind(cluster.as_str())
        .fetch_one(&self.pool)
        .await?;
        Ok(u64::try_from(live).unwrap_or(0) >= self.settings.max_silos_per_cluster)
    }

    /// Writes a heartbeat's record if the row is still the one it was computed from; returns the
    /// record as written. A drain that came in between keeps the silo shutting down (the drain
    /// changes neither the version nor the heartbeat's other figures).
    async fn update_silo(
        &self,
        cluster: &ClusterName,
        record: &SiloRecord,
        previous_count: i64,
    ) -> Result<Option<SiloRecord>, StoreError> {
        let written = sqlx::query(
            "UPDATE silos SET address = $3,
                    status = CASE WHEN drained_at_ms IS NULL THEN $4 ELSE 'shutting_down' END,
                    last_heartbeat_ms = $5, heartbeat_count = $6, profile = $7,
                    protected_until_ms = $9
             WHERE cluster = $1 AND silo = $2 AND status <> 'dead' AND heartbeat_count = $8
             RETURNING drained_at_ms",
        )
        .bind(cluster.as_str())
        .bind(record.id.as_str())
        .bind(&record.profile.address)
        .bind(record.status.as_str())
        .bind(record.last_heartbeat_ms)
        .bind(record.heartbeat_count)
        .bind(Json(&record.profile))
        .bind(previous_count)
        .bind(record.protected_until_ms)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = written else {
            return Ok(None);
        };
        let drained_at_ms: Option<Millis> = row.try_get("drained_at_ms")?;
        let mut record = record.clone();
        if drained_at_ms.is_some() {
            record.status = SiloStatus::ShuttingDown;
            record.drained_at_ms = drained_at_ms;
        }
        Ok(Some(record))
    }

    async fn try_record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<Result<(SiloRecord, Liveness), HeartbeatRejection>, StoreError> {
        self.ensure_cluster(cluster).await?;
        let (address, generation) = silo.incarnation();
        let select = format!(
            "SELECT c.silo_ttl_ms AS ttl, COALESCE($3::int8, oracle_now_ms()) AS now,
                    r.generation AS retired_generation, {SILO_COLUMNS}
             FROM clusters c
             LEFT JOIN silos s ON s.cluster = c.name AND s.silo = $2
             LEFT JOIN retired_generations r ON r.cluster = c.name AND r.address = $4
             WHERE c.name = $1"
        );
        for _ in 0..MAX_HEARTBEAT_ATTEMPTS {
            let reachable_for = self.health.reachable_for();
            let row = sqlx::query(&select)
                .bind(cluster.as_str())
                .bind(silo.as_str())
                .bind(self.now())
                .bind(address)
                .fetch_one(&self.pool)
                .await?;
            let liveness = self.liveness_from_row(&row, reachable_for)?;
            let previous = match row.try_get::<Option<String>, _>("silo")? {
                Some(_) => Some(silo_from_row(&row)?),
                None => None,
            };
            if previous.is_none() {
                let retired: Option<i64> = row.try_get("retired_generation")?;
                if let Some(dead_generation) = retired.filter(|&dead| generation <= dead) {
                    return Ok(Err(HeartbeatRejection::Retired {
                        silo: silo.to_string(),
                        address: address.to_owned(),
                        dead_generation,
                    }));
                }
            }
            let record = match update(previous.as_ref(), &liveness) {
                Ok(record) => record,
                Err(rejection) => {
                    if matches!(rejection, HeartbeatRejection::DeclaredDead { .. })
                        && previous
                            .as_ref()
                            .is_some_and(|p| p.status != SiloStatus::Dead)
                    {
                        // Told it is dead, it is made dead: no replica may welcome it back. Only
                        // if the death rule, applied again under the row's lock, agrees: an
                        // outage seen meanwhile may have deferred it, and a silo told it is dead
                        // drops grains that would then still be registered to it.
                        let reaping = self.declare_silent_dead(Some((cluster, silo))).await?;
                        if reaping.dead.is_empty() {
                            continue;
                        }
                        let dead: Vec<&str> =
                            reaping.dead.iter().map(|r| r.silo.as_str()).collect();
                        super::declared_dead_on_the_way(cluster.as_str(), &dead, "heartbeat");
                    }
                    return Ok(Err(rejection));
                }
            };
            let written = match &previous {
                Some(previous) => {
                    self.update_silo(cluster, &record, previous.heartbeat_count)
                        .await?
                }
                None => {
                    let inserted = self.insert_silo(cluster, &record).await?;
                    if !inserted && self.silos_full(cluster).await? {
                        return Err(LimitReached::Silos {
                            cluster: cluster.to_string(),
                            max: self.settings.max_silos_per_cluster,
                            retry_after_ms: liveness.silo_ttl_ms,
                        }
                        .into());
                    }
                    inserted.then_some(record)
                }
            };
            if let Some(record) = written {
                return Ok(Ok((record, liveness)));
            }
        }
        Err(StoreError::Contended(MAX_HEARTBEAT_ATTEMPTS))
    }

    /// Many heartbeats in two statements: one read of every silo they name, then one conditional
    /// update of all of them (each row only if it is still the version that was read, as in
    /// [`Self::try_record_heartbeat`]). Heartbeats of one silo are folded in order, each applied to
    /// the record the one before it left, and written once. A silo that is new, was declared
    /// dead by its heartbeat, or changed between the read and the write takes the one-by-one path,
    /// all its heartbeats in order.
    async fn try_record_heartbeats(
        &self,
        silos: &[(ClusterName, SiloId)],
        update: &HeartbeatUpdates<'_>,
    ) -> Result<BatchedHeartbeats, StoreError> {
        // Positions of each silo's heartbeats, in batch order; silos in (cluster, silo) order so
        // that concurrent batches lock rows in one order.
        let mut by_silo: std::collections::BTreeMap<(&str, &str), Vec<usize>> = Default::default();
        for (i, (cluster, silo)) in silos.iter().enumerate() {
            by_silo
                .entry((cluster.as_str(), silo.as_str()))
                .or_default()
                .push(i);
        }
        let mut outcomes: Vec<Option<Result<HeartbeatOutcome, StoreError>>> =
            (0..silos.len()).map(|_| None).collect();
        let mut one_by_one: Vec<usize> = Vec::new();
        let mut clusters: Vec<&ClusterName> = silos.iter().map(|(c, _)| c).collect();
        clusters.sort();
        clusters.dedup();
        for cluster in clusters {
            if let Err(error) = self.ensure_cluster(cluster).await {
                // A store that could not be reached fails the batch (and the circuit sees it);
                // a refusal (the cluster limit) fails only that cluster's heartbeats.
                if error.reach() != Reach::Answered {
                    return Err(error);
                }
                for (i, (c, _)) in silos.iter().enumerate() {
                    if c == cluster {
                        outcomes[i] = Some(Err(error.clone()));
                    }
                }
            }
        }

        let keys: Vec<(&str, &str)> = by_silo
            .keys()
            .copied()
            .filter(|(cluster, silo)| {
                let first = by_silo[&(*cluster, *silo)][0];
                outcomes[first].is_none()
            })
            .collect();
        let (key_clusters, key_silos): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
        let reachable_for = self.health.reachable_for();
        let rows = sqlx::query(&format!(
            "SELECT k.position, c.silo_ttl_ms AS ttl, COALESCE($3::int8, oracle_now_ms()) AS now,
                    {SILO_COLUMNS}
             FROM UNNEST($1::text[], $2::text[]) WITH ORDINALITY AS k(cluster, silo, position)
             JOIN LATERAL (SELECT c.silo_ttl_ms FROM clusters c WHERE c.name = k.cluster) c ON true
             LEFT JOIN LATERAL (SELECT * FROM silos s
                                WHERE s.cluster = k.cluster AND s.silo = k.silo LIMIT 1) s ON true"
        ))
        .bind(&key_clusters)
        .bind(&key_silos)
        .bind(self.now())
        .fetch_all(&self.pool)
        .await?;

        // Fold each known silo's heartbeats; what is to be written, and from which version.
        let mut writes: Vec<(usize, SiloRecord, i64)> = Vec::new();
        let mut answered = vec![false; keys.len()];
        for row in &rows {
            let position: i64 = row.try_get("position")?;
            let k = usize::try_from(position - 1)
                .ok()
                .filter(|&k| k < keys.len())
                .ok_or_else(|| {
                    StoreError::Corrupt("a heartbeat read answered for no silo".into())
                })?;
            answered[k] = true;
            let positions = &by_silo[&keys[k]];
            if row.try_get::<Option<String>, _>("silo")?.is_none() {
                one_by_one.extend(positions);
                continue;
            }
            let liveness = self.liveness_from_row(row, reachable_for)?;
            let read = silo_from_row(row)?;
            let mut current = read.clone();
            let mut answers = Vec::with_capacity(positions.len());
            let mut declared_dead = false;
            let mut accepted = false;
            for &i in positions {
                match update(i, Some(&current), &liveness) {
                    Ok(next) => {
                        accepted = true;
                        current = next.clone();
                        answers.push((i, Ok((next, liveness))));
                    }
                    Err(HeartbeatRejection::DeclaredDead { .. })
                        if read.status != SiloStatus::Dead =>
                    {
                        declared_dead = true;
                        break;
                    }
                    Err(rejection) => answers.push((i, Err(rejection))),
                }
            }
            if declared_dead {
                one_by_one.extend(positions);
                continue;
            }
            for (i, answer) in answers {
                outcomes[i] = Some(Ok(answer));
            }
            if accepted {
                writes.push((positions[0], current, read.heartbeat_count));
            }
        }
        // A silo the read did not answer for (its cluster vanished meanwhile) is asked alone.
        for (k, key) in keys.iter().enumerate() {
            if !answered[k] {
                one_by_one.extend(&by_silo[key]);
            }
        }

        if !writes.is_empty() {
            // In (cluster, silo) order: the statement locks the rows in the order it is given them.
            writes.sort_by(|a, b| silos[a.0].cmp(&silos[b.0]));
            let mut columns = HeartbeatColumns::default();
            for (first, record, previous_count) in &writes {
                columns.push(&silos[*first].0, record, *previous_count);
            }
            let written = sqlx::query(
                // The rows are locked first, one by one in the order given — (cluster, silo)
                // order — so that two batches naming the same silos wait for each other instead
                // of deadlocking (which Postgres would only notice after `deadlock_timeout`, a
                // second). Each row is found by its key, whatever the statistics.
                "WITH u AS (
                    SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[],
                                         $6::int8[], $7::jsonb[], $8::int8[], $9::int8[])
                             AS u(cluster, silo, address, status, last_heartbeat_ms, heartbeat_count,
                                  profile, previous_count, protected_until_ms)
                 ),
                 locked AS (
                    SELECT s.cluster, s.silo FROM u
                    JOIN LATERAL (SELECT s.cluster, s.silo, s.status, s.heartbeat_count FROM silos s
                                  WHERE s.cluster = u.cluster AND s.silo = u.silo LIMIT 1) s ON true
                    WHERE s.status <> 'dead' AND s.heartbeat_count = u.previous_count
                    FOR NO KEY UPDATE OF s
                 )
                 UPDATE silos s SET address = u.address,
                        status = CASE WHEN s.drained_at_ms IS NULL THEN u.status ELSE 'shutting_down' END,
                        last_heartbeat_ms = u.last_heartbeat_ms, heartbeat_count = u.heartbeat_count,
                        profile = u.profile, protected_until_ms = u.protected_until_ms
                 FROM u JOIN locked l ON l.cluster = u.cluster AND l.silo = u.silo
                 WHERE s.cluster = u.cluster AND s.silo = u.silo AND s.status <> 'dead'
                   AND s.heartbeat_count = u.previous_count
                 RETURNING s.cluster, s.silo, s.drained_at_ms",
            )
            .bind(&columns.clusters)
            .bind(&columns.silos)
            .bind(&columns.addresses)
            .bind(&columns.statuses)
            .bind(&columns.last_heartbeats)
            .bind(&columns.counts)
            .bind(&columns.profiles)
            .bind(&columns.previous_counts)
            .bind(&columns.protected_until)
            .fetch_all(&self.pool)
            .await;
            let written = match written {
                // Two batches met on the same rows in opposite orders: the one-by-one path sorts
                // it out.
                Err(error) if has_sqlstate(&error, DEADLOCK_DETECTED) => Vec::new(),
                written => written?,
            };
            let mut drained: HashMap<(String, String), Option<Millis>> = HashMap::new();
            for row in &written {
                drained.insert(
                    (row.try_get("cluster")?, row.try_get("silo")?),
                    row.try_get("drained_at_ms")?,
                );
            }
            for (first, _, _) in &writes {
                let (cluster, silo) = &silos[*first];
                let positions = &by_silo[&(cluster.as_str(), silo.as_str())];
                match drained.get(&(cluster.to_string(), silo.to_string())) {
                    None => {
                        for &i in positions {
                            outcomes[i] = None;
                        }
                        one_by_one.extend(positions);
                    }
                    Some(None) => {}
                    Some(Some(drained_at_ms)) => {
                        for &i in positions {
                            if let Some(Ok(Ok((answer, _)))) = &mut outcomes[i] {
                                answer.status = SiloStatus::ShuttingDown;
                                answer.drained_at_ms = Some(*drained_at_ms);
                            }
                        }
                    }
                }
            }
        }

        one_by_one.sort_unstable();
        Ok(BatchedHeartbeats {
            outcomes,
            one_by_one,
        })
    }
}

/// What the batched heartbeat statements settled, and the heartbeats (positions, in order) left to
/// the one-by-one path.
struct BatchedHeartbeats {
    outcomes: Vec<Option<Result<HeartbeatOutcome, StoreError>>>,
    one_by_one: Vec<usize>,
}

/// Positions of `items` in grain order: registrations insert in it, so that two replicas
/// registering overlapping batches lock index entries in the same order and cannot deadlock.
fn grain_order<T>(items: &[T], grain: impl Fn(&T) -> &GrainId) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| grain(&items[a]).cmp(grain(&items[b])));
    order
}

/// The columns of a batched heartbeat write, one entry per silo.
#[derive(Default)]
struct HeartbeatColumns<'a> {
    clusters: Vec<&'a str>,
    silos: Vec<&'a str>,
    addresses: Vec<&'a str>,
    statuses: Vec<&'static str>,
    last_heartbeats: Vec<Millis>,
    counts: Vec<i64>,
    profiles: Vec<Json<&'a SiloProfile>>,
    previous_counts: Vec<i64>,
    protected_until: Vec<Millis>,
}

impl<'a> HeartbeatColumns<'a> {
    fn push(&mut self, cluster: &'a ClusterName, record: &'a SiloRecord, previous_count: i64) {
        self.clusters.push(cluster.as_str());
        self.silos.push(record.id.as_str());
        self.addresses.push(&record.profile.address);
        self.statuses.push(record.status.as_str());
        self.last_heartbeats.push(record.last_heartbeat_ms);
        self.counts.push(record.heartbeat_count);
        self.profiles.push(Json(&record.profile));
        self.previous_counts.push(previous_count);
        self.protected_until.push(record.protected_until_ms);
    }
}

fn silo_from_row(row: &PgRow) -> Result<SiloRecord, StoreError> {
    let id: String = row.try_get("silo")?;
    let status: String = row.try_get("status")?;
    let Json(profile): Json<SiloProfile> = row.try_get("profile")?;
    Ok(SiloRecord {
        id: SiloId::parse("silo", &id).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        status: SiloStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("unknown silo status {status:?}")))?,
        last_heartbeat_ms: row.try_get("last_heartbeat_ms")?,
        heartbeat_count: row.try_get("heartbeat_count")?,
        profile,
        drained_at_ms: row.try_get("drained_at_ms")?,
        protected_until_ms: row.try_get("protected_until_ms")?,
    })
}

/// The silos of a `clusters LEFT JOIN silos` read (a cluster without any has one row of NULLs).
fn silos_from_rows(rows: &[PgRow]) -> Result<Vec<SiloRecord>, StoreError> {
    let mut silos = Vec::with_capacity(rows.len());
    for row in rows {
        if row.try_get::<Option<String>, _>("silo")?.is_some() {
            silos.push(silo_from_row(row)?);
        }
    }
    Ok(silos)
}

/// Cluster names as the database holds them (each was checked on its way in).
fn cluster_names(names: &[String]) -> Result<Vec<ClusterName>, StoreError> {
    names
        .iter()
        .map(|n| ClusterName::parse(n).map_err(|e| StoreError::Corrupt(e.to_string())))
        .collect()
}

fn activation_from_row(row: &PgRow) -> Result<Activation, StoreError> {
    Ok(Activation {
        grain: row.try_get("grain")?,
        silo: row.try_get("silo")?,
        address: row.try_get("address")?,
        strategy: row.try_get("strategy")?,
        epoch: row.try_get("epoch")?,
        created_ms: row.try_get("created_ms")?,
    })
}

/// Columns of a silo row, as `silo_from_row` reads them.
const SILO_COLUMNS: &str = "s.silo, s.status, s.last_heartbeat_ms, s.heartbeat_count, s.profile, \
     s.drained_at_ms, s.protected_until_ms";

/// The statements behind each [`Store`] call, before the circuit (see the `Store` impl below).
impl PostgresStore {
    async fn try_membership(
        &self,
        cluster: &ClusterName,
    ) -> Result<Option<Membership>, StoreError> {
        // Only silos not marked dead: the dead of the last hour are never read for a decision.
        let reachable_for = self.health.reachable_for();
        let rows = sqlx::query(&format!(
            "SELECT c.silo_ttl_ms AS ttl, COALESCE($2::int8, oracle_now_ms()) AS now,
                    c.policy, c.policy_version, {SILO_COLUMNS}
             FROM clusters c LEFT JOIN silos s ON s.cluster = c.name AND s.status <> 'dead'
             WHERE c.name = $1 ORDER BY s.silo"
        ))
        .bind(cluster.as_str())
        .bind(self.now())
        .fetch_all(&self.pool)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let liveness = self.liveness_from_row(first, reachable_for)?;
        let policy: Policy = decode_stored(first.try_get("policy")?)?;
        let policy_version: i64 = first.try_get("policy_version")?;
        let silos = silos_from_rows(&rows)?;
        Ok(Some(Membership {
            liveness,
            silos: Arc::new(silos),
            policy: Arc::new(policy),
            policy_version,
        }))
    }

    async fn try_silos(
        &self,
        cluster: &ClusterName,
        after: Option<&SiloId>,
        limit: u32,
    ) -> Result<Option<SiloPage>, StoreError> {
        // Seeks from the cursor: silo ids are never empty, so '' is before every one ("C" order).
        let reachable_for = self.health.reachable_for();
        let rows = sqlx::query(&format!(
            "SELECT c.silo_ttl_ms AS ttl, COALESCE($2::int8, oracle_now_ms()) AS now, {SILO_COLUMNS}
             FROM clusters c
             LEFT JOIN LATERAL (
                SELECT * FROM silos s WHERE s.cluster = c.name AND s.silo > COALESCE($3, '')
                ORDER BY s.silo LIMIT $4
             ) s ON true
             WHERE c.name = $1 ORDER BY s.silo"
        ))
        .bind(cluster.as_str())
        .bind(self.now())
        .bind(after.map(SiloId::as_str))
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let liveness = self.liveness_from_row(first, reachable_for)?;
        let silos = silos_from_rows(&rows)?;
        Ok(Some(SiloPage { liveness, silos }))
    }

    async fn try_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        let reachable_for = self.health.reachable_for();
        let row = sqlx::query(&format!(
            "SELECT c.silo_ttl_ms AS ttl, COALESCE($3::int8, oracle_now_ms()) AS now, {SILO_COLUMNS}
             FROM clusters c JOIN silos s ON s.cluster = c.name AND s.silo = $2
             WHERE c.name = $1"
        ))
        .bind(cluster.as_str())
        .bind(silo.as_str())
        .bind(self.now())
        .fetch_optional(&self.pool)
        .await?;
        row.map(|row| {
            Ok((
                silo_from_row(&row)?,
                self.liveness_from_row(&row, reachable_for)?,
            ))
        })
        .transpose()
    }

    async fn try_drain_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        // Only a live silo is marked: one silent past its TTL is dead already, whether or not a
        // sweep has said so yet.
        sqlx::query(
            "UPDATE silos s SET status = 'shutting_down',
                    drained_at_ms = COALESCE(s.drained_at_ms, $3::int8, oracle_now_ms())
             FROM clusters c
             WHERE c.name = $1 AND s.cluster = $1 AND s.silo = $2
               AND silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                 c.silo_ttl_ms, COALESCE($3::int8, oracle_now_ms()), $4)",
        )
        .bind(cluster.as_str())
        .bind(silo.as_str())
        .bind(self.now())
        .bind(self.health.reachable_for())
        .execute(&self.pool)
        .await?;
        self.try_silo(cluster, silo).await
    }

    async fn try_remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<Departure>, PgError> {
        // Mark it dead first — taking the row FOR UPDATE, the death protocol (see
        // `declare_silent_dead`), so racing heartbeats and registrations wait, then find it dead —
        // then release a first chunk of its entries; the sweep releases the rest.
        let mut tx = self.pool.begin().await?;
        let known = sqlx::query(
            "WITH locked AS (
                SELECT cluster, silo FROM silos WHERE cluster = $1 AND silo = $2 FOR UPDATE
             )
             UPDATE silos s SET status = 'dead',
                    dead_since_ms = COALESCE(s.dead_since_ms, $3::int8, oracle_now_ms())
             FROM locked l WHERE s.cluster = l.cluster AND s.silo = l.silo",
        )
        .bind(cluster.as_str())
        .bind(silo.as_str())
        .bind(self.now())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if known == 0 {
            return Ok(None);
        }
        retire(&mut tx, std::iter::once((cluster.as_str(), silo.as_str()))).await?;
        let released =
            release_chunk(&mut tx, cluster.as_str(), silo.as_str(), RELEASE_CHUNK).await?;
        let release_pending = released >= u64::from(RELEASE_CHUNK);
        tx.commit().await?;
        Ok(Some(Departure {
            released,
            release_pending,
        }))
    }

    async fn try_lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
    ) -> Result<Vec<Located>, PgError> {
        let names: Vec<&str> = grains.iter().map(GrainId::as_str).collect();
        let rows = sqlx::query(
            // One primary-key probe per grain, by the statement's shape: `a.grain = ANY($2)`
            // lets a plan made without statistics (a fresh database) scan the cluster's every
            // entry and compare it with every grain asked for.
            "SELECT a.grain, a.silo, s.address, a.strategy, a.epoch, a.created_ms,
                    silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                  c.silo_ttl_ms, COALESCE($3::int8, oracle_now_ms()), $4) AS live
             FROM clusters c
             CROSS JOIN UNNEST($2::text[]) AS g(grain)
             JOIN LATERAL (SELECT a.grain, a.silo, a.strategy, a.epoch, a.created_ms
                           FROM activations a
                           WHERE a.cluster = $1 AND a.grain = g.grain LIMIT 1) a ON true
             JOIN LATERAL (SELECT s.address, s.status, s.last_heartbeat_ms, s.protected_until_ms
                           FROM silos s
                           WHERE s.cluster = $1 AND s.silo = a.silo LIMIT 1) s ON true
             WHERE c.name = $1",
        )
        .bind(cluster.as_str())
        .bind(&names)
        .bind(self.now())
        .bind(self.health.reachable_for())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Located {
                    activation: activation_from_row(row)?,
                    live: row.try_get("live")?,
                })
            })
            .collect()
    }

    /// The entries of grains an insert lost to another transaction (committed while the insert
    /// ran, so the insert's own statement could not see them), by grain; none asked, no trip.
    async fn race_winners(
        &self,
        cluster: &ClusterName,
        lost: &[GrainId],
    ) -> Result<HashMap<String, Located>, PgError> {
        if lost.is_empty() {
            return Ok(HashMap::new());
        }
        Ok(self
            .try_lookup(cluster, lost)
            .await?
            .into_iter()
            .map(|located| (located.activation.grain.clone(), located))
            .collect())
    }

    /// [`DirectoryStore::lookup_or_register`] in one statement: each grain's entry if it has one,
    /// and the registration (by [`Self::try_register`]'s rules: the chosen silo active, alive and
    /// held `FOR KEY SHARE` until commit) of those that have none. A new grain costs one round
    /// trip, not a lookup and then an insert, and each chosen silo is checked and locked once per
    /// statement, not once per grain. Only a grain another transaction registered while
    /// this statement ran (it lost that race) costs a second read.
    async fn try_lookup_or_register(
        &self,
        cluster: &ClusterName,
        proposals: &[Proposal],
    ) -> Result<Vec<Registration>, PgError> {
        let order = grain_order(proposals, |p| &p.grain);
        let grains: Vec<&str> = order.iter().map(|&i| proposals[i].grain.as_str()).collect();
        let silos: Vec<Option<&str>> = order
            .iter()
            .map(|&i| proposals[i].silo.as_ref().map(SiloId::as_str))
            .collect();
        let strategies: Vec<&str> = order.iter().map(|&i| proposals[i].strategy).collect();
        let rows = sqlx::query(
            "WITH asked AS (
                SELECT * FROM UNNEST($2::text[], $3::text[], $4::text[]) WITH ORDINALITY
                         AS n(grain, silo, strategy, position)
             ),
             found AS (
                SELECT a.grain, a.silo, a.strategy, a.epoch, a.created_ms
                FROM asked n
                JOIN LATERAL (SELECT a.grain, a.silo, a.strategy, a.epoch, a.created_ms
                              FROM activations a
                              WHERE a.cluster = $1 AND a.grain = n.grain LIMIT 1) a ON true
             ),
             missing AS (
                SELECT n.* FROM asked n
                WHERE n.silo IS NOT NULL AND NOT EXISTS (SELECT 1 FROM found f WHERE f.grain = n.grain)
             ),
             chosen AS (
                SELECT s.silo
                FROM (SELECT DISTINCT silo FROM missing ORDER BY silo) d
                CROSS JOIN clusters c
                JOIN LATERAL (
                    SELECT s.silo FROM silos s
                    WHERE s.cluster = $1 AND s.silo = d.silo AND s.status = 'active'
                      AND silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        c.silo_ttl_ms, COALESCE($5::int8, oracle_now_ms()), $6)
                    LIMIT 1
                    FOR KEY SHARE
                ) s ON true
                WHERE c.name = $1
             ),
             inserted AS (
                INSERT INTO activations (cluster, grain, silo, strategy, epoch, created_ms)
                SELECT $1, n.grain, n.silo, n.strategy, nextval('activation_epochs'),
                       COALESCE($5::int8, oracle_now_ms())
                FROM missing n
                JOIN chosen s ON s.silo = n.silo
                ORDER BY n.position
                ON CONFLICT (cluster, grain) DO NOTHING
                RETURNING grain, silo, strategy, epoch, created_ms
             ),
             answered AS (
                SELECT 'registered' AS kind, i.* FROM inserted i
                UNION ALL
                SELECT 'found', f.* FROM found f
             )
             SELECT r.kind, r.grain, r.silo, s.address, r.strategy, r.epoch, r.created_ms,
                    r.kind = 'registered'
                    OR silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                     c.silo_ttl_ms, COALESCE($5::int8, oracle_now_ms()), $6) AS live
             FROM answered r
             CROSS JOIN clusters c
             JOIN LATERAL (SELECT s.address, s.status, s.last_heartbeat_ms, s.protected_until_ms
                           FROM silos s
                           WHERE s.cluster = $1 AND s.silo = r.silo LIMIT 1) s ON true
             WHERE c.name = $1
             UNION ALL
             -- Grains whose proposed silo could not take them: decided again, not looked up.
             SELECT 'unavailable', m.grain, m.silo, NULL, NULL, NULL, NULL, false
             FROM missing m
             WHERE NOT EXISTS (SELECT 1 FROM chosen s WHERE s.silo = m.silo)",
        )
        .bind(cluster.as_str())
        .bind(&grains)
        .bind(&silos)
        .bind(&strategies)
        .bind(self.now())
        .bind(self.health.reachable_for())
        .fetch_all(&self.pool)
        .await;
        let rows = match rows {
            // A chosen silo left (its row was deleted) between the liveness check and the foreign
            // key check: nothing was written; the two-step path sorts it out.
            Err(error) if has_sqlstate(&error, FOREIGN_KEY_VIOLATION) => {
                return Ok(super::lookup_then_register(self, cluster, proposals).await?);
            }
            rows => rows?,
        };
        let mut answers: HashMap<String, Registration> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let kind: String = row.try_get("kind")?;
            if kind == "unavailable" {
                answers.insert(row.try_get("grain")?, Registration::SiloUnavailable);
                continue;
            }
            let activation = activation_from_row(row)?;
            let grain = activation.grain.clone();
            let answer = if kind == "registered" {
                Registration::Registered(activation)
            } else {
                Registration::Existing(Located {
                    activation,
                    live: row.try_get("live")?,
                })
            };
            answers.insert(grain, answer);
        }
        // Grains registered by another transaction while this statement ran (their entry is
        // committed now, but was not there when the statement looked): the only ones read again.
        let lost: Vec<GrainId> = proposals
            .iter()
            .filter(|p| p.silo.is_some() && !answers.contains_key(p.grain.as_str()))
            .map(|p| p.grain.clone())
            .collect();
        for (grain, located) in self.race_winners(cluster, &lost).await? {
            answers.insert(grain, Registration::Existing(located));
        }
        Ok(proposals
            .iter()
            .map(|p| {
                answers
                    .get(p.grain.as_str())
                    .cloned()
                    .unwrap_or(Registration::SiloUnavailable)
            })
            .collect())
    }

    async fn try_register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
    ) -> Result<Vec<Registration>, PgError> {
        let order = grain_order(entries, |e| &e.grain);
        let now = self.now();
        let outages = self.health.outages_seen();
        let reachable_for = self.health.reachable_for();

        let (stale_grains, stale_epochs): (Vec<&str>, Vec<i64>) = order
            .iter()
            .filter_map(|&i| {
                let e = &entries[i];
                e.replaces_epoch.map(|epoch| (e.grain.as_str(), epoch))
            })
            .unzip();
        if !stale_grains.is_empty() {
            // An entry is released only once its silo is marked dead — by this statement, under the
            // silo row's lock, or before it. A heartbeat racing in for that silo then finds it dead
            // and is refused, so a silo can never keep running a grain the directory gave away.
            // The silo's other entries go with the sweep's release.
            let mut tx = self.pool.begin().await?;
            let dead: Vec<String> = sqlx::query_scalar(
                "WITH stale AS (
                    SELECT a.grain, a.silo FROM UNNEST($2::text[], $3::int8[]) AS s(grain, epoch)
                    CROSS JOIN LATERAL (SELECT a.grain, a.silo FROM activations a
                                        WHERE a.cluster = $1 AND a.grain = s.grain AND a.epoch = s.epoch
                                        LIMIT 1) a
                 ),
                 doomed AS (
                    SELECT s.silo FROM silos s
                    JOIN clusters c ON c.name = s.cluster
                    WHERE s.cluster = $1
                      AND s.silo = ANY (ARRAY(SELECT silo FROM stale))
                      AND s.status <> 'dead'
                      AND NOT silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                            c.silo_ttl_ms, COALESCE($4::int8, oracle_now_ms()), $5)
                    FOR UPDATE OF s
                 ),
                 dead AS (
                    UPDATE silos s SET status = 'dead', dead_since_ms = COALESCE($4::int8, oracle_now_ms())
                    WHERE s.cluster = $1 AND s.silo = ANY (ARRAY(SELECT silo FROM doomed))
                    RETURNING s.silo
                 ),
                 released AS (
                 DELETE FROM activations a
                 WHERE a.cluster = $1 AND a.grain = ANY (ARRAY(SELECT grain FROM stale))
                   AND (a.grain, a.silo) IN (SELECT grain, silo FROM stale)
                   AND ((SELECT s.status FROM silos s WHERE s.cluster = $1 AND s.silo = a.silo) = 'dead'
                        OR a.silo IN (SELECT silo FROM dead))
                 RETURNING 1
                 )
                 SELECT silo FROM dead",
            )
            .bind(cluster.as_str())
            .bind(&stale_grains)
            .bind(&stale_epochs)
            .bind(now)
            .bind(reachable_for)
            .fetch_all(&mut *tx)
            .await?;
            retire(
                &mut tx,
                dead.iter().map(|silo| (cluster.as_str(), silo.as_str())),
            )
            .await?;
            if self.health.outages_seen() == outages {
                tx.commit().await?;
                let dead: Vec<&str> = dead.iter().map(String::as_str).collect();
                super::declared_dead_on_the_way(cluster.as_str(), &dead, "placement");
            } else {
                // An outage began while this judged: nothing is replaced; the insert below finds
                // the old entries and the placement decides again.
                tx.rollback().await?;
            }
        }

        let grains: Vec<&str> = order.iter().map(|&i| entries[i].grain.as_str()).collect();
        let silos: Vec<&str> = order.iter().map(|&i| entries[i].silo.as_str()).collect();
        let strategies: Vec<&str> = order.iter().map(|&i| entries[i].strategy).collect();
        // `FOR KEY SHARE`: the chosen silo's row stays locked until the insert commits, and every
        // death takes that row `FOR UPDATE` first (the death protocol, see `declare_silent_dead`),
        // which conflicts with it. So a concurrent death either commits first — and this
        // statement, having waited for it, re-checks the row and finds the silo dead — or waits for
        // this insert and then releases the new entry with the silo's others. Without the lock, a
        // registration could commit on a silo whose death was already under way. Heartbeats (plain
        // updates) do not conflict with it, so they never wait for registrations.
        let rows = sqlx::query(
            "WITH inserted AS (
                INSERT INTO activations (cluster, grain, silo, strategy, epoch, created_ms)
                SELECT $1, n.grain, n.silo, n.strategy, nextval('activation_epochs'),
                       COALESCE($5::int8, oracle_now_ms())
                FROM clusters c
                CROSS JOIN UNNEST($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS n(grain, silo, strategy, position)
                JOIN LATERAL (
                    SELECT 1 FROM silos s
                    WHERE s.cluster = $1 AND s.silo = n.silo AND s.status = 'active'
                      AND silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        c.silo_ttl_ms, COALESCE($5::int8, oracle_now_ms()), $6)
                    LIMIT 1
                    FOR KEY SHARE
                ) s ON true
                WHERE c.name = $1
                ORDER BY n.position
                ON CONFLICT (cluster, grain) DO NOTHING
                RETURNING grain, silo, strategy, epoch, created_ms
             )
             SELECT i.grain, i.silo, s.address, i.strategy, i.epoch, i.created_ms
             FROM inserted i
             JOIN LATERAL (SELECT s.address FROM silos s WHERE s.cluster = $1 AND s.silo = i.silo LIMIT 1) s ON true",
        )
        .bind(cluster.as_str())
        .bind(&grains)
        .bind(&silos)
        .bind(&strategies)
        .bind(now)
        .bind(reachable_for)
        .fetch_all(&self.pool)
        .await;
        let rows = match rows {
            // A chosen silo left (its row was deleted) between the liveness check and the foreign
            // key check: nothing was inserted; every entry is decided again.
            Err(error) if has_sqlstate(&error, FOREIGN_KEY_VIOLATION) => {
                return Ok(vec![Registration::SiloUnavailable; entries.len()]);
            }
            rows => rows?,
        };

        let mut registered: HashMap<String, Activation> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let activation = activation_from_row(row)?;
            registered.insert(activation.grain.clone(), activation);
        }
        let lost: Vec<GrainId> = entries
            .iter()
            .filter(|e| !registered.contains_key(e.grain.as_str()))
            .map(|e| e.grain.clone())
            .collect();
        let winners = self.race_winners(cluster, &lost).await?;
        Ok(entries
            .iter()
            .map(|e| {
                let grain = e.grain.as_str();
                match (registered.get(grain), winners.get(grain)) {
                    (Some(activation), _) => Registration::Registered(activation.clone()),
                    (None, Some(located)) => Registration::Existing(located.clone()),
                    (None, None) => Registration::SiloUnavailable,
                }
            })
            .collect())
    }

    async fn try_put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError> {
        self.ensure_cluster(cluster).await?;
        sqlx::query(
            "INSERT INTO pools (cluster, pool, definition) VALUES ($1, $2, $3)
             ON CONFLICT (cluster, pool) DO UPDATE SET definition = EXCLUDED.definition",
        )
        .bind(cluster.as_str())
        .bind(name.as_str())
        .bind(Json(pool))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn try_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        let definition: Option<serde_json::Value> =
            sqlx::query_scalar("SELECT definition FROM pools WHERE cluster = $1 AND pool = $2")
                .bind(cluster.as_str())
                .bind(name.as_str())
                .fetch_optional(&self.pool)
                .await?;
        definition.map(decode_stored).transpose()
    }

    async fn try_next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError> {
        let before: Option<i64> = sqlx::query_scalar(
            "UPDATE pools SET round_robin = round_robin + 1 WHERE cluster = $1 AND pool = $2
             RETURNING round_robin - 1",
        )
        .bind(cluster.as_str())
        .bind(name.as_str())
        .fetch_optional(&self.pool)
        .await?;
        Ok(before.map(|n| u64::try_from(n).unwrap_or(0)))
    }

    async fn try_deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM activations WHERE cluster = $1 AND grain = $2 AND silo = $3 AND epoch = $4",
        )
        .bind(cluster.as_str())
        .bind(grain.as_str())
        .bind(silo.as_str())
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn try_activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        // Seeks from the cursor (grain ids are never empty, so '' is before every one): one plan
        // for the first page and every later one, an index range scan either way.
        let rows = sqlx::query(
            "SELECT a.grain, a.silo, s.address, a.strategy, a.epoch, a.created_ms
             FROM activations a JOIN silos s ON s.cluster = a.cluster AND s.silo = a.silo
             WHERE a.cluster = $1 AND a.silo = $2 AND a.grain > COALESCE($3, '')
             ORDER BY a.grain LIMIT $4",
        )
        .bind(cluster.as_str())
        .bind(silo.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(activation_from_row).collect()
    }

    async fn try_movable_activations(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        immovable: &[String],
        moved_since: Millis,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        let rows = sqlx::query(
            "SELECT a.grain, a.silo, s.address, a.strategy, a.epoch, a.created_ms
             FROM activations a JOIN silos s ON s.cluster = a.cluster AND s.silo = a.silo
             WHERE a.cluster = $1 AND a.silo = $2
               AND NOT (a.strategy IN ('rebalancer', 'drain', 'repartitioner')
                        AND a.created_ms >= $4)
               AND split_part(a.grain, '/', 1) <> ALL ($3::text[])
               AND NOT EXISTS (SELECT 1 FROM migrations m
                               WHERE m.cluster = a.cluster AND m.grain = a.grain)
             ORDER BY a.created_ms, a.grain LIMIT $5",
        )
        .bind(cluster.as_str())
        .bind(silo.as_str())
        .bind(immovable)
        .bind(moved_since)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(activation_from_row).collect()
    }

    async fn try_reap(&self) -> Result<Reaping, PgError> {
        let reaped = self.declare_silent_dead(None).await?;
        self.forget_expired().await?;
        Ok(reaped)
    }

    /// Marks dead every silo (or just `only`) that the death rule (`silo_is_alive`, judged with
    /// how long this replica has reached the store) finds dead, and retires its generation, in one
    /// transaction; and names the silos past their TTL and their protection that it did not mark,
    /// because this replica has not reached the store for a whole TTL since their last heartbeat
    /// (the deaths the outage rule defers). Each row is taken `FOR UPDATE` first — the death
    /// protocol: that lock waits for registrations holding the row (`FOR KEY SHARE`) to commit,
    /// and makes later ones wait and find the silo dead. The rule is applied again to the row as it
    /// is once locked, so a heartbeat that got in first keeps the silo alive.
    async fn declare_silent_dead(
        &self,
        only: Option<(&ClusterName, &SiloId)>,
    ) -> Result<Reaping, PgError> {
        let outages = self.health.outages_seen();
        let reachable_for = self.health.reachable_for();
        let mut tx = self.pool.begin().await?;
        let rows = sqlx::query(
            "WITH t AS (SELECT COALESCE($1::int8, oracle_now_ms()) AS now),
             silent AS (
                -- Dead, were this replica never cut off from the store (NULL: reachable always).
                SELECT s.cluster, s.silo,
                       silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                     c.silo_ttl_ms, t.now, $2) AS deferred
                FROM silos s JOIN clusters c ON c.name = s.cluster CROSS JOIN t
                WHERE s.status <> 'dead'
                  AND ($3::text IS NULL OR (s.cluster = $3 AND s.silo = $4))
                  AND NOT silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        c.silo_ttl_ms, t.now, NULL)
             ),
             doomed AS (
                SELECT s.cluster, s.silo FROM silos s
                JOIN silent d ON d.cluster = s.cluster AND d.silo = s.silo AND NOT d.deferred
                JOIN clusters c ON c.name = s.cluster
                CROSS JOIN t
                WHERE s.status <> 'dead'
                  AND NOT silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        c.silo_ttl_ms, t.now, $2)
                FOR UPDATE OF s
             ),
             dead AS (
                UPDATE silos s SET status = 'dead', dead_since_ms = (SELECT now FROM t)
                FROM doomed d
                WHERE s.cluster = d.cluster AND s.silo = d.silo
                RETURNING s.cluster, s.silo
             )
             SELECT true AS dead, cluster, silo FROM dead
             UNION ALL
             SELECT false, cluster, silo FROM silent WHERE deferred",
        )
        .bind(self.now())
        .bind(reachable_for)
        .bind(only.map(|(cluster, _)| cluster.as_str()))
        .bind(only.map(|(_, silo)| silo.as_str()))
        .fetch_all(&mut *tx)
        .await?;
        let mut reaping = Reaping::default();
        for row in &rows {
            let silo = Reaped {
                cluster: row.try_get("cluster")?,
                silo: row.try_get("silo")?,
            };
            match row.try_get("dead")? {
                true => reaping.dead.push(silo),
                false => reaping.deferred.push(silo),
            }
        }
        retire(
            &mut tx,
            reaping
                .dead
                .iter()
                .map(|r| (r.cluster.as_str(), r.silo.as_str())),
        )
        .await?;
        if self.health.outages_seen() != outages {
            // An outage began while this judged: its count of reachable time was too long.
            tx.rollback().await?;
            return Ok(Reaping::default());
        }
        tx.commit().await?;
        Ok(reaping)
    }

    /// Drops tombstones older than [`DEAD_SILO_RETENTION_MS`] whose entries are all released. Their
    /// generations were retired when they died, so the ids stay refused.
    async fn forget_expired(&self) -> Result<(), PgError> {
        sqlx::query(
            "DELETE FROM silos s USING (
                SELECT cluster, silo FROM silos
                WHERE status = 'dead' AND released
                  AND dead_since_ms < COALESCE($1::int8, oracle_now_ms()) - $2
                LIMIT $3) expired
             WHERE s.cluster = expired.cluster AND s.silo = expired.silo",
        )
        .bind(self.now())
        .bind(DEAD_SILO_RETENTION_MS)
        .bind(FORGET_CHUNK)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn try_release_dead(&self, limit: u32) -> Result<u64, StoreError> {
        // One dead silo at a time, by its key: every statement is an index range, whatever the
        // planner knows about the tables. No entry can appear on a silo after its death commits
        // (registration holds the silo row), so a dead silo found without entries is released for
        // good.
        loop {
            let Some(row) = sqlx::query(
                "SELECT cluster, silo FROM silos WHERE status = 'dead' AND NOT released LIMIT 1",
            )
            .fetch_optional(&self.pool)
            .await?
            else {
                return Ok(0);
            };
            let cluster: String = row.try_get("cluster")?;
            let silo: String = row.try_get("silo")?;
            let mut tx = self.pool.begin().await?;
            let released = release_chunk(&mut tx, &cluster, &silo, limit).await?;
            tx.commit().await?;
            if released > 0 {
                return Ok(released);
            }
        }
    }

    async fn try_stats(&self) -> Result<StoreStats, StoreError> {
        let rows =
            sqlx::query("SELECT status, count(*) AS n FROM silos GROUP BY status ORDER BY status")
                .fetch_all(&self.pool)
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
        .fetch_one(&self.pool)
        .await?;
        Ok(StoreStats {
            silos_by_status,
            directory_entries: u64::try_from(entries).unwrap_or(0),
        })
    }

    async fn try_put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError> {
        let ttl = policy
            .silo_ttl_ms
            .map_or(self.settings.default_silo_ttl_ms, |ttl| {
                i64::try_from(ttl).unwrap_or(i64::MAX)
            });
        // The cluster may not exist yet (a policy written before any silo joins); create it at
        // version 0 so the conditional update below has a row to compare against.
        self.ensure_cluster(cluster).await?;
        let updated: Option<i64> = sqlx::query_scalar(
            "UPDATE clusters SET policy = $2, silo_ttl_ms = $3, policy_version = policy_version + 1
             WHERE name = $1 AND ($4::int8 IS NULL OR policy_version = $4)
             RETURNING policy_version",
        )
        .bind(cluster.as_str())
        .bind(Json(policy))
        .bind(ttl)
        .bind(expected)
        .fetch_optional(&self.pool)
        .await?;
        if let Some(version) = updated {
            return Ok(Ok(version));
        }
        let current: i64 =
            sqlx::query_scalar("SELECT policy_version FROM clusters WHERE name = $1")
                .bind(cluster.as_str())
                .fetch_one(&self.pool)
                .await?;
        Ok(Err(current))
    }
}

/// Deletes up to `limit` of a dead silo's entries, by primary key; when fewer were left, marks the
/// silo released (no entry can appear on it after its death commits). Returns how many it deleted.
async fn release_chunk(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    cluster: &str,
    silo: &str,
    limit: u32,
) -> Result<u64, PgError> {
    let released = sqlx::query(
        "DELETE FROM activations WHERE cluster = $1 AND silo = $2 AND grain = ANY (ARRAY(
            SELECT grain FROM activations WHERE cluster = $1 AND silo = $2 LIMIT $3))",
    )
    .bind(cluster)
    .bind(silo)
    .bind(i64::from(limit))
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if released < u64::from(limit) {
        sqlx::query(
            "UPDATE silos SET released = true
             WHERE cluster = $1 AND silo = $2 AND status = 'dead'
               AND (SELECT 1 FROM activations WHERE cluster = $1 AND silo = $2 LIMIT 1) IS NULL",
        )
        .bind(cluster)
        .bind(silo)
        .execute(&mut **tx)
        .await?;
    }
    Ok(released)
}

/// Records the generations of silos that just died (in the death's transaction): per address the
/// newest dead generation, which every id not newer than it is refused by, for ever.
async fn retire<'a>(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    dead: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<(), PgError> {
    let mut newest: HashMap<(&str, String), i64> = HashMap::new();
    for (cluster, silo) in dead {
        let id = SiloId::parse("silo", silo).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let (address, generation) = id.incarnation();
        let entry = newest
            .entry((cluster, address.to_owned()))
            .or_insert(generation);
        *entry = (*entry).max(generation);
    }
    if newest.is_empty() {
        return Ok(());
    }
    let (mut clusters, mut addresses, mut generations) = (Vec::new(), Vec::new(), Vec::new());
    for ((cluster, address), generation) in newest {
        clusters.push(cluster);
        addresses.push(address);
        generations.push(generation);
    }
    sqlx::query(
        "INSERT INTO retired_generations (cluster, address, generation)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::int8[])
         ON CONFLICT (cluster, address)
         DO UPDATE SET generation = GREATEST(retired_generations.generation, EXCLUDED.generation)",
    )
    .bind(&clusters)
    .bind(&addresses)
    .bind(&generations)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Decodes a stored document (policy, pool) that a newer version may have written: fields this
/// version does not know are kept in the database and ignored here (requests still refuse them).
fn decode_stored<T: serde::de::DeserializeOwned>(
    value: serde_json::Value,
) -> Result<T, StoreError> {
    crate::validation::from_stored_json(value).map_err(StoreError::Corrupt)
}

#[async_trait]
impl MembershipStore for PostgresStore {
    async fn record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<Result<(SiloRecord, Liveness), HeartbeatRejection>, StoreError> {
        self.guard(self.try_record_heartbeat(cluster, silo, update))
            .await
    }

    async fn record_heartbeats(
        &self,
        silos: &[(ClusterName, SiloId)],
        update: &HeartbeatUpdates<'_>,
    ) -> Result<Vec<Result<HeartbeatOutcome, StoreError>>, StoreError> {
        let BatchedHeartbeats {
            mut outcomes,
            one_by_one,
        } = self
            .guard(self.try_record_heartbeats(silos, update))
            .await?;
        // The rest one by one, each under its own deadline: a few silos at once (a fleet rejoining
        // after a restart is all new silos, and must not take every connection), one silo's
        // heartbeats in their order.
        let mut by_silo: HashMap<(&str, &str), Vec<usize>> = HashMap::new();
        for i in one_by_one {
            let (cluster, silo) = &silos[i];
            by_silo
                .entry((cluster.as_str(), silo.as_str()))
                .or_default()
                .push(i);
        }
        let per_silo = by_silo.into_values().map(|positions| async move {
            let mut answers = Vec::with_capacity(positions.len());
            for i in positions {
                let (cluster, silo) = &silos[i];
                let one = |previous: Option<&SiloRecord>, liveness: &Liveness| {
                    update(i, previous, liveness)
                };
                answers.push((i, self.record_heartbeat(cluster, silo, &one).await));
            }
            answers
        });
        let answers: Vec<_> = futures_util::stream::iter(per_silo)
            .buffer_unordered(SILOS_ONE_BY_ONE_AT_ONCE)
            .collect()
            .await;
        for (i, answer) in answers.into_iter().flatten() {
            outcomes[i] = Some(answer);
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.ok_or_else(|| {
                    StoreError::Corrupt("a heartbeat of a batch got no answer".into())
                })
            })
            .collect()
    }

    async fn membership(&self, cluster: &ClusterName) -> Result<Option<Membership>, StoreError> {
        self.guard(self.try_membership(cluster)).await
    }

    async fn clusters(
        &self,
        after: Option<&ClusterName>,
        limit: u32,
    ) -> Result<Vec<ClusterName>, StoreError> {
        self.guard(async {
            // `name` is COLLATE "C": byte order, as the memory store sorts.
            let names: Vec<String> = sqlx::query_scalar(
                "SELECT name FROM clusters WHERE $1::text IS NULL OR name > $1
                 ORDER BY name LIMIT $2",
            )
            .bind(after.map(ClusterName::as_str))
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
            cluster_names(&names)
        })
        .await
    }

    async fn silos(
        &self,
        cluster: &ClusterName,
        after: Option<&SiloId>,
        limit: u32,
    ) -> Result<Option<SiloPage>, StoreError> {
        self.guard(self.try_silos(cluster, after, limit)).await
    }

    async fn silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        self.guard(self.try_silo(cluster, silo)).await
    }

    async fn remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<Departure>, StoreError> {
        self.guard(async { deadlock_as_contention(self.try_remove_silo(cluster, silo).await) })
            .await
    }

    async fn drain_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        self.guard(self.try_drain_silo(cluster, silo)).await
    }

    async fn reap(&self) -> Result<Reaping, StoreError> {
        self.guard(async { deadlock_as_contention(self.try_reap().await) })
            .await
    }
}

#[async_trait]
impl DirectoryStore for PostgresStore {
    async fn lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
    ) -> Result<Vec<Located>, StoreError> {
        self.guard(async { Ok(self.try_lookup(cluster, grains).await?) })
            .await
    }

    async fn register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
    ) -> Result<Vec<Registration>, StoreError> {
        self.guard(async { deadlock_as_contention(self.try_register(cluster, entries).await) })
            .await
    }

    async fn lookup_or_register(
        &self,
        cluster: &ClusterName,
        proposals: &[Proposal],
    ) -> Result<Vec<Registration>, StoreError> {
        self.guard(async {
            deadlock_as_contention(self.try_lookup_or_register(cluster, proposals).await)
        })
        .await
    }

    async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: i64,
    ) -> Result<bool, StoreError> {
        self.guard(self.try_deactivate(cluster, grain, silo, epoch))
            .await
    }

    async fn movable_activations(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        immovable: &[String],
        moved_since: Millis,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        self.guard(self.try_movable_activations(cluster, silo, immovable, moved_since, limit))
            .await
    }

    async fn activation_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<HashMap<String, u64>, StoreError> {
        self.guard(async {
            let rows: Vec<(String, i64)> = sqlx::query_as(
                "SELECT silo, count(*) FROM activations WHERE cluster = $1 GROUP BY silo",
            )
            .bind(cluster.as_str())
            .fetch_all(&self.pool)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(silo, n)| (silo, u64::try_from(n).unwrap_or(0)))
                .collect())
        })
        .await
    }

    async fn activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        self.guard(self.try_activations_on(cluster, silo, after, limit))
            .await
    }

    async fn release_dead(&self, limit: u32) -> Result<u64, StoreError> {
        self.guard(self.try_release_dead(limit)).await
    }
}

#[async_trait]
impl PolicyStore for PostgresStore {
    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
    ) -> Result<Result<i64, i64>, StoreError> {
        self.guard(self.try_put_policy(cluster, policy, expected))
            .await
    }
}

#[async_trait]
impl PoolStore for PostgresStore {
    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), StoreError> {
        self.guard(self.try_put_pool(cluster, name, pool)).await
    }

    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        self.guard(self.try_pool(cluster, name)).await
    }

    async fn next_round_robin(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<u64>, StoreError> {
        self.guard(self.try_next_round_robin(cluster, name)).await
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

    async fn ping(&self) -> Result<(), StoreError> {
        self.guard(async {
            sqlx::query("SELECT 1").execute(&self.pool).await?;
            Ok(())
        })
        .await
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.guard(self.try_stats()).await
    }
}
