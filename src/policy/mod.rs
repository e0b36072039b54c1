//! A cluster's policy: how its grains are placed (the default strategy and options, per grain type
//! overrides and filters: [`grain_type`]), how long a silo may stay silent, and — as the features
//! arrive — how the rebalancer and the repartitioner move grains, each a section of its own.
//! Operators change it at run time (`PUT …/policy`); every replica decides with it within a
//! membership read's age.

pub mod grain_type;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use grain_type::{GrainTypePolicy, Immovable};

use crate::cluster::names::check_grain_type;
use crate::placement::filters::{self, Filter};
use crate::placement::webhook_hosts::WebhookHosts;
use crate::placement::{Strategy, StrategyOptions};
use crate::rebalancer::RebalancerOptions;
use crate::repartitioner::RepartitionerOptions;
use crate::validation::{FieldError, Invalid, Violations};

/// The policy's bounds, declared once: the published schema states them and
/// [`Policy::validate`] checks them.
pub mod bounds {
    use crate::validation::Bound;

    /// A silo's allowed silence (a policy's `silo_ttl_ms`, and `ORACLE_SILO_TTL_MS`): 100 ms to
    /// one day.
    pub const SILO_TTL_MS: Bound = Bound::new(100.0, 86_400_000.0);
    /// How long an issued migration may wait to be completed: 1 s to one day.
    pub const MIGRATION_TTL_MS: Bound = Bound::new(1_000.0, 86_400_000.0);
    /// Grain types one policy may configure.
    pub const GRAIN_TYPES: Bound = Bound::new(0.0, 4_096.0);
}

/// A cluster's policy.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
#[schema(example = json!({
    "default_strategy": "resource_optimized",
    "silo_ttl_ms": 10000,
    "grain_types": {
        "user": { "strategy": "hash_based" },
        "session": { "strategy": "prefer_local",
                     "filters": [{ "kind": "required_match", "keys": ["zone"] }] },
        "worker": { "strategy": "stateless_worker",
                    "options": { "stateless_worker": { "max_local": 4 } } }
    }
}))]
pub struct Policy {
    /// The strategy of grain types without their own.
    pub default_strategy: Strategy,
    /// Options of grain types without their own.
    pub options: StrategyOptions,
    /// Silence after which a silo is dead, 100 ms to one day; absent means the oracle's default
    /// (`ORACLE_SILO_TTL_MS`).
    pub silo_ttl_ms: Option<u64>,
    /// Per grain type overrides, keyed by grain type.
    pub grain_types: BTreeMap<String, GrainTypePolicy>,
    /// How long an issued migration may wait to be completed before it is cancelled, 1 s to one
    /// day; absent means 60000.
    pub migration_ttl_ms: Option<u64>,
    /// The rebalancer: sessions that even out activations across silos.
    pub rebalancer: RebalancerOptions,
    /// The repartitioner: rounds that bring grains that call each other onto one silo.
    pub repartitioner: RepartitionerOptions,
}

/// The migration TTL of a policy that sets none.
pub const DEFAULT_MIGRATION_TTL_MS: u64 = 60_000;

/// What a placement of one grain type uses.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'p> {
    pub strategy: Strategy,
    pub options: &'p StrategyOptions,
    pub filters: &'p [Filter],
}

