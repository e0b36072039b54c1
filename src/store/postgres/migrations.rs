//! Open migrations on Postgres. Issuing is fenced by the cluster's lease row (read `FOR SHARE` in
//! the writing transaction, so a takeover waits for it); completing locks the migration, then
//! both silos `FOR KEY SHARE` (the one lock a death's `FOR UPDATE` conflicts with, as for
//! registrations), then the directory entry, and moves the entry in the transaction that removes
//! the migration.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::types::Json;
use sqlx::Row;

use super::statements::Tx;

use super::error::{conflict_as_contention, PgError};
use super::PostgresStore;
use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloId};
use crate::store::{
    Completion, Ending, Failure, Lease, Migration, MigrationReason, MigrationStore, NewMigration,
    Refusal, SiloCounts, StoreError, ENDING_KEPT_MS,
};

const COLUMNS: &str = "id, grain, from_silo, to_silo, reason, epoch, created_at_ms";

fn migration(row: &PgRow) -> Result<Migration, StoreError> {
    Ok(Migration {
        id: row.try_get("id")?,
        grain: row.try_get("grain")?,
        from: row.try_get("from_silo")?,
        to: row.try_get("to_silo")?,
        reason: MigrationReason::parse(row.try_get("reason")?)?,
        epoch: row.try_get("epoch")?,
        created_at_ms: row.try_get("created_at_ms")?,
    })
}

