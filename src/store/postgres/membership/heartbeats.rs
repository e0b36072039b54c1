//! Heartbeats on Postgres: optimistic read-modify-write on the silo row's version. One heartbeat
//! reads its silo (with the cluster's TTL and retired generation), applies the domain's update and
//! writes the row back only if nobody wrote it meanwhile, retrying if somebody did. A batch does
//! the same for many silos, of any number of clusters, in two statements (each row found by its
//! whole key, cluster first, from the statement's own list), and leaves the silos it cannot settle that way to
//! the one-by-one path. A silo whose row this replica wrote last skips the read: its heartbeats
//! are folded onto that copy ([`WrittenSilos`](super::WrittenSilos)) and written, under the same
//! conditions, by the statement that reads the batch's other silos — and those whose row it finds
//! changed — so a batch is never more than two statements, and one when every copy holds. A
//! heartbeat folded onto a copy that changes only load figures is not written by its own request
//! while the stored heartbeat is young ([`held`]): it is answered from the copy, with a lease
//! bounded by the protection the database holds, and written later by the flush of held
//! heartbeats, with those of many other silos.

mod batch;
mod columns;
mod held;
mod joining;

use std::collections::{BTreeMap, HashMap};

use sqlx::postgres::PgRow;
use sqlx::Row;

use self::batch::{BatchedHeartbeats, HeartbeatBatch, IfChanged};
use self::columns::HeartbeatColumns;
use self::held::holds_back;
use self::joining::{fold_joining, Joining};
use super::{profile_text, silo_from_row, SiloCopy, SILO_COLUMNS};
use crate::clock::Millis;
use crate::cluster::{ClusterName, HeartbeatRejection, Liveness, SiloId, SiloRecord, SiloStatus};
use crate::store::postgres::error::lost_a_race;
use crate::store::postgres::PostgresStore;
use crate::store::{
    HeartbeatOutcome, HeartbeatUpdate, HeartbeatUpdates, LimitReached, Reach, StoreError,
};
use crate::telemetry::metric;

/// Optimistic heartbeat writes retry this many times before giving up (only a silo hammering the
/// oracle with concurrent heartbeats for itself could lose this often).
const MAX_HEARTBEAT_ATTEMPTS: u32 = 8;

/// How far past the bound on the database's clock (`clock_estimate`) heartbeats
/// folded without a read are stamped: the time from the fold to the write's start, which must not
/// pass the stamp. A stamp that late only keeps the silo counted alive that much longer.
const STAMP_LEAD_MS: Millis = 20;

/// How far behind a stamp of heartbeats folded without a read the database's clock may be when
/// their write runs; further, and the write changes nothing (the bound is stale: the heartbeats
/// are read and folded at the database's instant instead).
const STAMP_SLACK_MS: Millis = 250;

