//! One test per fault. Each starts a run (two replicas, five hosts, three callers), lets it warm
//! up, injects the fault, lets it settle for two TTLs, and then holds the run to what a runtime
//! relies on: no grain ever ran on two hosts at once, no caller got an answer it cannot act on,
//! and — except where the fault is a real death — no live silo was declared dead. The figures are
//! printed (`cargo test --test runtime -- --nocapture`).

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

use crate::cluster_run::{
    operator_post, series_value, silo, Options, Recovery, Run, SharedDatabase, TTL,
};
use crate::host::HEARTBEAT_INTERVAL;
use crate::postgres_server::{OwnPostgres, StopMode};

/// How long a run goes before its fault.
const WARM_UP: Duration = Duration::from_secs(3);

/// The harness's runs take both cores to keep their timing; they go one at a time.
pub static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_for_three_ttls_pauses_every_silo_and_kills_none() {
    store_outage(StopMode::Fast).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crashed_for_three_ttls_pauses_every_silo_and_kills_none() {
    store_outage(StopMode::Immediate).await;
}

/// Postgres goes down for three TTLs (stopped as `mode` says) and comes back: every host pauses
/// when its lease runs out, none is declared dead, and all run again within a heartbeat or so.
async fn store_outage(mode: StopMode) {
    let _one = ONE_AT_A_TIME.lock().await;
    let server = std::sync::Arc::new(OwnPostgres::start());
    let run = Run::start(&server.url("postgres"), Options::default()).await;
    tokio::time::sleep(WARM_UP).await;

    let stopping = server.clone();
    tokio::task::spawn_blocking(move || stopping.stop(mode))
        .await
        .unwrap();
    tokio::time::sleep(3 * TTL).await;
    let paused = run.hosts.all().iter().filter(|h| !h.is_running()).count();
    let mut ready_while_down = Vec::new();
    for replica in &run.replicas {
        let text = reqwest::get(format!("{}/metrics", replica.base()))
            .await
            .expect("a replica serves its metrics while its store is down")
            .text()
            .await
            .unwrap();
        ready_while_down.push(series_value(&text, "oracle_ready"));
    }
    let starting = server.clone();
    tokio::task::spawn_blocking(move || starting.start_again())
        .await
        .unwrap();
    let Recovery {
        resumed,
        first_served,
        report,
    } = run.recover().await;
    report.print(&format!("postgres stopped ({mode:?}) for 3 TTLs"));
    println!(
        "  paused while the store was down: {paused} of 5 hosts; all running again {resumed:?} \
         after Postgres accepted connections; first call served {first_served:?} after"
    );
    report.assert_single_activation();
    report.assert_no_rejoin();
    assert_eq!(
        paused, 5,
        "a host kept running without an acknowledged heartbeat"
    );
    assert_eq!(
        ready_while_down,
        [0.0, 0.0],
        "oracle_ready while the store was down"
    );
    // What an operator sees: outages on both replicas, leases that ran out, no death.
    let counted = |name| report.metric(name);
    assert!(
        counted("oracle_store_outages_total") >= 2.0,
        "{:?}",
        report.metrics
    );
    // Each paused host's first heartbeat after the outage came a whole lease after the one
    // stored before it, unless a heartbeat whose request timed out (the host never heard of it)
    // was written late, when the store answered again: then the stored stamp is that one, and the
    // oracle cannot see the lapse. One CI run counted 3 of 5, its replicas' calls queued behind a
    // pool that waited on the stopped server (the likely cause; not reproduced alone or under
    // load in five runs). Never more lapses than hosts paused.
    let lapsed = counted("oracle_silo_leases_lapsed_total");
    assert!((1.0..=5.0).contains(&lapsed), "{:?}", report.metrics);
    assert_eq!(counted("oracle_silos_declared_dead_total"), 0.0);
    let resumed = resumed.expect("the hosts run again");
    // The first heartbeat after the store is back renews every lease: a heartbeat interval, the
    // replica's first probe of the store, and a new connection.
    assert!(
        resumed <= HEARTBEAT_INTERVAL + Duration::from_millis(700),
        "the cluster took {resumed:?} to serve again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silo_cut_off_from_the_oracle_stops_its_grains_before_they_run_elsewhere() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let run = Run::start(&database.url(), Options::default()).await;
    tokio::time::sleep(WARM_UP).await;

    let cut = run.host(0);
    let cut_id = cut.id();
    let held = cut.grains();
    cut.cut_off();
    tokio::time::sleep(3 * TTL).await;
    let dead = silo(&run, &cut_id).await;
    cut.reconnect();
    tokio::time::sleep(2 * TTL).await;

    let report = run.finish().await;
    report.print("one silo cut off from the oracle for 3 TTLs");
    println!("  the cut-off silo held {held} grains");
    report.assert_single_activation();
    assert_eq!(dead["status"], "dead", "{dead}");
    assert_eq!(
        report.rejoins,
        vec![1, 0, 0, 0, 0],
        "only the cut-off silo dies, and it rejoins"
    );
    assert!(report.pauses >= 1, "the cut-off silo paused");
    assert!(held > 0, "the cut-off silo held grains that had to move");
    // A real death, as an operator sees it: declared, and no outage behind it.
    let counted = |name| report.metric(name);
    assert!(
        counted("oracle_silos_declared_dead_total") >= 1.0,
        "{:?}",
        report.metrics
    );
    assert_eq!(counted("oracle_store_outages_total"), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_and_restarted_loses_nothing_and_kills_no_one() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let mut run = Run::start(&database.url(), Options::default()).await;
    tokio::time::sleep(WARM_UP).await;

    run.replicas[0].kill();
    tokio::time::sleep(2 * TTL).await;
    run.replicas[0].restart().await;
    tokio::time::sleep(2 * TTL).await;

    let report = run.finish().await;
    report.print("a replica killed for 2 TTLs and restarted");
    report.assert_single_activation();
    report.assert_no_rejoin();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_replica_frozen_for_three_ttls_pauses_its_silos_and_kills_none() {
    replica_frozen(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_frozen_for_three_ttls_beside_another_kills_no_silo() {
    replica_frozen(2).await;
}

/// The first of `replicas` replicas is frozen (SIGSTOP: a paused VM, a debugger) for three TTLs
/// while Postgres stays up, then thawed. Heartbeats sent to it wait in its socket queues; when it
/// runs again they find their silos silent for longer than the TTL, and must not declare them
/// dead: a replica that did not run did not watch. Alone, it pauses every host (no lease can be
/// renewed) and they resume; beside another, the hosts carry on through the other.
async fn replica_frozen(replicas: usize) {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let run = Run::start(
        &database.url(),
        Options {
            replicas,
            ..Options::default()
        },
    )
    .await;
    tokio::time::sleep(WARM_UP).await;

    run.replicas[0].freeze();
    tokio::time::sleep(3 * TTL).await;
    let paused = run.hosts.all().iter().filter(|h| !h.is_running()).count();
    run.replicas[0].thaw();
    let Recovery {
        resumed,
        first_served,
        report,
    } = run.recover().await;
    report.print(&format!(
        "replica 1 of {replicas} frozen (SIGSTOP) for 3 TTLs, then thawed"
    ));
    println!(
        "  paused while it was frozen: {paused} of 5 hosts; all running {resumed:?} after the \
         thaw; first call served {first_served:?} after"
    );
    report.assert_single_activation();
    report.assert_no_rejoin();
    let counted = |name| report.metric(name);
    assert_eq!(counted("oracle_silos_declared_dead_total"), 0.0);
    assert!(
        counted("oracle_replica_stalls_total") >= 1.0,
        "the frozen replica saw its stall: {:?}",
        report.metrics
    );
    if replicas == 1 {
        assert_eq!(paused, 5, "a host ran without an acknowledged heartbeat");
    }
    let resumed = resumed.expect("the hosts run again");
    assert!(
        resumed <= HEARTBEAT_INTERVAL + Duration::from_secs(2),
        "the cluster took {resumed:?} to run again after the thaw"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_host_is_declared_dead_and_its_grains_run_elsewhere() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let run = Run::start(&database.url(), Options::default()).await;
    tokio::time::sleep(WARM_UP).await;

    let killed = run.host(0);
    let killed_id = killed.id();
    let held = killed.grains();
    let activations_before = run.registry.tally().activations;
    killed.kill();
    tokio::time::sleep(3 * TTL).await;
    let dead = silo(&run, &killed_id).await;
    let activations_after = run.registry.tally().activations;

    let report = run.finish().await;
    report.print("a host killed");
    println!(
        "  it held {held} grains; {} activations after the kill",
        activations_after - activations_before
    );
    report.assert_single_activation();
    report.assert_no_rejoin();
    assert_eq!(dead["status"], "dead", "{dead}");
    assert!(held > 0 && activations_after > activations_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_silo_hands_every_grain_over_and_leaves() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let run = Run::start(&database.url(), Options::default()).await;
    tokio::time::sleep(WARM_UP).await;

    let drained = run.host(0);
    let id = drained.id();
    let held = drained.grains();
    operator_post(&run, &format!("/silos/{id}/drain")).await;
    let started = Instant::now();
    let remaining = loop {
        let now = silo(&run, &id).await;
        let remaining = now["drain"]["remaining_activations"].as_u64();
        if remaining == Some(0) || started.elapsed() > 6 * TTL {
            break remaining;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let drained_in = started.elapsed();
    let left = drained.leave().await;
    tokio::time::sleep(2 * TTL).await;

    let report = run.finish().await;
    report.print("a silo drained, then left");
    println!("  it held {held} grains; drained in {drained_in:?}");
    report.assert_single_activation();
    report.assert_no_rejoin();
    assert_eq!(remaining, Some(0), "the drain finished");
    assert!(left.is_ok(), "{left:?}");
    assert!(report.migrations_completed > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalancer_cycles_move_grains_to_a_new_silo_without_a_second_activation() {
    let _one = ONE_AT_A_TIME.lock().await;
    let database = SharedDatabase::create().await;
    let mut run = Run::start(
        &database.url(),
        Options {
            hosts: 4,
            ..Options::default()
        },
    )
    .await;
    run.put_policy(json!({
        "rebalancer": { "enabled": true, "due_time_ms": 1000, "session_cycle_period_ms": 2000 }
    }))
    .await;
    tokio::time::sleep(WARM_UP).await;

    let late = run.add_host().await;
    tokio::time::sleep(5 * TTL).await;
    let state = run.operator(Method::GET, "/rebalancer", None).await;

    let report = run.finish().await;
    report.print("rebalancer sessions with a late silo");
    println!("  the late silo runs {} grains", late.grains());
    report.assert_single_activation();
    report.assert_no_rejoin();
    assert!(
        report.migrations_completed > 0,
        "the rebalancer moved grains: {state}"
    );
}
