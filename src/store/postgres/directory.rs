//! The grain directory on Postgres. The primary key on `(cluster, grain)` makes registration
//! first-writer-wins across replicas; a registration checks the chosen silo's liveness in the
//! statement that inserts, and holds the silo row `FOR KEY SHARE` until it commits, so a death
//! (which takes the row `FOR UPDATE`) either comes first and is seen, or waits and releases the new
//! entry with the others. Registrations insert in (cluster, grain) order and lock silos in
//! (cluster, silo) order, so overlapping batches cannot deadlock on the index or the silo rows.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::deaths::{release_chunk, retire};
use super::error::{conflict_as_contention, has_sqlstate, PgError, FOREIGN_KEY_VIOLATION};
use super::PostgresStore;
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId};
use crate::store::{
    Activation, DirectoryStore, Located, NewActivation, Proposal, Registration, StoreError,
};

/// Positions of `items` in grain order: registrations insert in it, so that two replicas
/// registering overlapping batches lock index entries in the same order and cannot deadlock.
fn grain_order<T>(items: &[T], grain: impl Fn(&T) -> &GrainId) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| grain(&items[a]).cmp(grain(&items[b])));
    order
}

/// What one registration judges liveness by, read once before its statements so that all of
/// them judge at the same instant: the store's time (`None`: the database's clock), how long this
/// replica had reached the store, and how many times its count of silence had restarted (a death
/// is only committed if it did not restart while it was judged: an outage, a stall, a slow call).
struct Judgement {
    now: Option<Millis>,
    restarts: u64,
    reachable_for: Millis,
}

/// The answers of [`PostgresStore::lookup_or_insert`], by cluster, then grain (looked up by
/// the names asked for, without building a key a grain).
type Answers = HashMap<String, HashMap<String, Registration>>;

fn answer_of<'a>(
    answers: &'a Answers,
    cluster: &ClusterName,
    grain: &GrainId,
) -> Option<&'a Registration> {
    answers.get(cluster.as_str())?.get(grain.as_str())
}

