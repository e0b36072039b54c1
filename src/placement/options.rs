//! Strategy options, with Orleans' defaults and validation rules.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::webhook_hosts::WebhookHosts;
use crate::validation::{Invalid, Violations};

/// Options of `resource_optimized` (Orleans `ResourceOptimizedPlacementOptions`, §1.13): integer
/// weights, each 0 to 100, normalised by their sum; and the local silo's preference margin in
/// points of score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceOptimizedOptions {
    #[schema(example = 40)]
    pub cpu_usage_weight: u32,
    #[schema(example = 20)]
    pub memory_usage_weight: u32,
    #[schema(example = 20)]
    pub available_memory_weight: u32,
    #[schema(example = 5)]
    pub max_available_memory_weight: u32,
    #[schema(example = 15)]
    pub activation_count_weight: u32,
    /// The requesting silo wins unless its score is worse than the best by more than this many
    /// hundredths.
    #[schema(example = 5)]
    pub local_silo_preference_margin: u32,
}

impl Default for ResourceOptimizedOptions {
    fn default() -> Self {
        Self {
            cpu_usage_weight: 40,
            memory_usage_weight: 20,
            available_memory_weight: 20,
            max_available_memory_weight: 5,
            activation_count_weight: 15,
            local_silo_preference_margin: 5,
        }
    }
}

impl ResourceOptimizedOptions {
    pub fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut v = Violations::default();
        for (name, value) in [
            ("cpu_usage_weight", self.cpu_usage_weight),
            ("memory_usage_weight", self.memory_usage_weight),
            ("available_memory_weight", self.available_memory_weight),
            (
                "max_available_memory_weight",
                self.max_available_memory_weight,
            ),
            ("activation_count_weight", self.activation_count_weight),
            (
                "local_silo_preference_margin",
                self.local_silo_preference_margin,
            ),
        ] {
            bounds::PERCENT.check(&mut v, format!("{prefix}{name}"), f64::from(value));
        }
        v.finish(|| ())
    }
}

/// Options of `activation_count` (Orleans `ActivationCountBasedPlacementOptions`, §1.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ActivationCountOptions {
    /// How many candidates to sample; the least loaded wins ("power of k choices").
    #[schema(example = 2)]
    pub choose_out_of: u32,
}

impl Default for ActivationCountOptions {
    fn default() -> Self {
        Self { choose_out_of: 2 }
    }
}

impl ActivationCountOptions {
    pub fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut v = Violations::default();
        bounds::CHOOSE_OUT_OF.check(
            &mut v,
            format!("{prefix}choose_out_of"),
            f64::from(self.choose_out_of),
        );
        v.finish(|| ())
    }
}

/// Options of `stateless_worker` (Orleans `StatelessWorkerPlacement`, §1.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StatelessWorkerOptions {
    /// Most worker instances per silo; 0 means the silo's processor count (Orleans' default). The
    /// silo enforces it; the oracle passes it along in the placement answer.
    #[schema(example = 4)]
    pub max_local: u32,
}

/// Options of `consistent_hash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConsistentHashOptions {
    /// A silo carrying more than this percentage of the mean load is passed over (100 to 1000;
    /// lower spreads more evenly, higher moves fewer grains when loads shift).
    #[schema(example = 105)]
    pub load_factor_percent: u32,
}

impl Default for ConsistentHashOptions {
    fn default() -> Self {
        Self {
            load_factor_percent: 105,
        }
    }
}

/// Options of `webhook`: the operator's endpoint that picks among the candidates.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookOptions {
    /// `http://` or `https://` URL the oracle POSTs each placement's candidates to. Without one, a
    /// grain type placed with `webhook` is decided by the fallback (the policy lists a warning).
    #[schema(example = "http://127.0.0.1:9000/choose")]
    pub url: Option<String>,
    /// How long to wait for the answer (1 to 2000 ms) before using the fallback. Kept well under
    /// the request timeout, so a slow endpoint yields the fallback's answer, never a 503.
    #[schema(example = 250)]
    pub timeout_ms: u32,
    /// The strategy used when the endpoint is slow, failing, or answers a silo that is not a
    /// candidate.
    pub fallback: FallbackStrategy,
}

/// A strategy that decides on its own and registers what it places: any but `webhook` and
/// `stateless_worker`, so a webhook's fallback can stand in for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FallbackStrategy {
    Random,
    PreferLocal,
    HashBased,
    ActivationCount,
    #[default]
    ResourceOptimized,
    SiloRole,
    ConsistentHash,
}

impl From<FallbackStrategy> for super::Strategy {
    fn from(fallback: FallbackStrategy) -> Self {
        match fallback {
            FallbackStrategy::Random => Self::Random,
            FallbackStrategy::PreferLocal => Self::PreferLocal,
            FallbackStrategy::HashBased => Self::HashBased,
            FallbackStrategy::ActivationCount => Self::ActivationCount,
            FallbackStrategy::ResourceOptimized => Self::ResourceOptimized,
            FallbackStrategy::SiloRole => Self::SiloRole,
            FallbackStrategy::ConsistentHash => Self::ConsistentHash,
        }
    }
}

