//! The silo rows this replica wrote last, so that a silo's next heartbeat can be folded onto its
//! row without reading it first.
//!
//! A copy is only ever a guess: another replica, a drain, a death or a new TTL may have changed the
//! row since. The write that uses one is conditional on the row's version (`heartbeat_count`), its
//! status and the cluster's TTL being what the copy says, exactly as a write after a read is; a
//! write that finds otherwise changes nothing, and the heartbeat is read and folded the usual way.
//!
//! A copy also holds heartbeats back: one that changes only a silo's load figures, while the
//! stored heartbeat is young enough, is folded onto the copy and answered without a write
//! ([`SiloCopy::holding`]: the copy keeps the stored stamp and protection, which bound its lease,
//! and remembers the held heartbeat's own). The copies holding heartbeats back are written
//! together, many silos of any clusters a statement, once their stored heartbeat is nearly the
//! write-after age old, or a third of the TTL for figures that hardly moved
//! ([`WrittenSilos::take_held`]); a copy stays in place while it is written, to hold the
//! heartbeats that arrive meanwhile.
//!
//! Copies pay only where a silo's heartbeats keep coming through the replica that wrote its row
//! (a runtime keeps its connection). Where they are spread over replicas, most copies are stale,
//! and writing from them costs row locks that wait on the other replicas' writes: a cluster whose
//! recent copies were mostly stale stops using them, except for one batch in
//! [`PROBE_EVERY`], which tells when they hold again.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::clock::Millis;
use crate::cluster::silo::load_moved;
use crate::cluster::{ClusterName, LoadReport, SiloRecord};

/// At most this many silos' rows are kept; past it the copies are dropped and rebuilt as silos
/// heartbeat again (a replica serving more silos than this only reads more often).
const MAX_SILOS: usize = 100_000;

/// Above this share of stale copies (a moving average over the batches that used copies) a
/// cluster's copies are set aside.
const STALE_SHARE_LIMIT: f64 = 0.2;

/// A cluster whose copies are set aside still uses them in one batch of this many.
pub const PROBE_EVERY: u32 = 64;

/// The weight of the latest batch in the moving average of stale copies.
const LATEST_WEIGHT: f64 = 0.25;

/// A silo's row as this replica knows it: the record its latest heartbeat was folded into, with
/// the stamp and protection the database holds (older than the folded heartbeat's when
/// heartbeats were held back since the last write), so that the next heartbeat is judged alive
/// or dead exactly as a read of the row would judge it, and no lease granted from the copy
/// outlives the stored protection.
#[derive(Debug, Clone)]
pub struct SiloCopy {
    pub record: SiloRecord,
    /// The row's version (`heartbeat_count`) as stored: a write from the copy is conditional on
    /// it. Below the record's by the heartbeats held back since the last write.
    pub stored_count: i64,
    /// The stamp and protection of the latest heartbeat held back since the last write, which the
    /// write of the held heartbeats stores (`None`: none is held back).
    pub held: Option<HeldBack>,
    /// The load figures as stored, which other replicas decide by: held figures that have not
    /// moved far from them ([`load_moved`]) wait longer for their write.
    pub stored_load: LoadReport,
    /// Whether the flush of held heartbeats is writing what this copy held: it stays in place
    /// meanwhile, so that a heartbeat arriving then is folded onto it (and held) instead of
    /// reading the row and racing the flush's write; the write's landing rebases it.
    pub flushing: bool,
}

/// The stamp and protection a heartbeat held back on a copy was folded with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldBack {
    pub last_heartbeat_ms: Millis,
    pub protected_until_ms: Millis,
}

impl SiloCopy {
    /// A copy of the row just written as `record`.
    pub fn written(record: SiloRecord) -> Self {
        let stored_count = record.heartbeat_count;
        let stored_load = record.profile.load.clone();
        Self {
            record,
            stored_count,
            held: None,
            stored_load,
            flushing: false,
        }
    }