/// Clusters of one batch of heartbeats looked up or created at once when this replica does not
/// know them yet (each takes a connection).
const CLUSTERS_CREATED_AT_ONCE: usize = 8;

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
        if let Some(drained_at_ms) = drained_at_ms {
            record.mark_drained(drained_at_ms);
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

    /// Many heartbeats in a statement or two: the heartbeats of silos whose rows this replica
    /// wrote last are folded onto its copies; one statement writes them (each row only if it is
    /// still the version copied, as in [`Self::try_record_heartbeat`]) and reads every other
    /// silo, then one conditional update writes those. A batch whose every silo had a copy is the
    /// write alone, followed by a read and a write only for copies it found stale; heartbeats held
    /// back on their copies are settled before any statement, and a batch of only those sends
    /// none. Heartbeats of one silo are folded in order, each applied to the record the one before
    /// it left, and written once. Silos the read finds no row for are inserted together, in one
    /// more statement ([`joining`]). A silo that was declared dead by its heartbeat, one changed
    /// between the read and the write, and a new one the insert did not take take the one-by-one
    /// path, all its heartbeats in order.
    pub(super) async fn try_record_heartbeats(
        &self,
        silos: &[(ClusterName, SiloId)],
        update: &HeartbeatUpdates<'_>,
    ) -> Result<BatchedHeartbeats, StoreError> {
        let mut batch = HeartbeatBatch::new(silos);
        self.ensure_batch_clusters(&mut batch).await?;
        let keys = batch.silos_to_read();
        if keys.is_empty() {
            return Ok(batch.finish());
        }
        let reachable_for = self.health.reachable_for();
        let mut copied = self.fold_copies(&mut batch, &keys, reachable_for, update);
        let keys = batch.unheld(keys, &copied);
        if keys.is_empty() {
            return Ok(batch.finish());
        }
        let keys = if copied.len() == keys.len() {
            // Every silo was folded onto a copy: the write alone, and a read only for the
            // copies it found stale.
            let written = self.write_batch(silos, &mut copied).await?;
            self.settle_copies(&mut batch, &copied, &written);
            copied.clear();
            let stale = batch.silos_to_read();
            if stale.is_empty() {
                return Ok(batch.finish());
            }
            stale
        } else {
            keys
        };
        let rows = self
            .write_copies_and_read(silos, &keys, &mut copied, &mut batch)
            .await?;
        let (mut writes, joining) =
            self.fold_batch(&mut batch, &keys, &rows, reachable_for, update)?;
        if !writes.is_empty() {
            let written = self.write_batch(silos, &mut writes).await?;
            batch.settle_writes(&writes, &written, IfChanged::OneByOne);
        }
        if !joining.is_empty() {
            self.insert_joining(&mut batch, joining).await?;
        }
        Ok(batch.finish())
    }

    /// Folds the heartbeats of the silos of `keys` whose rows this replica wrote last onto those
    /// copies, judged at an instant no earlier than the database's clock when their write will run
    /// (the write checks it); returns what to write, each with what it was folded under.
    /// Heartbeats that [`holds_back`] allows are settled without a write, their copies kept with
    /// them. A silo with no copy, one a heartbeat declares dead as copied, or one whose every
    /// heartbeat the copy refuses (its copy kept) is left for the read.
    fn fold_copies(
        &self,
        batch: &mut HeartbeatBatch<'_>,
        keys: &[(&str, &str)],
        reachable_for: Millis,
        update: &HeartbeatUpdates<'_>,
    ) -> Vec<PendingWrite> {
        let Some(stamped_at) = self.copy_stamp() else {
            return Vec::new();
        };
        let mut writes = Vec::new();
        let mut held = 0;
        // `keys` are in (cluster, silo) order: each cluster's silos are together.
        for cluster_keys in keys.chunk_by(|a, b| a.0 == b.0) {
            let cluster = &batch.silos[batch.by_silo[&cluster_keys[0]][0]].0;
            let (cluster_writes, cluster_held) = self.fold_cluster_copies(
                batch,
                cluster,
                cluster_keys,
                stamped_at,
                reachable_for,
                update,
            );
            writes.extend(cluster_writes);
            held += cluster_held;
        }
        metric::heartbeats_held(held);
        writes
    }

    /// The stamp of heartbeats folded onto copies now: no earlier than the database's clock (the
    /// test clock's instant, or the bound on the database's clock plus [`STAMP_LEAD_MS`]); `None`
    /// when there is no bound yet.
    fn copy_stamp(&self) -> Option<Millis> {
        match self.now() {
            Some(now) => Some(now),
            None => self
                .clock_estimate
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .no_earlier_than(self.health.now())
                .map(|bound| bound.saturating_add(STAMP_LEAD_MS)),
        }
    }

    /// [`Self::fold_copies`] for the silos of one cluster (`keys`), at `stamped_at`: what to write,
    /// and how many silos' heartbeats it held back.
    fn fold_cluster_copies(
        &self,
        batch: &mut HeartbeatBatch<'_>,
        cluster: &ClusterName,
        keys: &[(&str, &str)],
        stamped_at: Millis,
        reachable_for: Millis,
        update: &HeartbeatUpdates<'_>,
    ) -> (Vec<PendingWrite>, usize) {
        let Some((silo_ttl_ms, copies)) = self
            .written_silos
            .take(cluster, keys.iter().map(|(_, silo)| *silo))
        else {
            return (Vec::new(), 0);
        };
        let liveness = Liveness {
            now: stamped_at,
            silo_ttl_ms,
            reachable_since: stamped_at.saturating_sub(reachable_for),
        };
        let under = FoldedUnder {
            silo_ttl_ms,
            stamped_at: Some(stamped_at),
        };
        let holding = self.holding_under(silo_ttl_ms);
        let mut writes = Vec::new();
        let mut held = 0;
        for copy in copies {
            let positions = &batch.by_silo[&(cluster.as_str(), copy.record.id.as_str())];
            let Some(folded) = fold_silo(&copy.record, liveness, positions, update) else {
                continue;
            };
            let Some(record) = folded.record else {
                // Every heartbeat refused: nothing to write, and the read judges them again. The
                // copy stays, with whatever heartbeats it holds back.
                self.written_silos.remember(cluster, silo_ttl_ms, copy);
                continue;
            };
            let hold = holds_back(&copy, &record, stamped_at, holding);
            for (i, answer) in folded.answers {
                batch.outcomes[i] = Some(Ok(answer.map(|(mut answered, judged)| {
                    if hold {
                        // The lease granted counts down to the protection stored, not to one
                        // this heartbeat would have written.
                        answered.protected_until_ms = copy.record.protected_until_ms;
                    }
                    (answered, judged)
                })));
            }
            if hold {
                held += 1;
                self.written_silos
                    .remember(cluster, silo_ttl_ms, copy.holding(record));
                continue;
            }
            writes.push(PendingWrite {
                first: positions[0],
                record,
                previous_count: copy.stored_count,
                under,
            });
        }
        (writes, held)
    }

    /// Makes sure every cluster of the batch exists, a few unknown ones at once. A store that
    /// could not be reached fails the batch (and the circuit sees it); a refusal (the cluster
    /// limit) fails only that cluster's heartbeats, which are then settled.
    async fn ensure_batch_clusters(
        &self,
        batch: &mut HeartbeatBatch<'_>,
    ) -> Result<(), StoreError> {
        let mut ensured = Vec::new();
        for clusters in batch.clusters().chunks(CLUSTERS_CREATED_AT_ONCE) {
            let at_once: Vec<_> = clusters.iter().map(|c| self.ensure_named(c)).collect();
            ensured.extend(futures_util::future::join_all(at_once).await);
        }
        for (cluster, ensured) in ensured {
            if let Err(error) = ensured {
                if error.reach() != Reach::Answered {
                    return Err(error);
                }
                batch.fail_cluster(cluster, &error);
            }
        }
        Ok(())
    }

    /// [`Self::ensure_cluster`], answered with the cluster's name.
    async fn ensure_named<'c>(
        &self,
        cluster: &'c ClusterName,
    ) -> (&'c ClusterName, Result<(), StoreError>) {
        (cluster, self.ensure_cluster(cluster).await)
    }

    /// Writes the records folded onto copies (as [`Self::write_batch`] does) and, in the same
    /// statement, reads every other silo in `keys` with its cluster's TTL and the store's
    /// instant. Each row carries its silo's place in `keys` (from 1) and whether its copy was
    /// written (then its silo columns are NULL); a silo not stored yet has a row of NULL silo
    /// columns, and one whose cluster vanished meanwhile has none. The copies written are
    /// settled, and kept as this replica's copies again; the others' heartbeats are left for the
    /// fold of the row read.
    async fn write_copies_and_read(
        &self,
        silos: &[(ClusterName, SiloId)],
        keys: &[(&str, &str)],
        copied: &mut [PendingWrite],
        batch: &mut HeartbeatBatch<'_>,
    ) -> Result<Vec<PgRow>, StoreError> {
        let key_clusters: Vec<&str> = keys.iter().map(|(cluster, _)| *cluster).collect();
        let key_silos: Vec<&str> = keys.iter().map(|(_, silo)| *silo).collect();
        in_lock_order(silos, copied);
        let mut columns = HeartbeatColumns::of(silos, copied)?;
        columns.positions = copied
            .iter()
            .map(|write| {
                let (cluster, silo) = &silos[write.first];
                keys.binary_search(&(cluster.as_str(), silo.as_str()))
                    .map(|k| k as i64 + 1)
                    .map_err(|_| StoreError::Corrupt("a copy written is not a key read".into()))
            })
            .collect::<Result<_, _>>()?;
        let sent = self.health.now();
        let statement = format!(
            "WITH {HEARTBEAT_WRITE}
             , w AS (SELECT COALESCE(array_agg(w.position), ARRAY[]::int8[]) AS positions,
                           array_agg(w.drained_at_ms) AS drained
                    FROM written w)
             SELECT k.position, c.silo_ttl_ms AS ttl, t.now, k.position = ANY(w.positions) AS written,
                    w.drained[array_position(w.positions, k.position)] AS written_drained_at_ms,
                    {SILO_COLUMNS}
             FROM UNNEST($15::text[], $16::text[]) WITH ORDINALITY AS k(cluster, silo, position)
             CROSS JOIN t
             CROSS JOIN w
             JOIN LATERAL (SELECT c.silo_ttl_ms FROM clusters c
                           WHERE c.name = k.cluster) c ON true
             LEFT JOIN LATERAL (SELECT * FROM silos s
                                WHERE s.cluster = k.cluster AND s.silo = k.silo
                                  AND NOT k.position = ANY(w.positions)
                                LIMIT 1) s ON true"
        );
        let rows = columns
            .bind(sqlx::query(&statement), self.now())
            .bind(&key_clusters)
            .bind(&key_silos)
            .fetch_all(&self.db)
            .await;
        let rows = match rows {
            // Lost a race the database broke: nothing written, nothing read; the heartbeats go
            // one by one.
            Err(error) if lost_a_race(&error) => Vec::new(),
            rows => rows?,
        };
        if let Some(row) = rows.first() {
            self.observe_clock(sent, row.try_get("now")?);
        }
        let mut written = HashMap::new();
        for row in &rows {
            if row.try_get("written")? {
                let position: i64 = row.try_get("position")?;
                let key = usize::try_from(position - 1)
                    .ok()
                    .and_then(|k| keys.get(k))
                    .ok_or_else(|| {
                        StoreError::Corrupt("a heartbeat write answered for no silo".into())
                    })?;
                written.insert(
                    (key.0.to_owned(), key.1.to_owned()),
                    row.try_get("written_drained_at_ms")?,
                );
            }
        }
        self.remember_written(silos, copied, &written);
        self.settle_copies(batch, copied, &written);
        Ok(rows)
    }

    /// Settles the heartbeats folded onto copies that `written` (the drain stamp of each row
    /// written) says landed, leaves the others for the read, and notes how many copies of each
    /// cluster were stale.
    fn settle_copies(
        &self,
        batch: &mut HeartbeatBatch<'_>,
        copied: &[PendingWrite],
        written: &HashMap<(String, String), Option<Millis>>,
    ) {
        self.note_stale_copies(batch.silos, copied, written);
        batch.settle_writes(copied, written, IfChanged::Read);
    }

    /// Notes, per cluster, how many of the writes made from copies (`copied`, of `silos`)
    /// `written` says landed and how many found their row changed (stale).
    fn note_stale_copies(
        &self,
        silos: &[(ClusterName, SiloId)],
        copied: &[PendingWrite],
        written: &HashMap<(String, String), Option<Millis>>,
    ) {
        let mut by_cluster: BTreeMap<&ClusterName, (usize, usize)> = BTreeMap::new();
        for write in copied {
            let (cluster, silo) = &silos[write.first];
            let (used, stale) = by_cluster.entry(cluster).or_default();
            *used += 1;
            if !written.contains_key(&(cluster.to_string(), silo.to_string())) {
                *stale += 1;
            }
        }
        for (cluster, (used, stale)) in by_cluster {
            self.written_silos.found_stale(cluster, used, stale);
            metric::heartbeat_copies(used - stale, stale);
        }
    }

    /// Folds each silo's heartbeats onto its row as read ([`fold_silo`]) and settles their
    /// answers; returns what is to be written, and from which version, and the silos not stored
    /// yet, their heartbeats applied to nothing ([`fold_joining`]), to be inserted. One a
    /// heartbeat declared dead (its death takes the death protocol), a new silo whose first
    /// heartbeat is refused, and one the read did not answer for (its cluster vanished meanwhile)
    /// are left to the one-by-one path.
    fn fold_batch(
        &self,
        batch: &mut HeartbeatBatch<'_>,
        keys: &[(&str, &str)],
        rows: &[PgRow],
        reachable_for: Millis,
        update: &HeartbeatUpdates<'_>,
    ) -> Result<(Vec<PendingWrite>, Vec<Joining>), StoreError> {
        let mut writes = Vec::new();
        let mut joining = Vec::new();
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
            if row.try_get("written")? {
                continue;
            }
            let positions = &batch.by_silo[&keys[k]];
            let liveness = self.liveness_from_row(row, reachable_for)?;
            if row.try_get::<Option<String>, _>("silo")?.is_none() {
                match fold_joining(liveness, positions, update) {
                    Some(silo) => joining.push(silo),
                    None => batch.one_by_one.extend(positions),
                }
                continue;
            }
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
                    under: FoldedUnder {
                        silo_ttl_ms: liveness.silo_ttl_ms,
                        stamped_at: None,
                    },
                });
            }
        }
        for (k, key) in keys.iter().enumerate() {
            if !answered[k] {
                batch.one_by_one.extend(&batch.by_silo[key]);
            }
        }
        Ok((writes, joining))
    }

    /// Writes the folded records in one statement, whatever their clusters: each row only if it
    /// is still the version that was folded onto, and only if its cluster's TTL and the
    /// database's instant are what it was folded under. Returns the drain stamp of each silo it
    /// wrote, by (cluster, silo), and keeps what it wrote as this replica's copies. Two batches
    /// that meet on the same rows in opposite orders deadlock: then nothing is written, and the
    /// one-by-one path sorts it out.
    async fn write_batch(
        &self,
        silos: &[(ClusterName, SiloId)],
        writes: &mut [PendingWrite],
    ) -> Result<HashMap<(String, String), Option<Millis>>, StoreError> {
        in_lock_order(silos, writes);
        let columns = HeartbeatColumns::of(silos, writes)?;
        let sent = self.health.now();
        let statement = format!(
            "WITH {HEARTBEAT_WRITE}
             SELECT w.cluster, w.silo, w.drained_at_ms, t.now FROM written w CROSS JOIN t"
        );
        let written = columns
            .bind(sqlx::query(&statement), self.now())
            .fetch_all(&self.db)
            .await;
        let written = match written {
            Err(error) if lost_a_race(&error) => Vec::new(),
            written => written?,
        };
        if let Some(row) = written.first() {
            self.observe_clock(sent, row.try_get("now")?);
        }
        let mut drained: HashMap<(String, String), Option<Millis>> = HashMap::new();
        for row in &written {
            drained.insert(
                (row.try_get("cluster")?, row.try_get("silo")?),
                row.try_get("drained_at_ms")?,
            );
        }
        self.remember_written(silos, writes, &drained);
        Ok(drained)
    }

    /// Keeps the records a write landed (`drained`: the drain stamp of each row written) as this
    /// replica's copies, as the database now holds them.
    fn remember_written(
        &self,
        silos: &[(ClusterName, SiloId)],
        writes: &[PendingWrite],
        drained: &HashMap<(String, String), Option<Millis>>,
    ) {
        for write in writes {
            let (cluster, silo) = &silos[write.first];
            if let Some(drained_at_ms) = drained.get(&(cluster.to_string(), silo.to_string())) {
                let mut record = write.record.clone();
                if let Some(drained_at_ms) = drained_at_ms {
                    record.mark_drained(*drained_at_ms);
                }
                self.written_silos.remember(
                    cluster,
                    write.under.silo_ttl_ms,
                    SiloCopy::written(record),
                );
            }
        }
    }
}

