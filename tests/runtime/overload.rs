//! A replica offered three times what it can serve, for three TTLs, then its normal load again.
//!
//! The flood is new-grain placements in a cluster of its own, the kind of request that costs a
//! replica and its database the most, sent open loop (each at its time, whatever became of the
//! others) from a runtime of its own, so that the hosts' heartbeats keep their schedule on theirs.
//! Its rate is three times what the same replica served just before, measured closed loop. What a
//! runtime relies on through it: no silo declared dead (their heartbeats waited or were refused
//! in the replica, which is not their silence), no grain on two hosts, hosts running again soon
//! after; and what an operator relies on: the excess refused at once with `Retry-After`, not
//! queued until it times out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::api::{Api, Reply};
use crate::cluster_run::{Options, Recovery, Run, SharedDatabase, TTL};
use crate::faults::ONE_AT_A_TIME;
use crate::host::HEARTBEAT_INTERVAL;

/// Requests in flight while the replica's capacity is measured (more in flight make fuller
/// batches: what it serves with 1,024 in flight is more than this finds).
const MEASURING_CONNECTIONS: usize = 256;
const MEASURING_FOR: Duration = Duration::from_secs(2);
/// Connections the flood sends on: more than the replica admits at once.
const FLOOD_CONNECTIONS: usize = 1_536;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_offered_three_times_its_capacity_refuses_the_rest_and_kills_no_silo() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let run = Run::start(
        &database.url(),
        Options {
            replicas: 1,
            ..Options::default()
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let base = run.replicas[0].base();
    let flood = tokio::task::spawn_blocking(move || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
            .block_on(flood(base))
    })
    .await
    .unwrap();
    let Recovery {
        resumed,
        first_served,
        report,
    } = run.recover().await;
    report.print("the only replica offered 3× its capacity for 3 TTLs");
    println!(
        "  capacity {:.0} placements/s; offered {:.0}/s for {:?}: {:.0}/s served ({:.0} % of \
         capacity), {:.0}/s refused with Retry-After, other answers {:?}; refusals answered \
         within {:?} (longest), served ones within {:?}; hosts all running {resumed:?} after, \
         first call served {first_served:?} after",
        flood.capacity,
        flood.offered,
        3 * TTL,
        flood.served,
        100.0 * flood.served / flood.capacity,
        flood.refused,
        flood.other,
        flood.longest_refusal,
        flood.longest_served,
    );
    report.assert_single_activation();
    report.assert_no_rejoin();
    assert_eq!(
        report.metric("oracle_silos_declared_dead_total"),
        0.0,
        "{:#?}",
        report.warnings
    );
    assert!(
        flood.refused > 0.0,
        "the replica refused none of three times its capacity: {flood:?}"
    );
    assert!(
        flood.served > 0.0,
        "the replica served nothing while flooded: {flood:?}"
    );
    let resumed = resumed.expect("the hosts run again after the flood");
    assert!(
        resumed <= HEARTBEAT_INTERVAL + Duration::from_secs(2),
        "the cluster took {resumed:?} to run again after the flood"
    );
}

/// What the flood saw.
#[derive(Debug)]
struct Flooded {
    /// Placements a second served closed loop before the flood.
    capacity: f64,
    /// A second, during the flood.
    offered: f64,
    served: f64,
    refused: f64,
    other: BTreeMap<String, u64>,
    longest_refusal: Duration,
    longest_served: Duration,
}

