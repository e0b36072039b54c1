//! A batch of heartbeats on its way through the batched statements of
//! [`heartbeats`](super): where each silo's heartbeats are, the answers settled so far, and those
//! left to the one-by-one path.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::PendingWrite;
use crate::clock::Millis;
use crate::cluster::{ClusterName, SiloId};
use crate::store::{HeartbeatOutcome, StoreError};

/// Where the heartbeats of a silo whose row changed before its write go next.
#[derive(Clone, Copy)]
pub(super) enum IfChanged {
    /// To the batch's read (they were folded onto a copy).
    Read,
    /// To the one-by-one path (they were folded onto a row just read).
    OneByOne,
}

/// What the batched heartbeat statements settled, and the heartbeats (positions, in order) left to
/// the one-by-one path.
pub(in crate::store::postgres) struct BatchedHeartbeats {
    pub(in crate::store::postgres) outcomes: Vec<Option<Result<HeartbeatOutcome, StoreError>>>,
    pub(in crate::store::postgres) one_by_one: Vec<usize>,
}

/// A batch of heartbeats on its way through the batched statements: where each silo's heartbeats
/// are, the answers settled so far, and the heartbeats left to the one-by-one path.
pub(super) struct HeartbeatBatch<'s> {
    pub(super) silos: &'s [(ClusterName, SiloId)],
    /// Positions of each silo's heartbeats, in batch order; silos in (cluster, silo) order so
    /// that concurrent batches lock rows in one order.
    pub(super) by_silo: BTreeMap<(&'s str, &'s str), Vec<usize>>,
    pub(super) outcomes: Vec<Option<Result<HeartbeatOutcome, StoreError>>>,
    pub(super) one_by_one: Vec<usize>,
}

impl<'s> HeartbeatBatch<'s> {
    pub(super) fn new(silos: &'s [(ClusterName, SiloId)]) -> Self {
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
    pub(super) fn clusters(&self) -> Vec<&'s ClusterName> {
        let mut clusters: Vec<&ClusterName> = self.silos.iter().map(|(c, _)| c).collect();
        clusters.sort();
        clusters.dedup();
        clusters
    }

    /// Settles every heartbeat of `cluster` as failed with `error`.
    pub(super) fn fail_cluster(&mut self, cluster: &ClusterName, error: &StoreError) {
        for (i, (c, _)) in self.silos.iter().enumerate() {
            if c == cluster {
                self.outcomes[i] = Some(Err(error.clone()));
            }
        }
    }

    /// The silos whose heartbeats are not settled yet (their cluster exists), in (cluster, silo)
    /// order: the ones to read.
    pub(super) fn silos_to_read(&self) -> Vec<(&'s str, &'s str)> {
        self.by_silo
            .iter()
            .filter(|(_, positions)| self.outcomes[positions[0]].is_none())
            .map(|(key, _)| *key)
            .collect()
    }

    /// `keys` less the silos whose heartbeats were held back (settled without a write): those
    /// left to read and those folded onto copies to write (`copied`).
    pub(super) fn unheld(
        &self,
        keys: Vec<(&'s str, &'s str)>,
        copied: &[PendingWrite],
    ) -> Vec<(&'s str, &'s str)> {
        let copied: HashSet<usize> = copied.iter().map(|write| write.first).collect();
        keys.into_iter()
            .filter(|key| {
                let first = self.by_silo[key][0];
                self.outcomes[first].is_none() || copied.contains(&first)
            })
            .collect()
    }

    /// Settles the heartbeats of the silos written, given the drain stamp of each row the write
    /// changed. A silo drained meanwhile answers shutting down, as the statement kept it. A silo
    /// whose row changed since it was read was not written: its answers are dropped and its
    /// heartbeats go where `if_changed` says.
    pub(super) fn settle_writes(
        &mut self,
        writes: &[PendingWrite],
        drained: &HashMap<(String, String), Option<Millis>>,
        if_changed: IfChanged,
    ) {
        for write in writes {
            let (cluster, silo) = &self.silos[write.first];
            let positions = &self.by_silo[&(cluster.as_str(), silo.as_str())];
            match drained.get(&(cluster.to_string(), silo.to_string())) {
                None => {
                    for &i in positions {
                        self.outcomes[i] = None;
                    }
                    if let IfChanged::OneByOne = if_changed {
                        self.one_by_one.extend(positions);
                    }
                }
                Some(None) => {}
                Some(Some(drained_at_ms)) => {
                    for &i in positions {
                        if let Some(Ok(Ok((answer, _)))) = &mut self.outcomes[i] {
                            answer.mark_drained(*drained_at_ms);
                        }
                    }
                }
            }
        }
    }

    /// What the batched statements settled, and the heartbeats left, in batch order.
    pub(super) fn finish(mut self) -> BatchedHeartbeats {
        self.one_by_one.sort_unstable();
        BatchedHeartbeats {
            outcomes: self.outcomes,
            one_by_one: self.one_by_one,
        }
    }
}
