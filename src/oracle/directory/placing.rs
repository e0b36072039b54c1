//! Placing grains: a small state machine over the grains of one call.
//!
//! Each grain is an [`Item`] that carries its own state through three steps:
//! 1. **cached** — a recent answer of this replica, on a silo still alive, answers it without a
//!    store call ([`Directory::answer_from_cache`]);
//! 2. **proposed** — one batched store call answers every other registered grain: its entry if
//!    it has one, else the registration of a silo decided now, before knowing (a pure decision,
//!    about a microsecond, spares new grains a second trip; webhook grains only look up here, as
//!    their endpoint is asked only for grains that need placing) ([`Directory::propose`]);
//! 3. **rounds** — grains still unanswered are decided again and registered, on a fresh
//!    membership read after the first round, up to [`MAX_PLACEMENT_ROUNDS`]
//!    ([`Directory::placement_round`]).
//!
//! Every store answer about a grain is taken in one place, [`Item::absorb`], and every decision
//! that was tallied but did not become a registration is taken back ([`Directory::untally`]).

use super::{Ask, Directory, Outcome, PlaceRequest, Placement};
use crate::cluster::{ClusterName, SiloId};
use crate::placement::{ClusterView, Decision, Explanation, Strategy};
use crate::policy::Policy;
use crate::store::{Membership, NewActivation, Proposal, Registration, StoreError};
use crate::telemetry::metric;

use super::super::OracleError;

/// How many times a batch is decided again after its chosen silos vanished between the decision
/// and the registration (a silo dying or leaving in that instant).
const MAX_PLACEMENT_ROUNDS: usize = 3;

/// One grain of a placement call and how far it got.
struct Item<'r> {
    request: &'r PlaceRequest,
    /// What the cluster's policy (or the request) says places it.
    strategy: Strategy,
    result: Option<Result<Placement, OracleError>>,
    /// The epoch of its entry on a silo that is no longer alive: the next registration replaces
    /// exactly that entry.
    stale_epoch: Option<i64>,
    /// Its webhook was asked already (once per call: the endpoint's timeout counts once against
    /// the request's; later rounds decide by the fallback).
    asked_webhook: bool,
}

impl<'r> Item<'r> {
    fn new(request: &'r PlaceRequest, policy: &Policy) -> Self {
        Self {
            request,
            strategy: policy
                .resolve(request.grain.grain_type(), request.strategy)
                .strategy,
            result: None,
            stale_epoch: None,
            asked_webhook: false,
        }
    }

    fn ask(&self) -> Ask<'r> {
        Ask {
            request: self.request,
            strategy: self.strategy,
            webhook_choice: None,
        }
    }

    fn pending(&self) -> bool {
        self.result.is_none()
    }

    /// Takes the store's answer about this grain — the one place a [`Registration`] is read. A
    /// new entry (with the decision's explanation) or a live one answers the grain; an entry on a
    /// silo no longer alive is remembered, so the next registration replaces exactly it; an
    /// unavailable silo leaves the grain for the next round. Whether it registered.
    fn absorb(
        &mut self,
        directory: &Directory,
        cluster: &ClusterName,
        registration: Registration,
        explanation: Option<Explanation>,
    ) -> bool {
        match registration {
            Registration::Registered(activation) => {
                self.result = Some(Ok(directory.answered(
                    cluster,
                    activation,
                    Outcome::Placed,
                    explanation,
                )));
                return true;
            }
            Registration::Existing(located) if located.live => {
                self.result = Some(Ok(directory.answered(
                    cluster,
                    located.activation,
                    Outcome::Existing,
                    None,
                )));
            }
            Registration::Existing(located) => self.stale_epoch = Some(located.activation.epoch),
            Registration::SiloUnavailable => {}
        }
        false
    }

    /// A stateless worker's answer: placed for this call, never registered.
    fn stateless(&mut self, decision: Decision, policy: &Policy) {
        metric::placement(self.strategy.as_str(), Outcome::Stateless.as_str());
        let max_local = policy
            .resolve(self.request.grain.grain_type(), Some(self.strategy))
            .options
            .stateless_worker
            .max_local;
        self.result = Some(Ok(Placement {
            grain: self.request.grain.to_string(),
            silo: decision.silo.to_string(),
            address: decision.address,
            strategy: self.strategy.as_str().to_owned(),
            epoch: None,
            outcome: Outcome::Stateless,
            explanation: decision.explanation,
            max_local: Some(max_local),
        }));
    }

    /// The answer; a grain still unanswered after every round lost to concurrent changes.
    fn into_result(self) -> Result<Placement, OracleError> {
        self.result
            .unwrap_or(Err(OracleError::Store(StoreError::Contended(
                MAX_PLACEMENT_ROUNDS as u32,
            ))))
    }
}

