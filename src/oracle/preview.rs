//! A placement tried out: what the grain's strategy would decide now, and why, without
//! registering anything. Operators use it to see a policy at work (the live page's tryout); it
//! changes neither the directory nor the tallies later decisions read.

use std::collections::HashMap;

use super::directory::Round;
use super::{Oracle, OracleError, PlaceRequest};
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

impl Oracle {
    /// Decides `request` as a placement would, on a fresh membership read, with its explanation;
    /// a webhook strategy asks its endpoint, as a placement would. Registers nothing, and a
    /// tallying strategy's tally is taken back at once.
    pub async fn preview(
        &self,
        cluster: &ClusterName,
        request: PlaceRequest,
    ) -> Result<Preview, OracleError> {
        let (membership, _) = self.membership_for_placement(cluster, true).await?;
        let strategy = membership
            .policy
            .resolve(request.grain.grain_type(), request.strategy)
            .strategy;
        let existing = if strategy.registers() {
            self.lookups
                .call((cluster.clone(), request.grain.clone()))
                .await?
                .filter(|located| located.live)
                .map(|located| located.activation)
        } else {
            None
        };
        let view = membership.view();
        let requests = [PlaceRequest {
            explain: true,
            ..request
        }];
        let strategies = [strategy];
        let webhook_choices: HashMap<_, _> = self
            .ask_webhooks(
                cluster,
                &view,
                &membership.policy,
                &requests,
                &strategies,
                &[0],
            )
            .await;
        let round = Round {
            view: &view,
            policy: &membership.policy,
            requests: &requests,
            strategies: &strategies,
            webhook_choices: &webhook_choices,
        };
        let decision = self
            .decide(cluster, &round, &[0])
            .pop()
            .expect("one decision per request")?;
        if strategy.tallies() {
            self.untally(cluster, &view, std::slice::from_ref(&decision.silo));
        }
        Ok(Preview {
            strategy,
            existing,
            silo: decision.silo.to_string(),
            address: decision.address,
            explanation: decision
                .explanation
                .expect("a decision asked to explain carries its explanation"),
        })
    }
}
