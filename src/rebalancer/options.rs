//! The rebalancer's options: Orleans' `ActivationRebalancerOptions`, in milliseconds, with its
//! defaults and validation rules (reference 4.2), and the oracle's own two switches.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::validation::{Invalid, Violations};

/// Shortest session cycle period: twice Orleans' one-second statistics refresh (silos should
/// heartbeat at least once a second for cycles to see fresh counts).
pub const MIN_SESSION_CYCLE_PERIOD_MS: u64 = 2_000;
/// Ceiling of a scaled allowed deviation (Orleans' `MAX_SCALED_ENTROPY_DEVIATION`).
pub const MAX_SCALED_ENTROPY_DEVIATION: f64 = 0.1;

/// The options' bounds, declared once: the published schema states them and
/// [`RebalancerOptions::validate`] checks them.
pub mod bounds {
    use super::MIN_SESSION_CYCLE_PERIOD_MS;
    use crate::validation::{Bound, MAX_SAFE_INTEGER};

    /// Timers: at most one day.
    pub const DUE_TIME_MS: Bound = Bound::new(0.0, 86_400_000.0);
    pub const SESSION_CYCLE_PERIOD_MS: Bound =
        Bound::new(MIN_SESSION_CYCLE_PERIOD_MS as f64, 86_400_000.0);
    pub const MAX_STAGNANT_CYCLES: Bound = Bound::new(1.0, u32::MAX as f64);
    pub const ENTROPY_QUANTUM: Bound = Bound::above_zero(0.1);
    pub const ALLOWED_ENTROPY_DEVIATION: Bound = Bound::above_zero(0.1);
    pub const SCALED_ENTROPY_DEVIATION_ACTIVATION_THRESHOLD: Bound =
        Bound::new(1_000.0, MAX_SAFE_INTEGER as f64);
    pub const CYCLE_NUMBER_WEIGHT: Bound = Bound::above_zero(1.0);
    pub const SILO_NUMBER_WEIGHT: Bound = Bound::new(0.0, 1.0);
    pub const ACTIVATION_MIGRATION_COUNT_LIMIT: Bound = Bound::new(1.0, MAX_SAFE_INTEGER as f64);
}

/// How and when the rebalancer evens out activations across a cluster's silos.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct RebalancerOptions {
    /// Run sessions on their own timers (on the replica holding the cluster's lease). Off, cycles
    /// run only when asked for (`POST …/rebalancer/cycles`).
    pub enabled: bool,
    /// Reproduce Orleans' arithmetic (harmonic mean of counts, extreme pairing, truncated δ);
    /// otherwise the oracle's planner (ideal counts that sum to N, least moves).
    pub orleans_compat: bool,
    /// Delay before the first session once enabled (Orleans `RebalancerDueTime`).
    pub due_time_ms: u64,
    /// Time between cycles of a session; at least 2000.
    pub session_cycle_period_ms: u64,
    /// Cycles without entropy change before a session stops as stagnant; at least 1.
    pub max_stagnant_cycles: u32,
    /// Smallest entropy change (relative to the maximum) that counts as progress; (0, 0.1].
    pub entropy_quantum: f64,
    /// Deviation below which the cluster counts as balanced; (0, 0.1].
    pub allowed_entropy_deviation: f64,
    /// Scale the allowed deviation up by powers of ten with the activation count.
    pub scale_allowed_entropy_deviation: bool,
    /// Activation count from which the allowed deviation scales; at least 1000.
    pub scaled_entropy_deviation_activation_threshold: u64,
    /// How fast moves grow with the cycle number; (0, 1].
    pub cycle_number_weight: f64,
    /// How much moves shrink with the silo count; [0, 1].
    pub silo_number_weight: f64,
    /// Most activations one silo pair (compat) or one cycle (the oracle's planner) moves; at
    /// least 1.
    pub activation_migration_count_limit: u64,
}

impl Default for RebalancerOptions {
    fn default() -> Self {
        Self {
            enabled: false,
            orleans_compat: false,
            due_time_ms: 60_000,
            session_cycle_period_ms: 15_000,
            max_stagnant_cycles: 3,
            entropy_quantum: 0.0001,
            allowed_entropy_deviation: 0.0001,
            scale_allowed_entropy_deviation: true,
            scaled_entropy_deviation_activation_threshold: 10_000,
            cycle_number_weight: 0.1,
            silo_number_weight: 0.1,
            activation_migration_count_limit: i32::MAX as u64,
        }
    }
}