/// A registration to attempt for one item, and the decision behind it.
struct Attempt {
    item: usize,
    entry: NewActivation,
    tallied: bool,
    explanation: Option<Explanation>,
}

impl Directory {
    /// Where `request.grain` lives: its live activation, or a new placement registered now.
    pub async fn place(
        &self,
        cluster: &ClusterName,
        request: PlaceRequest,
    ) -> Result<Placement, OracleError> {
        let mut results = self
            .place_many(cluster, std::slice::from_ref(&request))
            .await?;
        results.pop().expect("one result per request")
    }

    /// Places many grains. Lookups and registrations go through the batchers, so a call costs a
    /// lookup and a registration however many grains it carries (more only when races or dying
    /// silos intervene), and concurrent calls share them. Grains must be distinct. Each grain gets
    /// its own result; a failure of the whole cluster (unknown, store down) fails the call.
    /// Stateless workers skip the directory: they are decided afresh on every call.
    pub async fn place_many(
        &self,
        cluster: &ClusterName,
        requests: &[PlaceRequest],
    ) -> Result<Vec<Result<Placement, OracleError>>, OracleError> {
        // The policy decides each grain's strategy, and stateless workers skip the directory, so
        // the (usually cached) membership read with its policy comes first.
        let (membership, _) = self.views.for_placement(cluster, false).await?;
        let mut items: Vec<Item<'_>> = requests
            .iter()
            .map(|request| Item::new(request, &membership.policy))
            .collect();
        self.answer_from_cache(cluster, &membership.view(), &mut items);
        let stale_view = self.propose(cluster, &membership, &mut items).await?;
        for round in 0..MAX_PLACEMENT_ROUNDS {
            if !items.iter().any(Item::pending) {
                break;
            }
            // A later round exists only because a chosen silo vanished or nothing fitted, so it
            // reads afresh: a grain is declared unplaceable only on a fresh read.
            self.placement_round(cluster, round > 0 || stale_view, &mut items)
                .await?;
        }
        Ok(items.into_iter().map(Item::into_result).collect())
    }