impl PostgresStore {
    async fn try_issue_migrations(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        migrations: &[NewMigration],
    ) -> Result<Option<Vec<Migration>>, StoreError> {
        let mut tx = self.db.begin().await?;
        let holds: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM cluster_leases
             WHERE cluster = $1 AND holder = $2 AND token = $3
               AND expires_at_ms > COALESCE($4::int8, oracle_now_ms())
             FOR SHARE",
        )
        .bind(cluster.as_str())
        .bind(&fence.holder)
        .bind(fence.token)
        .bind(self.now())
        .fetch_optional(&mut tx)
        .await?;
        if holds.is_none() {
            return Ok(None);
        }
        let mut sorted: Vec<&NewMigration> = migrations.iter().collect();
        sorted.sort_by(|a, b| a.grain.cmp(&b.grain));
        let grains: Vec<&str> = sorted.iter().map(|m| m.grain.as_str()).collect();
        let froms: Vec<&str> = sorted.iter().map(|m| m.from.as_str()).collect();
        let tos: Vec<&str> = sorted.iter().map(|m| m.to.as_str()).collect();
        let reasons: Vec<&str> = sorted.iter().map(|m| m.reason.as_str()).collect();
        let epochs: Vec<i64> = sorted.iter().map(|m| m.epoch).collect();
        // Ids from the cluster's own counter, moved past the batch (under the lease, so by one
        // writer at a time): ids a migration dropped below (its grain moved meanwhile) are
        // simply never used.
        let first_id: i64 = sqlx::query_scalar(
            "UPDATE clusters SET next_migration_id = next_migration_id + $2
             WHERE name = $1 RETURNING next_migration_id - $2",
        )
        .bind(cluster.as_str())
        .bind(sorted.len() as i64)
        .fetch_one(&mut tx)
        .await?;
        let rows = sqlx::query(&format!(
            "INSERT INTO migrations
                (cluster, id, grain, from_silo, to_silo, reason, epoch, lease_token, created_at_ms)
             SELECT $1, $9 + n.position - 1, n.grain, n.from_silo, n.to_silo, n.reason, n.epoch,
                    $7, COALESCE($8::int8, oracle_now_ms())
             FROM UNNEST($2::text[], $3::text[], $4::text[], $5::text[], $6::int8[])
                  WITH ORDINALITY AS n(grain, from_silo, to_silo, reason, epoch, position)
             WHERE EXISTS (SELECT 1 FROM activations a
                           WHERE a.cluster = $1 AND a.grain = n.grain
                             AND a.silo = n.from_silo AND a.epoch = n.epoch)
             ON CONFLICT (cluster, grain) DO NOTHING
             RETURNING {COLUMNS}"
        ))
        .bind(cluster.as_str())
        .bind(&grains)
        .bind(&froms)
        .bind(&tos)
        .bind(&reasons)
        .bind(&epochs)
        .bind(fence.token)
        .bind(self.now())
        .bind(first_id)
        .fetch_all(&mut tx)
        .await?;
        let mut written = rows.iter().map(migration).collect::<Result<Vec<_>, _>>()?;
        tx.commit().await?;
        written.sort_by_key(|m| m.id);
        Ok(Some(written))
    }

    async fn try_pending_migrations(
        &self,
        cluster: &ClusterName,
        from: &SiloId,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Migration>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM migrations
             WHERE cluster = $1 AND from_silo = $2 AND id > COALESCE($3::int8, 0)
             ORDER BY id LIMIT $4"
        ))
        .bind(cluster.as_str())
        .bind(from.as_str())
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(migration).collect()
    }

    async fn try_complete_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
        ttl_ms: Millis,
    ) -> Result<Completion, PgError> {
        let mut tx = self.db.begin().await?;
        let (m, now) = match self.lock_migration(&mut tx, cluster, id).await? {
            Found::Open { migration, now } => (migration, now),
            Found::Ended { migration, ending } => {
                return Ok(Completion::Ended { migration, ending })
            }
            Found::Neither => return Ok(Completion::NotFound),
        };
        if now - m.created_at_ms > ttl_ms {
            return refuse(tx, cluster, m, Refusal::Expired, now).await;
        }
        // Both silos, in id order, KEY SHARE: a death (FOR UPDATE) waits for this transaction,
        // or this one sees it.
        let grain_type = m.grain.split('/').next().unwrap_or_default().to_owned();
        let silos: Vec<(String, String, bool, bool)> = sqlx::query_as(
            "SELECT s.silo, s.status,
                    silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                  c.silo_ttl_ms, $3, $4),
                    COALESCE(json_typeof(s.profile -> 'grain_types'), 'null') = 'null'
                        OR (s.profile -> 'grain_types')::jsonb ? $5
             FROM silos s JOIN clusters c ON c.name = s.cluster
             WHERE s.cluster = $1 AND s.silo = ANY ($2::text[])
             ORDER BY s.silo
             FOR KEY SHARE OF s",
        )
        .bind(cluster.as_str())
        .bind(vec![m.from.as_str(), m.to.as_str()])
        .bind(now)
        .bind(self.health.reachable_for())
        .bind(&grain_type)
        .fetch_all(&mut tx)
        .await?;
        let find = |id: &str| silos.iter().find(|(silo, ..)| silo == id);
        if !find(&m.from).is_some_and(|(_, status, live, _)| status != "dead" && *live) {
            return refuse(tx, cluster, m, Refusal::SourceDead, now).await;
        }
        let target_ok = find(&m.to)
            .is_some_and(|(_, status, live, hosts)| status == "active" && *live && *hosts);
        if !target_ok {
            return refuse(tx, cluster, m, Refusal::TargetUnavailable, now).await;
        }
        let entry: Option<(String, i64)> = sqlx::query_as(
            "SELECT silo, epoch FROM activations WHERE cluster = $1 AND grain = $2 FOR UPDATE",
        )
        .bind(cluster.as_str())
        .bind(&m.grain)
        .fetch_optional(&mut tx)
        .await?;
        match entry {
            None => return refuse(tx, cluster, m, Refusal::GrainGone, now).await,
            Some((silo, epoch)) if silo != m.from || epoch != m.epoch => {
                let refusal = Refusal::GrainMoved { silo, epoch };
                return refuse(tx, cluster, m, refusal, now).await;
            }
            Some(_) => {}
        }
        let epoch: i64 = sqlx::query_scalar(
            "UPDATE activations
             SET silo = $3, epoch = oracle_next_epoch(epoch), created_ms = $4, strategy = $5
             WHERE cluster = $1 AND grain = $2 RETURNING epoch",
        )
        .bind(cluster.as_str())
        .bind(&m.grain)
        .bind(&m.to)
        .bind(now)
        .bind(m.reason.as_str())
        .fetch_one(&mut tx)
        .await?;
        end(&mut tx, cluster, &m, &Ending::Moved { epoch }, now).await?;
        tx.commit().await?;
        Ok(Completion::Moved {
            migration: m,
            epoch,
        })
    }

    /// Migration `id` locked for its ending if it is open, else how a call within
    /// [`ENDING_KEPT_MS`] ended it, if one did.
    async fn lock_migration(
        &self,
        tx: &mut Tx,
        cluster: &ClusterName,
        id: i64,
    ) -> Result<Found, PgError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS}, COALESCE($3::int8, oracle_now_ms()) AS now
             FROM migrations WHERE cluster = $1 AND id = $2 FOR UPDATE"
        ))
        .bind(cluster.as_str())
        .bind(id)
        .bind(self.now())
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(row) = row {
            return Ok(Found::Open {
                migration: migration(&row)?,
                now: row.try_get("now")?,
            });
        }
        let ended: Option<(Json<Migration>, Json<Ending>)> = sqlx::query_as(
            "SELECT migration, ending FROM migration_endings
             WHERE cluster = $1 AND id = $2
               AND ended_ms >= COALESCE($3::int8, oracle_now_ms()) - $4",
        )
        .bind(cluster.as_str())
        .bind(id)
        .bind(self.now())
        .bind(ENDING_KEPT_MS)
        .fetch_optional(&mut *tx)
        .await?;
        Ok(match ended {
            Some((migration, ending)) => Found::Ended {
                migration: migration.0,
                ending: ending.0,
            },
            None => Found::Neither,
        })
    }

    async fn try_fail_migration(&self, cluster: &ClusterName, id: i64) -> Result<Failure, PgError> {
        let mut tx = self.db.begin().await?;
        match self.lock_migration(&mut tx, cluster, id).await? {
            Found::Open { migration, now } => {
                end(&mut tx, cluster, &migration, &Ending::Failed, now).await?;
                tx.commit().await?;
                Ok(Failure::Failed(migration))
            }
            Found::Ended { migration, ending } => Ok(Failure::Ended { migration, ending }),
            Found::Neither => Ok(Failure::NotFound),
        }
    }

    async fn try_cancel_stale_migrations(
        &self,
        cluster: &ClusterName,
        ttl_ms: Millis,
    ) -> Result<Vec<Migration>, StoreError> {
        let rows = sqlx::query(&format!(
            "WITH now AS (SELECT COALESCE($3::int8, oracle_now_ms()) AS ms)
             DELETE FROM migrations m
             WHERE m.cluster = $1 AND (
                m.created_at_ms < (SELECT ms FROM now) - $2
                OR NOT EXISTS (SELECT 1 FROM activations a
                               WHERE a.cluster = m.cluster AND a.grain = m.grain
                                 AND a.silo = m.from_silo AND a.epoch = m.epoch)
                OR NOT EXISTS (SELECT 1 FROM silos s WHERE s.cluster = m.cluster AND s.silo = m.to_silo)
                OR EXISTS (SELECT 1 FROM silos s JOIN clusters c ON c.name = s.cluster
                           WHERE s.cluster = m.cluster AND s.silo IN (m.from_silo, m.to_silo)
                             AND (s.status = 'dead'
                                  OR (s.silo = m.to_silo AND s.status = 'shutting_down')
                                  OR NOT silo_is_alive(s.status, s.last_heartbeat_ms,
                                                       s.protected_until_ms, c.silo_ttl_ms,
                                                       (SELECT ms FROM now), $4))))
             RETURNING {COLUMNS}"
        ))
        .bind(cluster.as_str())
        .bind(ttl_ms)
        .bind(self.now())
        .bind(self.health.reachable_for())
        .fetch_all(&self.db)
        .await?;
        // Endings kept for retries, once they are older than that: rows no one else touches.
        sqlx::query(
            "DELETE FROM migration_endings
             WHERE cluster = $1 AND ended_ms < COALESCE($2::int8, oracle_now_ms()) - $3",
        )
        .bind(cluster.as_str())
        .bind(self.now())
        .bind(ENDING_KEPT_MS)
        .execute(&self.db)
        .await?;
        rows.iter().map(migration).collect()
    }
}