impl Policy {
    /// Checks every field, naming each bad one.
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut v = Violations::default();
        v.check(self.options.validate("options."));
        if let Some(ttl) = self.silo_ttl_ms {
            bounds::SILO_TTL_MS.check(&mut v, "silo_ttl_ms", ttl as f64);
        }
        if let Some(ttl) = self.migration_ttl_ms {
            bounds::MIGRATION_TTL_MS.check(&mut v, "migration_ttl_ms", ttl as f64);
        }
        v.check(self.rebalancer.validate("rebalancer."));
        v.check(self.repartitioner.validate("repartitioner."));
        bounds::GRAIN_TYPES.check_count(&mut v, "grain_types", self.grain_types.len());
        for (grain_type, policy) in &self.grain_types {
            let prefix = format!("grain_types.{grain_type}");
            v.check(check_grain_type(&prefix, grain_type));
            if let Some(options) = &policy.options {
                v.check(options.validate(&format!("{prefix}.options.")));
            }
            v.check(filters::validate(
                &policy.filters,
                &format!("{prefix}.filters"),
            ));
        }
        v.finish(|| ())
    }

    /// Checks every webhook URL the policy sets (the default options' and each grain type's,
    /// whatever the strategy, since a call may ask for `webhook` itself) against the replica's
    /// allow-list, naming each refused field and how to allow its host.
    pub fn validate_webhook_hosts(&self, hosts: &WebhookHosts) -> Result<(), Invalid> {
        let mut v = Violations::default();
        v.check(self.options.webhook.check_host("options.webhook.", hosts));
        for (grain_type, policy) in &self.grain_types {
            if let Some(options) = &policy.options {
                let prefix = format!("grain_types.{grain_type}.options.webhook.");
                v.check(options.webhook.check_host(&prefix, hosts));
            }
        }
        v.finish(|| ())
    }

    /// What is valid but probably not meant: a webhook strategy without a URL (its fallback then
    /// decides every placement, counted as `unconfigured`). Shown with the policy rather than
    /// refused, because whether a URL is needed depends on two fields at different levels, a rule
    /// the published schema cannot state.
    pub fn warnings(&self) -> Vec<FieldError> {
        let unconfigured = |field: String, whose: &str| {
            FieldError {
            field,
            message: format!(
                "{whose} is placed by webhook but no url is set, so its fallback strategy decides every placement"
            ),
        }
        };
        let mut warnings = Vec::new();
        if self.default_strategy == Strategy::Webhook && self.options.webhook.url.is_none() {
            warnings.push(unconfigured(
                "options.webhook.url".into(),
                "every grain type without its own strategy",
            ));
        }
        for grain_type in self.grain_types.keys() {
            let resolved = self.resolve(grain_type, None);
            if resolved.strategy == Strategy::Webhook && resolved.options.webhook.url.is_none() {
                warnings.push(unconfigured(
                    format!("grain_types.{grain_type}.options.webhook.url"),
                    &format!("grain type `{grain_type}`"),
                ));
            }
        }
        warnings.extend(self.repartitioner.warnings("repartitioner."));
        warnings
    }

    /// The grain types whose `immovable` setting `keeps` from a mover.
    pub fn immovable_types(&self, keeps: fn(Immovable) -> bool) -> Vec<String> {
        self.grain_types
            .iter()
            .filter(|(_, p)| keeps(p.immovable))
            .map(|(grain_type, _)| grain_type.clone())
            .collect()
    }

    /// How long a migration may stay open, in milliseconds.
    pub fn migration_ttl_ms(&self) -> i64 {
        self.migration_ttl_ms.unwrap_or(DEFAULT_MIGRATION_TTL_MS) as i64
    }

    /// The strategy, options and filters for `grain_type`; a per-call strategy overrides both.
    pub fn resolve(&self, grain_type: &str, requested: Option<Strategy>) -> Resolved<'_> {
        let own = self.grain_types.get(grain_type);
        Resolved {
            strategy: requested
                .or(own.and_then(|p| p.strategy))
                .unwrap_or(self.default_strategy),
            options: own
                .and_then(|p| p.options.as_ref())
                .unwrap_or(&self.options),
            filters: own.map_or(&[], |p| p.filters.as_slice()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_policy_is_resource_optimized_with_orleans_options() {
        let policy = Policy::default();
        let resolved = policy.resolve("user", None);
        assert_eq!(resolved.strategy, Strategy::ResourceOptimized);
        assert_eq!(resolved.options, &StrategyOptions::default());
        assert!(resolved.filters.is_empty());
    }

    #[test]
    fn a_call_overrides_the_type_which_overrides_the_cluster() {
        let policy: Policy = serde_json::from_value(serde_json::json!({
            "default_strategy": "random",
            "grain_types": { "user": { "strategy": "hash_based" } }
        }))
        .unwrap();
        assert_eq!(policy.resolve("order", None).strategy, Strategy::Random);
        assert_eq!(policy.resolve("user", None).strategy, Strategy::HashBased);
        assert_eq!(
            policy.resolve("user", Some(Strategy::PreferLocal)).strategy,
            Strategy::PreferLocal
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let policy: Policy = serde_json::from_value(serde_json::json!({
            "silo_ttl_ms": 5,
            "options": { "resource_optimized": { "cpu_usage_weight": 101 } },
            "grain_types": {
                "us er": {},
                "user": {
                    "options": { "activation_count": { "choose_out_of": 0 } },
                    "filters": [
                        { "kind": "required_match", "keys": ["zone"] },
                        { "kind": "preferred_match", "keys": ["rack"], "min_candidates": 0 }
                    ]
                }
            }
        }))
        .unwrap();
        let fields: Vec<String> = policy
            .validate()
            .unwrap_err()
            .0
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "options.resource_optimized.cpu_usage_weight",
                "silo_ttl_ms",
                "grain_types.us er",
                "grain_types.user.options.activation_count.choose_out_of",
                "grain_types.user.filters[1].min_candidates",
            ]
        );
    }
}

