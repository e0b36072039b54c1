//! The grain directory: placement, lookup, deactivation and listing.
//!
//! Placement is lookup first; only a grain without a live activation is placed. The decision is the
//! domain's ([`crate::placement::place`]); the single-activation guarantee is the store's: when two
//! callers race, the store keeps the first registration and hands it to the other.

mod cache;
mod distribution;
mod placing;
mod preview;
mod webhook;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rand_chacha::ChaCha8Rng;

pub use cache::{CacheSettings, DirectoryCache};
pub use distribution::{Distribution, Flow, SiloShare};
pub use preview::Preview;
pub use webhook::MAX_ANSWER_BYTES as MAX_WEBHOOK_ANSWER_BYTES;

use super::batcher::Batcher;
use super::views::ClusterViews;
use futures_util::stream::{self, StreamExt};

use super::{
    lock_rng, store_batcher, OracleError, SharedRng, READS_OVERLAP_AFTER, WRITES_OVERLAP_AFTER,
};
use crate::cluster::{ClusterName, GrainId, SiloId, SiloStatus};
use crate::placement::webhook_hosts::WebhookHosts;
use crate::placement::LocalDeltas;
use crate::placement::{self, ClusterView, Explanation, PlacementInput, Strategy};
use crate::policy::Policy;
use crate::store::{
    by_cluster, Activation, Located, NewActivation, Proposal, Registration, Store, StoreError,
};
use crate::telemetry::metric;

/// One grain to place.
#[derive(Debug, Clone)]
pub struct PlaceRequest {
    pub grain: GrainId,
    pub requesting_silo: Option<SiloId>,
    pub hint: Option<SiloId>,
    /// Overrides the policy's strategy for this call.
    pub strategy: Option<Strategy>,
    pub explain: bool,
}

/// Whether the answer was already in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A live activation was registered already.
    Existing,
    /// This call placed and registered a new activation.
    Placed,
    /// A stateless worker: placed for this call, never registered.
    Stateless,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Existing => "existing",
            Outcome::Placed => "placed",
            Outcome::Stateless => "stateless",
        }
    }
}

/// Where a grain lives (or, for a stateless worker, where this call goes), and how that was decided.
#[derive(Debug, Clone)]
pub struct Placement {
    pub grain: String,
    pub silo: String,
    pub address: String,
    pub strategy: String,
    /// The activation's epoch; absent for stateless workers, which are never registered.
    pub epoch: Option<i64>,
    pub outcome: Outcome,
    pub explanation: Option<Explanation>,
    /// For stateless workers: the most instances per silo (0 = the silo's processor count).
    pub max_local: Option<u32>,
}

impl Placement {
    fn registered(
        activation: Activation,
        outcome: Outcome,
        explanation: Option<Explanation>,
    ) -> Self {
        metric::placement(&activation.strategy, outcome.as_str());
        Self {
            grain: activation.grain,
            silo: activation.silo,
            address: activation.address,
            strategy: activation.strategy,
            epoch: Some(activation.epoch),
            outcome,
            explanation,
            max_local: None,
        }
    }
}

/// One grain to decide: its request, the strategy its policy gives it, and the silo its webhook
/// chose, if it was asked and answered.
#[derive(Clone, Copy)]
struct Ask<'a> {
    request: &'a PlaceRequest,
    strategy: Strategy,
    webhook_choice: Option<&'a SiloId>,
}

/// One page of a silo's activations.
#[derive(Debug, Clone)]
pub struct Page {
    pub activations: Vec<Activation>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// The directory's use cases and their state.
pub struct Directory {
    store: Arc<dyn Store>,
    views: Arc<ClusterViews>,
    rng: SharedRng,
    /// What this replica placed on each silo since its last heartbeat, per cluster
    /// (`activation_count` adds it to the silo's reported figures).
    deltas: Mutex<HashMap<ClusterName, LocalDeltas>>,
    lookups: Batcher<(ClusterName, GrainId), Option<Located>>,
    registrations: Batcher<(ClusterName, NewActivation), Registration>,
    proposals: Batcher<(ClusterName, Proposal), Registration>,
    /// Recent answers for placements of known grains (see [`cache`]); the movers forget a grain's
    /// when it moves.
    cache: Arc<DirectoryCache>,
    webhooks: Webhooks,
}

/// What the `webhook` strategy calls with.
struct Webhooks {
    /// Pools connections to the operators' endpoints. Follows no redirects: a redirect would lead
    /// to a host the allow-list never judged.
    http: reqwest::Client,
    /// The hosts webhook URLs may name: checked again before every call.
    hosts: WebhookHosts,
}

impl Directory {
    /// How many recent answers this replica keeps now (`oracle_directory_cache_entries`).
    pub fn cached_answers(&self) -> usize {
        self.cache.len()
    }

