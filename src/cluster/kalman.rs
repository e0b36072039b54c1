//! The dual-mode cooperative Kalman filter Orleans uses to smooth CPU and memory readings
//! (reference §2.4).
//!
//! Two scalar filters run side by side: a slow one with no process noise (a running mean) and a fast
//! one that follows change. When a reading rises above the slow estimate the output jumps with it at
//! once (so an overloaded silo looks overloaded immediately); when readings fall, the output decays
//! slowly (so a silo that just shed load is not flooded). Arithmetic is single-precision on purpose:
//! it reproduces Orleans' numbers exactly, which the test vector below checks.

use serde::{Deserialize, Serialize};

/// Measurement noise; fixed, so the gains do not depend on the signal's scale.
const MEASUREMENT_NOISE: f32 = 1.0;
const SLOW_PROCESS_NOISE: f32 = 0.0;
const FAST_PROCESS_NOISE: f32 = 0.01;

/// One scalar Kalman filter: estimate `x` and error covariance `p`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScalarKalman {
    pub x: f32,
    pub p: f32,
}

impl Default for ScalarKalman {
    fn default() -> Self {
        Self { x: 0.0, p: 1.0 }
    }
}

impl ScalarKalman {
    fn update(&mut self, measurement: f32, process_noise: f32) -> f32 {
        let predicted_p = self.p + process_noise;
        let gain = predicted_p / (predicted_p + MEASUREMENT_NOISE);
        self.x += gain * (measurement - self.x);
        self.p = (1.0 - gain) * predicted_p;
        self.x
    }
}

/// Which of the two filters currently drives the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Regime {
    #[default]
    Slow,
    Fast,
}

/// The slow/fast pair and its regime; one per smoothed signal per silo.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct DualModeKalman {
    pub slow: ScalarKalman,
    pub fast: ScalarKalman,
    pub regime: Regime,
}

impl DualModeKalman {
    /// Feeds one reading and returns the smoothed value.
    pub fn update(&mut self, measurement: f32) -> f32 {
        let slow_estimate = self.slow.update(measurement, SLOW_PROCESS_NOISE);
        let fast_estimate = self.fast.update(measurement, FAST_PROCESS_NOISE);

        if measurement > slow_estimate {
            if self.regime == Regime::Slow {
                self.regime = Regime::Fast;
                self.fast = ScalarKalman {
                    x: measurement,
                    p: 0.0,
                };
                return self.fast.update(measurement, FAST_PROCESS_NOISE);
            }
            fast_estimate
        } else {
            if self.regime == Regime::Fast {
                self.regime = Regime::Slow;
                self.slow = self.fast;
                return self.slow.update(measurement, SLOW_PROCESS_NOISE);
            }
            slow_estimate
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproduces_the_orleans_test_vector() {
        let vector: [(f32, f32, Regime); 10] = [
            (50.0, 50.0, Regime::Fast),
            (50.0, 50.0, Regime::Fast),
            (80.0, 50.86, Regime::Fast),
            (20.0, 48.6448, Regime::Slow),
            (20.0, 47.6523, Regime::Slow),
            (20.0, 46.7263, Regime::Slow),
            (20.0, 45.8603, Regime::Slow),
            (90.0, 90.0, Regime::Fast),
            (10.0, 86.9377, Regime::Slow),
            (10.0, 85.4929, Regime::Slow),
        ];
        let mut filter = DualModeKalman::default();
        for (step, (input, expected, regime)) in vector.into_iter().enumerate() {
            let output = filter.update(input);
            assert!(
                (output - expected).abs() < 0.001,
                "step {step}: input {input} gave {output}, expected {expected}"
            );
            assert_eq!(filter.regime, regime, "step {step}: regime");
        }
    }

    #[test]
    fn a_first_reading_of_zero_stays_zero_in_the_slow_regime() {
        let mut filter = DualModeKalman::default();
        assert_eq!(filter.update(0.0), 0.0);
        assert_eq!(filter.regime, Regime::Slow);
    }

    #[test]
    fn from_the_slow_regime_a_rise_shows_at_once_and_a_drop_decays_slowly() {
        let mut filter = DualModeKalman::default();
        filter.update(10.0);
        filter.update(5.0);
        assert_eq!(filter.regime, Regime::Slow);
        assert_eq!(filter.update(95.0), 95.0, "a rise shows immediately");
        let after_drop = filter.update(5.0);
        assert!(after_drop > 80.0, "a drop decays slowly, got {after_drop}");
    }
}
