//! Silos joining: the first heartbeats of silos the batch's read found no row for are applied to
//! nothing and inserted together, one statement for the batch whatever their clusters, each
//! cluster's silo limit and retired generations checked in it. A fleet joining at once (a restart
//! of every runtime, a platform bringing up its clusters) then costs a statement per batch instead
//! of two or three round trips per silo, four silos at a time. A silo the statement does not
//! insert (its cluster full, its generation retired, or another replica's insert first) takes the
//! one-by-one path, which finds out which and answers so.

use sqlx::Row;

use super::batch::HeartbeatBatch;
use super::columns::RecordColumns;
use crate::cluster::{ClusterName, HeartbeatRejection, Liveness, SiloRecord};
use crate::store::postgres::error::lost_a_race;
use crate::store::postgres::membership::SiloCopy;
use crate::store::postgres::PostgresStore;
use crate::store::{HeartbeatOutcome, HeartbeatUpdates, StoreError};

/// A silo with no row yet, its heartbeats applied in order to nothing and to each other.
pub(super) struct Joining {
    /// Its heartbeats' positions in the batch, in order.
    positions: Vec<usize>,
    answers: Vec<(usize, HeartbeatOutcome)>,
    record: SiloRecord,
    silo_ttl_ms: crate::clock::Millis,
}

/// Applies the heartbeats of a silo that has no row, in order, judged at the read's instant.
/// `None` when its first heartbeat is refused, or one declares it dead: the one-by-one path
/// answers those.
pub(super) fn fold_joining(
    liveness: Liveness,
    positions: &[usize],
    update: &HeartbeatUpdates<'_>,
) -> Option<Joining> {
    let (&first, rest) = positions.split_first()?;
    let mut current = update(first, None, &liveness).ok()?;
    let mut answers = vec![(first, Ok((current.clone(), liveness)))];
    for &i in rest {
        match update(i, Some(&current), &liveness) {
            Ok(next) => {
                current = next.clone();
                answers.push((i, Ok((next, liveness))));
            }
            Err(HeartbeatRejection::DeclaredDead { .. }) => return None,
            Err(rejection) => answers.push((i, Err(rejection))),
        }
    }
    Some(Joining {
        positions: positions.to_vec(),
        answers,
        record: current,
        silo_ttl_ms: liveness.silo_ttl_ms,
    })
}

impl PostgresStore {
    /// Inserts the joining silos in one statement (in (cluster, silo) order, as the batch is):
    /// each only while its cluster has room for it, counting the silos of the statement ahead of
    /// it in the same cluster, and only if its generation is not retired. The inserted are
    /// answered and kept as this replica's copies; the rest go one by one.
    pub(super) async fn insert_joining(
        &self,
        batch: &mut HeartbeatBatch<'_>,
        joining: Vec<Joining>,
    ) -> Result<(), StoreError> {
        let mut columns = JoiningColumns::default();
        for silo in &joining {
            columns.push(&batch.silos[silo.positions[0]].0, &silo.record)?;
        }
        let statement = sqlx::query(
            "WITH u AS (
                SELECT u.*, row_number() OVER (PARTITION BY u.cluster ORDER BY u.silo) AS rank
                FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[],
                            $6::int8[], $7::text[], $8::int8[], $9::text[], $10::int8[])
                     AS u(cluster, silo, address, status, last_heartbeat_ms, heartbeat_count,
                          profile, protected_until_ms, incarnation, generation)
             )
             INSERT INTO silos (cluster, silo, address, status, last_heartbeat_ms, heartbeat_count,
                                profile, protected_until_ms)
             SELECT u.cluster, u.silo, u.address, u.status, u.last_heartbeat_ms, u.heartbeat_count,
                    u.profile::json, u.protected_until_ms
             FROM u
             WHERE (SELECT count(*) FROM silos s
                    WHERE s.cluster = u.cluster AND s.status <> 'dead') + u.rank <= $11
               AND NOT EXISTS (SELECT 1 FROM retired_generations r
                               WHERE r.cluster = u.cluster AND r.address = u.incarnation
                                 AND r.generation >= u.generation)
             ORDER BY u.cluster, u.silo
             ON CONFLICT (cluster, silo) DO NOTHING
             RETURNING cluster, silo",
        );
        let inserted = columns
            .records
            .bind(statement)
            .bind(&columns.records.protected_until)
            .bind(&columns.incarnations)
            .bind(&columns.generations)
            .bind(i64::try_from(self.settings.max_silos_per_cluster).unwrap_or(i64::MAX))
            .fetch_all(&self.db)
            .await;
        let inserted = match inserted {
            // Lost a race the database broke: nothing inserted; they go one by one.
            Err(error) if lost_a_race(&error) => Vec::new(),
            inserted => inserted?,
        };
        let mut landed = std::collections::HashSet::new();
        for row in &inserted {
            landed.insert((row.try_get::<String, _>(0)?, row.try_get::<String, _>(1)?));
        }
        for silo in joining {
            let cluster: &ClusterName = &batch.silos[silo.positions[0]].0;
            if !landed.contains(&(cluster.to_string(), silo.record.id.to_string())) {
                batch.one_by_one.extend(&silo.positions);
                continue;
            }
            for (i, answer) in silo.answers {
                batch.outcomes[i] = Some(Ok(answer));
            }
            self.written_silos
                .remember(cluster, silo.silo_ttl_ms, SiloCopy::written(silo.record));
        }
        Ok(())
    }
}

/// The columns of the insert of joining silos, one entry per silo.
#[derive(Default)]
struct JoiningColumns<'a> {
    records: RecordColumns<'a>,
    /// The address part of the silo's id, and its generation: what a retired generation names.
    incarnations: Vec<&'a str>,
    generations: Vec<i64>,
}

impl<'a> JoiningColumns<'a> {
    fn push(&mut self, cluster: &'a ClusterName, record: &'a SiloRecord) -> Result<(), StoreError> {
        let (incarnation, generation) = record.id.incarnation();
        self.records.push(cluster, record)?;
        self.incarnations.push(incarnation);
        self.generations.push(generation);
        Ok(())
    }
}
