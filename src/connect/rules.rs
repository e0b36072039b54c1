//! The connection rules and the per-pool state their time windows need.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::clock::Millis;
use crate::cluster::{SiloId, SiloRecord};

/// How often `connection_count` samples each node.
pub const SAMPLE_INTERVAL_MS: Millis = 10_000;
/// How many samples `connection_count` averages: one minute's worth.
pub const SAMPLES_AVERAGED: usize = 6;
/// How long `network_throughput` and `cpu_usage` keep a decision, and the CPU averaging window.
pub const DECISION_WINDOW_MS: Millis = 5_000;

/// A pool's connection rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectRule {
    #[default]
    RoundRobin,
    ConnectionCount,
    NetworkThroughput,
    CpuUsage,
}

impl ConnectRule {
    /// The rule's name as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round_robin",
            Self::ConnectionCount => "connection_count",
            Self::NetworkThroughput => "network_throughput",
            Self::CpuUsage => "cpu_usage",
        }
    }
}

/// A member node as the rules see it: an alive, active silo of the pool.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    pub silo: &'a SiloRecord,
}

impl Node<'_> {
    fn id(&self) -> &SiloId {
        &self.silo.id
    }

    fn connections(&self) -> u64 {
        self.silo.profile.load.connection_count.unwrap_or(0)
    }

    fn throughput(&self) -> u64 {
        self.silo.profile.load.network_bytes_per_second.unwrap_or(0)
    }

    fn cpu(&self) -> f64 {
        self.silo.profile.load.cpu_usage.unwrap_or(0.0)
    }
}

/// What a rule remembers between decisions, per pool, per replica.
#[derive(Debug, Clone, Default)]
pub struct PoolState {
    /// When `connection_count` last sampled, and each node's last samples (newest last).
    last_sample_ms: Option<Millis>,
    samples: BTreeMap<SiloId, VecDeque<u64>>,
    /// CPU readings of the last window, per node, with the heartbeat they came from.
    cpu_readings: BTreeMap<SiloId, VecDeque<(Millis, i64, f64)>>,
    /// The kept decision of the time-windowed rules, and until when it holds.
    kept: Option<(SiloId, Millis)>,
    /// Connections handed out per node since the last sample (burst-aware variant).
    handed_out: BTreeMap<SiloId, u64>,
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub silo: SiloId,
    pub rule: ConnectRule,
    /// Each member's figure as the rule compared it (lower wins), in member order.
    pub figures: Vec<(String, f64)>,
    /// Whether the decision was a kept one from the current window.
    pub kept: bool,
}

/// Chooses a node for one new connection. `nodes` are the pool's alive, active members in a fixed
/// order (silo id); `counter` is the pool's shared round-robin counter value for this request.
/// `None` only when there is no member.
pub fn choose(
    rule: ConnectRule,
    burst_aware: bool,
    nodes: &[Node<'_>],
    state: &mut PoolState,
    now: Millis,
    counter: u64,
) -> Option<Choice> {
    if nodes.is_empty() {
        return None;
    }
    if rule == ConnectRule::RoundRobin {
        let node = nodes[(counter % nodes.len() as u64) as usize];
        return Some(Choice {
            silo: node.id().clone(),
            rule,
            figures: Vec::new(),
            kept: false,
        });
    }

    let sampled = sample(state, nodes, now);
    if sampled {
        state.handed_out.clear();
    }
    record_cpu(state, nodes, now);
    let figure = |node: &Node<'_>| -> f64 {
        match rule {
            ConnectRule::ConnectionCount => average(state.samples.get(node.id())),
            ConnectRule::NetworkThroughput => node.throughput() as f64,
            ConnectRule::CpuUsage => cpu_average(state.cpu_readings.get(node.id())),
            ConnectRule::RoundRobin => 0.0,
        }
    };
    let figures: Vec<(String, f64)> = nodes
        .iter()
        .map(|n| (n.id().to_string(), figure(n)))
        .collect();

    let windowed = matches!(rule, ConnectRule::NetworkThroughput | ConnectRule::CpuUsage);
    if windowed && !burst_aware {
        if let Some((kept, until)) = &state.kept {
            if now < *until && nodes.iter().any(|n| n.id() == kept) {
                return Some(Choice {
                    silo: kept.clone(),
                    rule,
                    figures,
                    kept: true,
                });
            }
        }
    }

    let handed = |node: &Node<'_>| state.handed_out.get(node.id()).copied().unwrap_or(0);
    let best = nodes
        .iter()
        .zip(&figures)
        .min_by(|(a, fa), (b, fb)| {
            let by_burst = if burst_aware {
                handed(a).cmp(&handed(b))
            } else {
                std::cmp::Ordering::Equal
            };
            by_burst.then(fa.1.total_cmp(&fb.1))
        })
        .map(|(node, _)| node.id().clone())
        .expect("nodes is not empty");

    if windowed && !burst_aware {
        state.kept = Some((best.clone(), now + DECISION_WINDOW_MS));
    }
    *state.handed_out.entry(best.clone()).or_default() += 1;
    Some(Choice {
        silo: best,
        rule,
        figures,
        kept: false,
    })
}

