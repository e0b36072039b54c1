//! Heartbeats held back: how long a heartbeat that changes only load figures may go unwritten
//! ([`holds_back`]), and the flush that writes those held on this replica's copies, many silos of
//! any clusters a statement, once their stored heartbeat is nearly the write-after age old (a
//! third of the TTL for figures that hardly moved: [`Holding`])
//! ([`PostgresStore::try_flush_held_heartbeats`]).

use super::{FoldedUnder, PendingWrite};
use crate::clock::Millis;
use crate::cluster::silo::{changes_membership, load_moved};
use crate::cluster::{ClusterName, SiloId, SiloRecord};
use crate::store::postgres::membership::SiloCopy;
use crate::store::postgres::PostgresStore;
use crate::store::{StoreError, FLUSH_HELD_EVERY_MS};

/// Most silos one statement of the flush of held heartbeats writes.
const FLUSH_PAGE: usize = 1_000;

/// How old a silo's stored heartbeat may be for heartbeats that change only load figures to be
/// held back, and how old before the flush writes them, under one cluster's TTL
/// ([`PostgresStore::holding_under`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holding {
    /// Held figures that moved from the stored ones ([`load_moved`]): written by the flush once
    /// the stored heartbeat is this old (less the flush's period).
    moved_write_after_ms: Millis,
    /// Held figures that moved are written by a heartbeat's own request at this age (the flush
    /// fell behind): twice the write-after age, so that the flush is what writes them.
    moved_hold_for_ms: Millis,
    /// Figures near the stored ones wait until the silo's protection needs extending: a third of
    /// the TTL, less two of the flush's periods for the flush, and at most a third of the TTL for
    /// the request, so that a lease granted from the stored protection keeps most of its length.
    steady_write_after_ms: Millis,
    steady_hold_for_ms: Millis,
}

impl Holding {
    /// How old the stored heartbeat may be for the figures folded into `folded` onto `copy` to be
    /// held back (0: none is).
    fn hold_for_ms(&self, copy: &SiloCopy, folded: &SiloRecord) -> Millis {
        if load_moved(&copy.stored_load, &folded.profile.load) {
            self.moved_hold_for_ms
        } else {
            self.steady_hold_for_ms
        }
    }

    /// Whether the flush writes what `copy` holds now (`now`: the database's instant), so that,
    /// flushed every [`FLUSH_HELD_EVERY_MS`], no stored heartbeat of a silo beating here gets
    /// much older than its write-after age.
    fn flush_due(&self, copy: &SiloCopy, now: Millis) -> bool {
        let write_after_ms = if copy.load_moved() {
            self.moved_write_after_ms
        } else {
            self.steady_write_after_ms
        };
        copy.record.last_heartbeat_ms
            <= now.saturating_sub((write_after_ms - FLUSH_HELD_EVERY_MS).max(0))
    }
}

impl PostgresStore {
    /// How heartbeats that change only load figures are held back under a TTL of `silo_ttl_ms`:
    /// figures that moved ([`load_moved`]) are written once the stored heartbeat is the
    /// write-after age old (the setting, at most a third of the TTL), so other replicas see them
    /// that late; figures that drifted less wait until the silo's protection needs extending,
    /// about a third of the TTL. A write-after age of 0 holds nothing back.
    pub(super) fn holding_under(&self, silo_ttl_ms: Millis) -> Holding {
        let setting = self.settings.heartbeat_write_after_ms.max(0);
        let third = silo_ttl_ms / 3;
        let moved_write_after_ms = setting.min(third);
        if setting == 0 {
            return Holding {
                moved_write_after_ms,
                moved_hold_for_ms: 0,
                steady_write_after_ms: 0,
                steady_hold_for_ms: 0,
            };
        }
        Holding {
            moved_write_after_ms,
            moved_hold_for_ms: setting.saturating_mul(2).min(third),
            steady_write_after_ms: (third - FLUSH_HELD_EVERY_MS).max(moved_write_after_ms),
            steady_hold_for_ms: third,
        }
    }

