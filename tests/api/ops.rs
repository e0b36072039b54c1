//! Operations endpoints and the server's lifecycle.

use std::time::Duration;

use axum::http::{Method, StatusCode};
use placement_oracle::clock::ManualClock;
use placement_oracle::config::Config;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::{memory_store, Backend, TestApp, TestDatabase, START_MS};

#[tokio::test]
async fn health_and_readiness_name_the_store() {
    for backend in [Backend::Memory, Backend::Postgres] {
        let app = TestApp::new(backend).await;
        let kind = if backend == Backend::Memory {
            "memory"
        } else {
            "postgres"
        };
        let health = app.send(Method::GET, "/healthz", None).await;
        assert_eq!(
            (health.status, health.body["store"].as_str()),
            (StatusCode::OK, Some(kind))
        );
        let ready = app.send(Method::GET, "/readyz", None).await;
        assert_eq!(
            (ready.status, ready.body["status"].as_str()),
            (StatusCode::OK, Some("ready"))
        );
    }
}

#[tokio::test]
async fn readiness_fails_with_a_problem_when_postgres_is_unreachable() {
    let database = TestDatabase::create().await;
    let clock = ManualClock::starting_at(START_MS);
    let store = database.store(1, &clock).await;
    store.pool().close().await;
    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .clock(clock)
        .seed(1)
        .build()
        .await;
    let ready = app.send(Method::GET, "/readyz", None).await;
    assert_eq!(
        ready.problem(StatusCode::SERVICE_UNAVAILABLE)["type"],
        "urn:placement-oracle:problem:store-unavailable"
    );
    assert!(
        !ready.body.to_string().contains("pool"),
        "internal details stay in the log: {}",
        ready.body
    );
    let health = app.send(Method::GET, "/healthz", None).await;
    assert_eq!(health.status, StatusCode::OK, "the process itself is alive");
}

#[tokio::test]
async fn metrics_count_requests_by_route_template_and_domain_events() {
    let app = TestApp::new(Backend::Memory).await;
    // The recorder is the process's, shared by every test running beside this one: each series
    // is read before and after, and must have grown by at least what this test did.
    let counted = [
        (
            r#"oracle_http_requests_total{method="POST",route="/v1/clusters/{cluster}/placements",status="200"}"#,
            2.0,
        ),
        (
            r#"oracle_http_request_duration_seconds_count{method="GET",route="/v1/clusters/{cluster}/activations/{*grain}",status="200"}"#,
            1.0,
        ),
        (r#"oracle_heartbeats_total{outcome="accepted"}"#, 1.0),
        (
            r#"oracle_placements_total{strategy="resource_optimized",outcome="placed"}"#,
            1.0,
        ),
        (
            r#"oracle_placements_total{strategy="resource_optimized",outcome="existing"}"#,
            1.0,
        ),
    ];
    let mut before = Vec::new();
    for (series, _) in counted {
        before.push(app.metric(series).await);
    }
    app.heartbeat("a@1", json!({})).await;
    app.place("user/metrics-test").await;
    app.place("user/metrics-test").await;
    app.get("/activations/user/metrics-test").await;
    app.oracle.members.sweep().await.unwrap();

    for ((series, grew_by), before) in counted.into_iter().zip(before) {
        let after = app.metric(series).await;
        assert!(after - before >= grew_by, "{series}: {before} → {after}");
    }
    let reply = app.send(Method::GET, "/metrics", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let text = reply.body.as_str().unwrap();
    // The sweep refreshed the gauges (this test's silo is active, its grain an entry).
    assert!(
        app.metric(r#"oracle_silos{status="active"}"#).await >= 1.0,
        "{text}"
    );
    assert!(
        app.metric("oracle_directory_entries").await >= 1.0,
        "{text}"
    );
    assert!(!text.contains("metrics-test"), "ids never become labels");
}

/// Sends one HTTP/1.1 request over a real socket and returns the status line.
async fn status_line(address: std::net::SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn the_server_serves_until_told_to_stop_then_returns() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(placement_oracle::serve(
        Config::defaults(),
        memory_store(&ManualClock::starting_at(START_MS)),
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    assert_eq!(status_line(address, "/healthz").await, "HTTP/1.1 200 OK");
    assert_eq!(
        status_line(address, "/swagger-ui/").await,
        "HTTP/1.1 200 OK"
    );
    stop.send(()).unwrap();
    let finished = tokio::time::timeout(Duration::from_secs(10), server).await;
    assert!(
        matches!(finished, Ok(Ok(Ok(())))),
        "serve returns cleanly after shutdown"
    );
}

/// A request that outlives ORACLE_REQUEST_TIMEOUT_MS is answered 503 with a problem, and counted.
#[tokio::test]
async fn a_request_past_the_timeout_gets_a_503_problem() {
    use axum::routing::post;

    // An operator endpoint that answers after 1.5 s, within its own 2 s webhook timeout...
    let slow = axum::Router::new().route(
        "/choose",
        post(|| async {
            tokio::time::sleep(Duration::from_millis(1_500)).await;
            axum::Json(json!({ "silo": "a@1" }))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/choose", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, slow).await });

    // ...but the oracle answers every request within 200 ms.
    let app = TestApp::builder(Backend::Memory)
        .request_timeout(Duration::from_millis(200))
        .build()
        .await;
    app.heartbeat("a@1", json!({})).await;
    let policy = json!({ "default_strategy": "webhook",
        "options": { "webhook": { "url": url, "timeout_ms": 2000 } } });
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );

    let started = std::time::Instant::now();
    let reply = app
        .post("/placements", json!({ "grain": "user/slow" }))
        .await;
    assert_eq!(
        reply.problem(StatusCode::SERVICE_UNAVAILABLE)["type"],
        "urn:placement-oracle:problem:request-timeout"
    );
    assert!(reply.headers.contains_key("retry-after"));
    assert!(
        started.elapsed() < Duration::from_millis(1_400),
        "answered at the timeout, not after the endpoint"
    );
}