/// Takes a connection-count sample of every node when the interval has passed. Says whether it did.
fn sample(state: &mut PoolState, nodes: &[Node<'_>], now: Millis) -> bool {
    let due = state
        .last_sample_ms
        .is_none_or(|last| now - last >= SAMPLE_INTERVAL_MS);
    if !due {
        return false;
    }
    state.last_sample_ms = Some(now);
    state
        .samples
        .retain(|id, _| nodes.iter().any(|n| n.id() == id));
    for node in nodes {
        let history = state.samples.entry(node.id().clone()).or_default();
        history.push_back(node.connections());
        while history.len() > SAMPLES_AVERAGED {
            history.pop_front();
        }
    }
    true
}

fn average(samples: Option<&VecDeque<u64>>) -> f64 {
    match samples {
        Some(samples) if !samples.is_empty() => {
            samples.iter().sum::<u64>() as f64 / samples.len() as f64
        }
        _ => 0.0,
    }
}

/// Records each node's CPU reading once per heartbeat, keeping the last window's (and forgetting
/// nodes that are no longer members: silo ids change with every restart).
fn record_cpu(state: &mut PoolState, nodes: &[Node<'_>], now: Millis) {
    state
        .cpu_readings
        .retain(|id, _| nodes.iter().any(|n| n.id() == id));
    for node in nodes {
        let readings = state.cpu_readings.entry(node.id().clone()).or_default();
        let heartbeat = node.silo.heartbeat_count;
        if readings
            .back()
            .is_none_or(|(_, seen, _)| *seen != heartbeat)
        {
            readings.push_back((now, heartbeat, node.cpu()));
        }
        while readings
            .front()
            .is_some_and(|(at, _, _)| now - at >= DECISION_WINDOW_MS && readings.len() > 1)
        {
            readings.pop_front();
        }
    }
}

fn cpu_average(readings: Option<&VecDeque<(Millis, i64, f64)>>) -> f64 {
    match readings {
        Some(readings) if !readings.is_empty() => {
            readings.iter().map(|(_, _, cpu)| cpu).sum::<f64>() / readings.len() as f64
        }
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::cluster::SiloStatus;
    use crate::placement::testing::silo;

    fn node(id: &str, connections: u64, throughput: u64, cpu: f64) -> SiloRecord {
        let mut s = silo(id, SiloStatus::Active, None);
        s.profile.load.connection_count = Some(connections);
        s.profile.load.network_bytes_per_second = Some(throughput);
        s.profile.load.cpu_usage = Some(cpu);
        s
    }

    fn nodes(records: &[SiloRecord]) -> Vec<Node<'_>> {
        records.iter().map(|silo| Node { silo }).collect()
    }

    fn pick(
        rule: ConnectRule,
        burst: bool,
        records: &[SiloRecord],
        state: &mut PoolState,
        now: Millis,
    ) -> String {
        choose(rule, burst, &nodes(records), state, now, 0)
            .unwrap()
            .silo
            .to_string()
    }

    #[test]
    fn round_robin_cycles_through_the_nodes_by_the_shared_counter() {
        let records = [
            node("a", 0, 0, 0.0),
            node("b", 0, 0, 0.0),
            node("c", 0, 0, 0.0),
        ];
        let mut state = PoolState::default();
        let order: Vec<String> = (0..6)
            .map(|counter| {
                choose(
                    ConnectRule::RoundRobin,
                    false,
                    &nodes(&records),
                    &mut state,
                    0,
                    counter,
                )
                .unwrap()
                .silo
                .to_string()
            })
            .collect();
        assert_eq!(order, ["a", "b", "c", "a", "b", "c"]);
        assert!(choose(ConnectRule::RoundRobin, false, &[], &mut state, 0, 0).is_none());
    }

    #[test]
    fn connection_count_samples_every_10_s_and_averages_a_minute() {
        let mut records = vec![node("a", 100, 0, 0.0), node("b", 40, 0, 0.0)];
        let mut state = PoolState::default();
        assert_eq!(
            pick(ConnectRule::ConnectionCount, false, &records, &mut state, 0),
            "b"
        );

        // b's connections jump at once, but the next sample is only taken 10 s after the first.
        records[1].profile.load.connection_count = Some(400);
        assert_eq!(
            pick(
                ConnectRule::ConnectionCount,
                false,
                &records,
                &mut state,
                9_999
            ),
            "b"
        );
        // At 10 s: samples a = [100, 100], b = [40, 400] → averages 100 and 220: a wins.
        assert_eq!(
            pick(
                ConnectRule::ConnectionCount,
                false,
                &records,
                &mut state,
                10_000
            ),
            "a"
        );

        // b drops back; its one-minute average recovers only as old samples age out.
        records[1].profile.load.connection_count = Some(40);
        let mut winners = Vec::new();
        for sample in 2..=8 {
            winners.push(pick(
                ConnectRule::ConnectionCount,
                false,
                &records,
                &mut state,
                sample * 10_000,
            ));
        }
        // b's averages at 20–80 s: [40,400,40] = 160, then 130, 112, 100 (a tie: a by order), 100
        // again ([400,40,40,40,40,40], six samples), then 40 once the 400 has aged out at 70 s.
        assert_eq!(winners, ["a", "a", "a", "a", "a", "b", "b"]);
    }

    #[test]
    fn throughput_keeps_its_decision_for_5_s_then_decides_again() {
        let mut records = vec![node("a", 0, 1_000, 0.0), node("b", 0, 5_000, 0.0)];
        let mut state = PoolState::default();
        assert_eq!(
            pick(
                ConnectRule::NetworkThroughput,
                false,
                &records,
                &mut state,
                0
            ),
            "a"
        );
        records[0].profile.load.network_bytes_per_second = Some(9_000);
        for now in [1, 2_500, 4_999] {
            let choice = choose(
                ConnectRule::NetworkThroughput,
                false,
                &nodes(&records),
                &mut state,
                now,
                0,
            )
            .unwrap();
            assert_eq!(
                (choice.silo.as_str(), choice.kept),
                ("a", true),
                "at {now} ms the window holds"
            );
        }
        assert_eq!(
            pick(
                ConnectRule::NetworkThroughput,
                false,
                &records,
                &mut state,
                5_000
            ),
            "b"
        );
    }

    #[test]
    fn a_kept_node_that_left_the_pool_is_not_returned() {
        let records = vec![node("a", 0, 1_000, 0.0), node("b", 0, 5_000, 0.0)];
        let mut state = PoolState::default();
        assert_eq!(
            pick(
                ConnectRule::NetworkThroughput,
                false,
                &records,
                &mut state,
                0
            ),
            "a"
        );
        assert_eq!(
            pick(
                ConnectRule::NetworkThroughput,
                false,
                &records[1..],
                &mut state,
                1
            ),
            "b"
        );
    }

    #[test]
    fn cpu_averages_the_readings_of_the_last_5_s() {
        let mut records = vec![node("a", 0, 0, 10.0), node("b", 0, 0, 30.0)];
        let mut state = PoolState::default();
        assert_eq!(
            pick(ConnectRule::CpuUsage, false, &records, &mut state, 0),
            "a"
        );
        // a spikes to 90 with a new heartbeat; its 5 s average is (10 + 90) / 2 = 50 > 30 once the
        // kept decision expires.
        records[0].profile.load.cpu_usage = Some(90.0);
        records[0].heartbeat_count += 1;
        assert_eq!(
            pick(ConnectRule::CpuUsage, false, &records, &mut state, 4_000),
            "a",
            "kept"
        );
        assert_eq!(
            pick(ConnectRule::CpuUsage, false, &records, &mut state, 5_000),
            "b"
        );
    }

    #[test]
    fn a_burst_lands_on_one_node_per_window_unless_burst_aware() {
        let records: Vec<SiloRecord> = (0..10)
            .map(|i| node(&format!("n{i}"), 10 * i, 1_000 * (i + 1), i as f64))
            .collect();
        for rule in [
            ConnectRule::ConnectionCount,
            ConnectRule::NetworkThroughput,
            ConnectRule::CpuUsage,
        ] {
            for burst_aware in [false, true] {
                let mut state = PoolState::default();
                let mut counts: HashMap<String, u32> = HashMap::new();
                for i in 0..1_000 {
                    // The burst arrives within one second.
                    *counts
                        .entry(pick(rule, burst_aware, &records, &mut state, i))
                        .or_default() += 1;
                }
                if burst_aware {
                    assert!(
                        counts.values().all(|&c| (99..=101).contains(&c)),
                        "{rule:?}: {counts:?}"
                    );
                } else {
                    assert_eq!(
                        counts.len(),
                        1,
                        "{rule:?} sends the whole burst to one node"
                    );
                }
            }
        }
    }
}