    pub(super) fn new(
        store: Arc<dyn Store>,
        views: Arc<ClusterViews>,
        rng: SharedRng,
        cache: Arc<DirectoryCache>,
        webhook_hosts: WebhookHosts,
    ) -> Self {
        Self {
            lookups: store_batcher(&store, READS_OVERLAP_AFTER, lookup_batch),
            registrations: store_batcher(&store, WRITES_OVERLAP_AFTER, register_batch),
            proposals: store_batcher(&store, WRITES_OVERLAP_AFTER, propose_batch),
            store,
            views,
            rng,
            deltas: Mutex::default(),
            cache,
            webhooks: Webhooks {
                http: webhook::client(),
                hosts: webhook_hosts,
            },
        }
    }

    /// Takes back tallied decisions that did not become placements (one per silo id listed): the
    /// grain existed, or its registration failed. Decisions are tallied when made, so placements
    /// still in flight already count for the decisions made meanwhile.
    fn untally(
        &self,
        cluster: &ClusterName,
        view: &crate::placement::ClusterView,
        silos: &[SiloId],
    ) {
        if silos.is_empty() {
            return;
        }
        self.with_rng_and_deltas(cluster, |_, deltas| {
            for silo in silos {
                if let Some(record) = view.find(silo) {
                    deltas.remove(record, 1);
                }
            }
        });
    }

    /// Runs `f` with the RNG and the cluster's placement tally, both held for its duration (always
    /// locked in this order). Tallies exist only for clusters that exist (a decision needs a
    /// membership read), and [`LocalDeltas::retain_silos`] keeps each to the silos of a view.
    fn with_rng_and_deltas<T>(
        &self,
        cluster: &ClusterName,
        f: impl FnOnce(&mut ChaCha8Rng, &mut LocalDeltas) -> T,
    ) -> T {
        let mut rng = lock_rng(&self.rng);
        let mut deltas = self
            .deltas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut rng, deltas.entry(cluster.clone()).or_default())
    }

