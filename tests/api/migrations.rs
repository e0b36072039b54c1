//! Migrations through HTTP, on both stores: a source silo polls what it should send away,
//! completes it (the entry moves, as a new activation) or fails it; one that no longer applies is
//! refused with the reason and cancelled. Migrations are issued here through the store, under a
//! lease, as the rebalancer's driver will.

use axum::http::StatusCode;
use serde_json::{json, Value};

use placement_oracle::cluster::{ClusterName, GrainId, SiloId};
use placement_oracle::store::{Lease, LeaseClaim, MigrationReason, NewMigration};

use crate::helpers::{Backend, TestApp};

async fn issue(app: &TestApp, lease: &Lease, grain: &str, from: &str, to: &str, epoch: i64) -> i64 {
    let cluster = ClusterName::parse(&app.cluster).unwrap();
    let issued = app
        .store
        .issue_migrations(
            &cluster,
            lease,
            &[NewMigration {
                grain: GrainId::parse("grain", grain).unwrap(),
                from: SiloId::parse("silo", from).unwrap(),
                to: SiloId::parse("silo", to).unwrap(),
                epoch,
                reason: MigrationReason::Rebalancer,
            }],
        )
        .await
        .unwrap()
        .expect("the lease holds");
    issued[0].id
}

async fn placed_on(app: &TestApp, grain: &str, silo: &str) -> i64 {
    let reply = app
        .post("/placements", json!({ "grain": grain, "hint": silo }))
        .await;
    assert_eq!(reply.body["silo"], silo);
    reply.body["epoch"].as_i64().unwrap()
}

async fn a_source_polls_completes_and_fails_its_migrations(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    app.heartbeat("b@1", json!({})).await;
    let alice = placed_on(&app, "user/alice", "a@1").await;
    let bob = placed_on(&app, "user/bob", "a@1").await;
    let cluster = ClusterName::parse(&app.cluster).unwrap();
    let LeaseClaim::Held(lease) = app
        .store
        .claim_lease(&cluster, "driver", 60_000)
        .await
        .unwrap()
    else {
        panic!("lease");
    };
    let to_alice = issue(&app, &lease, "user/alice", "a@1", "b@1", alice).await;
    let to_bob = issue(&app, &lease, "user/bob", "a@1", "b@1", bob).await;

    let page = app.get("/migrations?silo=a@1&limit=1").await;
    assert_eq!(page.status, StatusCode::OK);
    let first = &page.body["migrations"][0];
    assert_eq!(
        (
            first["id"].as_i64(),
            first["grain"].as_str(),
            first["from"].as_str(),
            first["to"].as_str()
        ),
        (Some(to_alice), Some("user/alice"), Some("a@1"), Some("b@1"))
    );
    assert_eq!(
        (first["reason"].as_str(), first["epoch"].as_i64()),
        (Some("rebalancer"), Some(alice))
    );
    let cursor = page.body["next_cursor"].as_i64().expect("a second page");
    let rest = app
        .get(&format!("/migrations?silo=a@1&cursor={cursor}"))
        .await;
    assert_eq!(rest.body["migrations"][0]["id"], to_bob);
    assert!(rest.body["next_cursor"].is_null());
    assert_eq!(
        app.get("/migrations?silo=b@1").await.body["migrations"],
        json!([])
    );

    // Completed: the grain is a new activation on b.
    let done = app
        .post(&format!("/migrations/{to_alice}/complete"), Value::Null)
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    let epoch = done.body["epoch"].as_i64().unwrap();
    assert!(epoch > alice);
    let now = app.get("/activations/user/alice").await;
    assert_eq!(
        (now.body["silo"].as_str(), now.body["epoch"].as_i64()),
        (Some("b@1"), Some(epoch))
    );
    assert_eq!(app.place("user/alice").await["silo"], "b@1");
    // The answer was lost and the silo retries: the same answer, nothing moved again. Failing it
    // now is told it was completed.
    let again = app
        .post(&format!("/migrations/{to_alice}/complete"), Value::Null)
        .await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.body);
    assert_eq!(again.body, done.body);
    assert_eq!(
        app.get("/activations/user/alice").await.body["epoch"],
        epoch
    );
    let late = app
        .post(&format!("/migrations/{to_alice}/fail"), Value::Null)
        .await;
    assert_eq!(
        late.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:migration-ended"
    );

    // Bob was deactivated meanwhile: refused, with the reason, and cancelled.
    let gone = app
        .send(
            axum::http::Method::DELETE,
            &app.path(&format!("/activations/user/bob?silo=a@1&epoch={bob}")),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    let refused = app
        .post(&format!("/migrations/{to_bob}/complete"), Value::Null)
        .await;
    let problem = refused.problem(StatusCode::CONFLICT);
    assert_eq!(
        problem["type"],
        "urn:placement-oracle:problem:migration-refused"
    );
    assert!(
        problem["detail"].as_str().unwrap().contains("user/bob"),
        "{problem}"
    );
    let refused_again = app
        .post(&format!("/migrations/{to_bob}/complete"), Value::Null)
        .await;
    assert_eq!(refused_again.problem(StatusCode::CONFLICT), problem);
    assert_eq!(
        app.get("/migrations?silo=a@1").await.body["migrations"],
        json!([])
    );

    // Failing one the source could not carry out removes it; the grain stays.
    let carol = placed_on(&app, "user/carol", "a@1").await;
    let to_carol = issue(&app, &lease, "user/carol", "a@1", "b@1", carol).await;
    let failed = app
        .post(&format!("/migrations/{to_carol}/fail"), Value::Null)
        .await;
    assert_eq!(failed.status, StatusCode::OK);
    assert_eq!(failed.body["migration"]["grain"], "user/carol");
    assert_eq!(app.get("/activations/user/carol").await.body["silo"], "a@1");
    let failed_again = app
        .post(&format!("/migrations/{to_carol}/fail"), Value::Null)
        .await;
    assert_eq!(failed_again.status, StatusCode::OK);
    assert_eq!(failed_again.body, failed.body);
    let completed_late = app
        .post(&format!("/migrations/{to_carol}/complete"), Value::Null)
        .await;
    assert_eq!(
        completed_late.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:migration-ended"
    );
    assert_eq!(app.get("/activations/user/carol").await.body["silo"], "a@1");
    // An id no silo ended (nor ever issued) is still 404.
    app.post("/migrations/999999/fail", Value::Null)
        .await
        .problem(StatusCode::NOT_FOUND);

    assert_eq!(
        app.post("/migrations/zero/fail", Value::Null)
            .await
            .invalid_fields(),
        ["id"]
    );
    assert_eq!(
        app.get("/migrations?silo=a@1&limit=0")
            .await
            .invalid_fields(),
        ["limit"]
    );
    let metrics = app.send(axum::http::Method::GET, "/metrics", None).await;
    let text = metrics.body.as_str().unwrap();
    for event in ["completed", "cancelled", "failed"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("oracle_migrations_total")
                    && l.contains(&format!("event=\"{event}\""))),
            "{event}"
        );
    }
}

for_each_store!(a_source_polls_completes_and_fails_its_migrations);
