//! Heartbeats on Postgres: optimistic read-modify-write on the silo row's version. One heartbeat
//! reads its silo (with the cluster's TTL and retired generation), applies the domain's update and
//! writes the row back only if nobody wrote it meanwhile, retrying if somebody did. A batch does
//! the same for many silos in two statements, and leaves the silos it cannot settle that way to
//! the one-by-one path.

use std::collections::{BTreeMap, HashMap};

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{profile_text, silo_from_row, SILO_COLUMNS};
use crate::clock::Millis;
use crate::cluster::{ClusterName, HeartbeatRejection, Liveness, SiloId, SiloRecord, SiloStatus};
use crate::store::postgres::error::lost_a_race;
use crate::store::postgres::PostgresStore;
use crate::store::{
    HeartbeatOutcome, HeartbeatUpdate, HeartbeatUpdates, LimitReached, Reach, StoreError,
};

/// Optimistic heartbeat writes retry this many times before giving up (only a silo hammering the
/// oracle with concurrent heartbeats for itself could lose this often).
const MAX_HEARTBEAT_ATTEMPTS: u32 = 8;

impl PostgresStore {
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
             SELECT $1, $2, $3, $4, $5, $6, $7::json, $11
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
        .bind(profile_text(&record.profile)?)
        .bind(i64::try_from(self.settings.max_silos_per_cluster).unwrap_or(i64::MAX))
        .bind(address)
        .bind(generation)
        .bind(record.protected_until_ms)
        .execute(&self.db)
        .await;
        match done {
            // Lost a race the database broke (a serializable engine's failure): not inserted,
            // the caller reads again.
            Err(error) if lost_a_race(&error) => Ok(false),
            done => Ok(done?.rows_affected() == 1),
        }
    }

    /// Whether the cluster has reached its silo limit.
    async fn silos_full(&self, cluster: &ClusterName) -> Result<bool, StoreError> {
        let live: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM silos WHERE cluster = $1 AND status <> 'dead'",
        )
        .bind(cluster.as_str())
        .fetch_one(&self.db)
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
                    last_heartbeat_ms = $5, heartbeat_count = $6, profile = $7::json,
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
        .bind(profile_text(&record.profile)?)
        .bind(previous_count)
        .bind(record.protected_until_ms)
        .fetch_optional(&self.db)
        .await;
        let written = match written {
            // Lost a race the database broke: not written, as if the row had changed.
            Err(error) if lost_a_race(&error) => None,
            written => written?,
        };
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

    pub(super) async fn try_record_heartbeat(
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
                .fetch_one(&self.db)
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
                        let reaping = self.declare_silent_dead(cluster, Some(silo)).await?;
                        if reaping.dead.is_empty() {
                            continue;
                        }
                        let dead: Vec<&str> =
                            reaping.dead.iter().map(|r| r.silo.as_str()).collect();
                        crate::store::declared_dead_on_the_way(
                            cluster.as_str(),
                            &dead,
                            "heartbeat",
                        );
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
    pub(super) async fn try_record_heartbeats(
        &self,
        silos: &[(ClusterName, SiloId)],
        update: &HeartbeatUpdates<'_>,
    ) -> Result<BatchedHeartbeats, StoreError> {
        let mut batch = HeartbeatBatch::new(silos);
        self.ensure_batch_clusters(&mut batch).await?;
        let keys = batch.silos_to_read();
        let reachable_for = self.health.reachable_for();
        let rows = self.read_batch(&keys).await?;
        let mut writes = self.fold_batch(&mut batch, &keys, &rows, reachable_for, update)?;
        if !writes.is_empty() {
            let drained = self.write_batch(silos, &mut writes).await?;
            batch.settle_writes(&writes, &drained);
        }
        Ok(batch.finish())
    }

    /// Makes sure every cluster of the batch exists. A store that could not be reached fails the
    /// batch (and the circuit sees it); a refusal (the cluster limit) fails only that cluster's
    /// heartbeats, which are then settled.
    async fn ensure_batch_clusters(
        &self,
        batch: &mut HeartbeatBatch<'_>,
    ) -> Result<(), StoreError> {
        for cluster in batch.clusters() {
            if let Err(error) = self.ensure_cluster(cluster).await {
                if error.reach() != Reach::Answered {
                    return Err(error);
                }
                batch.fail_cluster(cluster, &error);
            }
        }
        Ok(())
    }

    /// Reads every silo in `keys` (all of one cluster: each statement names one) with its
    /// cluster's TTL and the store's instant, in one statement. Each row carries its silo's place
    /// in `keys` (from 1); a silo not stored yet has a row of NULL silo columns, and one whose
    /// cluster vanished meanwhile has none.
    async fn read_batch(&self, keys: &[(&str, &str)]) -> Result<Vec<PgRow>, StoreError> {
        let cluster = one_cluster(keys.iter().map(|(cluster, _)| *cluster));
        let key_silos: Vec<&str> = keys.iter().map(|(_, silo)| *silo).collect();
        let rows = sqlx::query(&format!(
            "SELECT k.position, c.silo_ttl_ms AS ttl, COALESCE($3::int8, oracle_now_ms()) AS now,
                    {SILO_COLUMNS}
             FROM UNNEST($2::text[]) WITH ORDINALITY AS k(silo, position)
             JOIN LATERAL (SELECT c.silo_ttl_ms FROM clusters c WHERE c.name = $1) c ON true
             LEFT JOIN LATERAL (SELECT * FROM silos s
                                WHERE s.cluster = $1 AND s.silo = k.silo LIMIT 1) s ON true"
        ))
        .bind(cluster)
        .bind(&key_silos)
        .bind(self.now())
        .fetch_all(&self.db)
        .await?;
        Ok(rows)
    }

    /// Folds each silo's heartbeats onto its row as read ([`fold_silo`]) and settles their
    /// answers; returns what is to be written, and from which version. A silo not stored yet (its
    /// heartbeat creates it), one a heartbeat declared dead (its death takes the death protocol),
    /// and one the read did not answer for (its cluster vanished meanwhile) are left to the
    /// one-by-one path.
    fn fold_batch(
        &self,
        batch: &mut HeartbeatBatch<'_>,
        keys: &[(&str, &str)],
        rows: &[PgRow],
        reachable_for: Millis,
        update: &HeartbeatUpdates<'_>,
    ) -> Result<Vec<PendingWrite>, StoreError> {
        let mut writes = Vec::new();
        let mut answered = vec![false; keys.len()];
        for row in rows {
            let position: i64 = row.try_get("position")?;
            let k = usize::try_from(position - 1)
                .ok()
                .filter(|&k| k < keys.len())
                .ok_or_else(|| {
                    StoreError::Corrupt("a heartbeat read answered for no silo".into())
                })?;
            answered[k] = true;
            let positions = &batch.by_silo[&keys[k]];
            if row.try_get::<Option<String>, _>("silo")?.is_none() {
                batch.one_by_one.extend(positions);
                continue;
            }
            let liveness = self.liveness_from_row(row, reachable_for)?;
            let read = silo_from_row(row)?;
            let Some(folded) = fold_silo(&read, liveness, positions, update) else {
                batch.one_by_one.extend(positions);
                continue;
            };
            for (i, answer) in folded.answers {
                batch.outcomes[i] = Some(Ok(answer));
            }
            if let Some(record) = folded.record {
                writes.push(PendingWrite {
                    first: positions[0],
                    record,
                    previous_count: read.heartbeat_count,
                });
            }
        }
        for (k, key) in keys.iter().enumerate() {
            if !answered[k] {
                batch.one_by_one.extend(&batch.by_silo[key]);
            }
        }
        Ok(writes)
    }

    /// Writes the folded records in one statement, each row only if it is still the version that
    /// was read, and returns the drain stamp of each silo it wrote, by (cluster, silo). Two
    /// batches that meet on the same rows in opposite orders deadlock: then nothing is written,
    /// and the one-by-one path sorts it out.
    async fn write_batch(
        &self,
        silos: &[(ClusterName, SiloId)],
        writes: &mut [PendingWrite],
    ) -> Result<HashMap<(String, String), Option<Millis>>, StoreError> {
        // In (cluster, silo) order: the statement locks the rows in the order it is given them.
        writes.sort_by(|a, b| silos[a.first].cmp(&silos[b.first]));
        let mut columns = HeartbeatColumns::default();
        for write in writes.iter() {
            columns.push(&silos[write.first].0, &write.record, write.previous_count)?;
        }
        let cluster = one_cluster(columns.clusters.iter().copied());
        let written = sqlx::query(
                // The rows are locked first, one by one in the order given — silo order — so
                // that two batches naming the same silos wait for each other instead of
                // deadlocking (which Postgres would only notice after `deadlock_timeout`, a
                // second). Each row is found by its key, whatever the statistics; every table is
                // read for the one cluster named.
                "WITH u AS (
                    SELECT * FROM UNNEST($2::text[], $3::text[], $4::text[], $5::int8[],
                                         $6::int8[], $7::text[], $8::int8[], $9::int8[])
                             AS u(silo, address, status, last_heartbeat_ms, heartbeat_count,
                                  profile, previous_count, protected_until_ms)
                 ),
                 locked AS (
                    SELECT s.silo FROM u
                    JOIN LATERAL (SELECT s.silo, s.status, s.heartbeat_count FROM silos s
                                  WHERE s.cluster = $1 AND s.silo = u.silo LIMIT 1) s ON true
                    WHERE s.status <> 'dead' AND s.heartbeat_count = u.previous_count
                    FOR NO KEY UPDATE OF s
                 )
                 UPDATE silos s SET address = u.address,
                        status = CASE WHEN s.drained_at_ms IS NULL THEN u.status ELSE 'shutting_down' END,
                        last_heartbeat_ms = u.last_heartbeat_ms, heartbeat_count = u.heartbeat_count,
                        profile = u.profile::json, protected_until_ms = u.protected_until_ms
                 FROM u JOIN locked l ON l.silo = u.silo
                 WHERE s.cluster = $1 AND s.silo = u.silo AND s.status <> 'dead'
                   AND s.heartbeat_count = u.previous_count
                 RETURNING s.cluster, s.silo, s.drained_at_ms",
            )
        .bind(cluster)
        .bind(&columns.silos)
        .bind(&columns.addresses)
        .bind(&columns.statuses)
        .bind(&columns.last_heartbeats)
        .bind(&columns.counts)
        .bind(&columns.profiles)
        .bind(&columns.previous_counts)
        .bind(&columns.protected_until)
        .fetch_all(&self.db)
        .await;
        let written = match written {
            Err(error) if lost_a_race(&error) => Vec::new(),
            written => written?,
        };
        let mut drained = HashMap::new();
        for row in &written {
            drained.insert(
                (row.try_get("cluster")?, row.try_get("silo")?),
                row.try_get("drained_at_ms")?,
            );
        }
        Ok(drained)
    }
}

