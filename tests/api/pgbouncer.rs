//! The oracle behind PgBouncer: Debian's, started by each test as a process of its own (never a
//! shared one), in front of the test's database. In session mode nothing about the oracle's
//! connections may need a pooler configured for it: it connects, migrates, keeps
//! `plan_cache_mode` (set per connection, not as a startup option a pooler drops), and serves
//! through it. In transaction mode (`ORACLE_DB_TRANSACTION_POOLING`, migrations through their
//! own direct URL) it serves many callers at once on fewer server sessions than it has
//! connections, where any statement kept by name on a connection would fail or run another's.
//! (Every test of `for_each_store!` also runs through such a PgBouncer.)

use std::time::Duration;

use axum::http::{Method, StatusCode};
use placement_oracle::store::postgres::{Pooling, PostgresStore};
use placement_oracle::store::StoreSettings;
use serde_json::json;
use tokio::task::JoinSet;

use crate::helpers::{Backend, TestApp, TestDatabase, TTL_MS};
use crate::pgbouncer_process::PgBouncer;

#[tokio::test]
async fn the_oracle_connects_migrates_and_serves_through_pgbouncer_in_session_mode() {
    let database = TestDatabase::create_empty().await;
    let bouncer = PgBouncer::start(&database.server_address(), "session", 20);
    let url = database.url_via(bouncer.port());
    let connect = || {
        PostgresStore::connect(
            &url,
            4,
            Duration::from_secs(5),
            Pooling::Session,
            StoreSettings::with_ttl(TTL_MS),
        )
    };
    let migrator = connect()
        .await
        .unwrap_or_else(|e| panic!("connecting through pgbouncer: {e}\n{}", bouncer.log()));
    migrator.migrate().await.expect("migrate through pgbouncer");
    let store = connect().await.unwrap();
    assert_eq!(
        store.pending_migrations().await.unwrap(),
        Vec::<String>::new()
    );
    let plan_cache_mode: String = sqlx::query_scalar("SHOW plan_cache_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(plan_cache_mode, "force_generic_plan");

    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .build()
        .await;
    for silo in ["10.0.0.1:11111@1", "10.0.0.2:11111@1"] {
        app.heartbeat(silo, json!({"cpu_usage": 20.0})).await;
    }
    let grains: Vec<String> = (0..50).map(|i| format!("user/{i}")).collect();
    let batch = app
        .post(
            "/placements/batch",
            json!({"placements": grains.iter().map(|g| json!({"grain": g})).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.body);
    for (grain, result) in grains.iter().zip(batch.body["results"].as_array().unwrap()) {
        let placed = &result["placement"];
        let again = app.place(grain).await;
        assert_eq!(
            again["silo"], placed["silo"],
            "{grain} stays where it was placed"
        );
        let found = app.get(&format!("/activations/{grain}")).await;
        assert_eq!(found.status, StatusCode::OK);
        assert_eq!(found.body["epoch"], placed["epoch"]);
    }
    let first = &batch.body["results"][0]["placement"];
    let gone = app
        .send(
            Method::DELETE,
            &app.path(&format!(
                "/activations/user/0?silo={}&epoch={}",
                first["silo"].as_str().unwrap(),
                first["epoch"]
            )),
            None,
        )
        .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT, "{}", gone.body);
    assert_eq!(
        app.get("/activations/user/0").await.status,
        StatusCode::NOT_FOUND
    );
    let policy = app
        .put_policy(Some("*"), json!({"default_strategy": "activation_count"}))
        .await;
    assert_eq!(policy.status, StatusCode::OK, "{}", policy.body);
    let silos = app.get("/silos").await;
    assert_eq!(silos.body["silos"].as_array().unwrap().len(), 2);
    let ready = app.send(Method::GET, "/readyz", None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
}

/// The scenario: callers racing placements, heartbeats and look-ups through a
/// transaction-mode PgBouncer with two server sessions for the oracle's eight connections. The
/// oracle is configured as an operator would (`serve` migrating through the direct URL).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_oracle_serves_concurrent_callers_through_pgbouncer_in_transaction_mode() {
    let database = TestDatabase::create_empty().await;
    let bouncer = PgBouncer::start(&database.server_address(), "transaction", 2);
    let mut config = placement_oracle::config::Config::defaults();
    config.database_url = Some(database.url_via(bouncer.port()));
    config.migration_database_url = Some(database.url());
    config.db_transaction_pooling = true;
    config.db_pool_size = 8;
    config.validate().unwrap();
    let store = placement_oracle::open_store(&config)
        .await
        .unwrap_or_else(|e| panic!("serving through pgbouncer: {e}\n{}", bouncer.log()));
    let app = TestApp::builder(Backend::Postgres)
        .on_shared(store, &database)
        .build()
        .await;
    for silo in ["10.0.0.1:11111@1", "10.0.0.2:11111@1", "10.0.0.3:11111@1"] {
        app.heartbeat(silo, json!({"cpu_usage": 20.0})).await;
    }

    let callers = 16;
    let grains_each = 40;
    let mut racing = JoinSet::new();
    for caller in 0..callers {
        let app = app.clone();
        racing.spawn(async move {
            let mut placed = Vec::new();
            for i in 0..grains_each {
                // Two callers place each grain, so half the placements find it registered.
                let grain = format!("user/{}", (caller / 2) * grains_each + i);
                let answer = app.place(&grain).await;
                placed.push((grain, answer["silo"].clone(), answer["epoch"].clone()));
                if i % 10 == 0 {
                    let silo = format!("10.0.0.{}:11111@1", caller % 3 + 1);
                    app.heartbeat(&silo, json!({"cpu_usage": 20.0})).await;
                }
            }
            placed
        });
    }
    let mut placements = 0;
    while let Some(placed) = racing.join_next().await {
        for (grain, silo, epoch) in placed.unwrap() {
            placements += 1;
            let found = app.get(&format!("/activations/{grain}")).await;
            assert_eq!(found.status, StatusCode::OK, "{grain}: {}", found.body);
            assert_eq!(
                (&found.body["silo"], &found.body["epoch"]),
                (&silo, &epoch),
                "{grain}: both callers were given the one registration"
            );
        }
    }
    assert_eq!(placements, callers * grains_each);
    let ready = app.send(Method::GET, "/readyz", None).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
    let listed = app.get("/silos").await;
    assert_eq!(listed.body["silos"].as_array().unwrap().len(), 3);
}

/// Through a transaction-mode pooler the migrator could not hold its session lock: the oracle
/// refuses to start migrating through it, and says which URL to give.
#[tokio::test]
async fn transaction_pooling_never_migrates_through_the_pooler() {
    let mut config = placement_oracle::config::Config::defaults();
    config.database_url = Some("postgres://oracle@pgbouncer:6432/oracle".to_owned());
    config.db_transaction_pooling = true;
    let refused = config.validate().unwrap_err().join("\n");
    assert!(
        refused.contains("ORACLE_MIGRATION_DATABASE_URL"),
        "{refused}"
    );
    let refused = placement_oracle::migrate(&config).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("ORACLE_MIGRATION_DATABASE_URL"),
        "{refused}"
    );
    config.migrate_on_start = false;
    config.validate().unwrap();
}
