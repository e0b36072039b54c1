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

/// A database that answers nothing (a frozen server, a network that drops every packet) is one
/// that cannot be reached, every time it is asked: not a database whose writes stall (it used to
/// alternate between the two, since the readiness write was all it asked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_answers_nothing_is_unreachable_not_stalled() {
    let database = TestDatabase::create().await;
    let link = crate::proxy::FaultyLink::start(database.server_address()).await;
    let store = database
        .store_via_on_database_clock(
            link.port,
            placement_oracle::store::StoreSettings::with_ttl(10_000),
        )
        .await;
    let app = TestApp::builder(Backend::Postgres)
        .on(store, &database)
        .seed(1)
        .build()
        .await;
    assert_eq!(
        app.send(Method::GET, "/readyz", None).await.status,
        StatusCode::OK
    );
    link.freeze();
    // The answer from before stands 250 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut answers = Vec::new();
    for _ in 0..4 {
        let ready = app.send(Method::GET, "/readyz", None).await;
        answers.push(ready.body["type"].as_str().unwrap_or_default().to_owned());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        answers
            .iter()
            .all(|kind| kind == "urn:placement-oracle:problem:store-unavailable"),
        "{answers:?}"
    );
    link.thaw();
    let back = std::time::Instant::now();
    while app.send(Method::GET, "/readyz", None).await.status != StatusCode::OK {
        assert!(
            back.elapsed() < Duration::from_secs(10),
            "ready again after the thaw"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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

/// What an on-call engineer reads first, present from a replica's first scrape: readiness, the
/// requests in flight, the directory cache's size, the process's own figures, the pool's size
/// apart from its states, and every event series at zero before its first event.
#[tokio::test]
async fn a_scrape_carries_readiness_the_process_and_every_event_series_from_the_start() {
    use placement_oracle::telemetry::metric;
    let app = TestApp::new(Backend::Postgres).await;
    let reply = app.send(Method::GET, "/metrics", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    let text = reply.body.as_str().unwrap().to_owned();
    let value = |series: &str| -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    assert!(
        matches!(value("oracle_ready"), Some(v) if v == 0.0 || v == 1.0),
        "{text}"
    );
    assert!(
        value("oracle_requests_in_flight").is_some_and(|n| n >= 1.0),
        "the scrape itself"
    );
    assert!(value("oracle_directory_cache_entries").is_some(), "{text}");
    for process in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            value(process).is_some_and(|v| v > 0.0),
            "{process} in {text}"
        );
    }
    assert!(!text.contains(r#"state="max""#), "capacity is not a state");
    for series in [
        "oracle_store_circuit_open".to_owned(),
        "oracle_requests_shed_total".to_owned(),
        "oracle_store_outages_total".to_owned(),
        "oracle_replica_stalls_total".to_owned(),
        "oracle_store_timeline_regressions_total".to_owned(),
    ]
    .into_iter()
    .chain(
        metric::AUTH_DENIED_REASONS.map(|r| format!(r#"oracle_auth_denied_total{{reason="{r}"}}"#)),
    )
    .chain(
        metric::RATE_LIMITED_KINDS.map(|k| format!(r#"oracle_rate_limited_total{{kind="{k}"}}"#)),
    )
    .chain(metric::LIMITS.map(|l| format!(r#"oracle_limits_reached_total{{limit="{l}"}}"#)))
    .chain(
        metric::STORE_OPERATIONS
            .map(|o| format!(r#"oracle_store_errors_total{{operation="{o}"}}"#)),
    ) {
        assert!(value(&series).is_some(), "{series} missing from:\n{text}");
    }
}

/// Every operation a call site counts failures of is one exported at zero: a new call site with a
/// new name must be added to `metric::STORE_OPERATIONS`.
#[test]
fn every_store_operation_counted_is_exported_at_zero() {
    use placement_oracle::telemetry::metric;
    let mut named = std::collections::BTreeSet::new();
    let mut files = vec![std::path::PathBuf::from("src")];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // `store_error("name")`, and the name `once_per_grain` is given as its first string.
        for marker in ["store_error(\"", "once_per_grain("] {
            for (at, _) in text.match_indices(marker) {
                let from = at + marker.len() - usize::from(marker.ends_with('"'));
                if let Some(name) = text[from..].split('"').nth(1) {
                    named.insert(name.to_owned());
                }
            }
        }
    }
    assert!(named.len() > 20, "{named:?}");
    let exported: std::collections::BTreeSet<String> = metric::STORE_OPERATIONS
        .iter()
        .map(|o| (*o).to_owned())
        .collect();
    assert_eq!(named, exported);
}