/// The answers of [`PostgresStore::lookup_or_insert`]'s rows.
fn registrations_by_key(rows: &[PgRow]) -> Result<Answers, PgError> {
    let mut answers = Answers::new();
    for row in rows {
        let kind: String = row.try_get("kind")?;
        let cluster: String = row.try_get("cluster")?;
        if kind == "unavailable" {
            answers
                .entry(cluster)
                .or_default()
                .insert(row.try_get("grain")?, Registration::SiloUnavailable);
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
        answers.entry(cluster).or_default().insert(grain, answer);
    }
    Ok(answers)
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

impl PostgresStore {
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
        .fetch_all(&self.db)
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

    /// [`DirectoryStore::lookup_or_register`] in one statement, whatever the proposals' clusters:
    /// each grain's entry if it has one, and the registration (by [`Self::try_register`]'s rules:
    /// the chosen silo active, alive and held `FOR KEY SHARE` until commit) of those that have
    /// none. A new grain costs one round trip, not a lookup and then an insert; each chosen silo is
    /// checked and locked once per statement, not once per grain; and a fleet of small clusters'
    /// placements share a statement (one each cost Postgres ~180 µs of execution for one grain).
    /// Only a grain another transaction registered while this statement ran (it lost that race)
    /// costs a second read.
    async fn try_lookup_or_register(
        &self,
        proposals: &[(ClusterName, Proposal)],
    ) -> Result<Vec<Registration>, PgError> {
        let Some(rows) = self.lookup_or_insert(proposals).await? else {
            // A chosen silo left (its row was deleted) between the liveness check and the foreign
            // key check: nothing was written; the two-step path sorts it out.
            return Ok(crate::store::lookup_then_register(self, proposals).await?);
        };
        let mut answers = registrations_by_key(&rows)?;
        // Grains registered by another transaction while this statement ran (their entry is
        // committed now, but was not there when the statement looked): the only ones read again.
        let mut lost: HashMap<&ClusterName, Vec<GrainId>> = HashMap::new();
        for (cluster, p) in proposals {
            if p.silo.is_some() && answer_of(&answers, cluster, &p.grain).is_none() {
                lost.entry(cluster).or_default().push(p.grain.clone());
            }
        }
        for (cluster, lost) in lost {
            let winners = self.race_winners(cluster, &lost).await?;
            answers.entry(cluster.to_string()).or_default().extend(
                winners
                    .into_iter()
                    .map(|(grain, located)| (grain, Registration::Existing(located))),
            );
        }
        Ok(proposals
            .iter()
            .map(|(cluster, p)| {
                answer_of(&answers, cluster, &p.grain)
                    .cloned()
                    .unwrap_or(Registration::SiloUnavailable)
            })
            .collect())
    }

    /// The one statement of [`Self::try_lookup_or_register`], inserting in (cluster, grain) order
    /// as [`grain_order`] does within a cluster: a row per grain found (`found`), registered (`registered`) or whose
    /// proposed silo could not take it (`unavailable`); a grain another transaction registered
    /// meanwhile has none. `None` when a chosen silo left (its row was deleted) between the
    /// liveness check and the foreign key check: nothing was written.
    async fn lookup_or_insert(
        &self,
        proposals: &[(ClusterName, Proposal)],
    ) -> Result<Option<Vec<PgRow>>, PgError> {
        let mut order: Vec<usize> = (0..proposals.len()).collect();
        order.sort_by(|&a, &b| {
            let (ca, pa) = &proposals[a];
            let (cb, pb) = &proposals[b];
            (ca, &pa.grain).cmp(&(cb, &pb.grain))
        });
        let clusters: Vec<&str> = order.iter().map(|&i| proposals[i].0.as_str()).collect();
        let grains: Vec<&str> = order
            .iter()
            .map(|&i| proposals[i].1.grain.as_str())
            .collect();
        let silos: Vec<Option<&str>> = order
            .iter()
            .map(|&i| proposals[i].1.silo.as_ref().map(SiloId::as_str))
            .collect();
        let strategies: Vec<&str> = order.iter().map(|&i| proposals[i].1.strategy).collect();
        let rows = sqlx::query(
            // Every row is found by a (cluster, grain) or (cluster, silo) key of the list (`n`
            // names a row of it, or of what was derived from it), so an engine sharded by cluster
            // sends each row's work to its shard.
            "WITH asked AS (
                SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY
                         AS n(cluster, grain, silo, strategy, position)
             ),
             found AS (
                SELECT n.cluster, a.grain, a.silo, a.strategy, a.epoch, a.created_ms
                FROM asked n
                JOIN LATERAL (SELECT a.grain, a.silo, a.strategy, a.epoch, a.created_ms
                              FROM activations a
                              WHERE a.cluster = n.cluster AND a.grain = n.grain LIMIT 1) a ON true
             ),
             missing AS (
                SELECT n.* FROM asked n
                WHERE n.silo IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM found f
                                  WHERE f.cluster = n.cluster AND f.grain = n.grain)
             ),
             chosen AS (
                -- The silos are locked in (cluster, silo) order: the lateral is run once per
                -- row of the ordered list, in its order (the cluster's TTL is read inside it, so
                -- no join stands between the list and the locks to reorder them).
                SELECT n.cluster, s.silo
                FROM (SELECT DISTINCT cluster, silo FROM missing ORDER BY cluster, silo) n
                JOIN LATERAL (
                    SELECT s.silo FROM silos s
                    WHERE s.cluster = n.cluster AND s.silo = n.silo AND s.status = 'active'
                      AND silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                        (SELECT c.silo_ttl_ms FROM clusters c
                                         WHERE c.name = n.cluster),
                                        COALESCE($5::int8, oracle_now_ms()), $6)
                    LIMIT 1
                    FOR KEY SHARE
                ) s ON true
             ),
             inserted AS (
                INSERT INTO activations (cluster, grain, silo, strategy, epoch, created_ms)
                SELECT n.cluster, n.grain, n.silo, n.strategy, oracle_next_epoch(),
                       COALESCE($5::int8, oracle_now_ms())
                FROM missing n
                JOIN chosen s ON s.cluster = n.cluster AND s.silo = n.silo
                ORDER BY n.position
                ON CONFLICT (cluster, grain) DO NOTHING
                RETURNING cluster, grain, silo, strategy, epoch, created_ms
             ),
             answered AS (
                SELECT 'registered' AS kind, i.* FROM inserted i
                UNION ALL
                SELECT 'found', f.* FROM found f
             )
             SELECT n.kind, n.cluster, n.grain, n.silo, s.address, n.strategy, n.epoch,
                    n.created_ms,
                    n.kind = 'registered'
                    OR silo_is_alive(s.status, s.last_heartbeat_ms, s.protected_until_ms,
                                     c.silo_ttl_ms, COALESCE($5::int8, oracle_now_ms()), $6) AS live
             FROM answered n
             JOIN clusters c ON c.name = n.cluster
             JOIN LATERAL (SELECT s.address, s.status, s.last_heartbeat_ms, s.protected_until_ms
                           FROM silos s
                           WHERE s.cluster = n.cluster AND s.silo = n.silo LIMIT 1) s ON true
             UNION ALL
             -- Grains whose proposed silo could not take them: decided again, not looked up.
             SELECT 'unavailable', n.cluster, n.grain, n.silo, NULL, NULL, NULL, NULL, false
             FROM missing n
             WHERE NOT EXISTS (SELECT 1 FROM chosen s
                               WHERE s.cluster = n.cluster AND s.silo = n.silo)",
        )
        .bind(&clusters)
        .bind(&grains)
        .bind(&silos)
        .bind(&strategies)
        .bind(self.now())
        .bind(self.health.reachable_for())
        .fetch_all(&self.db)
        .await;
        match rows {
            Err(error) if has_sqlstate(&error, FOREIGN_KEY_VIOLATION) => Ok(None),
            rows => Ok(Some(rows?)),
        }
    }

    /// Registers new activations by [`DirectoryStore::register`]'s rules, in grain order (see
    /// [`grain_order`]): first the stale entries some of them replace are released, with their
    /// silos' deaths; then one statement inserts every entry whose silo is active and alive; last,
    /// the entries of grains that lost their race to another transaction are read back. Both
    /// statements judge liveness at one instant ([`Judgement`]).
    async fn try_register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
    ) -> Result<Vec<Registration>, PgError> {
        let order = grain_order(entries, |e| &e.grain);
        let judged = Judgement {
            now: self.now(),
            restarts: self.health.watch_restarts(),
            reachable_for: self.health.reachable_for(),
        };
        self.release_replaced(cluster, entries, &order, &judged)
            .await?;
        let Some(registered) = self
            .insert_activations(cluster, entries, &order, &judged)
            .await?
        else {
            // A chosen silo left (its row was deleted) between the liveness check and the foreign
            // key check: nothing was inserted; every entry is decided again.
            return Ok(vec![Registration::SiloUnavailable; entries.len()]);
        };
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

    /// Releases the stale entries (on silos past their TTL) that `entries` replace, each only if
    /// it is still that exact activation. An entry is released only once its silo is marked dead
    /// — by this statement, under the silo row's lock, or before it. A heartbeat racing in for
    /// that silo then finds it dead and is refused, so a silo can never keep running a grain the
    /// directory gave away. The silo's other entries go with the sweep's release.
    async fn release_replaced(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
        order: &[usize],
        judged: &Judgement,
    ) -> Result<(), PgError> {
        let (stale_grains, stale_epochs): (Vec<&str>, Vec<i64>) = order
            .iter()
            .filter_map(|&i| {
                let e = &entries[i];
                e.replaces_epoch.map(|epoch| (e.grain.as_str(), epoch))
            })
            .unzip();
        if stale_grains.is_empty() {
            return Ok(());
        }
        let mut tx = self.db.begin().await?;
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
        .bind(judged.now)
        .bind(judged.reachable_for)
        .fetch_all(&mut tx)
        .await?;
        retire(&mut tx, cluster.as_str(), dead.iter().map(String::as_str)).await?;
        if self.health.watch_restarts() == judged.restarts {
            tx.commit().await?;
            let dead: Vec<&str> = dead.iter().map(String::as_str).collect();
            crate::store::declared_dead_on_the_way(cluster.as_str(), &dead, "placement");
        } else {
            // The count of silence restarted while this judged: nothing is replaced; the insert
            // finds the old entries and the placement decides again.
            tx.rollback().await?;
        }
        Ok(())
    }

    /// Inserts every entry whose chosen silo is active and alive and whose grain has no entry, in
    /// one statement; returns the new activations by grain, or `None` when a chosen silo left
    /// (its row was deleted) between the liveness check and the foreign key check, and nothing
    /// was inserted.
    async fn insert_activations(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
        order: &[usize],
        judged: &Judgement,
    ) -> Result<Option<HashMap<String, Activation>>, PgError> {
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
                SELECT $1, n.grain, n.silo, n.strategy, oracle_next_epoch(),
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
        .bind(judged.now)
        .bind(judged.reachable_for)
        .fetch_all(&self.db)
        .await;
        let rows = match rows {
            Err(error) if has_sqlstate(&error, FOREIGN_KEY_VIOLATION) => return Ok(None),
            rows => rows?,
        };
        let mut registered: HashMap<String, Activation> = HashMap::with_capacity(rows.len());
        for row in &rows {
            let activation = activation_from_row(row)?;
            registered.insert(activation.grain.clone(), activation);
        }
        Ok(Some(registered))
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
        .execute(&self.db)
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
        .fetch_all(&self.db)
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
        .fetch_all(&self.db)
        .await?;
        rows.iter().map(activation_from_row).collect()
    }

    async fn try_release_dead(&self, cluster: &ClusterName, limit: u32) -> Result<u64, StoreError> {
        // One dead silo at a time, by its key: every statement is an index range, whatever the
        // planner knows about the tables. No entry can appear on a silo after its death commits
        // (registration holds the silo row), so a dead silo found without entries is released for
        // good.
        loop {
            let Some(silo) = sqlx::query_scalar::<_, String>(
                "SELECT silo FROM silos WHERE cluster = $1 AND status = 'dead' AND NOT released
                 LIMIT 1",
            )
            .bind(cluster.as_str())
            .fetch_optional(&self.db)
            .await?
            else {
                return Ok(0);
            };
            let mut tx = self.db.begin().await?;
            let released = release_chunk(&mut tx, cluster.as_str(), &silo, limit).await?;
            tx.commit().await?;
            if released > 0 {
                return Ok(released);
            }
        }
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
        self.guard(async { conflict_as_contention(self.try_register(cluster, entries).await) })
            .await
    }

    async fn lookup_or_register(
        &self,
        proposals: &[(ClusterName, Proposal)],
    ) -> Result<Vec<Registration>, StoreError> {
        self.guard(async { conflict_as_contention(self.try_lookup_or_register(proposals).await) })
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
            .fetch_all(&self.db)
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

    async fn release_dead(&self, cluster: &ClusterName, limit: u32) -> Result<u64, StoreError> {
        self.guard(self.try_release_dead(cluster, limit)).await
    }
}
