//! Silo leases and the outage rule, at the API: what an acknowledged heartbeat grants,
//! that no TTL change cuts a granted lease short, and that a replica counts no silence from before
//! it last began reaching the store without a break — whether it just started or came back from
//! any number of outages. (The runtime's side, under real faults, is `tests/runtime/`.)

use std::sync::Arc;

use axum::http::StatusCode;
use placement_oracle::clock::{Clock, ManualClock};
use placement_oracle::cluster::ClusterName;
use placement_oracle::store::postgres::health::PROBE_INTERVAL_MS;
use placement_oracle::store::Store;
use serde_json::json;

use crate::helpers::{unique_cluster, Backend, TestApp, TestDatabase, START_MS, TTL_MS};
use crate::proxy::FaultyLink;

for_each_store!(
    every_acknowledged_heartbeat_grants_the_ttl_less_a_tenth,
    a_shorter_ttl_never_cuts_short_a_lease_already_granted,
    a_replica_that_did_not_run_judges_no_silence_from_before_it_ran_again,
);

async fn every_acknowledged_heartbeat_grants_the_ttl_less_a_tenth(backend: Backend) {
    let app = TestApp::new(backend).await;
    let beat = app.heartbeat("a@1", json!({})).await;
    assert_eq!(
        (beat["lease_ms"].as_i64(), beat["silo_ttl_ms"].as_i64()),
        (Some(9_000), Some(TTL_MS))
    );
    assert_eq!(
        app.put_policy(Some("*"), json!({ "silo_ttl_ms": 3_000 }))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(app.heartbeat("a@1", json!({})).await["lease_ms"], 2_700);
    // A lease is an answer to a heartbeat only: a silo's listing has none.
    assert!(app.get("/silos/a@1").await.body.get("lease_ms").is_none());
}

/// A silo granted a 9 s lease under a 10 s TTL keeps running its grains for 9 s whatever happens
/// to the policy meanwhile; the oracle must not give them away sooner.
async fn a_shorter_ttl_never_cuts_short_a_lease_already_granted(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    app.heartbeat("b@1", json!({})).await;
    let placed = app
        .post(
            "/placements",
            json!({ "grain": "user/kept", "hint": "a@1" }),
        )
        .await
        .body;
    assert_eq!(placed["silo"], "a@1");
    assert_eq!(
        app.put_policy(Some("*"), json!({ "silo_ttl_ms": 1_000 }))
            .await
            .status,
        StatusCode::OK
    );

    // Five TTLs of the new policy later, a@1 is silent but its lease has not run out.
    app.clock.advance_ms(5_000);
    app.heartbeat("b@1", json!({})).await;
    assert_eq!(app.oracle.members.sweep().await.unwrap(), 0);
    assert_eq!(app.get("/silos/a@1").await.body["status"], "active");
    let again = app.place("user/kept").await;
    assert_eq!(
        (&again["silo"], &again["epoch"]),
        (&placed["silo"], &placed["epoch"])
    );

    // The lease (9 s) and its margin (1 s) have passed: now it dies (b@1 beating within the new
    // TTL all along).
    app.clock.advance_ms(4_500);
    app.heartbeat("b@1", json!({})).await;
    app.clock.advance_ms(500);
    assert_eq!(app.oracle.members.sweep().await.unwrap(), 1);
    assert_eq!(app.get("/silos/a@1").await.body["status"], "dead");
    assert_eq!(app.place("user/kept").await["silo"], "b@1");
}

/// A replica whose own process did not run for three TTLs (frozen, its VM paused) did not watch
/// its silos meanwhile. The heartbeat that waited in its queue through the freeze is accepted, not
/// answered `declared_dead`; no sweep kills a silo for that silence; a silo that stays silent dies
/// a whole TTL after the replica runs again.
async fn a_replica_that_did_not_run_judges_no_silence_from_before_it_ran_again(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("beating@1", json!({})).await;
    app.heartbeat("quiet@1", json!({})).await;

    // Frozen: the store's clock and the process's own move on together.
    app.clock.advance_ms(3 * TTL_MS);
    app.process.advance_ms(3 * TTL_MS);
    let queued = app
        .post("/heartbeats", json!({ "silo": "beating@1" }))
        .await;
    assert_eq!(queued.status, StatusCode::OK, "{:?}", queued.body);
    assert_eq!(queued.body["status"], "active");
    assert_eq!(app.oracle.members.sweep().await.unwrap(), 0);
    assert_eq!(app.get("/silos/quiet@1").await.body["status"], "active");

    app.clock.advance_ms(TTL_MS - 1);
    app.heartbeat("beating@1", json!({})).await;
    assert_eq!(app.oracle.members.sweep().await.unwrap(), 0);
    app.clock.advance_ms(1);
    assert_eq!(
        app.oracle.members.sweep().await.unwrap(),
        1,
        "a whole TTL watched since the replica ran again"
    );
    assert_eq!(app.get("/silos/quiet@1").await.body["status"], "dead");
    assert_eq!(app.get("/silos/beating@1").await.body["status"], "active");
}

/// A replica that has just reached the store (it started, say, while the only other replica was
/// down and no heartbeat could be stored) judges no silence from before: a silo silent for far
/// longer than the TTL is alive to it until it has watched a whole TTL go by itself.
#[tokio::test]
async fn a_replica_judges_no_silence_from_before_it_reached_the_store() {
    let database = TestDatabase::create().await;
    let clock = ManualClock::starting_at(START_MS);
    let cluster = unique_cluster();
    let first = TestApp::builder(Backend::Postgres)
        .on(database.store(2, &clock).await, &database)
        .cluster(cluster.clone())
        .seed(1)
        .clock(clock.clone())
        .build()
        .await;
    first.heartbeat("quiet@1", json!({})).await;

    clock.advance_ms(6 * TTL_MS);
    let late = TestApp::builder(Backend::Postgres)
        .on(database.store(2, &clock).await, &database)
        .cluster(cluster)
        .seed(2)
        .clock(clock.clone())
        .build()
        .await;
    assert_eq!(
        late.oracle.members.sweep().await.unwrap(),
        0,
        "nothing judged yet"
    );
    assert_eq!(late.get("/silos/quiet@1").await.body["status"], "active");

    clock.advance_ms(TTL_MS - 1);
    assert_eq!(late.oracle.members.sweep().await.unwrap(), 0);
    clock.advance_ms(1);
    assert_eq!(
        late.oracle.members.sweep().await.unwrap(),
        1,
        "a whole TTL watched"
    );
    assert_eq!(late.get("/silos/quiet@1").await.body["status"], "dead");
}

/// Two outages with reachable time between them: silence counts from the end of the second, so
/// the silo lives on where forgiving only the last outage would have killed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_outage_is_forgiven_not_only_the_last() {
    let database = TestDatabase::create().await;
    let link = FaultyLink::start(database.server_address()).await;
    let clock = ManualClock::starting_at(START_MS);
    let store = database.store_via(link.port, &clock).await;
    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .cluster(unique_cluster())
        .seed(3)
        .clock(clock.clone())
        .build()
        .await;
    app.heartbeat("a@1", json!({})).await;

    let outage = |length_ms: i64| {
        let (app, link, clock) = (app.clone(), &link, clock.clone());
        async move {
            link.cut();
            clock.advance_ms(length_ms);
            assert!(
                app.oracle.members.sweep().await.is_err(),
                "the outage is seen"
            );
            link.restore();
            loop {
                clock.advance_ms(PROBE_INTERVAL_MS);
                if app.oracle.members.sweep().await.is_ok() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    };
    outage(5_000).await;
    clock.advance_ms(1_000);
    outage(1_000).await;
    let back = clock.now_ms();

    // 14 s after a@1's heartbeat, forgiving only the last outage (about 2 s, from the last answer
    // before it) would leave 12 s of silence: dead. Counted from the end of it, 7 s: alive.
    clock.advance_ms(START_MS + 14_000 - back);
    assert_eq!(app.oracle.members.sweep().await.unwrap(), 0);
    assert_eq!(app.get("/silos/a@1").await.body["status"], "active");
    // A whole TTL after the store answered again, it is dead.
    clock.advance_ms(back + TTL_MS - clock.now_ms());
    assert_eq!(app.oracle.members.sweep().await.unwrap(), 1);
}

/// Calls a replica answers without the database (a flush of held heartbeats with nothing due,
/// heartbeats held on its copies) say nothing of whether the database answers: during an outage
/// they do not end it, nor start the count of time the store was reached, which silence is
/// judged against. The flush, every 250 ms, used to end a real outage whenever nothing was due;
/// only calls that timed out kept silence from being counted through the rest of it, and a silo
/// silent through the whole outage could be declared dead the moment the database came back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_answered_from_the_replicas_own_copies_do_not_end_an_outage() {
    let database = TestDatabase::create().await;
    let link = FaultyLink::start(database.server_address()).await;
    let clock = ManualClock::starting_at(START_MS);
    let store: Arc<dyn Store> = Arc::new(database.store_via(link.port, &clock).await);
    let cluster = ClusterName::parse(&unique_cluster()).unwrap();
    assert!(store.membership(&cluster).await.is_ok());
    assert_eq!(store.outages_seen(), 0);

    link.cut();
    assert!(
        store.membership(&cluster).await.is_err(),
        "the outage is seen"
    );
    assert_eq!(store.outages_seen(), 1);
    clock.advance_ms(PROBE_INTERVAL_MS);
    assert_eq!(
        store.flush_held_heartbeats().await.unwrap(),
        0,
        "nothing held: the probe's turn, answered without the database"
    );
    clock.advance_ms(PROBE_INTERVAL_MS);
    assert!(store.membership(&cluster).await.is_err());
    assert_eq!(
        store.outages_seen(),
        1,
        "still the first outage: the flush did not end it"
    );
}
