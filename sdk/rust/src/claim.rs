//! The registration rule: a silo runs a grain only under a registration it holds.
//!
//! A call arrives at a silo that does not run the grain. It does not activate on the caller's
//! word: it asks the oracle as the requesting silo (an answer naming the asker is never served
//! from a cache, so it is the store's). Its own id means it holds the registration: run here under
//! that epoch. Another silo means forward the call there. A stateless worker may run anywhere.

use crate::error::OracleError;
use crate::types::PlacementAnswer;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// Run the grain here, under the registration `epoch` held by the incarnation `silo` (the
    /// one that asked; if the silo rejoined since, the claim is not its own). `epoch` is `None`
    /// for a stateless worker.
    RunHere {
        grain: String,
        silo: String,
        epoch: Option<i64>,
    },
    /// Another silo holds the registration: send the call there.
    ForwardTo {
        grain: String,
        silo: String,
        address: String,
        epoch: i64,
    },
}

/// What the silo `own_silo` does with the oracle's answer to its own placement request. A
/// registered grain without an epoch is not an answer a silo can act on.
pub fn decide(own_silo: &str, placement: &PlacementAnswer) -> Result<Claim, OracleError> {
    let grain = placement.grain.clone();
    Ok(match placement.epoch {
        _ if placement.is_stateless() => Claim::RunHere {
            grain,
            silo: own_silo.to_owned(),
            epoch: None,
        },
        Some(epoch) if placement.silo == own_silo => Claim::RunHere {
            grain,
            silo: own_silo.to_owned(),
            epoch: Some(epoch),
        },
        Some(epoch) => Claim::ForwardTo {
            grain,
            silo: placement.silo.clone(),
            address: placement.address.clone(),
            epoch,
        },
        None => {
            return Err(OracleError::unexpected(format!(
                "the placement of {grain} ({}) names no epoch",
                placement.outcome
            )))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(silo: &str, epoch: Option<i64>, outcome: &str) -> PlacementAnswer {
        PlacementAnswer {
            grain: "user/7".into(),
            silo: silo.into(),
            address: silo.split('@').next().unwrap().to_owned(),
            epoch,
            outcome: outcome.into(),
            strategy: "random".into(),
        }
    }

    #[test]
    fn the_silo_named_runs_it_under_the_epoch() {
        let claim = decide("10.0.0.1:1@1", &answer("10.0.0.1:1@1", Some(42), "placed")).unwrap();
        assert_eq!(
            claim,
            Claim::RunHere {
                grain: "user/7".into(),
                silo: "10.0.0.1:1@1".into(),
                epoch: Some(42)
            }
        );
    }

    #[test]
    fn any_other_silo_forwards_even_the_same_address_of_another_generation() {
        let claim = decide(
            "10.0.0.1:1@2",
            &answer("10.0.0.1:1@1", Some(42), "existing"),
        )
        .unwrap();
        assert_eq!(
            claim,
            Claim::ForwardTo {
                grain: "user/7".into(),
                silo: "10.0.0.1:1@1".into(),
                address: "10.0.0.1:1".into(),
                epoch: 42
            }
        );
    }

    #[test]
    fn a_stateless_worker_runs_wherever_the_call_is() {
        let claim = decide("10.0.0.1:1@1", &answer("10.0.0.2:1@1", None, "stateless")).unwrap();
        assert!(matches!(claim, Claim::RunHere { epoch: None, .. }));
    }

    #[test]
    fn a_registered_grain_without_an_epoch_is_refused_not_run_or_forwarded() {
        let error = decide("10.0.0.1:1@1", &answer("10.0.0.1:1@1", None, "placed")).unwrap_err();
        assert_eq!(error.problem, "unexpected-answer");
    }
}
