//! The production store: Postgres through sqlx, shared by any number of oracle replicas.
//!
//! Every invariant is enforced by the database, not by a replica: the directory's primary key makes
//! registration first-writer-wins across replicas, registration checks the chosen silo's liveness in
//! the same statement that inserts, heartbeats use optimistic concurrency on the row version, and
//! the sweep that declares silos dead is idempotent. Liveness is always the SQL function
//! `silo_is_live` (a migration) with `now` from the oracle's clock, the same rule as
//! `cluster::silo::is_fresh`. A directory entry is only ever released after its silo is marked dead
//! (or deleted), and dead is final, so a late heartbeat cannot revive a silo whose grains moved.

use std::collections::{HashMap, HashSet};
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::types::Json;
use sqlx::{PgPool, Row};

use super::{
    Activation, HeartbeatUpdate, Located, Membership, NewActivation, Reaped, Registration, Store,
    StoreError, StoreStats, DEAD_SILO_RETENTION_MS,
};
use crate::clock::Millis;
use crate::cluster::silo::SiloProfile;
use crate::cluster::{
    ClusterName, GrainId, HeartbeatRejection, PoolName, SiloId, SiloRecord, SiloStatus,
};
use crate::connect::Pool;
use crate::placement::policy::Policy;

/// Optimistic heartbeat writes retry this many times before giving up (only a silo hammering the
/// oracle with concurrent heartbeats for itself could lose this often).
const MAX_HEARTBEAT_ATTEMPTS: u32 = 8;

/// SQLSTATE of a foreign key violation.
const FOREIGN_KEY_VIOLATION: &str = "23503";

/// The migrations in `migrations/`, compiled into the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The Postgres store.
#[derive(Debug)]
pub struct PostgresStore {
    pool: PgPool,
    default_silo_ttl_ms: Millis,
    /// Clusters this process has seen exist. Clusters are never deleted, so a hit saves the insert
    /// round trip on every heartbeat; a miss only costs one idempotent insert.
    known_clusters: Mutex<HashSet<ClusterName>>,
}

impl PostgresStore {
    /// Connects a pool of `pool_size` connections. Does not touch the schema; see [`Self::migrate`].
    pub async fn connect(
        url: &str,
        pool_size: u32,
        default_silo_ttl_ms: Millis,
    ) -> Result<Self, StoreError> {
        // Every query here is a short indexed statement whose best plan does not depend on its
        // parameters. Postgres would otherwise keep planning some of them afresh on each call
        // (its cost model prefers custom plans for `= ANY($array)`), which measured as 2.4× the
        // database CPU per directory lookup.
        let options =
            PgConnectOptions::from_str(url)?.options([("plan_cache_mode", "force_generic_plan")]);
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .acquire_timeout(Duration::from_secs(5))
            // sqlx pings every connection before handing it out by default: a second round trip
            // on every query. A connection that broke since its last use fails its query instead
            // (answered 503, retried by the client) and is replaced.
            .test_before_acquire(false)
            .connect_with(options)
            .await?;
        Ok(Self::from_pool(pool, default_silo_ttl_ms))
    }

    pub fn from_pool(pool: PgPool, default_silo_ttl_ms: Millis) -> Self {
        Self {
            pool,
            default_silo_ttl_ms,
            known_clusters: Mutex::default(),
        }
    }

