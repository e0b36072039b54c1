//! The rebalancer end to end, on both stores: a skewed cluster (3000/300/1800/1000 activations),
//! silos that poll and complete their migrations and heartbeat their new counts, cycles asked for
//! over HTTP until the session completes balanced; and the timers, driven by the lease holder.

use std::collections::BTreeMap;

use axum::http::StatusCode;
use serde_json::{json, Value};
use sqlx::Connection;

use placement_oracle::cluster::ClusterName;
use placement_oracle::oracle::RebalancerCycle;
use placement_oracle::store::LeaseClaim;

use crate::helpers::{Backend, TestApp};

const SILOS: [(&str, usize); 4] = [
    ("s1@1", 3000),
    ("s2@1", 300),
    ("s3@1", 1800),
    ("s4@1", 1000),
];

/// Places `count` grains on each silo (by hint), then each silo reports its count.
async fn skewed_cluster(app: &TestApp) -> BTreeMap<String, u64> {
    for (silo, _) in SILOS {
        app.heartbeat(silo, json!({ "activation_count": 0 })).await;
    }
    let mut counts = BTreeMap::new();
    for (silo, count) in SILOS {
        let grains: Vec<Value> = (0..count)
            .map(|i| json!({ "grain": format!("user/{silo}-{i}"), "hint": silo }))
            .collect();
        for chunk in grains.chunks(1_000) {
            let reply = app
                .post("/placements/batch", json!({ "placements": chunk }))
                .await;
            assert_eq!(reply.status, StatusCode::OK);
        }
        counts.insert(silo.to_owned(), count as u64);
    }
    heartbeat_counts(app, &counts).await;
    counts
}

/// The rebalancer's cycle of one movers' step on `app`'s replica, if it held the lease and a
/// cycle was due.
async fn driven_cycle(app: &TestApp, cluster: &ClusterName) -> Option<RebalancerCycle> {
    app.oracle
        .movers
        .drive(cluster)
        .await
        .unwrap()
        .and_then(|step| step.cycle)
}

async fn heartbeat_counts(app: &TestApp, counts: &BTreeMap<String, u64>) {
    for (silo, n) in counts {
        app.heartbeat(silo, json!({ "activation_count": n })).await;
    }
}

/// Each silo polls its migrations and completes every one; returns how many moved.
async fn complete_all(app: &TestApp, counts: &mut BTreeMap<String, u64>) -> usize {
    let mut moved = 0;
    for silo in counts.keys().cloned().collect::<Vec<_>>() {
        loop {
            let page = app
                .get(&format!("/migrations?silo={silo}&limit=1000"))
                .await;
            let migrations = page.body["migrations"].as_array().unwrap().clone();
            for m in &migrations {
                let done = app
                    .post(&format!("/migrations/{}/complete", m["id"]), Value::Null)
                    .await;
                assert_eq!(done.status, StatusCode::OK, "{}", done.body);
                *counts.get_mut(m["from"].as_str().unwrap()).unwrap() -= 1;
                *counts.get_mut(m["to"].as_str().unwrap()).unwrap() += 1;
                moved += 1;
            }
            if page.body["next_cursor"].is_null() {
                break;
            }
        }
    }
    moved
}

