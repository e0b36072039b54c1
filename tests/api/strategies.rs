//! The reference's deterministic Orleans scenarios (§8), through the HTTP API.

use axum::http::StatusCode;
use serde_json::{json, Value};

use crate::helpers::{Backend, TestApp};

async fn place(app: &TestApp, body: Value) -> Value {
    let reply = app.post("/placements", body.clone()).await;
    assert_eq!(reply.status, StatusCode::OK, "{body} → {}", reply.body);
    reply.body
}

/// Three Orleans-addressed silos; in Orleans order A < B < C (generation 1, port 11111, then the
/// little-endian address: 10.0.1.1 < 10.0.0.2 < 10.0.0.3).
pub(crate) async fn three_orleans_silos(app: &TestApp) -> [&'static str; 3] {
    let silos = ["10.0.1.1:11111@1", "10.0.0.2:11111@1", "10.0.0.3:11111@1"];
    for silo in silos {
        app.heartbeat(silo, json!({})).await;
    }
    silos
}

#[tokio::test]
async fn scenario_1_and_2_hash_based_matches_orleans_and_honours_hints() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let app = TestApp::new(backend).await;
        let [a, b, c] = three_orleans_silos(&app).await;
        for (grain, silo) in [("user/alice", c), ("user/bob", b), ("order/12345", a)] {
            let answer = place(&app, json!({ "grain": grain, "strategy": "hash_based" })).await;
            assert_eq!(answer["silo"], silo, "{grain}");
        }
        let hinted = place(
            &app,
            json!({ "grain": "user/carol", "strategy": "hash_based", "hint": b }),
        )
        .await;
        assert_eq!(hinted["silo"], b);
        let unknown_hint = place(&app, json!({ "grain": "user/dave", "strategy": "hash_based", "hint": "nobody@9", "explain": true })).await;
        assert_eq!(unknown_hint["explanation"]["rule"], "hash");
    }
}

#[tokio::test]
async fn scenario_3_prefer_local_falls_back_when_the_local_silo_cannot_host() {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("local@1", json!({ "grain_types": ["order"] }))
        .await;
    app.heartbeat("b@1", json!({})).await;
    let answer = place(
        &app,
        json!({ "grain": "user/x", "strategy": "prefer_local", "requesting_silo": "local@1" }),
    )
    .await;
    assert_eq!(answer["silo"], "b@1", "local does not host `user`");
    let answer = place(&app, json!({ "grain": "order/x", "strategy": "prefer_local", "requesting_silo": "local@1", "explain": true })).await;
    assert_eq!(
        (
            answer["silo"].as_str(),
            answer["explanation"]["rule"].as_str()
        ),
        (Some("local@1"), Some("local"))
    );

    app.heartbeat("joining@1", json!({ "status": "joining" }))
        .await;
    for i in 0..10 {
        let answer = place(&app, json!({ "grain": format!("user/j{i}"), "strategy": "prefer_local", "requesting_silo": "joining@1" })).await;
        assert_ne!(
            answer["silo"], "joining@1",
            "a joining local silo is not used"
        );
    }
}

#[tokio::test]
async fn scenario_4_stateless_workers_stay_local_even_when_joining_and_are_never_registered() {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("joining@1", json!({ "status": "joining" }))
        .await;
    app.heartbeat("b@1", json!({})).await;
    for _ in 0..3 {
        let answer = place(&app, json!({ "grain": "worker/w", "strategy": "stateless_worker", "requesting_silo": "joining@1" })).await;
        assert_eq!(
            (answer["silo"].as_str(), answer["outcome"].as_str()),
            (Some("joining@1"), Some("stateless"))
        );
        assert!(answer["epoch"].is_null());
        assert_eq!(answer["max_local"], 0);
    }
    app.get("/activations/worker/w")
        .await
        .problem(StatusCode::NOT_FOUND);

    app.heartbeat("leaving@1", json!({ "status": "shutting_down" }))
        .await;
    let answer = place(&app, json!({ "grain": "worker/w", "strategy": "stateless_worker", "requesting_silo": "leaving@1" })).await;
    assert_eq!(
        answer["silo"], "b@1",
        "a shutting-down local silo sends workers elsewhere"
    );
}