impl RebalancerOptions {
    /// Checks every option against Orleans' rules, naming each bad one under `prefix`.
    pub fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut v = Violations::default();
        let field = |name: &str| format!("{prefix}{name}");
        bounds::DUE_TIME_MS.check(&mut v, field("due_time_ms"), self.due_time_ms as f64);
        bounds::SESSION_CYCLE_PERIOD_MS.check(
            &mut v,
            field("session_cycle_period_ms"),
            self.session_cycle_period_ms as f64,
        );
        bounds::MAX_STAGNANT_CYCLES.check(
            &mut v,
            field("max_stagnant_cycles"),
            f64::from(self.max_stagnant_cycles),
        );
        bounds::ENTROPY_QUANTUM.check(&mut v, field("entropy_quantum"), self.entropy_quantum);
        bounds::ALLOWED_ENTROPY_DEVIATION.check(
            &mut v,
            field("allowed_entropy_deviation"),
            self.allowed_entropy_deviation,
        );
        bounds::SCALED_ENTROPY_DEVIATION_ACTIVATION_THRESHOLD.check(
            &mut v,
            field("scaled_entropy_deviation_activation_threshold"),
            self.scaled_entropy_deviation_activation_threshold as f64,
        );
        bounds::CYCLE_NUMBER_WEIGHT.check(
            &mut v,
            field("cycle_number_weight"),
            self.cycle_number_weight,
        );
        bounds::SILO_NUMBER_WEIGHT.check(
            &mut v,
            field("silo_number_weight"),
            self.silo_number_weight,
        );
        bounds::ACTIVATION_MIGRATION_COUNT_LIMIT.check(
            &mut v,
            field("activation_migration_count_limit"),
            self.activation_migration_count_limit as f64,
        );
        v.finish(|| ())
    }

    /// The deviation below which the cluster counts as balanced, for `activations` in all
    /// (reference 4.4 step 7: ×10 per decade of `activations ÷ threshold`, at most 0.1).
    pub fn allowed_deviation(&self, activations: u64) -> f64 {
        let threshold = self.scaled_entropy_deviation_activation_threshold.max(1);
        if !self.scale_allowed_entropy_deviation || activations < threshold {
            return self.allowed_entropy_deviation;
        }
        let decades = ((activations / threshold) as f64).log10().floor();
        (self.allowed_entropy_deviation * 10f64.powf(decades)).min(MAX_SCALED_ENTROPY_DEVIATION)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orleans_defaults_hold() {
        let o = RebalancerOptions::default();
        assert_eq!(
            (
                o.due_time_ms,
                o.session_cycle_period_ms,
                o.max_stagnant_cycles
            ),
            (60_000, 15_000, 3)
        );
        assert_eq!(
            (o.entropy_quantum, o.allowed_entropy_deviation),
            (0.0001, 0.0001)
        );
        assert!(o.scale_allowed_entropy_deviation);
        assert_eq!(o.scaled_entropy_deviation_activation_threshold, 10_000);
        assert_eq!((o.cycle_number_weight, o.silo_number_weight), (0.1, 0.1));
        assert_eq!(o.activation_migration_count_limit, 2_147_483_647);
        assert!(o.validate("").is_ok());
    }

    /// Each rule on its own (Orleans' own test rows break the period rule in every row).
    #[test]
    fn each_rule_is_checked_and_named() {
        let bad = |change: fn(&mut RebalancerOptions)| {
            let mut o = RebalancerOptions::default();
            change(&mut o);
            o.validate("rebalancer.").unwrap_err().0[0].field.clone()
        };
        assert_eq!(
            bad(|o| o.session_cycle_period_ms = 1_999),
            "rebalancer.session_cycle_period_ms"
        );
        assert_eq!(
            bad(|o| o.max_stagnant_cycles = 0),
            "rebalancer.max_stagnant_cycles"
        );
        assert_eq!(
            bad(|o| o.entropy_quantum = 0.0),
            "rebalancer.entropy_quantum"
        );
        assert_eq!(
            bad(|o| o.entropy_quantum = 0.11),
            "rebalancer.entropy_quantum"
        );
        assert_eq!(
            bad(|o| o.allowed_entropy_deviation = 0.2),
            "rebalancer.allowed_entropy_deviation"
        );
        assert_eq!(
            bad(|o| o.scaled_entropy_deviation_activation_threshold = 999),
            "rebalancer.scaled_entropy_deviation_activation_threshold"
        );
        assert_eq!(
            bad(|o| o.cycle_number_weight = 0.0),
            "rebalancer.cycle_number_weight"
        );
        assert_eq!(
            bad(|o| o.silo_number_weight = 1.5),
            "rebalancer.silo_number_weight"
        );
        assert_eq!(
            bad(|o| o.activation_migration_count_limit = 0),
            "rebalancer.activation_migration_count_limit"
        );
        let edge = RebalancerOptions {
            entropy_quantum: 0.1,
            silo_number_weight: 0.0,
            cycle_number_weight: 1.0,
            ..RebalancerOptions::default()
        };
        assert!(edge.validate("").is_ok(), "the closed ends are allowed");
    }

    #[test]
    fn the_allowed_deviation_scales_by_decades_up_to_a_tenth() {
        let o = RebalancerOptions::default();
        for (n, allowed) in [
            (99_999, 1e-4),
            (100_000, 1e-3),
            (999_999, 1e-3),
            (1_000_000, 1e-2),
            (9_999_999, 1e-2),
            (10_000_000, 0.1),
            (1_000_000_000, 0.1),
        ] {
            assert!((o.allowed_deviation(n) - allowed).abs() < 1e-12, "{n}");
        }
        let flat = RebalancerOptions {
            scale_allowed_entropy_deviation: false,
            ..o
        };
        assert_eq!(flat.allowed_deviation(10_000_000), 1e-4);
    }
}
