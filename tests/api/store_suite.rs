//! The behavioural suite: every test runs against the embedded store and against Postgres, through
//! the HTTP API, with the clock under the test's control.

use std::collections::{HashMap, HashSet};

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{Backend, TestApp, START_MS, TTL_MS};

for_each_store!(
    a_first_heartbeat_creates_the_cluster_and_the_silo,
    heartbeats_are_stamped_with_the_oracle_clock_and_smoothed,
    a_placement_is_registered_and_every_later_caller_gets_the_same_silo,
    only_active_silos_hosting_the_grain_type_are_chosen,
    a_compatible_hint_is_honoured,
    unplaceable_grains_get_a_problem_that_says_why,
    a_dead_silo_is_never_chosen_again_and_its_grains_are_placed_anew,
    the_sweep_releases_a_dead_silos_activations,
    a_dead_silo_must_rejoin_under_a_new_id,
    a_silo_status_only_moves_forward,
    a_graceful_leave_releases_the_silos_activations,
    deactivation_only_removes_the_entry_on_the_named_silo,
    a_deactivation_must_name_the_epoch_it_ends,
    a_silos_activations_are_listed_in_pages,
    a_batch_places_many_grains_with_one_result_each,
    the_policy_is_versioned_and_every_bad_field_named,
    the_policy_decides_strategy_filters_and_ttl_per_grain_type,
    pools_are_validated_stored_and_read_back,
    a_pool_hands_out_only_available_nodes_by_its_rule,
);

async fn three_silos(app: &TestApp) {
    for silo in ["10.0.0.1:11111@1", "10.0.0.2:11111@1", "10.0.0.3:11111@1"] {
        app.heartbeat(silo, json!({ "cpu_usage": 10.0 })).await;
    }
}

async fn a_first_heartbeat_creates_the_cluster_and_the_silo(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.get("/silos").await.problem(StatusCode::NOT_FOUND);

    let view = app
        .heartbeat(
            "10.0.0.5:11111@139000",
            json!({
                "role": "frontend",
                "metadata": { "zone": "az1" },
                "grain_types": ["user"],
                "memory_usage_bytes": 6_800_000_000_u64,
                "max_available_memory_bytes": 16_000_000_000_u64,
                "activation_count": 1200,
                "connection_count": 37
            }),
        )
        .await;
    assert_eq!(view["status"], "active");
    assert_eq!(
        view["address"], "10.0.0.5:11111",
        "address defaults to the id before '@'"
    );
    assert_eq!(view["role"], "frontend");
    assert_eq!(view["metadata"]["zone"], "az1");
    assert_eq!(view["grain_types"], json!(["user"]));
    assert_eq!(view["load"]["activation_count"], 1200);
    assert_eq!(view["smoothed"]["memory_usage_bytes"], 6_800_000_000_u64);
    assert_eq!(
        view["smoothed"]["available_memory_bytes"],
        9_200_000_000_u64
    );
    assert_eq!(view["silo_ttl_ms"], TTL_MS);

    let listed = app.get("/silos").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.body["silos"].as_array().unwrap().len(), 1);
    let one = app.get("/silos/10.0.0.5:11111@139000").await;
    assert_eq!(one.body["silo"], "10.0.0.5:11111@139000");
    app.get("/silos/nobody@1")
        .await
        .problem(StatusCode::NOT_FOUND);
}