    /// Step 1: grains this replica answered for lately, on silos still alive, need no store call.
    fn answer_from_cache(&self, cluster: &ClusterName, view: &ClusterView, items: &mut [Item<'_>]) {
        self.cache.enter_era(self.store.outages_seen());
        for item in items.iter_mut().filter(|i| i.strategy.registers()) {
            match self.cached_answer(cluster, view, item.request) {
                Some(activation) => {
                    metric::directory_cache("hit");
                    item.result = Some(Ok(Placement::registered(
                        activation,
                        Outcome::Existing,
                        None,
                    )));
                }
                None if self.cache.enabled() => metric::directory_cache("miss"),
                None => {}
            }
        }
    }

    /// Step 2: one batched store call for every registered grain left: its entry, or the
    /// registration of the silo decided now. Says whether a proposed silo turned out unavailable,
    /// which means the membership read was stale: the next round reads afresh rather than repeat
    /// the same choice.
    async fn propose(
        &self,
        cluster: &ClusterName,
        membership: &Membership,
        items: &mut [Item<'_>],
    ) -> Result<bool, OracleError> {
        let asked: Vec<usize> = (0..items.len())
            .filter(|&i| items[i].pending() && items[i].strategy.registers())
            .collect();
        let proposing: Vec<usize> = asked
            .iter()
            .copied()
            .filter(|&i| items[i].strategy != Strategy::Webhook)
            .collect();
        let view = membership.view();
        let asks: Vec<_> = proposing.iter().map(|&i| items[i].ask()).collect();
        let mut tentative: Vec<Option<Decision>> = vec![None; items.len()];
        for (&i, decided) in
            proposing
                .iter()
                .zip(self.decide(cluster, &view, &membership.policy, &asks))
        {
            tentative[i] = decided.ok();
        }
        let proposals = asked
            .iter()
            .map(|&i| {
                let proposal = Proposal {
                    grain: items[i].request.grain.clone(),
                    silo: tentative[i].as_ref().map(|d| d.silo.clone()),
                    strategy: items[i].strategy.as_str(),
                };
                (cluster.clone(), proposal)
            })
            .collect();
        let outcomes = self.proposals.call_many(proposals).await?;
        let mut stale_view = false;
        let mut not_placed = Vec::new();
        for (&i, outcome) in asked.iter().zip(outcomes) {
            let decision = tentative[i].take();
            let unavailable = matches!(outcome, Registration::SiloUnavailable);
            let explanation = decision.as_ref().and_then(|d| d.explanation.clone());
            let registered = items[i].absorb(self, cluster, outcome, explanation);
            if let Some(decision) = decision.filter(|_| !registered) {
                stale_view |= unavailable;
                if decision.tallied {
                    not_placed.push(decision.silo);
                }
            }
        }
        self.untally(cluster, &view, &not_placed);
        Ok(stale_view)
    }

    /// Step 3, one round: decides every grain still unanswered (asking webhooks once per grain)
    /// and registers the decisions in one batched call.
    async fn placement_round(
        &self,
        cluster: &ClusterName,
        fresh: bool,
        items: &mut [Item<'_>],
    ) -> Result<(), OracleError> {
        let pending: Vec<usize> = (0..items.len()).filter(|&i| items[i].pending()).collect();
        let (membership, cached) = self.views.for_placement(cluster, fresh).await?;
        let view = membership.view();
        let policy = &membership.policy;
        let mut asks: Vec<_> = pending.iter().map(|&i| items[i].ask()).collect();
        let first_asks: Vec<usize> = (0..pending.len())
            .filter(|&k| !std::mem::replace(&mut items[pending[k]].asked_webhook, true))
            .collect();
        let unasked: Vec<_> = first_asks.iter().map(|&k| asks[k]).collect();
        let choices = self.ask_webhooks(cluster, &view, policy, &unasked).await;
        let mut chosen: Vec<Option<SiloId>> = vec![None; asks.len()];
        for (k, choice) in first_asks.into_iter().zip(choices) {
            chosen[k] = choice;
        }
        for (ask, choice) in asks.iter_mut().zip(&chosen) {
            ask.webhook_choice = choice.as_ref();
        }
        let decisions = self.decide(cluster, &view, policy, &asks);
        let mut attempts = Vec::with_capacity(pending.len());
        for (&i, decided) in pending.iter().zip(decisions) {
            let item = &mut items[i];
            match decided {
                Ok(decision) if !item.strategy.registers() => item.stateless(decision, policy),
                Ok(decision) => attempts.push(Attempt {
                    item: i,
                    entry: NewActivation {
                        grain: item.request.grain.clone(),
                        silo: decision.silo,
                        strategy: item.strategy.as_str(),
                        replaces_epoch: item.stale_epoch,
                    },
                    tallied: decision.tallied,
                    explanation: decision.explanation,
                }),
                // Nothing fitted a read that may be stale: the next round decides on a fresh one.
                Err(_) if cached => {}
                Err(error) => {
                    metric::placement(item.strategy.as_str(), "unplaceable");
                    item.result = Some(Err(error.into()));
                }
            }
        }
        if attempts.is_empty() {
            return Ok(());
        }
        let entries = attempts
            .iter()
            .map(|a| (cluster.clone(), a.entry.clone()))
            .collect();
        let registrations = self.registrations.call_many(entries).await?;
        let mut not_placed = Vec::new();
        for (attempt, registration) in attempts.into_iter().zip(registrations) {
            let registered =
                items[attempt.item].absorb(self, cluster, registration, attempt.explanation);
            if attempt.tallied && !registered {
                not_placed.push(attempt.entry.silo);
            }
        }
        self.untally(cluster, &view, &not_placed);
        Ok(())
    }
}
