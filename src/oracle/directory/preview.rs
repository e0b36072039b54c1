//! A placement tried out: what the grain's strategy would decide now, and why, without
//! registering anything. Operators use it to see a policy at work (the live page's tryout); it
//! changes neither the directory nor the tallies later decisions read, and it calls nothing
//! outside the oracle, so any key of the cluster may ask.

use super::{Ask, Directory, OracleError, PlaceRequest};
use crate::cluster::ClusterName;
use crate::placement::{Explanation, Strategy};
use crate::store::Activation;

/// What a placement of the grain would do now.
#[derive(Debug, Clone)]
pub struct Preview {
    pub strategy: Strategy,
    /// The grain's live activation, which a placement would answer instead of deciding (always
    /// `None` for stateless workers, which are never registered).
    pub existing: Option<Activation>,
    pub silo: String,
    pub address: String,
    pub explanation: Explanation,
}

impl Directory {
    /// Decides `request` as a placement would, with its explanation: on a recent membership read,
    /// and on a fresh one if nothing fitted. A `webhook` type is decided by its fallback: a
    /// preview never calls the operator's endpoint. Registers nothing, and a tallied decision is
    /// taken back at once.
    pub async fn preview(
        &self,
        cluster: &ClusterName,
        request: PlaceRequest,
    ) -> Result<Preview, OracleError> {
        let requests = [PlaceRequest {
            explain: true,
            ..request
        }];
        let grain = &requests[0].grain;
        let mut fresh = false;
        loop {
            let (membership, cached) = self.views.for_placement(cluster, fresh).await?;
            let strategy = membership
                .policy
                .resolve(grain.grain_type(), requests[0].strategy)
                .strategy;
            let view = membership.view();
            let ask = Ask {
                request: &requests[0],
                strategy,
                webhook_choice: None,
            };
            let decided = self
                .decide(cluster, &view, &membership.policy, &[ask])
                .pop()
                .expect("one decision per request");
            let decision = match decided {
                Err(_) if cached && !fresh => {
                    fresh = true;
                    continue;
                }
                decided => decided?,
            };
            if decision.tallied {
                self.untally(cluster, &view, std::slice::from_ref(&decision.silo));
            }
            let existing = if strategy.registers() {
                match self.lookup(cluster, grain).await {
                    Ok(activation) => Some(activation),
                    Err(OracleError::ActivationNotFound(_)) => None,
                    Err(error) => return Err(error),
                }
            } else {
                None
            };
            return Ok(Preview {
                strategy,
                existing,
                silo: decision.silo.to_string(),
                address: decision.address,
                explanation: decision
                    .explanation
                    .expect("a decision asked to explain carries its explanation"),
            });
        }
    }
}