    /// Writes the heartbeats held back on this replica's copies ([`FLUSH_PAGE`] silos of any
    /// clusters a statement, each row only if it is still the version copied): with no cluster,
    /// those whose stored heartbeat is at least the write-after age old, less the flush's period
    /// (so that, flushed every [`FLUSH_HELD_EVERY_MS`], no stored heartbeat of a silo beating here
    /// gets much older than the write-after age); with one, every one of that cluster's. Returns
    /// how many rows it wrote. A copy found stale is dropped (its held load figures with it: the
    /// silo's next heartbeat carries newer ones, and reads the row).
    pub(in crate::store::postgres) async fn try_flush_held_heartbeats(
        &self,
        only: Option<&ClusterName>,
    ) -> Result<usize, StoreError> {
        let Some(now) = self.copy_stamp() else {
            return Ok(0);
        };
        let due = |silo_ttl_ms, copy: &SiloCopy| match only {
            Some(_) => true,
            None => self.holding_under(silo_ttl_ms).flush_due(copy, now),
        };
        if only.is_none() && self.written_silos.holds_any() {
            self.forget_copies_drained_elsewhere().await?;
        }
        let mut flushed = 0;
        loop {
            let copies = self.written_silos.take_held(only, due, FLUSH_PAGE);
            let taken = copies.len();
            if taken == 0 {
                return Ok(flushed);
            }
            let mut silos = Vec::with_capacity(copies.len());
            let mut writes = Vec::with_capacity(copies.len());
            for (cluster, silo_ttl_ms, copy) in copies {
                let Some(record) = copy.held_record() else {
                    continue;
                };
                let first = silos.len();
                silos.push((cluster, record.id.clone()));
                writes.push(PendingWrite {
                    first,
                    record,
                    previous_count: copy.stored_count,
                    // Judged when each was held back; the write checks the row's version,
                    // status and TTL, not the instant.
                    under: FoldedUnder {
                        silo_ttl_ms,
                        stamped_at: None,
                    },
                });
            }
            let written = self.write_batch(&silos, &mut writes).await;
            let landed = |(cluster, silo): &&(ClusterName, SiloId)| {
                written.as_ref().is_ok_and(|written| {
                    written.contains_key(&(cluster.to_string(), silo.to_string()))
                })
            };
            for (cluster, silo) in silos.iter().filter(|silo| !landed(silo)) {
                self.written_silos.drop_unflushed(cluster, silo.as_str());
            }
            let written = written?;
            self.note_stale_copies(&silos, &writes, &written);
            flushed += written.len();
            if taken < FLUSH_PAGE {
                // What was due is written. Heartbeats held while it was are the next tick's: a
                // flush that went on taking them wrote a few silos a statement, nearly a
                // statement per heartbeat.
                return Ok(flushed);
            }
        }
    }

    /// Drops this replica's copies of silos drained through another replica since the copy was
    /// made (one statement, on the index of silos draining), so that each one's next heartbeat
    /// reads its row and is answered `shutting_down`: a silo whose figures hold steady may go a
    /// third of the TTL without a write that would have read the drain back.
    async fn forget_copies_drained_elsewhere(&self) -> Result<(), StoreError> {
        let draining: Vec<(String, String)> = sqlx::query_as(
            "SELECT cluster, silo FROM silos WHERE drained_at_ms IS NOT NULL AND status <> 'dead'",
        )
        .fetch_all(&self.db)
        .await?;
        self.written_silos.forget_drained(&draining);
        Ok(())
    }
}

/// Whether the heartbeats folded onto `copy` into `folded` at `stamped_at` may go unwritten for
/// now: they change only load figures (and the smoothing of them; a drain is never folded, it
/// comes from the database), and the stored heartbeat (the copy's stamp) is younger than
/// `holding` allows for them. The lease granted meanwhile counts down to the stored protection,
/// which the hold, at most a third of the TTL, leaves most of.
pub(super) fn holds_back(
    copy: &SiloCopy,
    folded: &SiloRecord,
    stamped_at: Millis,
    holding: Holding,
) -> bool {
    stamped_at.saturating_sub(copy.record.last_heartbeat_ms) < holding.hold_for_ms(copy, folded)
        && !changes_membership(Some(&copy.record), folded)
}