    /// Decides `asks` against `view`, one after the other, each seeing the tally of the ones
    /// before (so a batch does not pile onto one silo).
    fn decide(
        &self,
        cluster: &ClusterName,
        view: &ClusterView,
        policy: &Policy,
        asks: &[Ask<'_>],
    ) -> Vec<Result<placement::Decision, placement::PlacementError>> {
        self.with_rng_and_deltas(cluster, |rng, deltas| {
            deltas.retain_silos(view);
            asks.iter()
                .map(|ask| {
                    let request = ask.request;
                    let resolved = policy.resolve(request.grain.grain_type(), Some(ask.strategy));
                    let decision = placement::Request {
                        input: PlacementInput {
                            grain: &request.grain,
                            requesting_silo: request.requesting_silo.as_ref(),
                            hint: request.hint.as_ref(),
                        },
                        strategy: resolved.strategy,
                        options: resolved.options,
                        filters: resolved.filters,
                        chosen_by_webhook: ask.webhook_choice,
                        explain: request.explain,
                    };
                    let started = std::time::Instant::now();
                    let decided = placement::place(view, &decision, deltas, rng);
                    metric::placement_decision(resolved.strategy.as_str(), started.elapsed());
                    decided
                })
                .collect()
        })
    }

    /// The grain's live activation.
    pub async fn lookup(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
    ) -> Result<Activation, OracleError> {
        let found = self
            .lookups
            .call((cluster.clone(), grain.clone()))
            .await?
            .filter(|located| located.live)
            .map(|located| located.activation);
        // Always the store's answer; this replica's cached one follows it.
        match &found {
            Some(activation) => self.cache.put(cluster.as_str(), activation),
            None => self.cache.forget_answer(cluster.as_str(), grain.as_str()),
        }
        found.ok_or_else(|| OracleError::ActivationNotFound(grain.to_string()))
    }

    /// A live activation the store answered with, remembered for the next placements of the grain.
    fn answered(
        &self,
        cluster: &ClusterName,
        activation: Activation,
        outcome: Outcome,
        explanation: Option<Explanation>,
    ) -> Placement {
        self.cache.put(cluster.as_str(), &activation);
        Placement::registered(activation, outcome, explanation)
    }

    /// The grain's activation as this replica last answered it, if the cache may serve it: its silo
    /// is still alive in `view`, and it is not the requesting silo itself (a silo asking where its
    /// own grain lives evidently does not run it, so the store must answer).
    fn cached_answer(
        &self,
        cluster: &ClusterName,
        view: &ClusterView,
        request: &PlaceRequest,
    ) -> Option<Activation> {
        let activation = self.cache.get(cluster.as_str(), request.grain.as_str())?;
        if request
            .requesting_silo
            .as_ref()
            .is_some_and(|silo| silo.as_str() == activation.silo)
        {
            return None;
        }
        // The view's silos are in id order (a miss here only costs a store call).
        let silo = view
            .silos
            .binary_search_by(|s| s.id.as_str().cmp(&activation.silo))
            .ok()
            .map(|at| &view.silos[at]);
        // On a silo the view does not show alive, the store answers (a silo that just joined may
        // be missing from a view read a moment ago, so the kept answer is not dropped for it).
        match silo.map(|silo| view.status(silo)) {
            Some(SiloStatus::Dead) | None => None,
            Some(_) => Some(activation),
        }
    }

    /// Removes the grain's activation, but only if it is still activation `epoch` on `silo`: a
    /// silo must never remove an activation that has since been placed elsewhere, nor — when a late
    /// or retried deactivation arrives — a newer one on itself.
    pub async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
        epoch: i64,
    ) -> Result<(), OracleError> {
        let removed = self.store.deactivate(cluster, grain, silo, epoch).await;
        // Also after a failure: the store may have removed it before the failure reached us, and
        // barring epoch `epoch` and older ones can only spare a stale answer.
        if !matches!(removed, Ok(false)) {
            self.cache
                .forget(cluster.as_str(), grain.as_str(), epoch + 1);
        }
        if removed.inspect_err(|_| metric::store_error("deactivate"))? {
            return Ok(());
        }
        match self.lookup(cluster, grain).await {
            Ok(current) => Err(OracleError::ActivationElsewhere {
                grain: grain.to_string(),
                silo: current.silo,
                epoch: current.epoch,
            }),
            Err(error) => Err(error),
        }
    }