    /// This copy, its heartbeats held back since the write that landed as `written` (made from
    /// this copy's basis, with fewer of its heartbeats) kept, on the row that write stored: its
    /// version, stamp, protection and load figures.
    fn rebased_on(mut self, written: &SiloCopy) -> Self {
        self.stored_count = written.stored_count;
        self.record.last_heartbeat_ms = written.record.last_heartbeat_ms;
        self.record.protected_until_ms = written.record.protected_until_ms;
        self.stored_load = written.stored_load.clone();
        self.flushing = false;
        self
    }

    /// Whether the load figures held on this copy moved far enough from the stored ones to be
    /// worth writing soon ([`load_moved`]).
    pub fn load_moved(&self) -> bool {
        load_moved(&self.stored_load, &self.record.profile.load)
    }

    /// This copy, holding back the heartbeats folded into `folded` as well. The stamp and
    /// protection stay the stored ones: a heartbeat held back protects the silo no longer than
    /// the row does. Judged by the folded ones, the copy would take a silo the database already
    /// holds dead (every reader sees it so) for alive, and a heartbeat written from it would bring
    /// that silo back.
    pub fn holding(&self, mut folded: SiloRecord) -> Self {
        let held = HeldBack {
            last_heartbeat_ms: folded.last_heartbeat_ms,
            protected_until_ms: folded.protected_until_ms,
        };
        folded.last_heartbeat_ms = self.record.last_heartbeat_ms;
        folded.protected_until_ms = self.record.protected_until_ms;
        Self {
            record: folded,
            stored_count: self.stored_count,
            held: Some(held),
            stored_load: self.stored_load.clone(),
            flushing: self.flushing,
        }
    }

    /// The record the heartbeats held back on this copy write: the latest one's stamp and
    /// protection. Writing it late is safe: the leases granted for them ended within the stored
    /// protection, which it only extends, and its stamp is when the silo was heard, not when the
    /// write lands. `None` when nothing is held back.
    pub fn held_record(&self) -> Option<SiloRecord> {
        let held = self.held?;
        let mut record = self.record.clone();
        record.last_heartbeat_ms = held.last_heartbeat_ms;
        record.protected_until_ms = held.protected_until_ms;
        Some(record)
    }
}

/// One cluster's rows as last written, with the TTL they were judged under.
#[derive(Debug)]
struct ClusterRows {
    silo_ttl_ms: Millis,
    /// By silo id.
    silos: HashMap<String, SiloCopy>,
    /// The moving average of the share of copies that were stale, over the batches that used
    /// copies.
    stale_share: f64,
    /// Batches since copies were last used, while they are set aside.
    set_aside_for: u32,
}

#[derive(Debug, Default)]
struct Rows {
    clusters: HashMap<ClusterName, ClusterRows>,
    /// How many silos' rows `clusters` holds.
    held: usize,
}