#[tokio::test]
async fn scenario_5_and_6_activation_count_takes_the_least_loaded_and_skips_overloaded() {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("B@1", json!({ "recent_activation_count": 100 }))
        .await;
    app.heartbeat("C@1", json!({ "recent_activation_count": 10 }))
        .await;
    for i in 0..10 {
        let answer = place(
            &app,
            json!({ "grain": format!("user/{i}"), "strategy": "activation_count" }),
        )
        .await;
        assert_eq!(answer["silo"], "C@1");
    }
    let explained = place(
        &app,
        json!({ "grain": "user/e", "strategy": "activation_count", "explain": true }),
    )
    .await;
    let scores = explained["explanation"]["scores"].as_array().unwrap();
    let c = scores.iter().find(|s| s["silo"] == "C@1").unwrap();
    assert_eq!(
        c["terms"]["placed_since_heartbeat"].as_f64(),
        Some(10.0),
        "this replica's ten placements on C count"
    );
    assert_eq!(c["score"], 20.0);

    let overloaded = TestApp::new(Backend::Memory).await;
    overloaded
        .heartbeat(
            "B@1",
            json!({ "recent_activation_count": 1, "overloaded": true }),
        )
        .await;
    overloaded
        .heartbeat(
            "C@1",
            json!({ "recent_activation_count": 1, "overloaded": true }),
        )
        .await;
    let reply = overloaded
        .post(
            "/placements",
            json!({ "grain": "user/x", "strategy": "activation_count" }),
        )
        .await;
    assert_eq!(
        reply.problem(StatusCode::SERVICE_UNAVAILABLE)["type"],
        "urn:placement-oracle:problem:all-overloaded"
    );
}

/// The reference's worked example: A scores 0.695, B 0.275 (figures smoothed from one heartbeat).
async fn worked_example(app: &TestApp) {
    const GIB: u64 = 1 << 30;
    app.heartbeat("A@1", json!({ "cpu_usage": 80.0, "memory_usage_bytes": 4 * GIB, "max_available_memory_bytes": 8 * GIB, "activation_count": 1000 })).await;
    app.heartbeat("B@1", json!({ "cpu_usage": 20.0, "memory_usage_bytes": 16 * GIB * 3 / 10, "max_available_memory_bytes": 16 * GIB, "activation_count": 500 })).await;
}

#[tokio::test]
async fn scenario_7_resource_optimized_scores_and_keeps_locality_within_the_margin() {
    let app = TestApp::new(Backend::Memory).await;
    worked_example(&app).await;
    let answer = place(
        &app,
        json!({ "grain": "user/1", "requesting_silo": "A@1", "explain": true }),
    )
    .await;
    assert_eq!(answer["strategy"], "resource_optimized");
    assert_eq!(
        (
            answer["silo"].as_str(),
            answer["explanation"]["rule"].as_str()
        ),
        (Some("B@1"), Some("lowest_score"))
    );
    let scores = answer["explanation"]["scores"].as_array().unwrap();
    let score = |id: &str| {
        scores.iter().find(|s| s["silo"] == id).unwrap()["score"]
            .as_f64()
            .unwrap()
    };
    assert!(
        (score("A@1") - 0.695).abs() < 1e-6 && (score("B@1") - 0.275).abs() < 1e-6,
        "{scores:?}"
    );

    let local = place(
        &app,
        json!({ "grain": "user/2", "requesting_silo": "B@1", "explain": true }),
    )
    .await;
    assert_eq!(
        (
            local["silo"].as_str(),
            local["explanation"]["rule"].as_str()
        ),
        (Some("B@1"), Some("local_within_margin"))
    );
}

#[tokio::test]
async fn silo_role_places_by_the_grain_key_and_says_when_no_silo_has_it() {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("gpu@1", json!({ "role": "gpu" })).await;
    app.heartbeat("web@1", json!({ "role": "web" })).await;
    for i in 0..5 {
        let answer = place(&app, json!({ "grain": "worker/gpu", "strategy": "silo_role", "hint": if i == 0 { "web@1" } else { "gpu@1" } })).await;
        assert_eq!(
            answer["silo"], "gpu@1",
            "a hint outside the role is ignored"
        );
        app.delete("/activations/worker/gpu?silo=gpu@1").await;
    }
    let reply = app
        .post(
            "/placements",
            json!({ "grain": "worker/fpga", "strategy": "silo_role" }),
        )
        .await;
    assert_eq!(
        reply.problem(StatusCode::CONFLICT)["type"],
        "urn:placement-oracle:problem:no-silo-with-role"
    );
}