async fn heartbeats_are_stamped_with_the_oracle_clock_and_smoothed(backend: Backend) {
    let app = TestApp::new(backend).await;
    // The first rows of the reference's Kalman test vector, fed through heartbeats.
    let mut smoothed = Vec::new();
    for cpu in [50.0, 50.0, 80.0, 20.0] {
        let view = app.heartbeat("a@1", json!({ "cpu_usage": cpu })).await;
        smoothed.push(view["smoothed"]["cpu_usage"].as_f64().unwrap());
        app.clock.advance_ms(1_000);
    }
    for (got, want) in smoothed.iter().zip([50.0, 50.0, 50.86, 48.6448]) {
        assert!((got - want).abs() < 0.001, "smoothed {smoothed:?}");
    }
    // What a Postgres replica held back it writes within a quarter of a second; read after that.
    app.oracle.members.flush_held_heartbeats().await.unwrap();
    let view = app.get("/silos/a@1").await.body;
    assert_eq!(view["last_heartbeat_at_ms"], START_MS + 3_000);
    assert_eq!(view["last_heartbeat_age_ms"], 1_000);
    assert_eq!(view["first_seen_at_ms"], START_MS);
    assert_eq!(view["heartbeat_count"], 4);
}

async fn a_placement_is_registered_and_every_later_caller_gets_the_same_silo(backend: Backend) {
    let app = TestApp::new(backend).await;
    three_silos(&app).await;

    let first = app.place("user/alice").await;
    assert_eq!(first["outcome"], "placed");
    assert_eq!(
        first["strategy"], "resource_optimized",
        "Orleans' default since 9.2"
    );
    assert_eq!(first["grain"], "user/alice");
    let silo = first["silo"].as_str().unwrap();
    assert_eq!(first["address"], silo.split('@').next().unwrap());

    for _ in 0..5 {
        let again = app.place("user/alice").await;
        assert_eq!(again["outcome"], "existing");
        assert_eq!(
            (&again["silo"], &again["epoch"]),
            (&first["silo"], &first["epoch"])
        );
    }
    let looked_up = app.get("/activations/user/alice").await;
    assert_eq!(looked_up.status, StatusCode::OK);
    assert_eq!(looked_up.body["silo"], first["silo"]);
    let encoded = app.get("/activations/user%2Falice").await;
    assert_eq!(
        encoded.body["silo"], first["silo"],
        "a percent-encoded '/' works too"
    );
    app.get("/activations/user/bob")
        .await
        .problem(StatusCode::NOT_FOUND);
}