impl Default for WebhookOptions {
    fn default() -> Self {
        Self {
            url: None,
            timeout_ms: 250,
            fallback: FallbackStrategy::ResourceOptimized,
        }
    }
}

/// Longest webhook URL accepted, in characters.
pub const MAX_WEBHOOK_URL_CHARS: usize = 2_048;

/// The options' bounds, declared once: the published schema states them and the `validate`
/// functions here check them.
pub mod bounds {
    use crate::validation::Bound;

    /// Weights and the local preference margin of `resource_optimized`.
    pub const PERCENT: Bound = Bound::new(0.0, 100.0);
    pub const CHOOSE_OUT_OF: Bound = Bound::new(1.0, 1_000.0);
    /// 0 is the silo's processor count.
    pub const MAX_LOCAL: Bound = Bound::new(0.0, u32::MAX as f64);
    pub const LOAD_FACTOR_PERCENT: Bound = Bound::new(100.0, 1_000.0);
    pub const WEBHOOK_TIMEOUT_MS: Bound = Bound::new(1.0, 2_000.0);
}

impl WebhookOptions {
    pub fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut v = Violations::default();
        if let Some(url) = &self.url {
            let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
            if !scheme_ok
                || url.chars().count() > MAX_WEBHOOK_URL_CHARS
                || url.chars().any(|c| c.is_control() || c.is_whitespace())
            {
                v.add(
                    format!("{prefix}url"),
                    "must be an http:// or https:// URL of at most 2048 characters without white space",
                );
            }
        }
        bounds::WEBHOOK_TIMEOUT_MS.check(
            &mut v,
            format!("{prefix}timeout_ms"),
            f64::from(self.timeout_ms),
        );
        v.finish(|| ())
    }
}

impl WebhookOptions {
    /// Checks the URL's host against the replica's allow-list. Apart from [`Self::validate`]
    /// because the list is configuration, not a rule of the published schema: the same policy may
    /// be accepted by one deployment and refused by another.
    pub fn check_host(&self, prefix: &str, hosts: &WebhookHosts) -> Result<(), Invalid> {
        match &self.url {
            Some(url) => hosts
                .check(url)
                .map(|_| ())
                .map_err(|refusal| Invalid::one(format!("{prefix}url"), refusal.to_string())),
            None => Ok(()),
        }
    }
}

/// Every strategy's options; each strategy reads its own.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StrategyOptions {
    pub resource_optimized: ResourceOptimizedOptions,
    pub activation_count: ActivationCountOptions,
    pub stateless_worker: StatelessWorkerOptions,
    pub consistent_hash: ConsistentHashOptions,
    pub webhook: WebhookOptions,
}

impl StrategyOptions {
    pub fn validate(&self, prefix: &str) -> Result<(), Invalid> {
        let mut v = Violations::default();
        v.check(
            self.resource_optimized
                .validate(&format!("{prefix}resource_optimized.")),
        );
        v.check(
            self.activation_count
                .validate(&format!("{prefix}activation_count.")),
        );
        v.check(self.webhook.validate(&format!("{prefix}webhook.")));
        bounds::LOAD_FACTOR_PERCENT.check(
            &mut v,
            format!("{prefix}consistent_hash.load_factor_percent"),
            f64::from(self.consistent_hash.load_factor_percent),
        );
        v.finish(|| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orleans_defaults() {
        let o = ResourceOptimizedOptions::default();
        assert_eq!(
            [
                o.cpu_usage_weight,
                o.memory_usage_weight,
                o.available_memory_weight,
                o.max_available_memory_weight,
                o.activation_count_weight,
                o.local_silo_preference_margin
            ],
            [40, 20, 20, 5, 15, 5]
        );
        assert_eq!(ActivationCountOptions::default().choose_out_of, 2);
    }

    #[test]
    fn resource_options_are_validated_to_0_through_100_each_named() {
        let over = ResourceOptimizedOptions {
            cpu_usage_weight: 101,
            local_silo_preference_margin: 101,
            ..Default::default()
        };
        let fields: Vec<String> = over
            .validate("")
            .unwrap_err()
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(fields, ["cpu_usage_weight", "local_silo_preference_margin"]);
        for ok in [
            (10, 0, 0, 0, 0, 10),
            (100, 0, 0, 0, 0, 10),
            (10, 0, 0, 0, 0, 100),
            (0, 0, 0, 0, 0, 0),
        ] {
            let options = ResourceOptimizedOptions {
                cpu_usage_weight: ok.0,
                memory_usage_weight: ok.1,
                available_memory_weight: ok.2,
                max_available_memory_weight: ok.3,
                activation_count_weight: ok.4,
                local_silo_preference_margin: ok.5,
            };
            assert!(options.validate("").is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn choose_out_of_must_be_positive() {
        assert!(ActivationCountOptions { choose_out_of: 0 }
            .validate("")
            .is_err());
        assert!(ActivationCountOptions { choose_out_of: 1 }
            .validate("")
            .is_ok());
    }
}