/// What the batched heartbeat statements settled, and the heartbeats (positions, in order) left to
/// the one-by-one path.
pub(super) struct BatchedHeartbeats {
    pub(super) outcomes: Vec<Option<Result<HeartbeatOutcome, StoreError>>>,
    pub(super) one_by_one: Vec<usize>,
}

/// A batch of heartbeats on its way through the batched statements: where each silo's heartbeats
/// are, the answers settled so far, and the heartbeats left to the one-by-one path.
struct HeartbeatBatch<'s> {
    silos: &'s [(ClusterName, SiloId)],
    /// Positions of each silo's heartbeats, in batch order; silos in (cluster, silo) order so
    /// that concurrent batches lock rows in one order.
    by_silo: BTreeMap<(&'s str, &'s str), Vec<usize>>,
    outcomes: Vec<Option<Result<HeartbeatOutcome, StoreError>>>,
    one_by_one: Vec<usize>,
}

impl<'s> HeartbeatBatch<'s> {
    fn new(silos: &'s [(ClusterName, SiloId)]) -> Self {
        let mut by_silo: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
        for (i, (cluster, silo)) in silos.iter().enumerate() {
            by_silo
                .entry((cluster.as_str(), silo.as_str()))
                .or_default()
                .push(i);
        }
        Self {
            silos,
            by_silo,
            outcomes: (0..silos.len()).map(|_| None).collect(),
            one_by_one: Vec::new(),
        }
    }