async fn only_active_silos_hosting_the_grain_type_are_chosen(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("joining@1", json!({ "status": "joining" }))
        .await;
    app.heartbeat("leaving@1", json!({ "status": "shutting_down" }))
        .await;
    app.heartbeat("orders@1", json!({ "grain_types": ["order"] }))
        .await;
    app.heartbeat("users@1", json!({ "grain_types": ["user", "order"] }))
        .await;
    app.heartbeat("any@1", json!({})).await;

    let mut chosen = HashSet::new();
    for i in 0..40 {
        chosen.insert(
            app.place(&format!("user/{i}")).await["silo"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(
        chosen,
        HashSet::from(["users@1".to_owned(), "any@1".to_owned()])
    );

    let explained = app
        .post(
            "/placements",
            json!({ "grain": "user/explained", "explain": true }),
        )
        .await
        .body;
    assert_eq!(
        explained["explanation"]["candidates"],
        json!(["any@1", "users@1"])
    );
    assert_eq!(
        explained["explanation"]["rule"], "no_statistics",
        "no silo reported load"
    );
    let excluded: Vec<&str> = explained["explanation"]["excluded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["silo"].as_str().unwrap())
        .collect();
    assert_eq!(excluded, ["joining@1", "leaving@1", "orders@1"]);
}

async fn a_compatible_hint_is_honoured(backend: Backend) {
    let app = TestApp::new(backend).await;
    three_silos(&app).await;
    app.heartbeat("joining@1", json!({ "status": "joining" }))
        .await;
    for i in 0..10 {
        let reply = app
            .post(
                "/placements",
                json!({ "grain": format!("user/h{i}"), "hint": "10.0.0.2:11111@1" }),
            )
            .await;
        assert_eq!(reply.body["silo"], "10.0.0.2:11111@1");
    }
    let ignored = app
        .post(
            "/placements",
            json!({ "grain": "user/j", "hint": "joining@1", "explain": true }),
        )
        .await;
    assert_ne!(ignored.body["silo"], "joining@1");
    assert!(ignored.body["explanation"]["hint"]
        .as_str()
        .unwrap()
        .contains("ignored"));
}

async fn unplaceable_grains_get_a_problem_that_says_why(backend: Backend) {
    let app = TestApp::new(backend).await;
    let unknown = app.post("/placements", json!({ "grain": "user/a" })).await;
    assert!(unknown.problem(StatusCode::NOT_FOUND)["detail"]
        .as_str()
        .unwrap()
        .contains("unknown"));

    app.heartbeat("joining@1", json!({ "status": "joining" }))
        .await;
    let reply = app.post("/placements", json!({ "grain": "user/a" })).await;
    let problem = reply.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        problem["type"],
        "urn:placement-oracle:problem:no-active-silo"
    );
    assert!(reply.headers.contains_key("retry-after"));

    app.heartbeat("orders@1", json!({ "grain_types": ["order"] }))
        .await;
    let reply = app.post("/placements", json!({ "grain": "user/a" })).await;
    let problem = reply.problem(StatusCode::CONFLICT);
    assert_eq!(
        problem["type"],
        "urn:placement-oracle:problem:no-compatible-silo"
    );
    assert!(problem["detail"].as_str().unwrap().contains("`user`"));
}

async fn a_dead_silo_is_never_chosen_again_and_its_grains_are_placed_anew(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    let first = app.place("user/alice").await;
    assert_eq!(first["silo"], "a@1");

    // b keeps beating; a falls silent for exactly the TTL.
    app.clock.advance_ms(TTL_MS / 2);
    app.heartbeat("b@1", json!({})).await;
    app.clock.advance_ms(TTL_MS / 2 - 1);
    assert_eq!(
        app.get("/silos/a@1").await.body["status"],
        "active",
        "still alive 1 ms before the TTL"
    );
    app.clock.advance_ms(1);
    assert_eq!(app.get("/silos/a@1").await.body["status"], "dead");
    app.get("/activations/user/alice")
        .await
        .problem(StatusCode::NOT_FOUND);

    let again = app.place("user/alice").await;
    assert_eq!(
        (again["outcome"].as_str(), again["silo"].as_str()),
        (Some("placed"), Some("b@1"))
    );
    assert!(
        again["epoch"].as_i64() > first["epoch"].as_i64(),
        "a new activation, a larger epoch"
    );
    for i in 0..20 {
        assert_eq!(app.place(&format!("user/{i}")).await["silo"], "b@1");
    }
}

async fn the_sweep_releases_a_dead_silos_activations(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    for i in 0..5 {
        app.place(&format!("user/{i}")).await;
    }
    assert_eq!(
        app.get("/activations?silo=a@1").await.body["activations"]
            .as_array()
            .unwrap()
            .len(),
        5
    );

    app.clock.advance_ms(TTL_MS);
    app.oracle.members.sweep().await.unwrap();
    let listed = app.get("/activations?silo=a@1").await;
    assert_eq!(
        listed.body["activations"],
        json!([]),
        "released by the sweep"
    );
    let silos = app.get("/silos").await.body;
    assert_eq!(
        silos["silos"][0]["status"], "dead",
        "listed as dead until forgotten"
    );
    assert_eq!(
        app.oracle.members.sweep().await.unwrap(),
        0,
        "sweeping again changes nothing"
    );
}

async fn a_dead_silo_must_rejoin_under_a_new_id(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    app.clock.advance_ms(TTL_MS);
    let late = app.try_heartbeat("a@1", json!({})).await;
    assert_eq!(
        late.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:silo-declared-dead"
    );
    app.oracle.members.sweep().await.unwrap();
    app.try_heartbeat("a@1", json!({}))
        .await
        .problem(StatusCode::CONFLICT);
    assert_eq!(app.heartbeat("a@2", json!({})).await["status"], "active");
}

async fn a_silo_status_only_moves_forward(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({ "status": "joining" })).await;
    app.heartbeat("a@1", json!({ "status": "active" })).await;
    app.heartbeat("a@1", json!({ "status": "shutting_down" }))
        .await;
    let back = app
        .try_heartbeat("a@1", json!({ "status": "active" }))
        .await;
    assert_eq!(
        back.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:status-regression"
    );
}

async fn a_graceful_leave_releases_the_silos_activations(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    app.place("user/alice").await;
    app.place("user/bob").await;
    app.heartbeat("b@1", json!({})).await;

    let left = app.delete("/silos/a@1").await;
    assert_eq!(left.status, StatusCode::OK);
    assert_eq!(left.body["released_activations"], 2);
    assert_eq!(
        app.get("/silos/a@1").await.body["status"],
        "dead",
        "kept as a tombstone"
    );
    app.get("/activations/user/alice")
        .await
        .problem(StatusCode::NOT_FOUND);
    assert_eq!(app.place("user/alice").await["silo"], "b@1");

    // The id is spent: a late or retried heartbeat cannot bring it back with grains it gave up.
    let late = app.try_heartbeat("a@1", json!({})).await;
    assert_eq!(
        late.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:silo-declared-dead"
    );
    let again = app.delete("/silos/a@1").await;
    assert_eq!(
        (again.status, &again.body["released_activations"]),
        (StatusCode::OK, &json!(0))
    );
    app.delete("/silos/nobody@1")
        .await
        .problem(StatusCode::NOT_FOUND);
}

async fn deactivation_only_removes_the_entry_on_the_named_silo(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    let alice = app.place("user/alice").await["epoch"].as_i64().unwrap();
    app.heartbeat("b@1", json!({})).await;

    let wrong = app
        .delete(&format!("/activations/user/alice?silo=b@1&epoch={alice}"))
        .await;
    assert!(wrong.problem(StatusCode::CONFLICT)["detail"]
        .as_str()
        .unwrap()
        .contains("a@1"));
    assert_eq!(
        app.get("/activations/user/alice").await.body["silo"],
        "a@1",
        "nothing was removed"
    );

    let right = app
        .delete(&format!("/activations/user/alice?silo=a@1&epoch={alice}"))
        .await;
    assert_eq!(right.status, StatusCode::NO_CONTENT);
    app.get("/activations/user/alice")
        .await
        .problem(StatusCode::NOT_FOUND);
    app.delete(&format!("/activations/user/alice?silo=a@1&epoch={alice}"))
        .await
        .problem(StatusCode::NOT_FOUND);

    // A late deactivation naming an older activation on the same silo removes nothing.
    let on_a = json!({ "grain": "user/bob", "hint": "a@1" });
    let old = app.post("/placements", on_a.clone()).await.body["epoch"]
        .as_i64()
        .unwrap();
    let removed = app
        .delete(&format!("/activations/user/bob?silo=a@1&epoch={old}"))
        .await;
    assert_eq!(removed.status, StatusCode::NO_CONTENT);
    let new = app.post("/placements", on_a).await.body;
    assert!(new["epoch"].as_i64().unwrap() > old);
    let late = app
        .delete(&format!("/activations/user/bob?silo=a@1&epoch={old}"))
        .await;
    late.problem(StatusCode::CONFLICT);
    assert_eq!(
        app.get("/activations/user/bob").await.body["epoch"],
        new["epoch"]
    );
}

/// Without an epoch, a late retry meant for an older activation removed the
/// grain's newer one. The epoch is required now.
async fn a_deactivation_must_name_the_epoch_it_ends(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    let placed = app.place("user/carol").await;
    let missing = app.delete("/activations/user/carol?silo=a@1").await;
    assert_eq!(missing.invalid_fields(), ["epoch"]);
    assert_eq!(
        app.get("/activations/user/carol").await.body["epoch"],
        placed["epoch"],
        "nothing was removed"
    );
}

async fn a_silos_activations_are_listed_in_pages(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({})).await;
    let mut placed: Vec<String> = (0..7).map(|i| format!("user/k{i}")).collect();
    for grain in &placed {
        app.place(grain).await;
    }
    placed.sort();

    let mut listed = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!(
                "/activations?silo=a@1&limit=3&cursor={}",
                c.replace('/', "%2F")
            ),
            None => "/activations?silo=a@1&limit=3".to_owned(),
        };
        let page = app.get(&query).await.body;
        let activations = page["activations"].as_array().unwrap();
        sizes.push(activations.len());
        for a in activations {
            assert_eq!(a["silo"], "a@1", "{a}");
            listed.push(a["grain"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(next) => {
                assert_eq!(
                    Some(next),
                    listed.last().map(String::as_str),
                    "the cursor is the last grain"
                );
                cursor = Some(next.to_owned());
            }
            None => break,
        }
    }
    assert_eq!(
        sizes,
        [3, 3, 1],
        "pages of `limit` grains, the last one short"
    );
    assert_eq!(listed, placed, "every grain once, in order");
}

async fn a_batch_places_many_grains_with_one_result_each(backend: Backend) {
    let app = TestApp::new(backend).await;
    for silo in ["u1@1", "u2@1", "u3@1"] {
        app.heartbeat(silo, json!({ "grain_types": ["user"] }))
            .await;
    }
    app.heartbeat("orders@1", json!({ "grain_types": ["order"] }))
        .await;
    let existing = app.place("user/existing").await;

    let mut placements: Vec<Value> = (0..50)
        .map(|i| json!({ "grain": format!("user/b{i}") }))
        .collect();
    placements.push(json!({ "grain": "user/existing" }));
    placements.push(json!({ "grain": "invoice/1" }));
    let reply = app
        .post("/placements/batch", json!({ "placements": placements }))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let results = reply.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 52);

    let mut per_silo: HashMap<&str, usize> = HashMap::new();
    for result in &results[..50] {
        assert_eq!(result["placement"]["outcome"], "placed");
        *per_silo
            .entry(result["placement"]["silo"].as_str().unwrap())
            .or_default() += 1;
    }
    assert_eq!(
        per_silo.len(),
        3,
        "random spreads 50 grains over all three user silos"
    );
    assert!(!per_silo.contains_key("orders@1"));
    assert_eq!(results[50]["placement"]["outcome"], "existing");
    assert_eq!(results[50]["placement"]["silo"], existing["silo"]);
    assert_eq!(results[51]["grain"], "invoice/1");
    assert!(results[51]["placement"].is_null());
    assert_eq!(
        results[51]["error"]["type"],
        "urn:placement-oracle:problem:no-compatible-silo"
    );
    assert_eq!(results[51]["error"]["status"], 409);

    // Each batch answer is what a single lookup says.
    for result in &results[..5] {
        let grain = result["grain"].as_str().unwrap();
        assert_eq!(
            app.get(&format!("/activations/{grain}")).await.body["silo"],
            result["placement"]["silo"]
        );
    }
}

