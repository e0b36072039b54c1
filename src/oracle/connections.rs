//! Connection pools: which node should this client connect to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::views::ClusterViews;
use super::OracleError;
use crate::cluster::{ClusterName, PoolName};
use crate::connect::{self, has_family, ConnectRule, IpFamily, Node, Pool, PoolState};
use crate::store::Store;
use crate::telemetry::metric;

/// Most pools whose rule state (sampling windows, kept decisions) this replica keeps.
const MAX_POOL_STATES: usize = 4_096;

/// Pools and the connections they hand out.
pub struct Connections {
    store: Arc<dyn Store>,
    views: Arc<ClusterViews>,
    /// Per-replica state of every pool's rule (samples, kept decisions, connections handed out).
    pool_states: Mutex<HashMap<(ClusterName, PoolName), PoolState>>,
}

/// The node a client should connect to.
#[derive(Debug, Clone)]
pub struct Connection {
    pub silo: String,
    pub address: String,
    pub rule: ConnectRule,
    /// How long the answer may be reused (the pool's TTL).
    pub valid_for_ms: u64,
    pub explanation: Option<ConnectionExplanation>,
}

/// One candidate's figure: connections (a minute's average), bytes per second or CPU percent.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Figure {
    #[schema(example = "10.0.0.7:11111@139002")]
    pub silo: String,
    #[schema(example = 12.5)]
    pub value: f64,
}

/// Why a connection went where it did.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ConnectionExplanation {
    /// Available members (active, alive, selected), in the order the rule saw them.
    pub candidates: Vec<String>,
    /// Each candidate's figure as the rule compared it (lower wins); empty for round robin.
    pub figures: Vec<Figure>,
    /// Whether the answer is the decision kept for the current 5-second window.
    pub kept: bool,
    pub burst_aware: bool,
}

impl Connections {
    pub(super) fn new(store: Arc<dyn Store>, views: Arc<ClusterViews>) -> Self {
        Self {
            store,
            views,
            pool_states: Mutex::default(),
        }
    }

    /// Creates or replaces a pool.
    pub async fn put_pool(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        pool: &Pool,
    ) -> Result<(), OracleError> {
        self.store
            .put_pool(cluster, name, pool)
            .await
            .inspect_err(|_| metric::store_error("put_pool"))?;
        // A changed rule starts from a clean slate on this replica.
        self.pool_states().remove(&(cluster.clone(), name.clone()));
        Ok(())
    }

    /// A pool's definition.
    pub async fn pool(&self, cluster: &ClusterName, name: &PoolName) -> Result<Pool, OracleError> {
        self.store
            .pool(cluster, name)
            .await
            .inspect_err(|_| metric::store_error("pool"))?
            .ok_or_else(|| OracleError::PoolNotFound {
                cluster: cluster.to_string(),
                pool: name.to_string(),
            })
    }

    /// Chooses the node for one new client connection by the pool's rule. Reads membership fresh:
    /// a node that started shutting down or died is never handed out.
    /// `family` (for DNS) keeps only members whose address is an IP of that family, so an AAAA
    /// question neither spends a decision nor answers with an IPv4 node.
    pub async fn connect(
        &self,
        cluster: &ClusterName,
        name: &PoolName,
        explain: bool,
        family: Option<IpFamily>,
    ) -> Result<Connection, OracleError> {
        let pool = self.pool(cluster, name).await?;
        let membership = self.views.read(cluster).await?;
        let view = membership.view();
        let mut available = pool.available(&view);
        if available.is_empty() {
            return Err(OracleError::NoAvailableNode {
                pool: name.to_string(),
            });
        }
        if let Some(family) = family {
            available.retain(|silo| has_family(silo, family));
            if available.is_empty() {
                return Err(OracleError::NoNodeOfFamily {
                    pool: name.to_string(),
                });
            }
        }
        let counter = if pool.rule == ConnectRule::RoundRobin {
            self.store
                .next_round_robin(cluster, name)
                .await
                .inspect_err(|_| metric::store_error("next_round_robin"))?
                .unwrap_or(0)
        } else {
            0
        };
        let nodes: Vec<Node<'_>> = available.iter().map(|&silo| Node { silo }).collect();
        let choice = {
            let mut states = self.pool_states();
            let key = (cluster.clone(), name.clone());
            if states.len() >= MAX_POOL_STATES && !states.contains_key(&key) {
                // Bounded: one pool's state (an arbitrary one) is dropped and that pool's windows
                // start afresh when it is next asked.
                if let Some(any) = states.keys().next().cloned() {
                    states.remove(&any);
                }
            }
            let state = states.entry(key).or_default();
            connect::choose(
                pool.rule,
                pool.burst_aware,
                &nodes,
                state,
                view.now(),
                counter,
            )
        }
        .ok_or_else(|| OracleError::NoAvailableNode {
            pool: name.to_string(),
        })?;
        let chosen = available
            .iter()
            .find(|s| s.id == choice.silo)
            .expect("the rule chose among the available nodes");
        metric::connection(pool.rule.as_str());
        Ok(Connection {
            silo: choice.silo.to_string(),
            address: chosen.profile.address.clone(),
            rule: pool.rule,
            valid_for_ms: u64::from(pool.ttl_seconds) * 1_000,
            explanation: explain.then(|| ConnectionExplanation {
                candidates: available.iter().map(|s| s.id.to_string()).collect(),
                figures: choice
                    .figures
                    .into_iter()
                    .map(|(silo, value)| Figure { silo, value })
                    .collect(),
                kept: choice.kept,
                burst_aware: pool.burst_aware,
            }),
        })
    }

    fn pool_states(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(ClusterName, PoolName), PoolState>> {
        self.pool_states
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