/// What a silo's call about a migration finds.
enum Found {
    /// Open, and locked until the transaction ends; `now` is the store's time.
    Open { migration: Migration, now: Millis },
    /// Ended by an earlier call within [`ENDING_KEPT_MS`].
    Ended {
        migration: Migration,
        ending: Ending,
    },
    /// Neither: cancelled by the oracle, ended longer ago, or never issued.
    Neither,
}

/// Cancels the migration and says why it was not applied.
async fn refuse(
    mut tx: Tx,
    cluster: &ClusterName,
    migration: Migration,
    refusal: Refusal,
    now: Millis,
) -> Result<Completion, PgError> {
    let ending = Ending::Refused {
        refusal: refusal.clone(),
    };
    end(&mut tx, cluster, &migration, &ending, now).await?;
    tx.commit().await?;
    Ok(Completion::Refused { migration, refusal })
}

/// Removes the migration and keeps how it ended (endings older than [`ENDING_KEPT_MS`] are pruned
/// by the movers' driver, in `cancel_stale_migrations`, off this path).
async fn end(
    tx: &mut Tx,
    cluster: &ClusterName,
    migration: &Migration,
    ending: &Ending,
    now: Millis,
) -> Result<(), PgError> {
    sqlx::query(
        "WITH removed AS (DELETE FROM migrations WHERE cluster = $1 AND id = $2)
         INSERT INTO migration_endings (cluster, id, migration, ending, ended_ms)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (cluster, id) DO UPDATE
         SET migration = EXCLUDED.migration, ending = EXCLUDED.ending, ended_ms = EXCLUDED.ended_ms",
    )
    .bind(cluster.as_str())
    .bind(migration.id)
    .bind(Json(migration))
    .bind(Json(ending))
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

#[async_trait]
impl MigrationStore for PostgresStore {
    async fn issue_migrations(
        &self,
        cluster: &ClusterName,
        fence: &Lease,
        migrations: &[NewMigration],
    ) -> Result<Option<Vec<Migration>>, StoreError> {
        self.guard(self.try_issue_migrations(cluster, fence, migrations))
            .await
    }

    async fn pending_migrations(
        &self,
        cluster: &ClusterName,
        from: &SiloId,
        after: Option<i64>,
        limit: u32,
    ) -> Result<Vec<Migration>, StoreError> {
        self.guard(self.try_pending_migrations(cluster, from, after, limit))
            .await
    }

    async fn complete_migration(
        &self,
        cluster: &ClusterName,
        id: i64,
        ttl_ms: Millis,
    ) -> Result<Completion, StoreError> {
        self.guard(async {
            conflict_as_contention(self.try_complete_migration(cluster, id, ttl_ms).await)
        })
        .await
    }

    async fn open_migration_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<Vec<(String, String, u64)>, StoreError> {
        self.guard(async {
            let rows: Vec<(String, String, i64)> = sqlx::query_as(
                "SELECT from_silo, to_silo, count(*) FROM migrations WHERE cluster = $1
                 GROUP BY from_silo, to_silo ORDER BY from_silo, to_silo",
            )
            .bind(cluster.as_str())
            .fetch_all(&self.db)
            .await?;
            Ok(rows
                .into_iter()
                .map(|(from, to, n)| (from, to, u64::try_from(n).unwrap_or(0)))
                .collect())
        })
        .await
    }

    async fn fail_migration(&self, cluster: &ClusterName, id: i64) -> Result<Failure, StoreError> {
        self.guard(async { conflict_as_contention(self.try_fail_migration(cluster, id).await) })
            .await
    }

    async fn cancel_stale_migrations(
        &self,
        cluster: &ClusterName,
        ttl_ms: Millis,
    ) -> Result<Vec<Migration>, StoreError> {
        self.guard(self.try_cancel_stale_migrations(cluster, ttl_ms))
            .await
    }

    async fn silo_counts(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<SiloCounts, StoreError> {
        self.guard(async {
            let (activations, migrating): (i64, i64) = sqlx::query_as(
                "SELECT (SELECT count(*) FROM activations WHERE cluster = $1 AND silo = $2),
                        (SELECT count(*) FROM migrations WHERE cluster = $1 AND from_silo = $2)",
            )
            .bind(cluster.as_str())
            .bind(silo.as_str())
            .fetch_one(&self.db)
            .await?;
            Ok(SiloCounts {
                activations: u64::try_from(activations).unwrap_or(0),
                migrating: u64::try_from(migrating).unwrap_or(0),
            })
        })
        .await
    }
}
