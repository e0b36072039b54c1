//! The oracle's answers the SDK reads, with the fields a runtime acts on (others are ignored,
//! so an oracle that adds fields does not break a silo).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// What a silo reports with each heartbeat, besides its id and status: whatever its host
/// measures. Fields left `None` are not sent (the oracle keeps its last value or its default).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Load {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_usage: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_available_memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activation_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_activation_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_bytes_per_second: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overloaded: Option<bool>,
}

/// The oracle's answer to a placement request.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PlacementAnswer {
    pub grain: String,
    pub silo: String,
    pub address: String,
    /// The activation's epoch; `None` for a stateless worker (never registered).
    pub epoch: Option<i64>,
    /// `existing`, `placed`, `stateless`, …
    pub outcome: String,
    pub strategy: String,
}

impl PlacementAnswer {
    pub fn is_stateless(&self) -> bool {
        self.outcome == "stateless"
    }
}

/// A grain the oracle wants moved from this silo.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Migration {
    pub id: i64,
    pub grain: String,
    /// The registration being moved: the source's activation.
    pub epoch: i64,
    pub from: String,
    pub to: String,
    /// `rebalance`, `repartition`, `drain`, …
    pub reason: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MigrationPage {
    pub migrations: Vec<Migration>,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct MigrationCompleted {
    pub epoch: i64,
}

#[derive(Debug, Clone, Deserialize)]
pub(crate) struct HeartbeatAnswer {
    /// Required: an answer without a lease grants nothing (it is not the oracle's).
    pub lease_ms: u64,
}

/// The node a new client connection of a SmartConnect-style pool should go to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Connection {
    pub silo: String,
    pub address: String,
    pub rule: String,
    /// How long a client may keep using this answer for new connections.
    pub valid_for_ms: u64,
}

/// A silo's description that does not change between heartbeats.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Description {
    pub grain_types: Option<Vec<String>>,
    pub role: Option<String>,
    pub metadata: Option<Map<String, Value>>,
}
