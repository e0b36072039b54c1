//! The silo rows this replica wrote last, so that a silo's next heartbeat can be folded onto its
//! row without reading it first.
//!
//! A copy is only ever a guess: another replica, a drain, a death or a new TTL may have changed the
//! row since. The write that uses one is conditional on the row's version (`heartbeat_count`), its
//! status and the cluster's TTL being what the copy says, exactly as a write after a read is; a
//! write that finds otherwise changes nothing, and the heartbeat is read and folded the usual way.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloRecord};

/// At most this many silos' rows are kept; past it the copies are dropped and rebuilt as silos
/// heartbeat again (a replica serving more silos than this only reads more often).
const MAX_SILOS: usize = 100_000;

/// One cluster's rows as last written, with the TTL they were judged under.
#[derive(Debug)]
struct ClusterRows {
    silo_ttl_ms: Millis,
    /// By silo id.
    silos: HashMap<String, SiloRecord>,
}

#[derive(Debug, Default)]
struct Rows {
    clusters: HashMap<ClusterName, ClusterRows>,
    /// How many silos' rows `clusters` holds.
    held: usize,
}

/// The silo rows this replica wrote last, by cluster.
#[derive(Debug, Default)]
pub struct WrittenSilos {
    rows: Mutex<Rows>,
}

impl WrittenSilos {
    /// The cluster's TTL and the rows of `silos` this replica wrote last, taken out: a row is
    /// put back by [`Self::remember`] once the write made from it has landed, so a copy is used
    /// by one write at a time.
    pub fn take<'s>(
        &self,
        cluster: &ClusterName,
        silos: impl Iterator<Item = &'s str>,
    ) -> Option<(Millis, Vec<SiloRecord>)> {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let Rows { clusters, held } = &mut *rows;
        let cluster_rows = clusters.get_mut(cluster)?;
        let taken: Vec<SiloRecord> = silos
            .filter_map(|silo| cluster_rows.silos.remove(silo))
            .collect();
        *held -= taken.len();
        Some((cluster_rows.silo_ttl_ms, taken))
    }

    /// Keeps `record` as the silo's row, written under `silo_ttl_ms`. A copy of a later version is
    /// kept instead; a TTL other than the one the cluster's copies were judged under drops them.
    pub fn remember(&self, cluster: &ClusterName, silo_ttl_ms: Millis, record: SiloRecord) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if rows.held >= MAX_SILOS {
            *rows = Rows::default();
        }
        let Rows { clusters, held } = &mut *rows;
        let cluster_rows = clusters
            .entry(cluster.clone())
            .or_insert_with(|| ClusterRows {
                silo_ttl_ms,
                silos: HashMap::new(),
            });
        if cluster_rows.silo_ttl_ms != silo_ttl_ms {
            *held -= cluster_rows.silos.len();
            cluster_rows.silo_ttl_ms = silo_ttl_ms;
            cluster_rows.silos.clear();
        }
        match cluster_rows.silos.get(record.id.as_str()) {
            Some(kept) if kept.heartbeat_count > record.heartbeat_count => {}
            Some(_) => {
                cluster_rows.silos.insert(record.id.to_string(), record);
            }
            None => {
                cluster_rows.silos.insert(record.id.to_string(), record);
                *held += 1;
            }
        }
    }
}