    /// The clusters the batch names, each once, in order.
    fn clusters(&self) -> Vec<&'s ClusterName> {
        let mut clusters: Vec<&ClusterName> = self.silos.iter().map(|(c, _)| c).collect();
        clusters.sort();
        clusters.dedup();
        clusters
    }

    /// Settles every heartbeat of `cluster` as failed with `error`.
    fn fail_cluster(&mut self, cluster: &ClusterName, error: &StoreError) {
        for (i, (c, _)) in self.silos.iter().enumerate() {
            if c == cluster {
                self.outcomes[i] = Some(Err(error.clone()));
            }
        }
    }

    /// The silos whose heartbeats are not settled yet (their cluster exists), in (cluster, silo)
    /// order: the ones to read.
    fn silos_to_read(&self) -> Vec<(&'s str, &'s str)> {
        self.by_silo
            .iter()
            .filter(|(_, positions)| self.outcomes[positions[0]].is_none())
            .map(|(key, _)| *key)
            .collect()
    }

    /// Settles the heartbeats of the silos written, given the drain stamp of each row the write
    /// changed. A silo drained meanwhile answers shutting down, as the statement kept it. A silo
    /// whose row changed since it was read was not written: its answers are dropped and its
    /// heartbeats take the one-by-one path.
    fn settle_writes(
        &mut self,
        writes: &[PendingWrite],
        drained: &HashMap<(String, String), Option<Millis>>,
    ) {
        for write in writes {
            let (cluster, silo) = &self.silos[write.first];
            let positions = &self.by_silo[&(cluster.as_str(), silo.as_str())];
            match drained.get(&(cluster.to_string(), silo.to_string())) {
                None => {
                    for &i in positions {
                        self.outcomes[i] = None;
                    }
                    self.one_by_one.extend(positions);
                }
                Some(None) => {}
                Some(Some(drained_at_ms)) => {
                    for &i in positions {
                        if let Some(Ok(Ok((answer, _)))) = &mut self.outcomes[i] {
                            answer.status = SiloStatus::ShuttingDown;
                            answer.drained_at_ms = Some(*drained_at_ms);
                        }
                    }
                }
            }
        }
    }

    /// What the batched statements settled, and the heartbeats left, in batch order.
    fn finish(mut self) -> BatchedHeartbeats {
        self.one_by_one.sort_unstable();
        BatchedHeartbeats {
            outcomes: self.outcomes,
            one_by_one: self.one_by_one,
        }
    }
}