async fn a_skewed_cluster_is_balanced_by_cycles_and_completed_migrations(backend: Backend) {
    let app = TestApp::new(backend).await;
    let mut counts = skewed_cluster(&app).await;
    let mut cycles = 0;
    let mut moved = 0;
    let last = loop {
        let reply = app.post("/rebalancer/cycles", Value::Null).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        cycles += 1;
        let outcome = reply.body["outcome"].as_str().unwrap().to_owned();
        if outcome != "migrated" {
            break reply.body;
        }
        moved += complete_all(&app, &mut counts).await;
        heartbeat_counts(&app, &counts).await;
        // Clock time passes between cycles (a cycle never moves a grain placed in the last one).
        app.clock.advance_ms(5_000);
        for (silo, n) in &counts {
            app.heartbeat(silo, json!({ "activation_count": n })).await;
        }
        assert!(cycles < 5, "balanced in a few cycles: {counts:?}");
    };
    assert_eq!(last["outcome"], "completed", "{last}");
    assert!(last["deviation"].as_f64().unwrap() < last["allowed_deviation"].as_f64().unwrap());
    assert!(
        counts.values().all(|&n| n == 1_525),
        "the ideal is 1525 each: {counts:?}"
    );
    // The fewest moves: (3000 − 1525) + (1800 − 1525).
    assert_eq!(moved, 1_750);
    assert_eq!(
        cycles, 2,
        "one cycle moved everything, the next found it balanced"
    );
    // The directory agrees with the counts the silos reported.
    let mut on_s2 = 0;
    let mut cursor = String::new();
    loop {
        let page = app
            .get(&format!("/activations?silo=s2@1&limit=1000{cursor}"))
            .await;
        on_s2 += page.body["activations"].as_array().unwrap().len();
        match page.body["next_cursor"].as_str() {
            Some(next) => {
                cursor = format!("&cursor={}", next.replace('/', "%2F").replace('@', "%40"))
            }
            None => break,
        }
    }
    assert_eq!(on_s2, 1_525);
    let status = app.get("/rebalancer").await;
    assert_eq!(
        status.body["state"], "suspended",
        "resting after completion"
    );
    assert_eq!(status.body["statistics"]["s1@1"]["dispersed"], 1_475);
    assert_eq!(status.body["statistics"]["s2@1"]["acquired"], 1_225);
}

async fn the_lease_holder_runs_sessions_on_their_timers(backend: Backend) {
    let app = TestApp::new(backend).await;
    let counts = skewed_cluster(&app).await;
    let policy = json!({ "rebalancer": { "enabled": true, "due_time_ms": 1_000, "session_cycle_period_ms": 2_000 } });
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );
    let cluster = ClusterName::parse(&app.cluster).unwrap();
    // Before the due time nothing runs; at it, a session starts and its first cycle issues moves.
    assert!(driven_cycle(&app, &cluster).await.is_none());
    app.clock.advance_ms(1_000);
    heartbeat_counts(&app, &counts).await;
    let cycle = driven_cycle(&app, &cluster).await.expect("a cycle");
    assert_eq!((cycle.report.session, cycle.report.cycle), (1, 1));
    assert_eq!(cycle.migrations.len(), 1_750);
    let status = app.get("/rebalancer").await;
    assert_eq!(status.body["session"], 1);
    assert_eq!(status.body["lease"]["holder"], app.oracle_replica());
    // Suspended, no cycle runs however late it gets; resumed, one runs at once.
    let suspended = app.post("/rebalancer/suspend", json!({})).await;
    assert_eq!(suspended.body["suspended_indefinitely"], true);
    app.clock.advance_ms(4_000);
    heartbeat_counts(&app, &counts).await;
    assert!(driven_cycle(&app, &cluster).await.is_none());
    let resumed = app.post("/rebalancer/resume", Value::Null).await;
    assert_eq!(
        (
            resumed.body["state"].as_str(),
            resumed.body["session"].as_u64()
        ),
        (Some("executing"), Some(2))
    );
}

async fn a_cycle_before_the_last_ones_moves_are_done_does_not_plan_them_again(backend: Backend) {
    let app = TestApp::new(backend).await;
    let counts = skewed_cluster(&app).await;
    let first = app.post("/rebalancer/cycles", Value::Null).await;
    assert_eq!(first.body["migrations"].as_array().unwrap().len(), 1_750);
    // The silos have not moved anything yet and report the same counts.
    app.clock.advance_ms(5_000);
    heartbeat_counts(&app, &counts).await;
    let second = app.post("/rebalancer/cycles", Value::Null).await;
    assert_eq!(second.body["outcome"], "completed", "{}", second.body);
    assert_eq!(second.body["migrations"], json!([]));
    // The first cycle's migrations are still there for the silos to carry out.
    let pending = app.get("/migrations?silo=s1@1&limit=1000").await;
    assert_eq!(pending.body["migrations"].as_array().unwrap().len(), 1_000);
    assert!(
        !pending.body["next_cursor"].is_null(),
        "1475 from s1: a second page"
    );
}

for_each_store!(
    a_cycle_before_the_last_ones_moves_are_done_does_not_plan_them_again,
    a_skewed_cluster_is_balanced_by_cycles_and_completed_migrations,
    the_lease_holder_runs_sessions_on_their_timers,
);