async fn the_policy_is_versioned_and_every_bad_field_named(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.get("/policy").await.problem(StatusCode::NOT_FOUND);

    let first = app
        .put_policy(Some("\"0\""), json!({ "default_strategy": "random" }))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(first.body["version"], 1);
    assert_eq!(first.headers["etag"], "\"1\"");
    let read = app.get("/policy").await;
    assert_eq!(read.body["policy"]["default_strategy"], "random");
    assert_eq!(read.headers["etag"], "\"1\"");

    // A writer that read version 0 lost the race: 412, and nothing changed.
    let stale = app
        .put_policy(Some("\"0\""), json!({ "default_strategy": "hash_based" }))
        .await;
    stale.problem(StatusCode::PRECONDITION_FAILED);
    app.put_policy(None, json!({}))
        .await
        .problem(StatusCode::PRECONDITION_REQUIRED);
    app.put_policy(Some("yesterday"), json!({}))
        .await
        .problem(StatusCode::BAD_REQUEST);
    assert_eq!(
        app.get("/policy").await.body["policy"]["default_strategy"],
        "random"
    );

    let invalid = app.put_policy(Some("\"1\""),
        json!({
            "silo_ttl_ms": 1,
            "grain_types": { "user": { "options": { "resource_optimized": { "cpu_usage_weight": 500 } } } }
        }),
    )
    .await;
    assert_eq!(
        invalid.invalid_fields(),
        [
            "grain_types.user.options.resource_optimized.cpu_usage_weight",
            "silo_ttl_ms",
        ]
    );
    let unknown = app
        .put_policy(Some("*"), json!({ "default_strategy": "teleport" }))
        .await;
    assert_eq!(unknown.invalid_fields(), ["default_strategy"]);

    let overwrite = app.put_policy(Some("*"), json!({})).await;
    assert_eq!(overwrite.body["version"], 2);
}