#[cfg(test)]
mod webhook_host_tests {
    use super::*;

    #[test]
    fn every_webhook_url_is_checked_against_the_allow_list_each_named() {
        let policy: Policy = serde_json::from_value(serde_json::json!({
            "options": { "webhook": { "url": "http://evil.example/choose" } },
            "grain_types": {
                "pricing": { "strategy": "webhook",
                             "options": { "webhook": { "url": "http://hook.internal:9000/choose" } } },
                "user": { "strategy": "random",
                          "options": { "webhook": { "url": "http://169.254.169.254/latest" } } },
                "order": { "strategy": "webhook" }
            }
        }))
        .unwrap();
        let hosts = WebhookHosts::parse("hook.internal", false).unwrap();
        let errors = policy.validate_webhook_hosts(&hosts).unwrap_err().0;
        assert_eq!(
            errors.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(),
            [
                "options.webhook.url",
                "grain_types.user.options.webhook.url"
            ]
        );
        assert!(errors[1].message.contains("169.254.169.254"), "{errors:?}");
        assert!(
            errors[0].message.contains("ORACLE_WEBHOOK_ALLOWED_HOSTS"),
            "{errors:?}"
        );
        let everything =
            WebhookHosts::parse("hook.internal,evil.example,169.254.169.254", false).unwrap();
        assert_eq!(policy.validate_webhook_hosts(&everything), Ok(()));
        assert_eq!(
            Policy::default().validate_webhook_hosts(&WebhookHosts::parse("", false).unwrap()),
            Ok(())
        );
    }
}

#[cfg(test)]
mod stored_tests {
    use super::*;

    #[test]
    fn a_stored_policy_with_fields_from_a_newer_version_decodes_without_them() {
        let stored = serde_json::json!({
            "default_strategy": "random",
            "from_the_future": { "x": 1 },
            "grain_types": { "user": { "strategy": "hash_based", "also_new": true } }
        });
        let policy: Policy = crate::validation::from_stored_json(stored).unwrap();
        assert_eq!(policy.default_strategy, Strategy::Random);
        assert_eq!(
            policy.grain_types["user"].strategy,
            Some(Strategy::HashBased)
        );
    }

    #[test]
    fn an_unknown_field_inside_a_stored_filter_is_dropped_too() {
        let stored = serde_json::json!({
            "grain_types": { "user": { "filters": [
                { "kind": "required_match", "keys": ["zone"], "weight_from_the_future": 3 }
            ] } }
        });
        let policy: Policy = crate::validation::from_stored_json(stored).unwrap();
        assert_eq!(policy.grain_types["user"].filters.len(), 1);
    }
}