/// A stand-in for an operator's placement endpoint, on a real socket. `mode` says how it answers.
async fn webhook_endpoint(mode: &'static str) -> String {
    use axum::routing::post;
    let app = axum::Router::new().route(
        "/choose",
        post(move |axum::Json(question): axum::Json<Value>| async move {
            let candidates = question["candidates"].as_array().unwrap();
            match mode {
                "last" => axum::Json(json!({ "silo": candidates.last().unwrap()["silo"] })),
                "slow" => {
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    axum::Json(json!({ "silo": candidates[0]["silo"] }))
                }
                _ => axum::Json(json!({ "silo": "not-a-candidate@1" })),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}/choose")
}

async fn webhook_policy(app: &TestApp, url: &str) {
    let policy = json!({
        "grain_types": { "user": {
            "strategy": "webhook",
            "options": { "webhook": { "url": url, "timeout_ms": 100, "fallback": "hash_based" } }
        } }
    });
    let reply = app.put_policy(Some("*"), policy).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
}

#[tokio::test]
async fn a_webhook_chooses_among_the_candidates_and_a_fallback_decides_when_it_cannot() {
    // Candidates go out in silo-id order, so the last one is 10.0.1.1.
    let [a, b] = ["10.0.1.1:11111@1", "10.0.0.2:11111@1"];
    for (mode, expected, rule) in [
        ("last", a, "webhook"),
        // The fallback is hash_based: user/bob → the second silo in Orleans order (scenario 1).
        ("slow", b, "hash"),
        ("wrong", b, "hash"),
    ] {
        let app = TestApp::new(Backend::Memory).await;
        three_orleans_silos(&app).await;
        webhook_policy(&app, &webhook_endpoint(mode).await).await;
        let answer = place(&app, json!({ "grain": "user/bob", "explain": true })).await;
        assert_eq!(answer["strategy"], "webhook");
        assert_eq!(
            (
                answer["silo"].as_str(),
                answer["explanation"]["rule"].as_str()
            ),
            (Some(expected), Some(rule)),
            "endpoint that answers {mode}"
        );
    }

    // An endpoint that is not there at all.
    let app = TestApp::new(Backend::Memory).await;
    three_orleans_silos(&app).await;
    webhook_policy(&app, "http://127.0.0.1:9/choose").await;
    assert_eq!(place(&app, json!({ "grain": "user/bob" })).await["silo"], b);

    let metrics = app.send(axum::http::Method::GET, "/metrics", None).await;
    let text = metrics.body.as_str().unwrap();
    for outcome in ["chosen", "timeout", "invalid", "error"] {
        assert!(
            text.contains(&format!(
                "oracle_webhook_calls_total{{outcome=\"{outcome}\"}}"
            )),
            "no {outcome} webhook calls counted"
        );
    }
}

#[tokio::test]
async fn a_webhook_type_without_a_url_is_stored_with_a_warning_and_placed_by_its_fallback() {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("a@1", json!({})).await;
    let reply = app
        .put_policy(
            Some("*"),
            json!({ "grain_types": { "user": { "strategy": "webhook", "options": { "webhook": { "fallback": "hash_based" } } } } }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let warnings = reply.body["warnings"].as_array().unwrap();
    assert_eq!(
        warnings
            .iter()
            .map(|w| w["field"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["grain_types.user.options.webhook.url"]
    );
    assert_eq!(
        app.get("/policy").await.body["warnings"],
        reply.body["warnings"]
    );
    let placed = place(&app, json!({ "grain": "user/alice", "explain": true })).await;
    assert_eq!(placed["silo"], "a@1");
    assert_eq!(
        placed["explanation"]["rule"], "hash",
        "the fallback (hash_based) decided"
    );
    let metrics = app.send(axum::http::Method::GET, "/metrics", None).await;
    assert!(metrics
        .body
        .as_str()
        .unwrap()
        .lines()
        .any(|line| line.contains("unconfigured") && !line.starts_with('#')));
}

#[tokio::test]
async fn scenario_10_preferred_match_through_the_api_mirrors_the_orleans_functional_tests() {
    // Three silos with a unique metadata value each, as in SiloMetadataPlacementFilterTests.
    let app = TestApp::new(Backend::Memory).await;
    let silos = ["s1@1", "s2@1", "s3@1"];
    for (i, silo) in silos.iter().enumerate() {
        app.heartbeat(silo, json!({ "metadata": { "unique": format!("u{i}") } }))
            .await;
    }
    let policy = json!({ "default_strategy": "random", "grain_types": {
        "strict": { "filters": [{ "kind": "preferred_match", "keys": ["unique"], "min_candidates": 1 }] },
        "loose": { "filters": [{ "kind": "preferred_match", "keys": ["unique"] }] },
        "absent": { "filters": [{ "kind": "preferred_match", "keys": ["unique", "other"], "min_candidates": 2 }] }
    } });
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );

    for caller in silos {
        // min 1: always the calling silo.
        for i in 0..10 {
            let answer = place(
                &app,
                json!({ "grain": format!("strict/{caller}-{i}"), "requesting_silo": caller }),
            )
            .await;
            assert_eq!(answer["silo"], caller);
        }
        // min 2 (the default), or a key nobody has: every silo gets some of 50.
        for grain_type in ["loose", "absent"] {
            let mut seen = std::collections::HashSet::new();
            for i in 0..50 {
                let answer = place(&app, json!({ "grain": format!("{grain_type}/{caller}-{i}"), "requesting_silo": caller })).await;
                seen.insert(answer["silo"].as_str().unwrap().to_owned());
            }
            assert_eq!(seen.len(), 3, "{grain_type} from {caller} reached {seen:?}");
        }
    }
}