async fn the_policy_decides_strategy_filters_and_ttl_per_grain_type(backend: Backend) {
    let app = TestApp::new(backend).await;
    let silos = ["10.0.1.1:11111@1", "10.0.0.2:11111@1", "10.0.0.3:11111@1"];
    for (silo, zone) in silos.iter().zip(["z1", "z1", "z2"]) {
        app.heartbeat(silo, json!({ "metadata": { "zone": zone } }))
            .await;
    }
    let policy = json!({
        "default_strategy": "random",
        "silo_ttl_ms": 60000,
        "grain_types": {
            "user": { "strategy": "hash_based" },
            "session": { "filters": [{ "kind": "required_match", "keys": ["zone"] }] },
            "worker": { "strategy": "stateless_worker", "options": { "stateless_worker": { "max_local": 3 } } }
        }
    });
    assert_eq!(
        app.put_policy(Some("\"0\""), policy).await.status,
        StatusCode::OK
    );

    // user → hash_based: the Orleans answers of the reference's scenario 1.
    assert_eq!(app.place("user/alice").await["silo"], silos[2]);
    assert_eq!(app.place("user/bob").await["silo"], silos[1]);
    // session → required zone match with the requesting silo (zone z2 → only the third silo).
    for i in 0..5 {
        let answer = app
            .post("/placements", json!({ "grain": format!("session/{i}"), "requesting_silo": silos[2], "explain": true }))
            .await
            .body;
        assert_eq!(answer["silo"], silos[2]);
        assert_eq!(
            answer["explanation"]["filters"][0]["removed"],
            json!([silos[1], silos[0]]) // in view order: silo ids in byte order
        );
    }
    // worker → stateless, with the type's max_local.
    let worker = app
        .post(
            "/placements",
            json!({ "grain": "worker/w", "requesting_silo": silos[0] }),
        )
        .await
        .body;
    assert_eq!(
        (worker["outcome"].as_str(), worker["max_local"].as_u64()),
        (Some("stateless"), Some(3))
    );
    // The policy's TTL (60 s) now decides liveness, not the oracle's default (10 s).
    app.clock.advance_ms(TTL_MS + 1);
    assert_eq!(
        app.get(&format!("/silos/{}", silos[0])).await.body["status"],
        "active"
    );
    assert_eq!(
        app.get(&format!("/silos/{}", silos[0])).await.body["silo_ttl_ms"],
        60000
    );
}