    /// Applies pending migrations. Safe when several replicas start at once: sqlx serialises
    /// migrators with a database lock and each one skips what is already applied.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn ensure_cluster(&self, cluster: &ClusterName, now: Millis) -> Result<(), StoreError> {
        if self.known().contains(cluster) {
            return Ok(());
        }
        sqlx::query(
            "INSERT INTO clusters (name, created_ms) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        )
        .bind(cluster.as_str())
        .bind(now)
        .execute(&self.pool)
        .await?;
        self.known().insert(cluster.clone());
        Ok(())
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashSet<ClusterName>> {
        self.known_clusters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn write_silo(
        &self,
        cluster: &ClusterName,
        record: &SiloRecord,
        previous_count: Option<i64>,
    ) -> Result<bool, StoreError> {
        let sql = if previous_count.is_none() {
            "INSERT INTO silos (cluster, silo, address, status, last_heartbeat_ms, heartbeat_count, profile)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (cluster, silo) DO NOTHING"
        } else {
            "UPDATE silos SET address = $3, status = $4, last_heartbeat_ms = $5,
                    heartbeat_count = $6, profile = $7
             WHERE cluster = $1 AND silo = $2 AND status <> 'dead' AND heartbeat_count = $8"
        };
        let mut query = sqlx::query(sql)
            .bind(cluster.as_str())
            .bind(record.id.as_str())
            .bind(&record.profile.address)
            .bind(record.status.as_str())
            .bind(record.last_heartbeat_ms)
            .bind(record.heartbeat_count)
            .bind(Json(&record.profile));
        if let Some(count) = previous_count {
            query = query.bind(count);
        }
        let done = query.execute(&self.pool).await?;
        Ok(done.rows_affected() == 1)
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
    })
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
const SILO_COLUMNS: &str = "s.silo, s.status, s.last_heartbeat_ms, s.heartbeat_count, s.profile";

#[async_trait]
impl Store for PostgresStore {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        now: Millis,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<Result<(SiloRecord, Millis), HeartbeatRejection>, StoreError> {
        self.ensure_cluster(cluster, now).await?;
        let select = format!(
            "SELECT COALESCE(c.silo_ttl_ms, $3) AS ttl, {SILO_COLUMNS}
             FROM clusters c LEFT JOIN silos s ON s.cluster = c.name AND s.silo = $2
             WHERE c.name = $1"
        );
        for _ in 0..MAX_HEARTBEAT_ATTEMPTS {
            let row = sqlx::query(&select)
                .bind(cluster.as_str())
                .bind(silo.as_str())
                .bind(self.default_silo_ttl_ms)
                .fetch_one(&self.pool)
                .await?;
            let ttl: Millis = row.try_get("ttl")?;
            let previous = match row.try_get::<Option<String>, _>("silo")? {
                Some(_) => Some(silo_from_row(&row)?),
                None => None,
            };
            let record = match update(previous.as_ref(), ttl) {
                Ok(record) => record,
                Err(rejection) => return Ok(Err(rejection)),
            };
            let previous_count = previous.as_ref().map(|p| p.heartbeat_count);
            if self.write_silo(cluster, &record, previous_count).await? {
                return Ok(Ok((record, ttl)));
            }
        }
        Err(StoreError::Contended(MAX_HEARTBEAT_ATTEMPTS))
    }

    async fn membership(&self, cluster: &ClusterName) -> Result<Option<Membership>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT COALESCE(c.silo_ttl_ms, $2) AS ttl, c.policy, c.policy_version, {SILO_COLUMNS}
             FROM clusters c LEFT JOIN silos s ON s.cluster = c.name
             WHERE c.name = $1 ORDER BY s.silo"
        ))
        .bind(cluster.as_str())
        .bind(self.default_silo_ttl_ms)
        .fetch_all(&self.pool)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let silo_ttl_ms: Millis = first.try_get("ttl")?;
        let Json(policy): Json<Policy> = first.try_get("policy")?;
        let policy_version: i64 = first.try_get("policy_version")?;
        let mut silos = Vec::with_capacity(rows.len());
        for row in &rows {
            if row.try_get::<Option<String>, _>("silo")?.is_some() {
                silos.push(silo_from_row(row)?);
            }
        }
        Ok(Some(Membership {
            silo_ttl_ms,
            silos: std::sync::Arc::new(silos),
            policy,
            policy_version,
        }))
    }

    async fn remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        now: Millis,
    ) -> Result<Option<u64>, StoreError> {
        // Mark it dead first (the row lock makes any racing heartbeat wait, then fail), then
        // release its entries; the tombstone keeps the id from rejoining until it expires.
        let mut tx = self.pool.begin().await?;
        let known = sqlx::query(
            "UPDATE silos SET status = 'dead', dead_since_ms = COALESCE(dead_since_ms, $3)
             WHERE cluster = $1 AND silo = $2",
        )
        .bind(cluster.as_str())
        .bind(silo.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let released = sqlx::query("DELETE FROM activations WHERE cluster = $1 AND silo = $2")
            .bind(cluster.as_str())
            .bind(silo.as_str())
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok((known == 1).then_some(released))
    }

    async fn lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
        now: Millis,
    ) -> Result<Vec<Located>, StoreError> {
        let names: Vec<&str> = grains.iter().map(GrainId::as_str).collect();
        let rows = sqlx::query(
            "SELECT a.grain, a.silo, s.address, a.strategy, a.epoch, a.created_ms,
                    silo_is_live(s.status, s.last_heartbeat_ms, COALESCE(c.silo_ttl_ms, $4), $3) AS live
             FROM activations a
             JOIN silos s ON s.cluster = a.cluster AND s.silo = a.silo
             JOIN clusters c ON c.name = a.cluster
             WHERE a.cluster = $1 AND a.grain = ANY($2)",
        )
        .bind(cluster.as_str())
        .bind(&names)
        .bind(now)
        .bind(self.default_silo_ttl_ms)
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

    async fn register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
        now: Millis,
    ) -> Result<Vec<Registration>, StoreError> {
        // Rows are written in grain order so that two replicas registering overlapping batches
        // always lock in the same order and cannot deadlock.
        let mut order: Vec<usize> = (0..entries.len()).collect();
        order.sort_by(|&a, &b| entries[a].grain.cmp(&entries[b].grain));

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
            sqlx::query(
                "WITH stale AS (
                    SELECT a.grain, a.silo FROM activations a
                    JOIN UNNEST($2::text[], $3::int8[]) AS s(grain, epoch)
                      ON a.grain = s.grain AND a.epoch = s.epoch
                    WHERE a.cluster = $1
                 ),
                 dead AS (
                    UPDATE silos s SET status = 'dead', dead_since_ms = $4
                    FROM clusters c
                    WHERE s.cluster = $1 AND c.name = s.cluster
                      AND s.silo IN (SELECT silo FROM stale)
                      AND s.status <> 'dead'
                      AND NOT silo_is_live(s.status, s.last_heartbeat_ms, COALESCE(c.silo_ttl_ms, $5), $4)
                    RETURNING s.silo
                 )
                 DELETE FROM activations a USING stale, silos s
                 WHERE a.cluster = $1 AND a.grain = stale.grain AND a.silo = stale.silo
                   AND s.cluster = a.cluster AND s.silo = a.silo
                   AND (s.status = 'dead' OR s.silo IN (SELECT silo FROM dead))",
            )
            .bind(cluster.as_str())
            .bind(&stale_grains)
            .bind(&stale_epochs)
            .bind(now)
            .bind(self.default_silo_ttl_ms)
            .execute(&self.pool)
            .await?;
        }

        let grains: Vec<&str> = order.iter().map(|&i| entries[i].grain.as_str()).collect();
        let silos: Vec<&str> = order.iter().map(|&i| entries[i].silo.as_str()).collect();
        let strategies: Vec<&str> = order.iter().map(|&i| entries[i].strategy).collect();
        let rows = sqlx::query(
            "WITH ttl AS (SELECT COALESCE((SELECT silo_ttl_ms FROM clusters WHERE name = $1), $6) AS ms),
             inserted AS (
                INSERT INTO activations (cluster, grain, silo, strategy, epoch, created_ms)
                SELECT $1, n.grain, n.silo, n.strategy, nextval('activation_epochs'), $5
                FROM UNNEST($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS n(grain, silo, strategy, position)
                JOIN silos s ON s.cluster = $1 AND s.silo = n.silo
                CROSS JOIN ttl
                WHERE s.status = 'active' AND silo_is_live(s.status, s.last_heartbeat_ms, ttl.ms, $5)
                ORDER BY n.position
                ON CONFLICT (cluster, grain) DO NOTHING
                RETURNING grain, silo, strategy, epoch, created_ms
             )
             SELECT i.grain, i.silo, s.address, i.strategy, i.epoch, i.created_ms
             FROM inserted i JOIN silos s ON s.cluster = $1 AND s.silo = i.silo",
        )
        .bind(cluster.as_str())
        .bind(&grains)
        .bind(&silos)
        .bind(&strategies)
        .bind(now)
        .bind(self.default_silo_ttl_ms)
        .fetch_all(&self.pool)
        .await;
        let rows = match rows {
            // A chosen silo left (its row was deleted) between the liveness check and the foreign
            // key check: nothing was inserted; every entry is decided again.
            Err(sqlx::Error::Database(error))
                if error.code().as_deref() == Some(FOREIGN_KEY_VIOLATION) =>
            {
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
        let mut winners: HashMap<String, Located> = HashMap::new();
        if !lost.is_empty() {
            for located in self.lookup(cluster, &lost, now).await? {
                winners.insert(located.activation.grain.clone(), located);
            }
        }
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

    async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
        now: Millis,
    ) -> Result<(), StoreError> {
        self.ensure_cluster(cluster, now).await?;
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

    async fn pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
    ) -> Result<Option<Pool>, StoreError> {
        let definition: Option<Json<Pool>> =
            sqlx::query_scalar("SELECT definition FROM pools WHERE cluster = $1 AND pool = $2")
                .bind(cluster.as_str())
                .bind(name.as_str())
                .fetch_optional(&self.pool)
                .await?;
        Ok(definition.map(|Json(pool)| pool))
    }

    async fn next_round_robin(
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

    async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: Option<i64>,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM activations WHERE cluster = $1 AND grain = $2 AND silo = $3
               AND ($4::int8 IS NULL OR epoch = $4)",
        )
        .bind(cluster.as_str())
        .bind(grain.as_str())
        .bind(silo.as_str())
        .bind(epoch)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    async fn activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError> {
        let rows = sqlx::query(
            "SELECT a.grain, a.silo, s.address, a.strategy, a.epoch, a.created_ms
             FROM activations a JOIN silos s ON s.cluster = a.cluster AND s.silo = a.silo
             WHERE a.cluster = $1 AND a.silo = $2 AND ($3::text IS NULL OR a.grain > $3)
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

    async fn reap(&self, now: Millis) -> Result<Vec<Reaped>, StoreError> {
        let rows = sqlx::query(
            "WITH dead AS (
                UPDATE silos s SET status = 'dead', dead_since_ms = $1
                FROM clusters c
                WHERE c.name = s.cluster AND s.status <> 'dead'
                  AND NOT silo_is_live(s.status, s.last_heartbeat_ms, COALESCE(c.silo_ttl_ms, $2), $1)
                RETURNING s.cluster, s.silo
             ),
             released AS (
                DELETE FROM activations a USING dead d
                WHERE a.cluster = d.cluster AND a.silo = d.silo
                RETURNING a.cluster, a.silo
             )
             SELECT d.cluster, d.silo,
                    (SELECT count(*) FROM released r WHERE r.cluster = d.cluster AND r.silo = d.silo) AS released
             FROM dead d",
        )
        .bind(now)
        .bind(self.default_silo_ttl_ms)
        .fetch_all(&self.pool)
        .await?;
        // A registration that raced the sweep (it saw the silo alive a moment before) can leave an
        // entry behind on a silo the sweep just marked dead. Lookups already ignore it; this drops it.
        sqlx::query(
            "DELETE FROM activations a USING silos s
             WHERE s.cluster = a.cluster AND s.silo = a.silo AND s.status = 'dead'",
        )
        .execute(&self.pool)
        .await?;
        sqlx::query("DELETE FROM silos WHERE status = 'dead' AND dead_since_ms < $1")
            .bind(now - DEAD_SILO_RETENTION_MS)
            .execute(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(Reaped {
                    cluster: row.try_get("cluster")?,
                    silo: row.try_get("silo")?,
                    released: u64::try_from(row.try_get::<i64, _>("released")?).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
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
        let entries: i64 = sqlx::query_scalar("SELECT count(*) FROM activations")
            .fetch_one(&self.pool)
            .await?;
        Ok(StoreStats {
            silos_by_status,
            directory_entries: u64::try_from(entries).unwrap_or(0),
        })
    }

    async fn put_policy(
        &self,
        cluster: &ClusterName,
        policy: &Policy,
        expected: Option<i64>,
        now: Millis,
    ) -> Result<Result<i64, i64>, StoreError> {
        let ttl = policy
            .silo_ttl_ms
            .map(|ttl| i64::try_from(ttl).unwrap_or(i64::MAX));
        // The cluster may not exist yet (a policy written before any silo joins); create it at
        // version 0 so the conditional update below has a row to compare against.
        self.ensure_cluster(cluster, now).await?;
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
