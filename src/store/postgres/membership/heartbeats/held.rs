//! Heartbeats held back: how long a heartbeat that changes only load figures may go unwritten
//! ([`holds_back`]), and the flush that writes those held on this replica's copies, many silos of
//! any clusters a statement, once their stored heartbeat is nearly the write-after age old
//! ([`PostgresStore::try_flush_held_heartbeats`]).

use super::{FoldedUnder, PendingWrite};
use crate::clock::Millis;
use crate::cluster::silo::changes_membership;
use crate::cluster::{ClusterName, SiloRecord};
use crate::store::postgres::membership::SiloCopy;
use crate::store::postgres::PostgresStore;
use crate::store::{StoreError, FLUSH_HELD_EVERY_MS};

/// Most silos one statement of the flush of held heartbeats writes.
const FLUSH_PAGE: usize = 1_000;

impl PostgresStore {
    /// How old a silo's stored heartbeat may be for a heartbeat that changes only load figures to
    /// be held back on its copy, under a TTL of `silo_ttl_ms`: twice the write-after age, so that
    /// the flush of held heartbeats ([`Self::try_flush_held_heartbeats`]), which writes them once
    /// the stored one is the write-after age old, is what writes them, and a heartbeat's own
    /// request does only when the flush falls behind; at most a third of the TTL, so that a lease
    /// granted from the stored protection keeps most of its length.
    pub(super) fn hold_for_ms(&self, silo_ttl_ms: Millis) -> Millis {
        self.settings
            .heartbeat_write_after_ms
            .saturating_mul(2)
            .min(silo_ttl_ms / 3)
            .max(0)
    }

    /// How old a silo's stored heartbeat gets before the heartbeats held back on its copy are
    /// written, under a TTL of `silo_ttl_ms`: the setting, at most a third of the TTL.
    fn write_after_ms(&self, silo_ttl_ms: Millis) -> Millis {
        self.settings
            .heartbeat_write_after_ms
            .min(silo_ttl_ms / 3)
            .max(0)
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
        let stored_by = |silo_ttl_ms| match only {
            Some(_) => Millis::MAX,
            None => {
                now.saturating_sub((self.write_after_ms(silo_ttl_ms) - FLUSH_HELD_EVERY_MS).max(0))
            }
        };
        let mut flushed = 0;
        loop {
            let copies = self.written_silos.take_held(only, stored_by, FLUSH_PAGE);
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
            let written = self.write_batch(&silos, &mut writes).await?;
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
}

/// Whether the heartbeats folded onto `copy` into `folded` at `stamped_at` may go unwritten for
/// now: they change only load figures (and the smoothing of them; a drain is never folded, it
/// comes from the database), and the stored heartbeat (the copy's stamp) is younger than
/// `hold_for_ms` (0: none is). The lease granted meanwhile counts down to the stored protection,
/// which the hold, at most a third of the TTL, leaves most of.
pub(super) fn holds_back(
    copy: &SiloCopy,
    folded: &SiloRecord,
    stamped_at: Millis,
    hold_for_ms: Millis,
) -> bool {
    stamped_at.saturating_sub(copy.record.last_heartbeat_ms) < hold_for_ms
        && !changes_membership(Some(&copy.record), folded)
}
