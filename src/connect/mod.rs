//! Which node should a client connect to: Dell PowerScale SmartConnect's connection rules.
//!
//! Pure code like the placement strategies: the rules read member nodes (silos, with the load
//! figures their heartbeats carry), the pool's per-replica state (samples, cached decisions,
//! connections handed out) and the oracle's clock, and return the chosen node. The REST endpoint
//! (`http/pools.rs`) and the DNS listener (`dns.rs`) both reach them through `Oracle::connect`.
//!
//! Rules (SmartConnect's, as its documentation describes them):
//! - `round_robin` (the default): the next node in turn, by a counter all replicas share. It does
//!   not balance load: a node that rejoins starts from zero connections and gets no more than the
//!   others from then on.
//! - `connection_count`: ESTABLISHED connections, sampled every 10 s and averaged over the last
//!   minute (six samples); the lowest average wins.
//! - `network_throughput`: the lowest in+out bytes per second; the decision is kept for 5 s, so
//!   every request in that window gets the same node.
//! - `cpu_usage`: the lowest average CPU over the last 5 s; the decision is kept for 5 s too.
//!
//! SmartConnect's documented weakness is bursts: many clients connecting inside one sampling window
//! all land on the same node. The burst-aware variant of the metric rules counts the connections it
//! handed out since the last sample and picks the node with the fewest, breaking ties by the rule's
//! metric, so a burst spreads evenly and the metric decides again once fresh samples arrive.

pub mod pool;
pub mod rules;

pub use pool::{has_family, node_ip, IpFamily, Members, Pool};
pub use rules::{choose, Choice, ConnectRule, Node, PoolState};