async fn put_pool(app: &TestApp, pool: &str, body: Value) -> crate::helpers::Reply {
    app.send(
        axum::http::Method::PUT,
        &app.path(&format!("/pools/{pool}")),
        Some(body),
    )
    .await
}

async fn pools_are_validated_stored_and_read_back(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.get("/pools/storage")
        .await
        .problem(StatusCode::NOT_FOUND);
    let bad = put_pool(&app, "storage", json!({ "members": { "role": "x", "silos": ["a@1"] }, "ttl_seconds": 99999, "rule": "fastest" })).await;
    assert_eq!(bad.invalid_fields(), ["members", "rule", "ttl_seconds"]);
    let bad = put_pool(
        &app,
        "storage",
        json!({ "members": { "role": "x", "silos": ["a@1"] }, "ttl_seconds": 99999 }),
    )
    .await;
    assert_eq!(bad.invalid_fields(), ["members", "ttl_seconds"]);
    let bad_name = put_pool(&app, "Storage_1", json!({})).await;
    assert_eq!(bad_name.invalid_fields(), ["pool"]);

    let pool = json!({ "members": { "role": "storage" }, "rule": "connection_count", "burst_aware": true, "ttl_seconds": 5 });
    assert_eq!(
        put_pool(&app, "storage", pool.clone()).await.status,
        StatusCode::OK
    );
    let read = app.get("/pools/storage").await;
    let mut as_written = pool.clone();
    as_written["members"] = json!({ "silos": null, "role": "storage", "metadata": null });
    assert_eq!(
        read.body, as_written,
        "every field present, unset ones null"
    );
    // What a client read, it can write back as it is.
    assert_eq!(
        put_pool(&app, "storage", read.body.clone()).await.status,
        StatusCode::OK
    );
    let two = json!({ "members": { "role": "storage", "silos": ["a@1"], "metadata": null } });
    assert_eq!(
        put_pool(&app, "storage", two).await.invalid_fields(),
        ["members"]
    );
}

