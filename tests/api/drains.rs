//! Drains through HTTP, on both stores: every movable grain of a drained silo gets exactly one
//! migration, none to a dead, joining or draining silo; failed or stranded migrations are issued
//! again; a replica without the lease leaves the issuing to the holder.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::StatusCode;
use serde_json::{json, Value};

use placement_oracle::cluster::ClusterName;
use placement_oracle::oracle::DriverStep;

use crate::helpers::{due_now, Backend, TestApp};

/// Places `count` grains `{prefix}{i}` on `silo` by hint.
async fn place_on(app: &TestApp, silo: &str, prefix: &str, count: usize) {
    let grains: Vec<Value> = (0..count)
        .map(|i| json!({ "grain": format!("{prefix}{i}"), "hint": silo }))
        .collect();
    for chunk in grains.chunks(1_000) {
        let reply = app
            .post("/placements/batch", json!({ "placements": chunk }))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        for placed in reply.body["results"].as_array().unwrap() {
            assert_eq!(placed["placement"]["silo"], silo, "{placed}");
        }
    }
}

/// Every open migration from `silo`, all pages.
async fn migrations_from(app: &TestApp, silo: &str) -> Vec<Value> {
    let mut all = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = app
            .get(&format!("/migrations?silo={silo}&limit=1000{cursor}"))
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        all.extend(page.body["migrations"].as_array().unwrap().iter().cloned());
        match page.body["next_cursor"].as_i64() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return all,
        }
    }
}

async fn step(app: &TestApp) -> DriverStep {
    let cluster = ClusterName::parse(&app.cluster).unwrap();
    app.oracle
        .movers
        .drive(&cluster)
        .await
        .unwrap()
        .expect("this replica holds the lease")
}

fn issued_total(reply: &Value) -> u64 {
    reply["issued"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["migrations"].as_u64().unwrap())
        .sum()
}

async fn every_movable_grain_of_a_drained_silo_gets_one_migration_to_a_live_silo(backend: Backend) {
    let app = TestApp::new(backend).await;
    let policy = json!({ "grain_types": { "ledger": { "immovable": "any" } } });
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );
    // a hosts every type; b and c all but `audit`; d is joining; e left; f is drained too.
    app.heartbeat("a@1", json!({ "cpu_usage": 30.0 })).await;
    let hosted = json!(["user", "order", "ledger"]);
    for live in ["b@1", "c@1", "f@1"] {
        app.heartbeat(
            live,
            json!({ "grain_types": hosted, "cpu_usage": 10.0, "activation_count": 0 }),
        )
        .await;
    }
    app.heartbeat("d@1", json!({ "status": "joining" })).await;
    app.heartbeat("e@1", json!({})).await;
    assert_eq!(app.delete("/silos/e@1").await.status, StatusCode::OK);
    assert_eq!(
        app.post("/silos/f@1/drain", Value::Null).await.status,
        StatusCode::OK
    );
    place_on(&app, "a@1", "audit/", 5).await;
    place_on(&app, "a@1", "ledger/", 10).await;
    place_on(&app, "a@1", "order/", 50).await;
    place_on(&app, "a@1", "user/", 2_300).await;
    app.heartbeat(
        "a@1",
        json!({ "cpu_usage": 30.0, "activation_count": 2_365 }),
    )
    .await;

    // The request marks a, and issues a first batch of 2,000 (the grain types no one else takes
    // are set aside, so they hide nothing).
    let drained = app.post("/silos/a@1/drain", Value::Null).await;
    assert_eq!(drained.status, StatusCode::OK, "{}", drained.body);
    let body = &drained.body;
    assert_eq!(body["silo"]["status"], "shutting_down");
    assert_eq!(body["planner"], app.oracle_replica());
    assert_eq!(issued_total(body), 2_000);
    assert_eq!(body["stuck"][0]["grain_type"], "audit");
    assert_eq!(body["stuck"][0]["activations"], 5);
    assert!(body["stuck"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("`audit`"));
    assert_eq!(
        body["silo"]["drain"]["remaining_activations"], 2_365,
        "{body}"
    );
    assert_eq!(body["silo"]["drain"]["migrating"], 2_000);

    // Nothing new goes to a drained silo, and its own heartbeats cannot undo the drain.
    let placed = app
        .post("/placements", json!({ "grain": "user/new", "hint": "a@1" }))
        .await;
    assert_ne!(placed.body["silo"], "a@1", "{}", placed.body);
    let beat = app.heartbeat("a@1", json!({ "status": "active" })).await;
    assert_eq!(beat["status"], "shutting_down");
    assert!(beat["drain"]["requested_at_ms"].is_i64());

    // The lease holder's next step issues the rest; then there is nothing left to issue.
    let next = step(&app).await;
    assert_eq!(next.drains.len(), 1);
    assert_eq!(next.drains[0].migrations.len(), 350);
    assert!(step(&app).await.drains.is_empty());

    let migrations = migrations_from(&app, "a@1").await;
    let grains: BTreeSet<&str> = migrations
        .iter()
        .map(|m| m["grain"].as_str().unwrap())
        .collect();
    assert_eq!(migrations.len(), 2_350, "every movable grain");
    assert_eq!(grains.len(), 2_350, "exactly one migration each");
    assert!(grains
        .iter()
        .all(|g| g.starts_with("user/") || g.starts_with("order/")));
    let mut by_target: BTreeMap<&str, usize> = BTreeMap::new();
    for m in &migrations {
        assert_eq!(m["reason"], "drain");
        *by_target.entry(m["to"].as_str().unwrap()).or_default() += 1;
    }
    assert_eq!(
        by_target.keys().copied().collect::<Vec<_>>(),
        ["b@1", "c@1"],
        "never a dead, joining or draining silo"
    );
    for (target, n) in &by_target {
        assert!(
            (1_000..=1_350).contains(n),
            "the plan counts its own moves, so b and c share them: {target} got {n}"
        );
    }

    // The silo carries them out; what stays is immovable or has nowhere to go.
    for m in &migrations {
        let done = app
            .post(&format!("/migrations/{}/complete", m["id"]), Value::Null)
            .await;
        assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    }
    let silo = app.get("/silos/a@1").await;
    assert_eq!(
        silo.body["drain"],
        json!({ "requested_at_ms": silo.body["drain"]["requested_at_ms"], "remaining_activations": 15, "migrating": 0 })
    );
    assert!(step(&app).await.drains.is_empty());
    let listed = app.get("/silos").await;
    let f = listed.body["silos"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["silo"] == "f@1")
        .unwrap();
    assert_eq!(f["drain"]["remaining_activations"], 0, "{f}");
}