/// Two replicas on one Postgres database. A runs the session, is "killed" (stops driving and
/// renewing), and B takes over within a lease period, carrying on the same session from the
/// stored state to the end; nothing is written under A's token after the takeover.
#[tokio::test]
async fn another_replica_takes_over_a_dead_lease_holders_session_and_finishes_it() {
    use crate::helpers::LEASE_TTL_MS;

    let (database, a, b) = TestApp::two_replicas().await;
    let clock = a.clock.clone();
    let cluster_name = a.cluster.clone();
    let mut counts = skewed_cluster(&a).await;
    let policy = json!({ "rebalancer": {
        "enabled": true, "due_time_ms": 0, "session_cycle_period_ms": 2_000,
        "activation_migration_count_limit": 500
    } });
    assert_eq!(a.put_policy(Some("*"), policy).await.status, StatusCode::OK);
    let cluster = ClusterName::parse(&cluster_name).unwrap();

    // A holds the lease and runs cycle 1 (500 moves); B, asked meanwhile, does nothing.
    let first = driven_cycle(&a, &cluster).await.expect("A's first cycle");
    assert_eq!(
        (
            first.report.session,
            first.report.cycle,
            first.migrations.len()
        ),
        (1, 1, 500)
    );
    assert!(driven_cycle(&b, &cluster).await.is_none());
    let a_lease = a.store.lease(&cluster).await.unwrap().unwrap();
    complete_all(&a, &mut counts).await;
    heartbeat_counts(&a, &counts).await;

    // A dies: it drives no more. After its lease runs out, B takes the lease and the session.
    clock.advance_ms(LEASE_TTL_MS + 1);
    heartbeat_counts(&b, &counts).await;
    let second = driven_cycle(&b, &cluster).await.expect("B carries on");
    assert_eq!(
        (second.report.session, second.report.cycle),
        (1, 2),
        "the same session, its next cycle"
    );
    let b_lease = b.store.lease(&cluster).await.unwrap().unwrap();
    assert_eq!(b_lease.holder, b.oracle_replica());
    assert!(b_lease.token > a_lease.token);
    // A comes back from the dead: its step does nothing, and its old token writes nothing.
    assert!(driven_cycle(&a, &cluster).await.is_none());
    let stale = a
        .store
        .issue_migrations(&cluster, &a_lease, &[])
        .await
        .unwrap();
    assert_eq!(stale, None);
    // The open migrations are B's cycle 2, all under B's token; none under A's.
    let mut raw = sqlx::PgConnection::connect(&database.url()).await.unwrap();
    let tokens: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT lease_token, count(*) FROM migrations WHERE cluster = $1 GROUP BY lease_token",
    )
    .bind(&cluster_name)
    .fetch_all(&mut raw)
    .await
    .unwrap();
    assert_eq!(tokens, [(b_lease.token, second.migrations.len() as i64)]);
    let metrics = b.send(axum::http::Method::GET, "/metrics", None).await;
    assert!(metrics
        .body
        .as_str()
        .unwrap()
        .lines()
        .any(|l| l.starts_with("oracle_cluster_leases_taken_total")));

    // B finishes: cycles on its timers until the session completes, the silos keeping up.
    let mut outcome = String::new();
    for _ in 0..10 {
        complete_all(&b, &mut counts).await;
        heartbeat_counts(&b, &counts).await;
        clock.advance_ms(2_000);
        heartbeat_counts(&b, &counts).await;
        if let Some(cycle) = driven_cycle(&b, &cluster).await {
            outcome = format!("{:?}", cycle.report.outcome);
            if outcome == "Completed" {
                break;
            }
        }
    }
    assert_eq!(outcome, "Completed", "{counts:?}");
    assert!(counts.values().all(|&n| n == 1_525), "{counts:?}");

    // B shuts down and gives its lease up: A takes it at once, not a lease period later.
    b.oracle.movers.release_leases().await;
    let LeaseClaim::Held(again) = a
        .store
        .claim_lease(&cluster, &a.oracle_replica(), LEASE_TTL_MS)
        .await
        .unwrap()
    else {
        panic!("the released lease is free");
    };
    assert!(again.token > b_lease.token);
}