/// Measures the replica at `base` and floods it at three times that for three TTLs.
async fn flood(base: String) -> Flooded {
    let api = Api::new(&format!("flood-{}", std::process::id()));
    let next = Arc::new(AtomicU64::new(0));
    let place = {
        let (api, base) = (api.clone(), base.clone());
        move || {
            let (api, base, next) = (api.clone(), base.clone(), next.clone());
            async move {
                let grain = format!("flood/{}", next.fetch_add(1, Ordering::Relaxed));
                api.post(&base, "/placements", json!({ "grain": grain }))
                    .await
            }
        }
    };
    // The flood's own silo, beating as the hosts do, so that its placements have somewhere to go.
    let beating = tokio::spawn({
        let (api, base) = (api.clone(), base.clone());
        async move {
            loop {
                let body = json!({ "silo": "10.9.9.9:11111@1" });
                api.post(&base, "/heartbeats", body).await;
                tokio::time::sleep(HEARTBEAT_INTERVAL).await;
            }
        }
    });
    tokio::time::sleep(HEARTBEAT_INTERVAL).await;

    let served = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + MEASURING_FOR;
    let measuring: Vec<_> = (0..MEASURING_CONNECTIONS)
        .map(|_| {
            let (place, served) = (place.clone(), served.clone());
            tokio::spawn(async move {
                while Instant::now() < until {
                    if place().await.ok().is_some() {
                        served.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in measuring {
        task.await.unwrap();
    }
    let capacity = served.load(Ordering::Relaxed) as f64 / MEASURING_FOR.as_secs_f64();
    assert!(capacity > 0.0, "no placement was served before the flood");

    let seen = Arc::new(Mutex::new(Flooded {
        capacity,
        offered: 0.0,
        served: 0.0,
        refused: 0.0,
        other: BTreeMap::new(),
        longest_refusal: Duration::ZERO,
        longest_served: Duration::ZERO,
    }));
    // Open loop over a fixed set of connections, more than the replica admits at once (1,024),
    // as a fleet's silos and clients each keep theirs: every request is due at its time and
    // waits for a free connection if none is; its time is counted from when it was due.
    let length = 3 * TTL;
    let rate = 3.0 * capacity;
    let (due_sender, due) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let due = Arc::new(tokio::sync::Mutex::new(due));
    let connections: Vec<_> = (0..FLOOD_CONNECTIONS)
        .map(|_| {
            let (place, seen, due) = (place.clone(), seen.clone(), due.clone());
            tokio::spawn(async move {
                loop {
                    let Some(at) = due.lock().await.recv().await else {
                        return;
                    };
                    let reply = place().await;
                    let took = at.elapsed();
                    let mut seen = seen.lock().unwrap();
                    if reply.ok().is_some() {
                        seen.served += 1.0;
                        seen.longest_served = seen.longest_served.max(took);
                    } else if reply.is_retryable() {
                        seen.refused += 1.0;
                        seen.longest_refusal = seen.longest_refusal.max(took);
                    } else {
                        *seen.other.entry(describe(&reply)).or_default() += 1;
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut sent = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(5));
    while started.elapsed() < length {
        tick.tick().await;
        let now = Instant::now();
        let due_by_now = ((now - started).as_secs_f64() * rate) as u64;
        for _ in sent..due_by_now {
            due_sender.send(now).unwrap();
        }
        sent = sent.max(due_by_now);
    }
    drop(due_sender);
    let seconds = started.elapsed().as_secs_f64();
    for connection in connections {
        connection.await.unwrap();
    }
    // The flood's silo leaves, as a silo that stops does: not a death. Its leave releases the
    // first 5,000 of the tens of thousands of grains the flood placed on it, which took over the
    // usual 3 s in a busy run (and a client that gives up cancels it).
    beating.abort();
    let left = api
        .send_within(
            &base,
            reqwest::Method::DELETE,
            "/silos/10.9.9.9:11111@1",
            None,
            Duration::from_secs(60),
        )
        .await;
    assert!(
        left.ok().is_some(),
        "the flood's silo left: {}",
        left.describe()
    );
    let mut seen = Arc::try_unwrap(seen).unwrap().into_inner().unwrap();
    seen.offered = sent as f64 / seconds;
    seen.served /= seconds;
    seen.refused /= seconds;
    seen
}

/// A reply that is neither served nor refused with `Retry-After`, by status and problem.
fn describe(reply: &Reply) -> String {
    match reply {
        Reply::Answer { status, .. } => format!("{status} {}", reply.problem().unwrap_or("")),
        Reply::Unreachable(_) => "unreachable".into(),
    }
}