async fn failed_and_stranded_drain_migrations_are_issued_again(backend: Backend) {
    let app = TestApp::new(backend).await;
    for silo in ["a@1", "b@1", "c@1"] {
        app.heartbeat(silo, json!({ "activation_count": 0 })).await;
    }
    place_on(&app, "a@1", "user/", 20).await;
    let drained = app.post("/silos/a@1/drain", Value::Null).await;
    assert_eq!(issued_total(&drained.body), 20);
    let migrations = migrations_from(&app, "a@1").await;

    // One fails: the next step issues it again.
    let failed = &migrations[0];
    let reply = app
        .post(&format!("/migrations/{}/fail", failed["id"]), Value::Null)
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let again = step(&app).await;
    assert_eq!(again.drains[0].migrations.len(), 1);
    assert_eq!(again.drains[0].migrations[0].grain, failed["grain"]);

    // c leaves: the migrations to it are cancelled and issued again, to b.
    assert_eq!(app.delete("/silos/c@1").await.status, StatusCode::OK);
    step(&app).await;
    let now = migrations_from(&app, "a@1").await;
    assert_eq!(now.len(), 20);
    assert!(now.iter().all(|m| m["to"] == "b@1"), "{now:?}");
}

async fn only_a_live_known_silo_can_be_drained(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    app.heartbeat("b@1", json!({})).await;
    app.post("/silos/nobody@1/drain", Value::Null)
        .await
        .problem(StatusCode::NOT_FOUND);
    assert_eq!(app.delete("/silos/b@1").await.status, StatusCode::OK);
    let dead = app.post("/silos/b@1/drain", Value::Null).await;
    assert!(dead.problem(StatusCode::CONFLICT)["type"]
        .as_str()
        .unwrap()
        .ends_with("silo-dead"));
    let invalid = app.post("/silos/%20/drain", Value::Null).await;
    assert_eq!(invalid.invalid_fields(), ["silo"]);
    // Draining needs no rebalancer: the cluster is driven for it.
    let drained = app.post("/silos/a@1/drain", Value::Null).await;
    assert_eq!(drained.status, StatusCode::OK);
    let cluster = ClusterName::parse(&app.cluster).unwrap();
    assert!(due_now(&*app.store, &cluster).await.moving);
}

for_each_store!(
    every_movable_grain_of_a_drained_silo_gets_one_migration_to_a_live_silo,
    failed_and_stranded_drain_migrations_are_issued_again,
    only_a_live_known_silo_can_be_drained,
);

/// Two replicas on one Postgres database: a drain asked of the one without the lease is marked
/// at once and issued by the holder's next step.
#[tokio::test]
async fn a_replica_without_the_lease_leaves_the_issuing_to_the_holder() {
    let (_, a, b) = TestApp::two_replicas().await;
    let cluster_name = a.cluster.clone();
    for silo in ["s1@1", "s2@1", "s3@1"] {
        a.heartbeat(silo, json!({ "activation_count": 0 })).await;
    }
    place_on(&a, "s1@1", "user/", 30).await;
    // A takes the lease (draining s3, which has nothing).
    let first = a.post("/silos/s3@1/drain", Value::Null).await;
    assert_eq!(first.body["planner"], a.oracle_replica());

    let asked = b.post("/silos/s1@1/drain", Value::Null).await;
    assert_eq!(asked.status, StatusCode::OK, "{}", asked.body);
    assert_eq!(asked.body["silo"]["status"], "shutting_down");
    assert_eq!(asked.body["planner"], a.oracle_replica());
    assert_eq!(asked.body["issued"], json!([]));
    let cluster = ClusterName::parse(&cluster_name).unwrap();
    assert!(
        b.oracle.movers.drive(&cluster).await.unwrap().is_none(),
        "B does not hold the lease"
    );
    let issued = step(&a).await;
    assert_eq!(issued.drains[0].migrations.len(), 30);
    assert!(issued.drains[0].migrations.iter().all(|m| m.to == "s2@1"));
}
