//! Several oracle replicas on one Postgres: the store, not a cache, keeps one activation per grain.

use std::collections::{HashMap, HashSet};

use placement_oracle::store::postgres::{Pooling, PostgresStore};
use placement_oracle::store::{Store, StoreSettings};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::helpers::{TestApp, TestDatabase};

const CALLERS_PER_GRAIN: usize = 8;

/// Two replicas, each with its own connection pool and its own RNG seed, serving one cluster. They
/// share one clock: the database's, which the test moves.
async fn two_replicas() -> (TestApp, TestApp, PostgresStore) {
    let (database, a, b) = TestApp::two_replicas().await;
    for i in 1..=5 {
        a.heartbeat(&format!("10.0.0.{i}:11111@1"), json!({})).await;
    }
    let check = database.store(1, &a.clock).await;
    (a, b, check)
}

async fn directory_rows(store: &PostgresStore, cluster: &str, grains: &[String]) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM activations WHERE cluster = $1 AND grain = ANY($2)")
        .bind(cluster)
        .bind(grains)
        .fetch_one(store.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_racing_on_the_same_new_grains_return_one_silo_per_grain() {
    let (a, b, check) = two_replicas().await;
    for round in 0..5 {
        let grains: Vec<String> = (0..40).map(|i| format!("user/r{round}-{i}")).collect();
        let mut callers = JoinSet::new();
        for grain in &grains {
            for caller in 0..CALLERS_PER_GRAIN {
                let replica = if caller % 2 == 0 {
                    a.clone()
                } else {
                    b.clone()
                };
                let grain = grain.clone();
                callers.spawn(async move { (grain.clone(), replica.place(&grain).await) });
            }
        }
        let mut answers: HashMap<String, Vec<Value>> = HashMap::new();
        while let Some(joined) = callers.join_next().await {
            let (grain, answer) = joined.unwrap();
            answers.entry(grain).or_default().push(answer);
        }
        for (grain, answers) in &answers {
            let silos: HashSet<&str> = answers
                .iter()
                .map(|a| a["silo"].as_str().unwrap())
                .collect();
            let epochs: HashSet<i64> = answers
                .iter()
                .map(|a| a["epoch"].as_i64().unwrap())
                .collect();
            let placed = answers.iter().filter(|a| a["outcome"] == "placed").count();
            assert_eq!(silos.len(), 1, "{grain} got several silos: {silos:?}");
            assert_eq!(
                epochs.len(),
                1,
                "{grain} got several activations: {epochs:?}"
            );
            assert_eq!(placed, 1, "{grain} was placed {placed} times");
        }
        assert_eq!(directory_rows(&check, &a.cluster, &grains).await, 40);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_racing_on_overlapping_batches_agree_and_never_deadlock() {
    let (a, b, check) = two_replicas().await;
    for round in 0..5 {
        let grains: Vec<String> = (0..200).map(|i| format!("order/r{round}-{i}")).collect();
        let forward: Vec<Value> = grains.iter().map(|g| json!({ "grain": g })).collect();
        let backward: Vec<Value> = forward.iter().rev().cloned().collect();
        let mut batches = JoinSet::new();
        for (replica, body) in [
            (a.clone(), forward.clone()),
            (b.clone(), backward),
            (b.clone(), forward),
        ] {
            batches.spawn(async move {
                let reply = replica
                    .post("/placements/batch", json!({ "placements": body }))
                    .await;
                assert_eq!(reply.status, 200, "{}", reply.body);
                reply.body["results"].as_array().unwrap().clone()
            });
        }
        let mut silo_of: HashMap<String, HashSet<String>> = HashMap::new();
        while let Some(results) = batches.join_next().await {
            for result in results.unwrap() {
                silo_of
                    .entry(result["grain"].as_str().unwrap().to_owned())
                    .or_default()
                    .insert(result["placement"]["silo"].as_str().unwrap().to_owned());
            }
        }
        assert_eq!(silo_of.len(), 200);
        assert!(
            silo_of.values().all(|silos| silos.len() == 1),
            "a grain got several silos"
        );
        assert_eq!(directory_rows(&check, &a.cluster, &grains).await, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grain_on_a_dead_silo_is_replaced_once_when_replicas_race() {
    let (a, b, _check) = two_replicas().await;
    a.heartbeat("doomed@1", json!({})).await;
    let first = a
        .post(
            "/placements",
            json!({ "grain": "user/phoenix", "hint": "doomed@1" }),
        )
        .await
        .body;
    assert_eq!(first["silo"], "doomed@1");

    // Every other silo keeps beating; doomed@1 stays silent for the whole TTL.
    let half = crate::helpers::TTL_MS / 2;
    a.clock.advance_ms(half);
    for i in 1..=5 {
        a.heartbeat(&format!("10.0.0.{i}:11111@1"), json!({})).await;
    }
    a.clock.advance_ms(half);
    let mut callers = JoinSet::new();
    for caller in 0..16 {
        let replica = if caller % 2 == 0 {
            a.clone()
        } else {
            b.clone()
        };
        callers.spawn(async move { replica.place("user/phoenix").await });
    }
    let mut answers = Vec::new();
    while let Some(answer) = callers.join_next().await {
        answers.push(answer.unwrap());
    }
    let silos: HashSet<&str> = answers
        .iter()
        .map(|a| a["silo"].as_str().unwrap())
        .collect();
    assert_eq!(silos.len(), 1, "{silos:?}");
    assert!(!silos.contains("doomed@1"));
    assert_eq!(
        answers.iter().filter(|a| a["outcome"] == "placed").count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silo_whose_grain_was_given_away_cannot_heartbeat_its_way_back() {
    let (a, b, _check) = two_replicas().await;
    a.heartbeat("s@1", json!({})).await;
    a.post("/placements", json!({ "grain": "user/g", "hint": "s@1" }))
        .await;

    // The other silos keep beating; s stays silent past its TTL, and replica a gives its grain
    // away. s's late heartbeat then reaches replica b.
    let half = crate::helpers::TTL_MS / 2;
    a.clock.advance_ms(half);
    for i in 1..=5 {
        a.heartbeat(&format!("10.0.0.{i}:11111@1"), json!({})).await;
    }
    a.clock.advance_ms(half);
    let moved = a.place("user/g").await;
    assert_ne!(moved["silo"], "s@1");

    let late = b.try_heartbeat("s@1", json!({})).await;
    assert_eq!(
        late.problem(axum::http::StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:silo-declared-dead",
        "s must learn it lost its grains, not be told all is well"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_policy_change_on_one_replica_reaches_the_other_within_a_second() {
    let (a, b, _check) = two_replicas().await;
    // b decides once, so it holds a membership-and-policy read.
    assert_eq!(
        b.place("user/before").await["strategy"],
        "resource_optimized"
    );

    let change = a
        .put_policy(Some("*"), json!({ "default_strategy": "hash_based" }))
        .await;
    assert_eq!(change.status, 200);

    // Within a second (the read b holds is at most a quarter of a second old) b places by it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    let mut i = 0;
    loop {
        i += 1;
        let answer = b.place(&format!("user/after-{i}")).await;
        if answer["strategy"] == "hash_based" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "replica b still places with the old policy"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_hand_out_round_robin_answers_that_cycle_evenly() {
    let (a, b, _check) = two_replicas().await;
    let pool = json!({ "members": { "silos": ["10.0.0.1:11111@1", "10.0.0.2:11111@1", "10.0.0.3:11111@1"] } });
    let created = a
        .send(axum::http::Method::PUT, &a.path("/pools/rr"), Some(pool))
        .await;
    assert_eq!(created.status, 200, "{}", created.body);

    let mut callers = JoinSet::new();
    for i in 0..60 {
        let replica = if i % 2 == 0 { a.clone() } else { b.clone() };
        callers.spawn(async move {
            let answer = replica.post("/pools/rr/connections", json!({})).await;
            assert_eq!(answer.status, 200, "{}", answer.body);
            answer.body["silo"].as_str().unwrap().to_owned()
        });
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    while let Some(silo) = callers.join_next().await {
        *counts.entry(silo.unwrap()).or_default() += 1;
    }
    assert_eq!(counts.len(), 3);
    assert!(
        counts.values().all(|&n| n == 20),
        "one shared counter: exactly even, got {counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_replicas_starting_together_migrate_a_fresh_database_once() {
    let database = TestDatabase::create_empty().await;
    let mut replicas = JoinSet::new();
    for _ in 0..4 {
        let url = database.url();
        replicas.spawn(async move {
            let store = PostgresStore::connect(
                &url,
                2,
                std::time::Duration::from_secs(5),
                Pooling::Session,
                StoreSettings::with_ttl(10_000),
            )
            .await
            .unwrap();
            store.migrate().await.unwrap();
            store.ping().await.unwrap();
            store
        });
    }
    let mut stores = Vec::new();
    while let Some(store) = replicas.join_next().await {
        stores.push(store.unwrap());
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(stores[0].pool())
        .await
        .unwrap();
    assert_eq!(
        applied,
        placement_oracle::store::postgres::MIGRATOR.iter().count() as i64
    );
}

/// Migrations run once (`placement-oracle migrate`, a Kubernetes Job) through their own URL, and
/// replicas started with `ORACLE_MIGRATE_ON_START=false` refuse a schema that is behind instead
/// of changing it.
#[tokio::test]
async fn replicas_that_do_not_migrate_refuse_a_schema_behind_and_take_a_current_one() {
    let database = TestDatabase::create_empty().await;
    let mut config = placement_oracle::config::Config::defaults();
    config.database_url = Some("postgres://nobody@127.0.0.1:1/unused".to_owned());
    config.migration_database_url = Some(database.url());
    config.migrate_on_start = false;
    // `migrate` uses the migration URL alone (DATABASE_URL here leads nowhere).
    placement_oracle::migrate(&config).await.unwrap();

    let behind = TestDatabase::create_empty().await;
    config.database_url = Some(behind.url());
    let refused = placement_oracle::open_store(&config).await.err().unwrap();
    assert!(
        refused
            .to_string()
            .contains("run `placement-oracle migrate`"),
        "{refused}"
    );
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .fetch_one(&reached_pool(&behind).await)
            .await
            .unwrap();
    assert_eq!(tables, 0, "a replica that does not migrate changes nothing");

    config.database_url = Some(database.url());
    let store = placement_oracle::open_store(&config).await.unwrap();
    store.ping().await.unwrap();
}

async fn reached_pool(database: &TestDatabase) -> sqlx::PgPool {
    sqlx::PgPool::connect(&database.url()).await.unwrap()
}

/// A replica answers placements of grains it answered for lately from its own cache, so its answer
/// can be stale: another replica may have moved the grain since. The store alone registers, so a
/// stale answer costs a forwarded call, never a second activation — as long as a silo runs a grain
/// only under a registration it holds ("What a runtime does with an answer" in docs/runtimes.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_cached_answer_never_makes_a_second_activation() {
    let (a, b, check) = two_replicas().await;
    let grain = "user/wanderer";
    let first = a.place(grain).await;
    assert_eq!(first["outcome"], "placed");
    let (old_silo, old_epoch) = (
        first["silo"].as_str().unwrap().to_owned(),
        first["epoch"].as_i64().unwrap(),
    );

    // Through replica B, the silo deactivates the grain and another call places it anew.
    let gone = b
        .delete(&format!(
            "/activations/{grain}?silo={old_silo}&epoch={old_epoch}"
        ))
        .await;
    assert_eq!(gone.status, 204, "{}", gone.body);
    let again = b.place(grain).await;
    assert_eq!(again["outcome"], "placed");
    let new_epoch = again["epoch"].as_i64().unwrap();
    assert!(new_epoch > old_epoch);

    // Replica A has not heard: it answers from its cache with the old activation.
    let stale = a.place(grain).await;
    assert_eq!(stale["outcome"], "existing");
    assert_eq!(
        stale["epoch"], old_epoch,
        "the cached answer is the old one"
    );

    // The silo named does not hold that registration any more (it deactivated it), so it asks as
    // itself; a cached answer naming the asking silo is never served: the store answers.
    let asked = a
        .post(
            "/placements",
            json!({ "grain": grain, "requesting_silo": old_silo }),
        )
        .await;
    assert_eq!(asked.status, 200, "{}", asked.body);
    assert_eq!(asked.body["epoch"], new_epoch);
    assert_eq!(asked.body["outcome"], "existing");

    // A stale epoch removes nothing, and the answer names the live activation.
    let refused = a
        .delete(&format!(
            "/activations/{grain}?silo={old_silo}&epoch={old_epoch}"
        ))
        .await;
    let problem = refused.problem(axum::http::StatusCode::CONFLICT);
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("activation {new_epoch}")),
        "{detail}"
    );

    // The directory holds exactly one activation of the grain: the new one. A's lookup reads it
    // from the store and refreshes A's answers.
    assert_eq!(
        directory_rows(&check, &a.cluster, &[grain.to_owned()]).await,
        1
    );
    let looked_up = a.get(&format!("/activations/{grain}")).await;
    assert_eq!(looked_up.body["epoch"], new_epoch);
    assert_eq!(a.place(grain).await["epoch"], new_epoch);
}