    /// A page of the activations registered on `silo`, in grain order.
    pub async fn activations_on(
        &self,
        cluster: &ClusterName,
        silo: &SiloId,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<Page, OracleError> {
        let activations = self
            .store
            .activations_on(cluster, silo, cursor, limit)
            .await
            .inspect_err(|_| metric::store_error("activations_on"))?;
        let next_cursor = (activations.len() == limit as usize)
            .then(|| activations.last().map(|a| a.grain.clone()))
            .flatten();
        Ok(Page {
            activations,
            next_cursor,
        })
    }
}

/// How many clusters of one batch reach the store at once: each cluster's statement names it
/// alone, so a batch over many small clusters runs them side by side rather than in a row.
const CLUSTERS_AT_ONCE: usize = 8;

/// One batched lookup: a store call per cluster in the batch.
async fn lookup_batch(
    store: Arc<dyn Store>,
    calls: Vec<(ClusterName, GrainId)>,
) -> Result<Vec<Option<Located>>, StoreError> {
    let per_cluster = by_cluster(&calls).into_iter().map(|(cluster, positions)| {
        let store = store.clone();
        let grains: Vec<GrainId> = positions.iter().map(|&i| calls[i].1.clone()).collect();
        async move { (positions, store.lookup(&cluster, &grains).await) }
    });
    let found: Vec<_> = stream::iter(per_cluster)
        .buffer_unordered(CLUSTERS_AT_ONCE)
        .collect()
        .await;
    let mut answers = vec![None; calls.len()];
    for (positions, located) in found {
        let found: HashMap<String, Located> = located
            .inspect_err(|_| metric::store_error("lookup"))?
            .into_iter()
            .map(|located| (located.activation.grain.clone(), located))
            .collect();
        for &i in &positions {
            // The same grain may be queued twice in one batch (two callers at once): both get it.
            answers[i] = found.get(calls[i].1.as_str()).cloned();
        }
    }
    Ok(answers)
}

/// One batched registration: a store call per cluster.
async fn register_batch(
    store: Arc<dyn Store>,
    calls: Vec<(ClusterName, NewActivation)>,
) -> Result<Vec<Registration>, StoreError> {
    once_per_grain(
        &calls,
        |e| &e.grain,
        "register",
        |cluster, entries| {
            let store = store.clone();
            async move { store.register(&cluster, &entries).await }
        },
    )
    .await
}

/// One batched lookup-or-register: one store call for every cluster in the batch.
async fn propose_batch(
    store: Arc<dyn Store>,
    calls: Vec<(ClusterName, Proposal)>,
) -> Result<Vec<Registration>, StoreError> {
    let mut unique = Vec::new();
    let mut duplicates = Vec::new();
    for (_, positions) in by_cluster(&calls) {
        let (first, later) = first_of_each_grain(&positions, |i| &calls[i].1.grain);
        unique.extend(first);
        duplicates.extend(later);
    }
    let proposals: Vec<(ClusterName, Proposal)> =
        unique.iter().map(|&i| calls[i].clone()).collect();
    let outcomes = store
        .lookup_or_register(&proposals)
        .await
        .inspect_err(|_| metric::store_error("lookup_or_register"))?;
    let mut answers = vec![Registration::SiloUnavailable; calls.len()];
    fan_out(&mut answers, &unique, outcomes, &duplicates);
    Ok(answers)
}

/// Runs `run` once per cluster in the batch with each grain queued only once. A grain queued twice
/// (two concurrent placements of one new grain) goes to the store once; the later call gets the
/// first one's activation as an existing one, exactly as if it had lost the race in the database.
async fn once_per_grain<T, F, Fut>(
    calls: &[(ClusterName, T)],
    grain_of: impl Fn(&T) -> &GrainId,
    operation: &'static str,
    run: F,
) -> Result<Vec<Registration>, StoreError>
where
    T: Clone,
    F: Fn(ClusterName, Vec<T>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Registration>, StoreError>>,
{
    let per_cluster = by_cluster(calls).into_iter().map(|(cluster, positions)| {
        let (unique, duplicates) = first_of_each_grain(&positions, |i| grain_of(&calls[i].1));
        let entries: Vec<T> = unique.iter().map(|&i| calls[i].1.clone()).collect();
        let outcomes = run(cluster, entries);
        async move { (unique, duplicates, outcomes.await) }
    });
    let done: Vec<_> = stream::iter(per_cluster)
        .buffer_unordered(CLUSTERS_AT_ONCE)
        .collect()
        .await;
    let mut answers = vec![Registration::SiloUnavailable; calls.len()];
    for (unique, duplicates, outcomes) in done {
        let outcomes = outcomes.inspect_err(|_| metric::store_error(operation))?;
        fan_out(&mut answers, &unique, outcomes, &duplicates);
    }
    Ok(answers)
}

/// Splits positions into the first call for each grain and the later ones (with their first).
fn first_of_each_grain<'c>(
    positions: &[usize],
    grain_of: impl Fn(usize) -> &'c GrainId,
) -> (Vec<usize>, Vec<(usize, usize)>) {
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    let mut unique = Vec::new();
    let mut duplicates = Vec::new();
    for &i in positions {
        match first_of.get(grain_of(i).as_str()) {
            Some(&first) => duplicates.push((i, first)),
            None => {
                first_of.insert(grain_of(i).as_str(), i);
                unique.push(i);
            }
        }
    }
    (unique, duplicates)
}

/// Hands each first call its answer, and each later call for the same grain the first one's
/// (a registration by the first is, to the later ones, an existing live activation).
fn fan_out(
    answers: &mut [Registration],
    unique: &[usize],
    outcomes: Vec<Registration>,
    duplicates: &[(usize, usize)],
) {
    for (&i, outcome) in unique.iter().zip(outcomes) {
        answers[i] = outcome;
    }
    for &(i, first) in duplicates {
        answers[i] = match &answers[first] {
            Registration::Registered(activation) => Registration::Existing(Located {
                activation: activation.clone(),
                live: true,
            }),
            other => other.clone(),
        };
    }
}