/// One silo's heartbeats folded onto its row as read.
struct FoldedSilo {
    /// Each heartbeat's answer, by its position in the batch.
    answers: Vec<(usize, HeartbeatOutcome)>,
    /// The record to write, when a heartbeat was accepted.
    record: Option<SiloRecord>,
}

/// Applies one silo's heartbeats in order, each to the record the one before it left, judged at
/// the read's instant. `None` when one declares a silo not yet marked dead dead: making it dead
/// takes the death protocol, which only the one-by-one path follows.
fn fold_silo(
    read: &SiloRecord,
    liveness: Liveness,
    positions: &[usize],
    update: &HeartbeatUpdates<'_>,
) -> Option<FoldedSilo> {
    let mut current = read.clone();
    let mut answers = Vec::with_capacity(positions.len());
    let mut accepted = false;
    for &i in positions {
        match update(i, Some(&current), &liveness) {
            Ok(next) => {
                accepted = true;
                current = next.clone();
                answers.push((i, Ok((next, liveness))));
            }
            Err(HeartbeatRejection::DeclaredDead { .. }) if read.status != SiloStatus::Dead => {
                return None;
            }
            Err(rejection) => answers.push((i, Err(rejection))),
        }
    }
    Some(FoldedSilo {
        answers,
        record: accepted.then_some(current),
    })
}

/// A silo's folded record, to be written if its row is still the version read.
struct PendingWrite {
    /// The position of the silo's first heartbeat in the batch.
    first: usize,
    record: SiloRecord,
    /// The row's version (`heartbeat_count`) as read.
    previous_count: i64,
}

/// The one cluster a batched statement's rows are all of (a batch is split by cluster before it
/// reaches the statements: every statement names one cluster).
fn one_cluster<'a>(mut clusters: impl Iterator<Item = &'a str>) -> &'a str {
    let first = clusters.next().unwrap_or_default();
    debug_assert!(
        clusters.all(|c| c == first),
        "a batched statement spans clusters"
    );
    first
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
    profiles: Vec<String>,
    previous_counts: Vec<i64>,
    protected_until: Vec<Millis>,
}

impl<'a> HeartbeatColumns<'a> {
    fn push(
        &mut self,
        cluster: &'a ClusterName,
        record: &'a SiloRecord,
        previous_count: i64,
    ) -> Result<(), StoreError> {
        self.clusters.push(cluster.as_str());
        self.silos.push(record.id.as_str());
        self.addresses.push(&record.profile.address);
        self.statuses.push(record.status.as_str());
        self.last_heartbeats.push(record.last_heartbeat_ms);
        self.counts.push(record.heartbeat_count);
        self.profiles.push(profile_text(&record.profile)?);
        self.previous_counts.push(previous_count);
        self.protected_until.push(record.protected_until_ms);
        Ok(())
    }
}
