//! The repartitioner's options: Orleans' `ActivationRepartitionerOptions` in milliseconds, with its
//! defaults and validation rules (reference 3.1), the period rules the oracle adds so that no
//! accepted value fails at run time (reference quirk 7), and the oracle's own two switches.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::validation::{Invalid, Violations};

/// How and when the repartitioner brings grains that call each other onto one silo.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RepartitionerOptions {
    /// Run rounds on their own timers (on the replica holding the cluster's lease). Off, rounds
    /// run only when asked for (`POST …/repartitioner/rounds`); edges are tracked either way.
    pub enabled: bool,
    /// Plan like Orleans: one pairwise exchange between two silos per round, within Orleans'
    /// imbalance tolerance. Otherwise the oracle's global plan over every silo at once.
    pub orleans_compat: bool,
    /// Edges tracked (the top-K of the frequent-edge sketch); at least 1.
    pub max_edge_count: u32,
    /// Edge reports waiting to be counted, across replicas; beyond it the oldest are dropped
    /// (and counted). At least 1.
    pub max_unprocessed_edges: u32,
    /// Shortest time between rounds; more than 0. Below `recovery_period_ms`, a round after moves
    /// still waits the recovery period (a warning says so).
    pub min_round_period_ms: u64,
    /// Longest time between rounds (each round's period is drawn from [min, max)); equal to the
    /// minimum, or below it (a warning says so), the period is fixed at the minimum.
    pub max_round_period_ms: u64,
    /// Quiet time after a round that moved grains, before the next.
    pub recovery_period_ms: u64,
    /// Leave grains whose traffic on their own silo outweighs their remote traffic where they are
    /// for three rounds (Orleans' anchoring filter; the oracle keeps an exact set).
    pub anchoring_filter_enabled: bool,
    /// Orleans' Bloom-filter error rate, 0.001 to 0.01. Validated for compatibility; the oracle's
    /// anchored set is exact, so it never errs.
    pub probabilistic_filtering_max_allowed_error_rate: f64,
    /// The global plan keeps every silo within this percentage of the mean activation count
    /// (moves that shrink the largest excess are always allowed); 1 to 100.
    pub max_imbalance_percent: u32,
}

impl Default for RepartitionerOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            orleans_compat: false,
            max_edge_count: 10_000,
            max_unprocessed_edges: 100_000,
            min_round_period_ms: 60_000,
            max_round_period_ms: 120_000,
            recovery_period_ms: 60_000,
            anchoring_filter_enabled: true,
            probabilistic_filtering_max_allowed_error_rate: 0.01,
            max_imbalance_percent: 10,
        }
    }
}

/// The options' bounds, declared once: the published schema states them and
/// [`RepartitionerOptions::validate`] checks them.
pub mod bounds {
    use crate::validation::Bound;

    /// Longest period of any timer: one day.
    const MAX_PERIOD_MS: f64 = 86_400_000.0;

    /// Edges the sketch may track: its state is stored with every round.
    pub const MAX_EDGE_COUNT: Bound = Bound::new(1.0, 100_000.0);
    /// Unprocessed edge reports per cluster.
    pub const MAX_UNPROCESSED_EDGES: Bound = Bound::new(1.0, 1_000_000.0);
    pub const MIN_ROUND_PERIOD_MS: Bound = Bound::new(1.0, MAX_PERIOD_MS);
    pub const MAX_ROUND_PERIOD_MS: Bound = Bound::new(1.0, MAX_PERIOD_MS);
    pub const RECOVERY_PERIOD_MS: Bound = Bound::new(0.0, MAX_PERIOD_MS);
    pub const FILTER_ERROR_RATE: Bound = Bound::new(0.001, 0.01);
    pub const MAX_IMBALANCE_PERCENT: Bound = Bound::new(1.0, 100.0);
}

impl RepartitionerOptions {
    /// Checks every option, naming each bad one under `prefix`.
    pub fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut v = Violations::default();
        let field = |name: &str| format!("{prefix}{name}");
        bounds::MAX_EDGE_COUNT.check(
            &mut v,
            field("max_edge_count"),
            f64::from(self.max_edge_count),
        );
        bounds::MAX_UNPROCESSED_EDGES.check(
            &mut v,
            field("max_unprocessed_edges"),
            f64::from(self.max_unprocessed_edges),
        );
        // Orleans accepts a minimum of 0, then fails drawing the period.
        bounds::MIN_ROUND_PERIOD_MS.check(
            &mut v,
            field("min_round_period_ms"),
            self.min_round_period_ms as f64,
        );
        bounds::MAX_ROUND_PERIOD_MS.check(
            &mut v,
            field("max_round_period_ms"),
            self.max_round_period_ms as f64,
        );
        bounds::RECOVERY_PERIOD_MS.check(
            &mut v,
            field("recovery_period_ms"),
            self.recovery_period_ms as f64,
        );
        bounds::FILTER_ERROR_RATE.check(
            &mut v,
            field("probabilistic_filtering_max_allowed_error_rate"),
            self.probabilistic_filtering_max_allowed_error_rate,
        );
        bounds::MAX_IMBALANCE_PERCENT.check(
            &mut v,
            field("max_imbalance_percent"),
            f64::from(self.max_imbalance_percent),
        );
        v.finish(|| ())
    }
}

