//! The grain directory: where grains live, one activation each.

use std::collections::HashMap;

use async_trait::async_trait;

use super::StoreError;
use crate::clock::Millis;
use crate::cluster::{ClusterName, GrainId, SiloId};

/// One directory entry: a grain's single activation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    pub grain: String,
    pub silo: String,
    /// The silo's address, as of its last heartbeat.
    pub address: String,
    /// Strategy that placed it.
    pub strategy: String,
    /// Identifies this activation: every registration gets a larger one than any before it.
    pub epoch: i64,
    pub created_ms: Millis,
}

/// A directory entry and whether its silo is alive now; entries on dead silos are as good as gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub activation: Activation,
    pub live: bool,
}

/// A registration to attempt.
#[derive(Debug, Clone)]
pub struct NewActivation {
    pub grain: GrainId,
    pub silo: SiloId,
    pub strategy: &'static str,
    /// The epoch of a stale entry (on a dead silo) that this one replaces; the replacement only
    /// happens if that exact entry is still there.
    pub replaces_epoch: Option<i64>,
}

/// A directory question for one grain: its entry if it has one, else — when `silo` is given —
/// registration on that silo. One statement answers a whole batch of them.
#[derive(Debug, Clone)]
pub struct Proposal {
    pub grain: GrainId,
    /// The silo a decision chose; `None` asks only for the existing entry.
    pub silo: Option<SiloId>,
    pub strategy: &'static str,
}

/// What a registration attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Registration {
    /// This call created the entry.
    Registered(Activation),
    /// Another entry got there first (the directory is first-writer-wins); here it is.
    Existing(Located),
    /// Nothing was registered: the chosen silo is no longer active and alive, another caller's
    /// entry appeared meanwhile, or (for a [`Proposal`] without a silo) there is no entry.
    SiloUnavailable,
}

/// Where grains live: the single-activation directory.
#[async_trait]
pub trait DirectoryStore: Send + Sync + 'static {
    /// Directory entries of these grains (absent grains are left out), judged live now.
    async fn lookup(
        &self,
        cluster: &ClusterName,
        grains: &[GrainId],
    ) -> Result<Vec<Located>, StoreError>;

    /// Registers new activations, one result per entry, in order. Each registration succeeds only if
    /// no live entry exists for the grain and the chosen silo is active and alive — and stays so
    /// until the registration commits (a silo being declared dead at that moment is waited for).
    async fn register(
        &self,
        cluster: &ClusterName,
        entries: &[NewActivation],
    ) -> Result<Vec<Registration>, StoreError>;

    /// For each proposal of a cluster, in order: the grain's entry (`Existing`, live or not) if it
    /// has one, else the registration of the proposed silo by [`DirectoryStore::register`]'s
    /// rules. A grain that exists costs a lookup; a new one is registered in the same call, without
    /// a second trip through the oracle. The proposals may be of many clusters (each grain once a
    /// cluster): the Postgres store does all of it in one statement, so a fleet of small clusters'
    /// placements do not cost a statement each.
    async fn lookup_or_register(
        &self,
        proposals: &[(ClusterName, Proposal)],
    ) -> Result<Vec<Registration>, StoreError> {
        lookup_then_register(self, proposals).await
    }

    /// Removes the grain's entry if it is activation `epoch` on `silo`; `true` when it did.
    async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: i64,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` of a silo's activations that a mover may pick, least recently placed first:
    /// not of an `immovable` grain type, not brought by a migration since `moved_since` (a grain
    /// that just arrived is not sent on at once), and without an open migration.
    async fn movable_activations(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        immovable: &[String],
        moved_since: Millis,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError>;

    /// How many directory entries each silo of the cluster holds (silos without any are left
    /// out), in one statement.
    async fn activation_counts(
        &self,
        cluster: &ClusterName,
    ) -> Result<std::collections::HashMap<String, u64>, StoreError>;

    /// A silo's activations ordered by grain, after `after` (exclusive), at most `limit`.
    async fn activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Activation>, StoreError>;

    /// Releases up to `limit` directory entries of a dead silo of `cluster`; returns how many, 0
    /// when no dead silo of it has any left. Idempotent; replicas may race on it.
    async fn release_dead(&self, cluster: &ClusterName, limit: u32) -> Result<u64, StoreError>;
}

/// Groups calls by cluster, preserving each call's position.
pub fn by_cluster<T>(calls: &[(ClusterName, T)]) -> Vec<(ClusterName, Vec<usize>)> {
    let mut groups: HashMap<&ClusterName, Vec<usize>> = HashMap::new();
    for (i, (cluster, _)) in calls.iter().enumerate() {
        groups.entry(cluster).or_default().push(i);
    }
    groups
        .into_iter()
        .map(|(cluster, positions)| (cluster.clone(), positions))
        .collect()
}

/// [`DirectoryStore::lookup_or_register`] as a lookup, then a registration of the grains it did not
/// find, a cluster at a time.
pub async fn lookup_then_register(
    store: &(impl DirectoryStore + ?Sized),
    proposals: &[(ClusterName, Proposal)],
) -> Result<Vec<Registration>, StoreError> {
    let mut answers = vec![Registration::SiloUnavailable; proposals.len()];
    for (cluster, positions) in by_cluster(proposals) {
        let ones: Vec<&Proposal> = positions.iter().map(|&i| &proposals[i].1).collect();
        let outcomes = lookup_then_register_in(store, &cluster, &ones).await?;
        for (i, outcome) in positions.into_iter().zip(outcomes) {
            answers[i] = outcome;
        }
    }
    Ok(answers)
}

/// [`lookup_then_register`] for one cluster's proposals.
async fn lookup_then_register_in(
    store: &(impl DirectoryStore + ?Sized),
    cluster: &ClusterName,
    proposals: &[&Proposal],
) -> Result<Vec<Registration>, StoreError> {
    let grains: Vec<GrainId> = proposals.iter().map(|p| p.grain.clone()).collect();
    let mut found: HashMap<String, Located> = store
        .lookup(cluster, &grains)
        .await?
        .into_iter()
        .map(|l| (l.activation.grain.clone(), l))
        .collect();
    let new: Vec<NewActivation> = proposals
        .iter()
        .filter(|p| !found.contains_key(p.grain.as_str()))
        .filter_map(|p| {
            p.silo.as_ref().map(|silo| NewActivation {
                grain: p.grain.clone(),
                silo: silo.clone(),
                strategy: p.strategy,
                replaces_epoch: None,
            })
        })
        .collect();
    let mut registered: HashMap<String, Registration> = HashMap::new();
    if !new.is_empty() {
        for (entry, outcome) in new.iter().zip(store.register(cluster, &new).await?) {
            registered.insert(entry.grain.to_string(), outcome);
        }
    }
    Ok(proposals
        .iter()
        .map(|p| match found.remove(p.grain.as_str()) {
            Some(located) => Registration::Existing(located),
            None => registered
                .remove(p.grain.as_str())
                .unwrap_or(Registration::SiloUnavailable),
        })
        .collect())
}
