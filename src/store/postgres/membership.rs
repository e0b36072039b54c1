//! Membership on Postgres: silos and their clusters. Every read judges the silos at the database's
//! clock with the cluster's TTL; a leave or a death follows the death protocol (the silo row taken
//! `FOR UPDATE`, which waits for registrations holding it `FOR KEY SHARE`) and retires the silo's
//! generation in the same transaction. Heartbeat writes, one at a time and batched (a batch's
//! statements span clusters, each row found by its whole key), are in [`heartbeats`].

mod heartbeats;
mod written_silos;

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::StreamExt;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::Row;

pub(super) use self::written_silos::{SiloCopy, WrittenSilos};
use super::deaths::{release_chunk, retire};
use super::error::{conflict_as_contention, PgError};
use super::{cluster_names, decode_stored, PostgresStore};
use crate::cluster::silo::SiloProfile;
use crate::cluster::{ClusterName, HeartbeatRejection, Liveness, SiloId, SiloRecord, SiloStatus};
use crate::policy::Policy;
use crate::store::{
    Departure, HeartbeatOutcome, HeartbeatUpdate, HeartbeatUpdates, Membership, MembershipStore,
    Reaped, Reaping, SiloPage, StoreError, DEAD_SILO_RETENTION_MS, RELEASE_CHUNK,
};

/// Silos of one heartbeat batch taking the one-by-one path at once (each holds a connection).
const SILOS_ONE_BY_ONE_AT_ONCE: usize = 4;
/// Most expired tombstones one sweep forgets.
const FORGET_CHUNK: i64 = 1_000;

/// Columns of a silo row, as `silo_from_row` reads them.
const SILO_COLUMNS: &str = "s.silo, s.status, s.last_heartbeat_ms, s.heartbeat_count, s.profile, \
     s.drained_at_ms, s.protected_until_ms";