impl RepartitionerOptions {
    /// Combinations Orleans refuses that the published schema cannot state (they relate two
    /// fields): accepted, with what the oracle does instead. A `max_round_period_ms` below the
    /// minimum makes the period fixed at the minimum (reference quirk 7 allows either); a
    /// `min_round_period_ms` below the recovery period still waits the recovery after moves.
    pub fn warnings(&self, prefix: &str) -> Vec<crate::validation::FieldError> {
        let mut warnings = Vec::new();
        if self.max_round_period_ms < self.min_round_period_ms {
            warnings.push(crate::validation::FieldError {
                field: format!("{prefix}max_round_period_ms"),
                message: format!(
                    "is below min_round_period_ms ({}): rounds come every {} ms exactly",
                    self.min_round_period_ms, self.min_round_period_ms
                ),
            });
        }
        if self.min_round_period_ms < self.recovery_period_ms {
            warnings.push(crate::validation::FieldError {
                field: format!("{prefix}min_round_period_ms"),
                message: format!(
                    "is below recovery_period_ms ({}): a round after moves still waits the recovery period",
                    self.recovery_period_ms
                ),
            });
        }
        warnings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(options: RepartitionerOptions) -> Vec<String> {
        match options.validate("") {
            Ok(()) => Vec::new(),
            Err(invalid) => invalid.0.into_iter().map(|e| e.field).collect(),
        }
    }

    #[test]
    fn orleans_defaults_are_valid() {
        let o = RepartitionerOptions::default();
        assert_eq!(
            (o.max_edge_count, o.max_unprocessed_edges),
            (10_000, 100_000)
        );
        assert_eq!(
            (
                o.min_round_period_ms,
                o.max_round_period_ms,
                o.recovery_period_ms
            ),
            (60_000, 120_000, 60_000)
        );
        assert!(o.anchoring_filter_enabled);
        assert!(fields(o).is_empty());
    }

    /// Orleans' `InvalidOptionsShouldThrow` rows, as (max edges, max unprocessed, min, max,
    /// recovery, error rate); recovery −1 cannot be written here (unsigned), so that row is the
    /// schema's business.
    #[test]
    fn orleans_invalid_rows_are_refused_and_so_are_periods_that_would_fail_later() {
        let row = |e: u32, u: u32, min: u64, max: u64, rec: u64, fp: f64| RepartitionerOptions {
            max_edge_count: e,
            max_unprocessed_edges: u,
            min_round_period_ms: min,
            max_round_period_ms: max,
            recovery_period_ms: rec,
            probabilistic_filtering_max_allowed_error_rate: fp,
            ..RepartitionerOptions::default()
        };
        let warned = |o: RepartitionerOptions| -> Vec<String> {
            o.warnings("").into_iter().map(|w| w.field).collect()
        };
        assert_eq!(fields(row(0, 1, 1, 1, 1, 0.01)), ["max_edge_count"]);
        assert_eq!(fields(row(1, 0, 1, 1, 1, 0.01)), ["max_unprocessed_edges"]);
        assert_eq!(fields(row(1, 1, 0, 1, 1, 0.01)), ["min_round_period_ms"]);
        assert_eq!(
            fields(row(1, 1, 2, 1, 2, 0.1)),
            ["probabilistic_filtering_max_allowed_error_rate"]
        );
        // Rules between two fields are accepted with a warning saying what happens instead.
        assert_eq!(
            (
                fields(row(1, 1, 2, 1, 1, 0.01)),
                warned(row(1, 1, 2, 1, 1, 0.01))
            ),
            (Vec::<String>::new(), vec!["max_round_period_ms".to_owned()])
        );
        assert_eq!(
            warned(row(1, 1, 0, 1, 1, 0.01)),
            ["min_round_period_ms"],
            "min 0 < recovery 1"
        );
        assert!(
            fields(row(1, 1, 5, 5, 5, 0.01)).is_empty()
                && warned(row(1, 1, 5, 5, 5, 0.01)).is_empty(),
            "min == max: a fixed period"
        );
    }
}
