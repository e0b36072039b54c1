//! Membership: silos and their clusters — heartbeats, membership reads, leaves and deaths.

use std::sync::Arc;

use async_trait::async_trait;

use super::StoreError;
use crate::clock::Millis;
use crate::cluster::{ClusterName, HeartbeatRejection, Liveness, SiloId, SiloRecord};
use crate::placement::ClusterView;
use crate::policy::Policy;

/// Computes a silo's next record from its current one (absent for a new silo) and the store's
/// liveness judge at this instant (its clock and the cluster's TTL). The store calls it inside its
/// atomic read-modify-write, perhaps more than once.
pub type HeartbeatUpdate<'a> = dyn Fn(Option<&SiloRecord>, &Liveness) -> Result<SiloRecord, HeartbeatRejection>
    + Send
    + Sync
    + 'a;

/// [`HeartbeatUpdate`] for a batch: also given the heartbeat's position in the batch.
pub type HeartbeatUpdates<'a> = dyn Fn(usize, Option<&SiloRecord>, &Liveness) -> Result<SiloRecord, HeartbeatRejection>
    + Send
    + Sync
    + 'a;

/// What one heartbeat comes to: the record as written and the judge of the instant, or why it was
/// refused.
pub type HeartbeatOutcome = Result<(SiloRecord, Liveness), HeartbeatRejection>;

/// The cluster's silos that are not marked dead, how to judge them, and the placement policy: all
/// that a placement decision reads, in one store call. (Silos dead for the last hour are listed by
/// [`MembershipStore::silos`], never loaded here.)
#[derive(Debug, Clone)]
pub struct Membership {
    pub liveness: Liveness,
    /// Ordered by silo id.
    pub silos: Arc<Vec<SiloRecord>>,
    /// Shared, so that a cached read is judged anew (a fresh `liveness`) without copying it.
    pub policy: Arc<Policy>,
    pub policy_version: i64,
}

impl Membership {
    /// What the pure decisions (placement, connection rules) judge: the silos as of this read.
    /// The one place a [`ClusterView`] is built from the store's answer.
    pub fn view(&self) -> ClusterView {
        ClusterView {
            liveness: self.liveness,
            silos: self.silos.clone(),
        }
    }
}

/// One page of a cluster's silos (dead ones included while they are listed).
#[derive(Debug, Clone)]
pub struct SiloPage {
    pub liveness: Liveness,
    /// Ordered by silo id.
    pub silos: Vec<SiloRecord>,
}

/// What a graceful leave did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// Entries released with the departure (at most [`RELEASE_CHUNK`](super::RELEASE_CHUNK)).
    pub released: u64,
    /// Whether more remain; they are released in the background and are never live meanwhile.
    pub release_pending: bool,
}

/// A silo named by a sweep ([`Reaping`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reaped {
    pub cluster: String,
    pub silo: String,
}

/// Logs and counts the deaths a store declares on the way, outside a sweep (which the oracle
/// logs itself): a placement replacing the grain of a silo past its TTL, or a heartbeat from one.
/// Either way the death rule found the silo dead, and an operator must see it like any other.
pub(super) fn declared_dead_on_the_way(cluster: &str, silos: &[&str], found_by: &'static str) {
    if silos.is_empty() {
        return;
    }
    tracing::warn!(
        cluster,
        count = silos.len(),
        silos = %silos.join(", "),
        found_by,
        "silos declared dead after missing heartbeats; their activations are released"
    );
    crate::telemetry::metric::silos_declared_dead(silos.len() as u64);
}

/// What one judgement of every silo found (see [`MembershipStore::reap`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reaping {
    /// Silos it declared dead. Their entries are released by
    /// [`DirectoryStore::release_dead`](super::DirectoryStore::release_dead).
    pub dead: Vec<Reaped>,
    /// Silos past their TTL and their lease that it did not declare dead, because the replica
    /// judging has not watched for a whole TTL since their last heartbeat (its store unreachable,
    /// its process stalled, or work it could not keep up with refused: it cannot tell silence
    /// from heartbeats it failed to store or to take in).
    pub deferred: Vec<Reaped>,
}

/// How often a replica writes the heartbeats it held back
/// ([`MembershipStore::flush_held_heartbeats`]).
pub const FLUSH_HELD_EVERY_MS: Millis = 250;

