//! A 1000-connection burst over 10 nodes, per connection rule, plain and burst-aware: how evenly
//! each spreads it. The burst arrives within one second, inside one sampling window.
//!
//!     cargo bench --bench connection_burst

use std::collections::BTreeMap;

use placement_oracle::cluster::silo::{LoadReport, SiloProfile, Smoothing};
use placement_oracle::cluster::{SiloId, SiloRecord, SiloStatus};
use placement_oracle::connect::{choose, ConnectRule, Node, PoolState};

#[path = "support/plot.rs"]
mod plot;

const NODES: usize = 10;
const BURST: usize = 1_000;

fn node(i: usize) -> SiloRecord {
    SiloRecord {
        id: SiloId::parse("silo", &format!("node-{i:02}")).unwrap(),
        status: SiloStatus::Active,
        last_heartbeat_ms: 0,
        heartbeat_count: 1,
        profile: SiloProfile {
            address: format!("10.1.0.{i}"),
            role: None,
            metadata: BTreeMap::new(),
            grain_types: None,
            // Uneven starting load, as a real pool has.
            load: LoadReport {
                connection_count: Some(20 + 7 * i as u64 % 30),
                network_bytes_per_second: Some(1_000_000 + 250_000 * ((i * 3) % 10) as u64),
                cpu_usage: Some(10.0 + ((i * 7) % 10) as f64 * 5.0),
                ..LoadReport::default()
            },
            smoothing: Smoothing::default(),
            first_seen_ms: 0,
        },
        drained_at_ms: None,
        protected_until_ms: 0,
    }
}

fn main() {
    let records: Vec<SiloRecord> = (0..NODES).map(node).collect();
    let nodes: Vec<Node<'_>> = records.iter().map(|silo| Node { silo }).collect();
    let even = BURST / NODES;
    println!("{BURST} connections over {NODES} nodes within one second (even = {even} each)\n");
    println!("| rule | variant | fewest | most | max distance from even |");
    println!("|---|---|---:|---:|---:|");
    let mut groups = Vec::new();
    for rule in [
        ConnectRule::RoundRobin,
        ConnectRule::ConnectionCount,
        ConnectRule::NetworkThroughput,
        ConnectRule::CpuUsage,
    ] {
        for burst_aware in [false, true] {
            if rule == ConnectRule::RoundRobin && burst_aware {
                continue;
            }
            let mut state = PoolState::default();
            let mut counts = [0usize; NODES];
            for i in 0..BURST {
                let now = i as i64; // one connection per millisecond
                let choice = choose(rule, burst_aware, &nodes, &mut state, now, i as u64).unwrap();
                let index = records.iter().position(|r| r.id == choice.silo).unwrap();
                counts[index] += 1;
            }
            let (fewest, most) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
            let distance = counts.iter().map(|&c| c.abs_diff(even)).max().unwrap();
            println!(
                "| {rule:?} | {} | {fewest} | {most} | {distance} |",
                if burst_aware { "burst-aware" } else { "plain" }
            );
            let name = format!(
                "{}{}",
                rule.as_str(),
                if burst_aware { " (burst-aware)" } else { "" }
            );
            groups.push((name, counts.iter().map(|&c| c as f64).collect()));
        }
    }
    let mut picture = plot::Picture::new(1100.0, 360.0);
    picture.bar_groups(
        plot::Panel {
            x: 0.0,
            y: 0.0,
            width: 1100.0,
            height: 340.0,
        },
        &plot::Axes {
            title: &format!(
                "{BURST} connections in one second over {NODES} nodes: connections per node, by rule"
            ),
            x_label: "",
            y_label: "connections",
            x: (0.0, 1.0),
            y: (0.0, BURST as f64),
        },
        &groups,
        Some((even as f64, "even")),
    );
    picture.caption("A bar per node. The plain metric rules send the whole burst to the node that looked lightest at the last sample. cargo bench --bench connection_burst");
    picture.save("connection-burst.svg");
}