async fn a_pool_hands_out_only_available_nodes_by_its_rule(backend: Backend) {
    let app = TestApp::new(backend).await;
    for (silo, status, connections) in [
        ("a@1", "active", 30),
        ("b@1", "active", 10),
        ("c@1", "active", 20),
        ("d@1", "shutting_down", 0),
    ] {
        app.heartbeat(
            silo,
            json!({ "status": status, "role": "storage", "connection_count": connections }),
        )
        .await;
    }
    app.heartbeat("web@1", json!({ "role": "web", "connection_count": 0 }))
        .await;
    assert_eq!(
        put_pool(
            &app,
            "rr",
            json!({ "members": { "role": "storage" }, "ttl_seconds": 5 })
        )
        .await
        .status,
        StatusCode::OK
    );

    let mut order = Vec::new();
    for _ in 0..6 {
        let answer = app.post("/pools/rr/connections", json!({})).await.body;
        assert_eq!(
            (answer["rule"].as_str(), answer["valid_for_ms"].as_u64()),
            (Some("round_robin"), Some(5_000))
        );
        order.push(answer["silo"].as_str().unwrap().to_owned());
    }
    assert_eq!(
        order,
        ["a@1", "b@1", "c@1", "a@1", "b@1", "c@1"],
        "in turn; never the shutting-down d or the web silo"
    );

    assert_eq!(
        put_pool(
            &app,
            "least",
            json!({ "members": { "role": "storage" }, "rule": "connection_count" })
        )
        .await
        .status,
        StatusCode::OK
    );
    let least = app
        .post("/pools/least/connections?explain=true", json!({}))
        .await
        .body;
    assert_eq!(least["silo"], "b@1");
    assert_eq!(
        least["explanation"]["candidates"],
        json!(["a@1", "b@1", "c@1"])
    );

    // Every member dead: a clear 503, never a dead node.
    app.clock.advance_ms(TTL_MS);
    let none = app.post("/pools/rr/connections", json!({})).await;
    assert_eq!(
        none.problem(StatusCode::SERVICE_UNAVAILABLE)["type"],
        "urn:placement-oracle:problem:no-available-node"
    );
    app.post("/pools/nowhere/connections", json!({}))
        .await
        .problem(StatusCode::NOT_FOUND);
}