/// Silos and their clusters: heartbeats, membership reads, leaves and deaths.
#[async_trait]
pub trait MembershipStore: Send + Sync + 'static {
    /// Applies a heartbeat atomically, stamped with the store's clock; creates the cluster on its
    /// first heartbeat. Refuses an id retired by a dead incarnation, and a new silo beyond
    /// [`StoreSettings::max_silos_per_cluster`](super::StoreSettings::max_silos_per_cluster).
    async fn record_heartbeat(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        update: &HeartbeatUpdate<'_>,
    ) -> Result<HeartbeatOutcome, StoreError>;

    /// Applies many heartbeats, each as [`MembershipStore::record_heartbeat`] would, one outcome
    /// per heartbeat in order. Heartbeats of one silo are applied in their order, each to the
    /// record the one before it left. A store where a call is a round trip does them together;
    /// this default, for stores where it is not, does them one by one.
    async fn record_heartbeats(
        &self,
        silos: &[(ClusterName, SiloId)],
        update: &HeartbeatUpdates<'_>,
    ) -> Result<Vec<Result<HeartbeatOutcome, StoreError>>, StoreError> {
        let mut outcomes = Vec::with_capacity(silos.len());
        for (i, (cluster, silo)) in silos.iter().enumerate() {
            let one =
                |previous: Option<&SiloRecord>, liveness: &Liveness| update(i, previous, liveness);
            outcomes.push(self.record_heartbeat(cluster, silo, &one).await);
        }
        Ok(outcomes)
    }

    /// The cluster's silos that are not marked dead, or `None` when the cluster does not exist.
    async fn membership(&self, cluster: &ClusterName) -> Result<Option<Membership>, StoreError>;

    /// Up to `limit` cluster names after `after` (exclusive), in byte order.
    async fn clusters(
        &self,
        after: Option<&ClusterName>,
        limit: u32,
    ) -> Result<Vec<ClusterName>, StoreError>;

    /// Up to `limit` silos after `after` (exclusive) in id order, dead ones included while listed;
    /// `None` when the cluster does not exist.
    async fn silos(
        &self,
        cluster: &ClusterName,
        after: Option<&SiloId>,
        limit: u32,
    ) -> Result<Option<SiloPage>, StoreError>;

    /// One silo (dead ones included while listed) and its judge; `None` when the cluster or the
    /// silo is unknown.
    async fn silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError>;

    /// A graceful leave: marks the silo dead (so the id cannot rejoin) and releases its first
    /// [`RELEASE_CHUNK`](super::RELEASE_CHUNK) activations; `None` when unknown. Leaving twice
    /// releases what is left.
    async fn remove_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<Departure>, StoreError>;

    /// Marks the silo drained (once: the first request's time stays) and `shutting_down`, if it
    /// is alive; returns it as it is now (dead ones too, so the caller can say so), or `None` when
    /// the cluster or the silo is unknown.
    async fn drain_silo(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
    ) -> Result<Option<(SiloRecord, Liveness)>, StoreError>;

    /// Declares dead every silo of `cluster` the death rule finds dead ([`Liveness::is_alive`]:
    /// past its protection, and silent for the cluster's TTL while this replica reached the
    /// store). Idempotent; replicas may race on it.
    async fn reap(&self, cluster: &ClusterName) -> Result<Reaping, StoreError>;

    /// Writes the heartbeats this replica answered without writing them (held back on its copies
    /// of silo rows: load figures alone, while the stored heartbeat was young), many silos of any
    /// clusters a statement, those whose stored heartbeat is nearly the write-after age old
    /// (called every [`FLUSH_HELD_EVERY_MS`]); returns how many silos it wrote. A store that
    /// holds nothing back (the memory store writes every heartbeat) has nothing to write.
    async fn flush_held_heartbeats(&self) -> Result<usize, StoreError> {
        Ok(0)
    }

    /// Forgets the silos of `cluster` dead for longer than
    /// [`DEAD_SILO_RETENTION_MS`](super::DEAD_SILO_RETENTION_MS) whose entries are all released
    /// (keeping their retired generation). Idempotent.
    async fn forget_expired(&self, cluster: &ClusterName) -> Result<(), StoreError>;
}
