//! Bad input: always a 4xx problem+json naming what is wrong, never a 5xx, and nothing changed.

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{Backend, TestApp};

async fn app() -> TestApp {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("a@1", json!({})).await;
    app
}

#[tokio::test]
async fn out_of_range_and_malformed_heartbeat_fields_are_each_named() {
    let app = app().await;
    let reply = app
        .post(
            "/heartbeats",
            json!({
                "silo": "b@1",
                "cpu_usage": 101.5,
                "memory_usage_bytes": 20,
                "max_available_memory_bytes": 10,
                "activation_count": 9_007_199_254_740_992_u64,
                "role": "front\u{0}end",
                "metadata": { "zone": "a\nb", "bad key": "x" },
                "grain_types": ["user", "us/er", ""]
            }),
        )
        .await;
    let mut fields = reply.invalid_fields();
    fields.sort();
    assert_eq!(
        fields,
        [
            "activation_count",
            "cpu_usage",
            "grain_types[1]",
            "grain_types[2]",
            "metadata.bad key",
            "metadata.zone",
            "role",
        ]
    );
    app.get("/silos/b@1").await.problem(StatusCode::NOT_FOUND);

    // Memory in use may exceed the maximum (a soft limit): accepted as sent.
    let reply = app
        .post(
            "/heartbeats",
            json!({ "silo": "b@1", "memory_usage_bytes": 20, "max_available_memory_bytes": 10 }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["load"]["memory_usage_bytes"], 20);

    // JSON Schema's integers include 12.0; so do ours. 12.5 is not one.
    let reply = app
        .post(
            "/heartbeats",
            json!({ "silo": "b@1", "activation_count": 12.0, "max_available_memory_bytes": 9_007_199_254_740_991.0 }),
        )
        .await;
    assert_eq!(reply.body["load"]["activation_count"], 12);
    assert_eq!(
        reply.body["load"]["max_available_memory_bytes"],
        9_007_199_254_740_991_u64
    );
    let reply = app
        .post(
            "/heartbeats",
            json!({ "silo": "b@1", "activation_count": 12.5 }),
        )
        .await;
    assert_eq!(reply.invalid_fields(), ["activation_count"]);
}

#[tokio::test]
async fn wrong_types_unknown_fields_and_unknown_statuses_name_the_field() {
    let app = app().await;
    let cases = [
        (json!({ "silo": "b@1", "cpu_usage": "high" }), "cpu_usage"),
        (
            json!({ "silo": "b@1", "activation_count": -1 }),
            "activation_count",
        ),
        (json!({ "silo": "b@1", "cpu": 1 }), "cpu"),
        (json!({ "silo": "b@1", "status": "dead" }), "status"),
        (
            json!({ "silo": "b@1", "metadata": { "zone": 1 } }),
            "metadata.zone",
        ),
        (json!({ "cpu_usage": 1 }), "silo"),
        (json!({ "silo": "" }), "silo"),
        (json!({ "silo": "has space@1" }), "silo"),
        (json!({ "silo": "x".repeat(256) }), "silo"),
        (json!({ "silo": "nul\u{0}@1" }), "silo"),
    ];
    for (body, field) in cases {
        let reply = app.post("/heartbeats", body.clone()).await;
        assert_eq!(reply.invalid_fields(), [field], "for {body}");
    }
}

#[tokio::test]
async fn placement_inputs_are_validated_field_by_field() {
    let app = app().await;
    let cases = [
        (json!({ "grain": "alice" }), "grain"),
        (json!({ "grain": "/alice" }), "grain"),
        (json!({ "grain": "user/" }), "grain"),
        (
            json!({ "grain": format!("user/{}", "k".repeat(1024)) }),
            "grain",
        ),
        (json!({ "grain": "user/a", "hint": "bad hint" }), "hint"),
        (
            json!({ "grain": "user/a", "requesting_silo": "" }),
            "requesting_silo",
        ),
        (
            json!({ "grain": "user/a", "strategy": "teleport" }),
            "strategy",
        ),
        (json!({ "grain": "user/a", "explain": "yes" }), "explain"),
    ];
    for (body, field) in cases {
        let reply = app.post("/placements", body.clone()).await;
        assert_eq!(reply.invalid_fields(), [field], "for {body}");
    }

    let too_many: Vec<Value> = (0..1001)
        .map(|i| json!({ "grain": format!("user/{i}") }))
        .collect();
    let reply = app
        .post("/placements/batch", json!({ "placements": too_many }))
        .await;
    assert_eq!(reply.invalid_fields(), ["placements"]);
    let reply = app
        .post("/placements/batch", json!({ "placements": [] }))
        .await;
    assert_eq!(reply.invalid_fields(), ["placements"]);
    let reply = app
        .post(
            "/placements/batch",
            json!({ "placements": [{ "grain": "user/a" }, { "grain": "nope" }, { "grain": "user/a" }] }),
        )
        .await;
    assert_eq!(reply.invalid_fields(), ["placements[1].grain"]);

    // A grain listed twice is placed once, and both listings get that answer.
    let reply = app
        .post(
            "/placements/batch",
            json!({ "placements": [{ "grain": "user/twice" }, { "grain": "user/twice" }] }),
        )
        .await;
    let results = reply.body["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0]["placement"]["outcome"], "placed");
    app.get("/activations/user/a")
        .await
        .problem(StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn path_and_query_parameters_are_validated() {
    let app = app().await;
    let bad_cluster = app
        .send(Method::GET, "/v1/clusters/Not_Valid/silos", None)
        .await;
    assert_eq!(bad_cluster.invalid_fields(), ["cluster"]);
    assert_eq!(
        app.get("/activations/nograintype").await.invalid_fields(),
        ["grain"]
    );
    assert_eq!(
        app.get("/activations?silo=a@1&limit=0")
            .await
            .invalid_fields(),
        ["limit"]
    );
    assert_eq!(
        app.get("/activations?silo=a@1&limit=many")
            .await
            .invalid_fields(),
        ["limit"]
    );
    assert_eq!(app.get("/activations").await.invalid_fields(), ["silo"]);
    assert_eq!(
        app.delete("/activations/user/a").await.invalid_fields(),
        ["silo"]
    );
    assert_eq!(
        app.get("/activations?silo=a@1&color=red")
            .await
            .invalid_fields(),
        ["color"]
    );
}

#[tokio::test]
async fn malformed_json_wrong_content_type_and_oversized_bodies_get_problems() {
    let app = app().await;
    let raw = |content_type: Option<&str>, body: &str| {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(app.path("/heartbeats"));
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        request.body(Body::from(body.to_owned())).unwrap()
    };
    app.send_request(raw(Some("application/json"), "{\"silo\": "))
        .await
        .problem(StatusCode::BAD_REQUEST);
    app.send_request(raw(Some("application/json"), ""))
        .await
        .problem(StatusCode::BAD_REQUEST);
    app.send_request(raw(Some("text/plain"), "{}"))
        .await
        .problem(StatusCode::UNSUPPORTED_MEDIA_TYPE);
    app.send_request(raw(None, "{}"))
        .await
        .problem(StatusCode::UNSUPPORTED_MEDIA_TYPE);

    let small = TestApp::builder(Backend::Memory)
        .body_limit_bytes(1_024)
        .build()
        .await;
    let big = json!({ "silo": "b@1", "metadata": { "k": "v".repeat(2_000) } });
    small
        .post("/heartbeats", big)
        .await
        .problem(StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn unknown_routes_and_methods_get_problems() {
    let app = app().await;
    app.send(Method::GET, "/nowhere", None)
        .await
        .problem(StatusCode::NOT_FOUND);
    let reply = app
        .send(Method::PUT, &app.path("/heartbeats"), Some(json!({})))
        .await;
    reply.problem(StatusCode::METHOD_NOT_ALLOWED);
    assert!(reply.headers.contains_key(header::ALLOW));
}

/// Throws a spread of hostile bodies at every JSON endpoint: each must get a 4xx problem.
#[tokio::test]
async fn no_client_mistake_is_ever_answered_with_a_server_error() {
    let app = app().await;
    let hostile = [
        json!(null),
        json!(42),
        json!("text"),
        json!([]),
        json!({}),
        json!({ "silo": null }),
        json!({ "silo": ["a"] }),
        json!({ "silo": "a@1", "cpu_usage": 1e308 }),
        json!({ "silo": "a@1", "cpu_usage": -0.0001 }),
        json!({ "silo": "a@1", "memory_usage_bytes": 1.5 }),
        json!({ "silo": "a@1", "grain_types": "user" }),
        json!({ "silo": "a@1", "metadata": [] }),
        json!({ "grain": null }),
        json!({ "grain": 7 }),
        json!({ "grain": "user/\u{7}" }),
        json!({ "placements": null }),
        json!({ "placements": [null] }),
        json!({ "placements": [{ "grain": "user/a", "extra": 1 }] }),
    ];
    for path in ["/heartbeats", "/placements", "/placements/batch"] {
        for body in &hostile {
            let reply = app.post(path, body.clone()).await;
            assert!(
                reply.status.is_client_error(),
                "{path} {body} → {} {}",
                reply.status,
                reply.body
            );
            reply.problem(reply.status);
        }
    }
}
