//! The placement section's per grain type overrides: strategy, options, filters, and whether the
//! background movers may move the type's activations.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::placement::filters::Filter;
use crate::placement::{Strategy, StrategyOptions};

/// Which movers must leave a grain type's activations where they are (Orleans `[Immovable]`).
/// Placement itself ignores it; the rebalancer and repartitioner honour their kinds; a drain
/// honours only `any` (the silo is about to stop, and `rebalancer` or `repartitioner` only keep
/// those movers off).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Immovable {
    #[default]
    No,
    Repartitioner,
    Rebalancer,
    Any,
}

impl Immovable {
    /// Whether the rebalancer must leave the type alone.
    pub fn keeps_from_rebalancer(self) -> bool {
        matches!(self, Immovable::Rebalancer | Immovable::Any)
    }

    /// Whether the repartitioner must leave the type alone.
    pub fn keeps_from_repartitioner(self) -> bool {
        matches!(self, Immovable::Repartitioner | Immovable::Any)
    }

    /// Whether a drain must leave the type alone.
    pub fn keeps_from_drain(self) -> bool {
        self == Immovable::Any
    }
}

/// Overrides for one grain type.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields, default)]
pub struct GrainTypePolicy {
    /// The strategy for this type; absent means the cluster's default.
    pub strategy: Option<Strategy>,
    /// Options for this type, replacing the cluster's; absent means the cluster's.
    pub options: Option<StrategyOptions>,
    /// Metadata filters, run in ascending `order` before the strategy.
    pub filters: Vec<Filter>,
    pub immovable: Immovable,
}