/// Membership reads, leaves, drains and deaths.
impl PostgresStore {
    /// The cluster's membership as stored, with the load figures this replica holds back shown
    /// (`WrittenSilos::show_held`): its own decisions go by the latest figures its silos sent.
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
        .fetch_all(&self.db)
        .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let liveness = self.liveness_from_row(first, reachable_for)?;
        let policy: Policy = decode_stored(first.try_get("policy")?)?;
        let policy_version: i64 = first.try_get("policy_version")?;
        let mut silos = silos_from_rows(&rows)?;
        self.written_silos.show_held(cluster, &mut silos);
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
        .fetch_all(&self.db)
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
        .fetch_optional(&self.db)
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
        // Its next heartbeat here is not held back on a copy: its write reads the drain back at
        // once (but for a heartbeat being folded on the copy at this very moment, which puts it
        // back, until the next flush of held heartbeats drops it). Through another replica, after
        // that replica's next flush, which drops its copies of silos drained elsewhere.
        self.written_silos.forget(cluster, silo.as_str());
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
        .execute(&self.db)
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
        // then release a first chunk of its entries; the sweep releases the rest. A heartbeat
        // here after the leave is not held back on a copy: its write finds the silo dead, and it
        // is refused.
        self.written_silos.forget(cluster, silo.as_str());
        let mut tx = self.db.begin().await?;
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
        .execute(&mut tx)
        .await?
        .rows_affected();
        if known == 0 {
            return Ok(None);
        }
        retire(&mut tx, cluster.as_str(), std::iter::once(silo.as_str())).await?;
        let released =
            release_chunk(&mut tx, cluster.as_str(), silo.as_str(), RELEASE_CHUNK).await?;
        let release_pending = released >= u64::from(RELEASE_CHUNK);
        tx.commit().await?;
        Ok(Some(Departure {
            released,
            release_pending,
        }))
    }

    /// Marks dead every silo of `cluster` (or just `only`) that the death rule (`silo_is_alive`,
    /// judged with how long this replica has reached the store) finds dead, and retires its
    /// generation, in one transaction; and names the silos past their TTL and their protection that it did not mark,
    /// because this replica has not reached the store for a whole TTL since their last heartbeat
    /// (the deaths the outage rule defers). Each row is taken `FOR UPDATE` first — the death
    /// protocol: that lock waits for registrations holding the row (`FOR KEY SHARE`) to commit,
    /// and makes later ones wait and find the silo dead. The rule is applied again to the row as it
    /// is once locked, so a heartbeat that got in first keeps the silo alive.
    async fn declare_silent_dead(
        &self,
        cluster: &ClusterName,
        only: Option<&SiloId>,
    ) -> Result<Reaping, PgError> {
        let restarts = self.health.watch_restarts();
        let reachable_for = self.health.reachable_for();
        let mut tx = self.db.begin().await?;
        let rows = sqlx::query(
            "WITH t AS (SELECT COALESCE($1::int8, oracle_now_ms()) AS now),
             silent AS (
                -- Dead, were this replica never cut off from the store (NULL: reachable always).
                SELECT s.cluster, s.silo,
                       silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                     c.silo_ttl_ms, t.now, $2) AS deferred
                FROM silos s JOIN clusters c ON c.name = s.cluster CROSS JOIN t
                WHERE s.cluster = $3 AND c.name = $3 AND s.status <> 'dead'
                  AND ($4::text IS NULL OR s.silo = $4)
                  AND NOT silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        c.silo_ttl_ms, t.now, NULL)
             ),
             doomed AS (
                SELECT s.cluster, s.silo FROM silos s
                JOIN silent d ON d.cluster = s.cluster AND d.silo = s.silo AND NOT d.deferred
                JOIN clusters c ON c.name = s.cluster
                CROSS JOIN t
                WHERE s.cluster = $3 AND c.name = $3 AND s.status <> 'dead'
                  AND ($4::text IS NULL OR s.silo = $4)
                  AND NOT silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        c.silo_ttl_ms, t.now, $2)
                FOR UPDATE OF s
             ),
             dead AS (
                UPDATE silos s SET status = 'dead', dead_since_ms = (SELECT now FROM t)
                FROM doomed d
                WHERE s.cluster = $3 AND s.cluster = d.cluster AND s.silo = d.silo
                RETURNING s.cluster, s.silo
             )
             SELECT true AS dead, cluster, silo FROM dead
             UNION ALL
             SELECT false, cluster, silo FROM silent WHERE deferred",
        )
        .bind(self.now())
        .bind(reachable_for)
        .bind(cluster.as_str())
        .bind(only.map(SiloId::as_str))
        .fetch_all(&mut tx)
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
            cluster.as_str(),
            reaping.dead.iter().map(|r| r.silo.as_str()),
        )
        .await?;
        if self.health.watch_restarts() != restarts {
            // The count of silence restarted while this judged (an outage, a stall, a slow call):
            // its count of watched time was too long.
            tx.rollback().await?;
            return Ok(Reaping::default());
        }
        tx.commit().await?;
        Ok(reaping)
    }

    /// Drops the cluster's tombstones older than [`DEAD_SILO_RETENTION_MS`] whose entries are all
    /// released. Their generations were retired when they died, so the ids stay refused.
    async fn try_forget_expired(&self, cluster: &ClusterName) -> Result<(), PgError> {
        sqlx::query(
            "DELETE FROM silos s USING (
                SELECT cluster, silo FROM silos
                WHERE cluster = $4 AND status = 'dead' AND released
                  AND dead_since_ms < COALESCE($1::int8, oracle_now_ms()) - $2
                LIMIT $3) expired
             WHERE s.cluster = $4 AND s.silo = expired.silo",
        )
        .bind(self.now())
        .bind(DEAD_SILO_RETENTION_MS)
        .bind(FORGET_CHUNK)
        .bind(cluster.as_str())
        .execute(&self.db)
        .await?;
        Ok(())
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

/// A profile as the text stored in `silos.profile`, a `json` column (see the migration that made
/// it one): bound as text and cast, so that the database only checks it, where a `jsonb` binding
/// would have it parse the whole document into a tree on every heartbeat.
fn profile_text(profile: &SiloProfile) -> Result<String, StoreError> {
    serde_json::to_string(profile).map_err(|error| sqlx::Error::Encode(error.into()).into())
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
        // One to three statements for the whole batch, whatever its clusters (see
        // `try_record_heartbeats`): each row is found by its (cluster, silo) key, so a batch of
        // many small clusters' heartbeats costs what one cluster's does.
        let batched = self
            .guard(self.try_record_heartbeats(silos, update))
            .await?;
        let mut outcomes = batched.outcomes;
        let one_by_one = batched.one_by_one;
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
            .fetch_all(&self.db)
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
        self.guard(async { conflict_as_contention(self.try_remove_silo(cluster, silo).await) })
            .await
    }

    async fn drain_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError> {
        self.guard(self.try_drain_silo(cluster, silo)).await
    }

    async fn reap(&self, cluster: &ClusterName) -> Result<Reaping, StoreError> {
        self.guard(async { conflict_as_contention(self.declare_silent_dead(cluster, None).await) })
            .await
    }

    async fn forget_expired(&self, cluster: &ClusterName) -> Result<(), StoreError> {
        self.guard(async { Ok(self.try_forget_expired(cluster).await?) })
            .await
    }

    async fn flush_held_heartbeats(&self) -> Result<usize, StoreError> {
        self.guard(self.try_flush_held_heartbeats(None)).await
    }
}
