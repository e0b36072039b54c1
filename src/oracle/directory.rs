//! The grain directory: placement, lookup, deactivation and listing.
//!
//! Placement is lookup first; only a grain without a live activation is placed. The decision is the
//! domain's ([`crate::placement::place`]); the single-activation guarantee is the store's: when two
//! callers race, the store keeps the first registration and hands it to the other.

use std::collections::HashMap;

use super::{Oracle, OracleError};
use crate::cluster::{ClusterName, GrainId, SiloId};
use crate::placement::{self, ClusterView, Explanation, PlacementError, PlacementInput, Strategy};
use crate::store::{Activation, NewActivation, Registration};
use crate::telemetry::metric;

/// How many times a batch is decided again after its chosen silos vanished between the decision
/// and the registration (a silo dying or leaving in that instant).
const MAX_PLACEMENT_ROUNDS: usize = 3;

/// One grain to place.
#[derive(Debug, Clone)]
pub struct PlaceRequest {
    pub grain: GrainId,
    pub requesting_silo: Option<SiloId>,
    pub hint: Option<SiloId>,
    /// Overrides the cluster's policy for this call.
    pub strategy: Option<Strategy>,
    pub explain: bool,
}

/// Whether the answer was already in the directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Existing,
    Placed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Existing => "existing",
            Outcome::Placed => "placed",
        }
    }
}

/// Where a grain lives, and how that was decided.
#[derive(Debug, Clone)]
pub struct Placement {
    pub activation: Activation,
    pub outcome: Outcome,
    pub explanation: Option<Explanation>,
}

/// One page of a silo's activations.
#[derive(Debug, Clone)]
pub struct Page {
    pub activations: Vec<Activation>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

impl Oracle {
    /// Where `request.grain` lives: its live activation, or a new placement registered now.
    pub async fn place(
        &self,
        cluster: &ClusterName,
        request: PlaceRequest,
    ) -> Result<Placement, OracleError> {
        let mut results = self
            .place_many(cluster, std::slice::from_ref(&request))
            .await?;
        Ok(results.pop().expect("one result per request")?)
    }

    /// Places many grains with a handful of store round trips whatever their number: one lookup,
    /// one membership read and one registration (more only when races or dying silos intervene).
    /// Grains must be distinct. Each grain gets its own result; a cluster-wide failure fails all.
    pub async fn place_many(
        &self,
        cluster: &ClusterName,
        requests: &[PlaceRequest],
    ) -> Result<Vec<Result<Placement, PlacementError>>, OracleError> {
        let now = self.clock.now_ms();
        let grains: Vec<GrainId> = requests.iter().map(|r| r.grain.clone()).collect();
        let found = self
            .store
            .lookup(cluster, &grains, now)
            .await
            .inspect_err(|_| metric::store_error("lookup"))?;
        let mut found: HashMap<String, _> = found
            .into_iter()
            .map(|l| (l.activation.grain.clone(), l))
            .collect();

        let mut results: Vec<Option<Result<Placement, PlacementError>>> =
            vec![None; requests.len()];
        let mut stale_epochs: HashMap<usize, i64> = HashMap::new();
        for (i, request) in requests.iter().enumerate() {
            match found.remove(request.grain.as_str()) {
                Some(located) if located.live => {
                    results[i] = Some(Ok(existing(located.activation)));
                }
                Some(located) => {
                    stale_epochs.insert(i, located.activation.epoch);
                }
                None => {}
            }
        }

        for _ in 0..MAX_PLACEMENT_ROUNDS {
            let pending: Vec<usize> = (0..requests.len())
                .filter(|&i| results[i].is_none())
                .collect();
            if pending.is_empty() {
                break;
            }
            let membership = self
                .store
                .membership(cluster)
                .await
                .inspect_err(|_| metric::store_error("membership"))?
                .ok_or_else(|| OracleError::ClusterNotFound(cluster.to_string()))?;
            let view = ClusterView {
                now: self.clock.now_ms(),
                silo_ttl_ms: membership.silo_ttl_ms,
                silos: membership.silos,
            };

            let mut attempts = Vec::with_capacity(pending.len());
            let mut explanations = HashMap::new();
            for &i in &pending {
                let request = &requests[i];
                let strategy = request.strategy.unwrap_or_default();
                let input = PlacementInput {
                    grain: &request.grain,
                    requesting_silo: request.requesting_silo.as_ref(),
                    hint: request.hint.as_ref(),
                };
                let decided = self
                    .with_rng(|rng| placement::place(&view, input, strategy, request.explain, rng));
                match decided {
                    Ok(decision) => {
                        if let Some(explanation) = decision.explanation {
                            explanations.insert(i, explanation);
                        }
                        attempts.push((
                            i,
                            NewActivation {
                                grain: request.grain.clone(),
                                silo: decision.silo,
                                strategy: strategy.as_str(),
                                replaces_epoch: stale_epochs.get(&i).copied(),
                            },
                        ));
                    }
                    Err(error) => {
                        metric::placement(strategy.as_str(), "unplaceable");
                        results[i] = Some(Err(error));
                    }
                }
            }
            if attempts.is_empty() {
                break;
            }

            let entries: Vec<NewActivation> = attempts.iter().map(|(_, e)| e.clone()).collect();
            let registrations = self
                .store
                .register(cluster, &entries, view.now)
                .await
                .inspect_err(|_| metric::store_error("register"))?;
            for ((i, entry), registration) in attempts.into_iter().zip(registrations) {
                match registration {
                    Registration::Registered(activation) => {
                        metric::placement(entry.strategy, "placed");
                        results[i] = Some(Ok(Placement {
                            activation,
                            outcome: Outcome::Placed,
                            explanation: explanations.remove(&i),
                        }));
                    }
                    Registration::Existing(located) if located.live => {
                        results[i] = Some(Ok(existing(located.activation)));
                    }
                    Registration::Existing(located) => {
                        stale_epochs.insert(i, located.activation.epoch);
                    }
                    Registration::SiloUnavailable => {}
                }
            }
        }

        results
            .into_iter()
            .map(|result| {
                result.ok_or(OracleError::Store(crate::store::StoreError::Contended(
                    MAX_PLACEMENT_ROUNDS as u32,
                )))
            })
            .collect()
    }

    /// The grain's live activation.
    pub async fn lookup(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
    ) -> Result<Activation, OracleError> {
        let now = self.clock.now_ms();
        self.store
            .lookup(cluster, std::slice::from_ref(grain), now)
            .await
            .inspect_err(|_| metric::store_error("lookup"))?
            .into_iter()
            .find(|located| located.live)
            .map(|located| located.activation)
            .ok_or_else(|| OracleError::ActivationNotFound(grain.to_string()))
    }

    /// Removes the grain's activation, but only if it is still on `silo`: a silo must never remove
    /// an activation that has since been placed elsewhere.
    pub async fn deactivate(
        &self,
        cluster: &ClusterName,
        grain: &GrainId,
        silo: &SiloId,
    ) -> Result<(), OracleError> {
        let removed = self
            .store
            .deactivate(cluster, grain, silo)
            .await
            .inspect_err(|_| metric::store_error("deactivate"))?;
        if removed {
            return Ok(());
        }
        match self.lookup(cluster, grain).await {
            Ok(current) => Err(OracleError::ActivationElsewhere {
                grain: grain.to_string(),
                silo: current.silo,
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

fn existing(activation: Activation) -> Placement {
    metric::placement(&activation.strategy, "existing");
    Placement {
        activation,
        outcome: Outcome::Existing,
        explanation: None,
    }
}