impl Rows {
    /// Drops the copy of `silo` of `cluster` if there is one and `drop` says so.
    fn drop_if(&mut self, cluster: &ClusterName, silo: &str, drop: impl Fn(&SiloCopy) -> bool) {
        let Some(cluster_rows) = self.clusters.get_mut(cluster) else {
            return;
        };
        if cluster_rows.silos.get(silo).is_some_and(drop) {
            cluster_rows.silos.remove(silo);
            self.held -= 1;
        }
    }
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
    ) -> Option<(Millis, Vec<SiloCopy>)> {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let Rows { clusters, held } = &mut *rows;
        let cluster_rows = clusters.get_mut(cluster)?;
        if cluster_rows.stale_share > STALE_SHARE_LIMIT {
            cluster_rows.set_aside_for += 1;
            if cluster_rows.set_aside_for < PROBE_EVERY {
                return None;
            }
        }
        cluster_rows.set_aside_for = 0;
        let taken: Vec<SiloCopy> = silos
            .filter_map(|silo| cluster_rows.silos.remove(silo))
            .collect();
        *held -= taken.len();
        Some((cluster_rows.silo_ttl_ms, taken))
    }

    /// Keeps `copy` as the silo's row, under `silo_ttl_ms`. Where a copy is kept already, the
    /// later version of the two is kept, on the later stored row of the two: a heartbeat held on
    /// a copy while the flush wrote it is kept on the row the flush stored. A row written drained
    /// under a copy that does not know it drops both (the silo's next heartbeat reads the row). A
    /// TTL other than the one the cluster's copies were judged under drops them.
    pub fn remember(&self, cluster: &ClusterName, silo_ttl_ms: Millis, copy: SiloCopy) {
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
                stale_share: 0.0,
                set_aside_for: 0,
            });
        if cluster_rows.silo_ttl_ms != silo_ttl_ms {
            *held -= cluster_rows.silos.len();
            cluster_rows.silo_ttl_ms = silo_ttl_ms;
            cluster_rows.silos.clear();
        }
        let id = copy.record.id.as_str().to_owned();
        let Some(kept) = cluster_rows.silos.remove(&id) else {
            cluster_rows.silos.insert(id, copy);
            *held += 1;
            return;
        };
        let (later, basis) = if kept.record.heartbeat_count > copy.record.heartbeat_count {
            (kept, copy)
        } else {
            (copy, kept)
        };
        let merged = if basis.stored_count <= later.stored_count {
            later
        } else if later.record.heartbeat_count <= basis.stored_count {
            // The later copy holds nothing the row does not: the row's.
            basis
        } else if basis.record.drained_at_ms.is_some() && later.record.drained_at_ms.is_none() {
            *held -= 1;
            return;
        } else {
            later.rebased_on(&basis)
        };
        cluster_rows.silos.insert(id, merged);
    }

    /// Drops the copy of `silo` of `cluster` if the flush of held heartbeats was writing it: the
    /// write did not land (the row changed, or the statement failed), so what it holds is not
    /// known to be stored, and the silo's next heartbeat reads its row.
    pub fn drop_unflushed(&self, cluster: &ClusterName, silo: &str) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        rows.drop_if(cluster, silo, |copy| copy.flushing);
    }

    /// Up to `max` copies holding heartbeats back (of the `only` cluster, or of any) that are
    /// `due` under their cluster's TTL, each with its cluster and that TTL, for the write of what
    /// they hold. Each stays in place, marked as being flushed (and not taken again until the
    /// write settles it): a silo beating meanwhile is folded onto it, and the write's landing
    /// ([`Self::remember`]) rebases what it held since; one that does not land is dropped
    /// ([`Self::drop_unflushed`]).
    pub fn take_held(
        &self,
        only: Option<&ClusterName>,
        due: impl Fn(Millis, &SiloCopy) -> bool,
        max: usize,
    ) -> Vec<(ClusterName, Millis, SiloCopy)> {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let mut taken = Vec::new();
        let clusters = &mut rows.clusters;
        for (cluster, cluster_rows) in clusters.iter_mut() {
            if only.is_some_and(|only| only != cluster) {
                continue;
            }
            let silo_ttl_ms = cluster_rows.silo_ttl_ms;
            let due: Vec<String> = cluster_rows
                .silos
                .iter()
                .filter(|(_, copy)| copy.held.is_some() && !copy.flushing && due(silo_ttl_ms, copy))
                .map(|(silo, _)| silo.clone())
                .take(max - taken.len())
                .collect();
            for silo in due {
                if let Some(copy) = cluster_rows.silos.get_mut(&silo) {
                    copy.flushing = true;
                    taken.push((cluster.clone(), silo_ttl_ms, copy.clone()));
                }
            }
            if taken.len() >= max {
                break;
            }
        }
        taken
    }

    /// Gives the silos of `cluster`'s records in `silos` the load figures (and their smoothing)
    /// held back on this replica's copies, where a copy was folded onto the version read: what
    /// this replica's own decisions go by, though the row is written later. The stamp and the
    /// protection stay the stored ones (a held heartbeat protects no longer than the row does).
    pub fn show_held(&self, cluster: &ClusterName, silos: &mut [SiloRecord]) {
        let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let Some(cluster_rows) = rows.clusters.get(cluster) else {
            return;
        };
        for silo in silos {
            let Some(copy) = cluster_rows.silos.get(silo.id.as_str()) else {
                continue;
            };
            if copy.held.is_some() && copy.stored_count == silo.heartbeat_count {
                silo.profile.load = copy.record.profile.load.clone();
                silo.profile.smoothing = copy.record.profile.smoothing.clone();
            }
        }
    }

    /// Drops the silo's copy: its row changed here in a way the copy does not know (a drain, a
    /// leave), so its next heartbeat is written, and reads the row if the write finds it changed.
    pub fn forget(&self, cluster: &ClusterName, silo: &str) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        rows.drop_if(cluster, silo, |_| true);
    }

    /// Whether any silo's row is kept.
    pub fn holds_any(&self) -> bool {
        self.rows.lock().unwrap_or_else(|e| e.into_inner()).held > 0
    }

    /// Drops the copies of the `draining` silos (cluster, silo) that do not know of their drain:
    /// it was asked for through another replica.
    pub fn forget_drained(&self, draining: &[(String, String)]) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        for (cluster, silo) in draining {
            if let Ok(cluster) = ClusterName::parse(cluster) {
                rows.drop_if(&cluster, silo, |copy| copy.record.drained_at_ms.is_none());
            }
        }
    }

    /// Drops every copy of the cluster's rows: its policy changed here, perhaps its TTL, and a
    /// heartbeat held back on a copy would be answered under the TTL the copy was judged under
    /// (a policy changed through another replica reaches the copies when their next write finds
    /// the TTL changed).
    pub fn forget_cluster(&self, cluster: &ClusterName) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        let Rows { clusters, held } = &mut *rows;
        if let Some(cluster_rows) = clusters.remove(cluster) {
            *held -= cluster_rows.silos.len();
        }
    }

    /// Records that of `used` copies of the cluster's rows a write found `stale` changed.
    pub fn found_stale(&self, cluster: &ClusterName, used: usize, stale: usize) {
        if used == 0 {
            return;
        }
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cluster_rows) = rows.clusters.get_mut(cluster) {
            let share = stale as f64 / used as f64;
            cluster_rows.stale_share =
                cluster_rows.stale_share * (1.0 - LATEST_WEIGHT) + share * LATEST_WEIGHT;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::heartbeat::{self, Heartbeat};
    use crate::cluster::{Liveness, LoadReport, SiloId, SiloStatus};

    fn cluster() -> ClusterName {
        ClusterName::parse("c").unwrap()
    }

    fn record(id: &str) -> SiloCopy {
        let beat = Heartbeat {
            silo: SiloId::parse("silo", id).unwrap(),
            address: "a".into(),
            status: SiloStatus::Active,
            role: None,
            metadata: Default::default(),
            grain_types: None,
            load: LoadReport::default(),
        };
        SiloCopy::written(heartbeat::apply(&beat, None, &Liveness::at(0, 10_000)).unwrap())
    }

    fn taken(copies: &WrittenSilos) -> Option<usize> {
        copies
            .take(&cluster(), ["a@1"].into_iter())
            .map(|(_, taken)| taken.len())
    }

    #[test]
    fn a_copy_is_lent_to_one_write_at_a_time_and_a_new_ttl_drops_the_copies() {
        let copies = WrittenSilos::default();
        assert_eq!(taken(&copies), None, "nothing written yet");
        copies.remember(&cluster(), 10_000, record("a@1"));
        assert_eq!(taken(&copies), Some(1));
        assert_eq!(taken(&copies), Some(0), "taken by the write before");
        copies.remember(&cluster(), 10_000, record("a@1"));
        copies.remember(&cluster(), 20_000, record("b@1"));
        assert_eq!(taken(&copies), Some(0), "judged under another TTL");
        copies.remember(&cluster(), 20_000, record("a@1"));
        copies.forget(&cluster(), "a@1");
        assert_eq!(taken(&copies), Some(0), "forgotten");
    }

    /// `copy` holding one more heartbeat, `after` ms after its latest, with `cpu` usage.
    fn beat_on(copy: &SiloCopy, after: Millis, cpu: f64) -> SiloCopy {
        let mut later = copy.record.clone();
        later.last_heartbeat_ms = copy
            .held
            .map_or(copy.record.last_heartbeat_ms, |held| held.last_heartbeat_ms)
            + after;
        later.protected_until_ms = later.last_heartbeat_ms + 10_000;
        later.heartbeat_count += 1;
        later.profile.load.cpu_usage = Some(cpu);
        copy.holding(later)
    }

    fn kept(copies: &WrittenSilos, id: &str) -> Option<SiloCopy> {
        let rows = copies.rows.lock().unwrap();
        rows.clusters.get(&cluster())?.silos.get(id).cloned()
    }

    #[test]
    fn a_copy_being_flushed_stays_to_hold_the_next_heartbeat_which_the_landing_rebases() {
        let copies = WrittenSilos::default();
        copies.remember(&cluster(), 10_000, beat_on(&record("a@1"), 1_000, 10.0));
        let flushing = copies.take_held(None, |_, _| true, 10);
        assert_eq!(flushing.len(), 1);
        assert!(
            copies.take_held(None, |_, _| true, 10).is_empty(),
            "taken by one flush at a time"
        );
        // A heartbeat arrives while the flush writes: folded onto the copy, held.
        let (_, in_place) = copies.take(&cluster(), ["a@1"].into_iter()).unwrap();
        let meanwhile = beat_on(&in_place[0], 1_000, 11.0);
        copies.remember(&cluster(), 10_000, meanwhile.clone());
        // The flush lands what it took.
        let (_, _, flushed) = &flushing[0];
        let stored = SiloCopy::written(flushed.held_record().unwrap());
        copies.remember(&cluster(), 10_000, stored.clone());
        let after = kept(&copies, "a@1").unwrap();
        assert_eq!(
            after.record.heartbeat_count,
            meanwhile.record.heartbeat_count
        );
        assert_eq!(after.held, meanwhile.held, "the heartbeat held meanwhile");
        assert_eq!(
            (
                after.stored_count,
                after.record.last_heartbeat_ms,
                after.record.protected_until_ms,
                &after.stored_load
            ),
            (
                stored.stored_count,
                stored.record.last_heartbeat_ms,
                stored.record.protected_until_ms,
                &stored.stored_load
            ),
            "on the row the flush stored"
        );
        assert!(!after.flushing);
        assert_eq!(
            copies.take_held(None, |_, _| true, 10).len(),
            1,
            "flushed next"
        );

        // A copy coming back with no heartbeat beyond the row a write stored: the row's copy.
        let held = beat_on(&record("b@1"), 1_000, 10.0);
        let stored = SiloCopy::written(held.held_record().unwrap());
        copies.remember(&cluster(), 10_000, stored.clone());
        copies.remember(&cluster(), 10_000, held);
        let after = kept(&copies, "b@1").unwrap();
        assert_eq!(
            (after.stored_count, after.held),
            (stored.stored_count, None)
        );
    }

    #[test]
    fn a_flush_that_did_not_land_drops_its_copy_and_a_drain_it_found_drops_a_later_one() {
        let copies = WrittenSilos::default();
        copies.remember(&cluster(), 10_000, beat_on(&record("a@1"), 1_000, 10.0));
        copies.remember(&cluster(), 10_000, beat_on(&record("b@1"), 1_000, 10.0));
        let flushing = copies.take_held(None, |_, _| true, 10);
        assert_eq!(flushing.len(), 2);
        copies.drop_unflushed(&cluster(), "a@1");
        assert!(kept(&copies, "a@1").is_none(), "the row changed: read it");
        let (_, in_place) = copies.take(&cluster(), ["b@1"].into_iter()).unwrap();
        copies.remember(&cluster(), 10_000, beat_on(&in_place[0], 1_000, 11.0));
        let (_, _, b) = flushing
            .iter()
            .find(|(_, _, c)| c.record.id.as_str() == "b@1")
            .unwrap();
        let mut drained = b.held_record().unwrap();
        drained.mark_drained(1_500);
        copies.remember(&cluster(), 10_000, SiloCopy::written(drained));
        assert!(
            kept(&copies, "b@1").is_none(),
            "a drain the later copy does not know"
        );
        copies.remember(&cluster(), 10_000, record("c@1"));
        copies.drop_unflushed(&cluster(), "c@1");
        assert!(kept(&copies, "c@1").is_some(), "not being flushed: kept");
    }

    #[test]
    fn only_copies_holding_heartbeats_back_on_an_old_enough_stored_one_are_taken_to_be_written() {
        let copies = WrittenSilos::default();
        let held = |id: &str, stored_at: Millis| {
            let mut copy = record(id);
            copy.record.last_heartbeat_ms = stored_at;
            let mut later = copy.record.clone();
            later.last_heartbeat_ms = stored_at + 900;
            later.protected_until_ms = stored_at + 10_900;
            later.heartbeat_count += 1;
            copy.holding(later)
        };
        copies.remember(&cluster(), 10_000, record("quiet@1"));
        copies.remember(&cluster(), 10_000, held("young@1", 500));
        copies.remember(&cluster(), 10_000, held("old@1", 0));
        copies.remember(&cluster(), 10_000, held("older@1", -100));
        let taken = copies.take_held(
            None,
            |ttl, copy| ttl == 10_000 && copy.record.last_heartbeat_ms <= 0,
            1,
        );
        assert_eq!(taken.len(), 1, "at most the page");
        let rest = copies.take_held(None, |_, copy| copy.record.last_heartbeat_ms <= 0, 10);
        let mut ids: Vec<&str> = taken
            .iter()
            .chain(&rest)
            .map(|(_, _, copy)| copy.record.id.as_str())
            .collect();
        ids.sort();
        assert_eq!(
            ids,
            ["old@1", "older@1"],
            "stored by the bound, and holding"
        );
        let (_, ttl, copy) = &taken[0];
        assert_eq!(*ttl, 10_000);
        let written = copy.held_record().unwrap();
        assert_eq!(
            (written.last_heartbeat_ms, written.protected_until_ms),
            (
                copy.held.unwrap().last_heartbeat_ms,
                copy.held.unwrap().protected_until_ms
            ),
            "the held heartbeat's stamp and protection are what is written"
        );
        assert_eq!(written.heartbeat_count, copy.stored_count + 1);
        assert_eq!(record("a@1").held_record(), None, "nothing held");
        let elsewhere = ClusterName::parse("elsewhere").unwrap();
        assert!(copies
            .take_held(Some(&elsewhere), |_, _| true, 10)
            .is_empty());
        assert_eq!(
            copies.take_held(Some(&cluster()), |_, _| true, 10).len(),
            1,
            "young@1, when its cluster's are asked for"
        );
    }

    #[test]
    fn a_cluster_whose_copies_were_stale_sets_them_aside_but_for_probes() {
        let copies = WrittenSilos::default();
        copies.remember(&cluster(), 10_000, record("a@1"));
        copies.found_stale(&cluster(), 4, 4);
        let used: Vec<bool> = (0..2 * PROBE_EVERY)
            .map(|_| taken(&copies).is_some())
            .collect();
        assert_eq!(used.iter().filter(|&&u| u).count(), 2, "{used:?}");
        // Probes that find the copies holding bring them back.
        for _ in 0..8 {
            copies.found_stale(&cluster(), 4, 0);
        }
        assert!((0..4).all(|_| taken(&copies).is_some()));
    }
}