/// How a batch's folded records are written, whatever their clusters: each row only if it is
/// still the version that was folded onto, and only if its cluster's TTL and the database's
/// instant are what the row was folded under (`$11`; `$12`–`$13`, each a column). Every row is
/// found by its whole key, cluster first, from the statement's own list (on an engine sharded by
/// cluster, each row's shard). The rows are locked first, one by one in the order given —
/// (cluster, silo) order — so that two batches naming the same silos wait for each other instead
/// of deadlocking (which Postgres would only notice after `deadlock_timeout`, a second). The
/// update takes its values from the locked rows themselves: joined back to `u`, two CTE scans
/// met in a nested loop under the generic plan (which takes an array parameter for ten rows), and
/// a write of 1,000 rows compared a million pairs (340 ms). `t` is the statement's instant,
/// `written` the rows changed, each with its place among the keys the statement reads (`$14`:
/// empty when it reads none).
const HEARTBEAT_WRITE: &str = "t AS (SELECT COALESCE($10::int8, oracle_now_ms()) AS now),
     u AS (
        SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[],
                             $6::int8[], $7::text[], $8::int8[], $9::int8[], $11::int8[],
                             $12::int8[], $13::int8[], $14::int8[])
                 AS u(cluster, silo, address, status, last_heartbeat_ms, heartbeat_count,
                      profile, previous_count, protected_until_ms, silo_ttl_ms, earliest,
                      latest, position)
     ),
     locked AS (
        SELECT u.* FROM u
        CROSS JOIN t
        JOIN LATERAL (SELECT c.silo_ttl_ms FROM clusters c
                      WHERE c.name = u.cluster) c ON c.silo_ttl_ms = u.silo_ttl_ms
        JOIN LATERAL (SELECT s.cluster, s.silo, s.status, s.heartbeat_count FROM silos s
                      WHERE s.cluster = u.cluster AND s.silo = u.silo LIMIT 1) s ON true
        WHERE t.now BETWEEN u.earliest AND u.latest
          AND s.status <> 'dead' AND s.heartbeat_count = u.previous_count
        FOR NO KEY UPDATE OF s
     ),
     written AS (
        UPDATE silos s SET address = u.address,
               status = CASE WHEN s.drained_at_ms IS NULL THEN u.status ELSE 'shutting_down' END,
               last_heartbeat_ms = u.last_heartbeat_ms, heartbeat_count = u.heartbeat_count,
               profile = u.profile::json, protected_until_ms = u.protected_until_ms
        FROM locked u
        WHERE s.cluster = u.cluster AND s.silo = u.silo AND s.status <> 'dead'
          AND s.heartbeat_count = u.previous_count
        RETURNING s.cluster, s.silo, s.drained_at_ms, u.position
     )";

/// What a record of a batched write was folded under, which the write checks before it changes
/// its row.
#[derive(Clone, Copy)]
struct FoldedUnder {
    /// The cluster's TTL.
    silo_ttl_ms: Millis,
    /// The instant they were judged at, for records folded onto this replica's copies (`None`:
    /// at the instant of the read that preceded the write).
    stamped_at: Option<Millis>,
}

impl FoldedUnder {
    /// The database instants at which the write may land. Records folded after a read were judged
    /// at the read's instant, which the write's follows; records folded onto a copy were judged at
    /// `stamped_at`, which the write's instant must not have passed (the stamp is then no earlier
    /// than any silo's send) nor trail by much.
    fn window(&self) -> (Millis, Millis) {
        match self.stamped_at {
            Some(stamped_at) => (stamped_at.saturating_sub(STAMP_SLACK_MS), stamped_at),
            None => (Millis::MIN, Millis::MAX),
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
    /// What it was folded under.
    under: FoldedUnder,
}

/// Puts `writes` in (cluster, silo) order, the order a batched write locks its rows in.
fn in_lock_order(silos: &[(ClusterName, SiloId)], writes: &mut [PendingWrite]) {
    writes.sort_by(|a, b| silos[a.first].cmp(&silos[b.first]));
}
