//! Load shedding (a replica at ORACLE_MAX_CONCURRENT_REQUESTS answers 503 at once) and per-cluster
//! rate limits (429 with Retry-After, one bucket per cluster, refilled by the app's clock).

use std::time::Duration;

use axum::http::{header, Method, StatusCode};
use placement_oracle::rate_limit::Rates;
use placement_oracle::Limits;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::helpers::{Backend, Reply, TestApp, MAX_CONCURRENT_REQUESTS, TTL_MS};
use placement_oracle::rate_limit::admission::{FLOOR, MIN_ANSWERS, WINDOW_MS};

fn limits(max_concurrent_requests: usize) -> Limits {
    Limits {
        request_timeout: Duration::from_secs(30),
        body_limit_bytes: 1 << 20,
        max_concurrent_requests,
        admission_target: Duration::ZERO,
    }
}

/// The `Retry-After` header, in seconds.
fn retry_after(reply: &Reply) -> u64 {
    reply.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A placement webhook on a real socket that reports each question it gets on the returned
/// receiver and answers only once the gate is opened (then at once, with the first candidate).
async fn gated_webhook() -> (String, mpsc::UnboundedReceiver<()>, watch::Sender<bool>) {
    use axum::routing::post;
    let (asked, questions) = mpsc::unbounded_channel();
    let (gate, opened) = watch::channel(false);
    let app = axum::Router::new().route(
        "/choose",
        post(move |axum::Json(question): axum::Json<Value>| {
            let (asked, mut opened) = (asked.clone(), opened.clone());
            async move {
                let _ = asked.send(());
                let _ = opened.wait_for(|open| *open).await;
                axum::Json(json!({ "silo": question["candidates"][0]["silo"] }))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/choose"), questions, gate)
}

/// One placement (`user/held`) in flight on `app`, routed to a [`gated_webhook`] and waiting
/// there, so that it holds its request slot; it is answered once the returned gate is opened.
async fn hold_a_placement(app: &TestApp) -> (JoinHandle<Reply>, watch::Sender<bool>) {
    let (mut held, gate) = hold_placements(app, 1).await;
    (held.remove(0), gate)
}

/// `n` placements (`user/held-…`) in flight on `app`, as [`hold_a_placement`] holds one.
async fn hold_placements(app: &TestApp, n: usize) -> (Vec<JoinHandle<Reply>>, watch::Sender<bool>) {
    let (url, mut questions, gate) = gated_webhook().await;
    let policy = json!({ "grain_types": { "user": {
        "strategy": "webhook",
        "options": { "webhook": { "url": url, "timeout_ms": 2_000, "fallback": "hash_based" } }
    } } });
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );
    // New grains every time: a grain placed before is answered without asking.
    static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let first = HELD.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    let held = (first..first + n)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move {
                app.post("/placements", json!({ "grain": format!("user/held-{i}") }))
                    .await
            })
        })
        .collect();
    for i in 0..n {
        tokio::time::timeout(Duration::from_secs(5), questions.recv())
            .await
            .unwrap_or_else(|_| panic!("only {i} of {n} asked"))
            .expect("each held placement asks the webhook");
    }
    (held, gate)
}

#[tokio::test]
async fn a_replica_at_its_concurrency_limit_sheds_requests_at_once_but_never_health_checks() {
    let app = TestApp::builder(Backend::Memory)
        .limits(limits(1))
        .rates(Rates::DEFAULT)
        .build()
        .await;
    let shed_total = "oracle_requests_shed_total";
    let shed_placements = r#"oracle_http_requests_total{method="POST",route="/v1/clusters/{cluster}/placements",status="503"}"#;
    let (shed_before, shed_placements_before) = (
        app.metric(shed_total).await,
        app.metric(shed_placements).await,
    );
    app.heartbeat("a@1", json!({})).await;
    // One placement in flight: it waits for the webhook, which waits for the gate.
    let (held, gate) = hold_a_placement(&app).await;

    let shed = app.post("/placements", json!({ "grain": "order/1" })).await;
    let problem = shed.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        problem["type"],
        "urn:placement-oracle:problem:concurrency-limit-reached"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("ORACLE_MAX_CONCURRENT_REQUESTS"),
        "{problem}"
    );
    assert_eq!(retry_after(&shed), 1);
    assert_eq!(
        app.get("/silos").await.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "any other route is shed too"
    );
    for exempt in ["/healthz", "/readyz", "/metrics"] {
        let reply = app.send(Method::GET, exempt, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{exempt} is never shed");
    }

    gate.send(true).unwrap();
    let held = held.await.unwrap();
    assert_eq!(held.status, StatusCode::OK, "{}", held.body);
    app.place("order/1").await;
    app.place("user/after").await;

    assert!(
        app.metric(shed_total).await > shed_before,
        "shed requests are counted"
    );
    assert!(
        app.metric(shed_placements).await > shed_placements_before,
        "shed requests are counted by route like any answer"
    );
}

/// An app whose fixed limit is 1,024 in flight and whose admission target is `target`.
async fn admitting(target: Duration) -> TestApp {
    let app = TestApp::builder(Backend::Memory)
        .limits(Limits {
            admission_target: target,
            ..limits(1_024)
        })
        .rates(Rates::DEFAULT)
        .build()
        .await;
    app.heartbeat("a@1", json!({})).await;
    app
}

/// Closes the admission window under way with a dozen answers: the window is judged by the first
/// answer given after it has lasted `WINDOW_MS`.
async fn close_the_admission_window(app: &TestApp) {
    for _ in 0..MIN_ANSWERS + 2 {
        assert_eq!(app.get("/silos").await.status, StatusCode::OK);
    }
    tokio::time::sleep(Duration::from_millis(WINDOW_MS.unsigned_abs() + 20)).await;
    assert_eq!(app.get("/silos").await.status, StatusCode::OK);
}

/// With `held` placements in flight, what the next request gets: the one after them (the held
/// ones answered once it is back).
async fn one_more_beside(app: &TestApp, held: usize) -> Reply {
    let (held, gate) = hold_placements(app, held).await;
    let next = app.get("/silos").await;
    gate.send(true).unwrap();
    for reply in held {
        assert_eq!(reply.await.unwrap().status, StatusCode::OK);
    }
    next
}

#[tokio::test]
async fn slow_answers_lower_how_many_requests_a_replica_admits_at_once() {
    // Every answer takes longer than a nanosecond: each window is slow.
    let app = admitting(Duration::from_nanos(1)).await;
    assert_eq!(
        one_more_beside(&app, FLOOR).await.status,
        StatusCode::OK,
        "{FLOOR} in flight and one more are admitted under the fixed limit of 1,024"
    );
    close_the_admission_window(&app).await;
    close_the_admission_window(&app).await;

    let shed = one_more_beside(&app, FLOOR).await;
    let problem = shed.problem(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        problem["type"],
        "urn:placement-oracle:problem:concurrency-limit-reached"
    );
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("serving {FLOOR} requests"))
            && detail.contains("ORACLE_ADMISSION_TARGET_MS"),
        "{detail}"
    );
    assert_eq!(retry_after(&shed), 1);
}

#[tokio::test]
async fn answers_that_waited_on_a_webhook_do_not_lower_the_admission_limit() {
    let target = Duration::from_millis(100);
    let app = admitting(target).await;
    let (held, gate) = hold_placements(&app, FLOOR + 16).await;
    // Each held placement waits on the webhook well past the target; the other answers do not.
    tokio::time::sleep(3 * target).await;
    gate.send(true).unwrap();
    for reply in held {
        assert_eq!(reply.await.unwrap().status, StatusCode::OK);
    }
    close_the_admission_window(&app).await;

    assert_eq!(
        one_more_beside(&app, FLOOR).await.status,
        StatusCode::OK,
        "the limit stayed at 1,024"
    );
}

#[tokio::test]
async fn heartbeats_over_the_limit_are_refused_per_cluster_until_the_bucket_refills() {
    let rates = Rates {
        heartbeats: 2,
        ..Rates::DEFAULT
    };
    let app = TestApp::builder(Backend::Memory)
        .limits(limits(MAX_CONCURRENT_REQUESTS))
        .rates(rates)
        .build()
        .await;
    app.heartbeat("a@1", json!({})).await;
    app.heartbeat("b@1", json!({})).await;

    let refused = app.try_heartbeat("a@1", json!({})).await;
    let problem = refused.problem(StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(problem["type"], "urn:placement-oracle:problem:rate-limited");
    let detail = problem["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("`{}`", app.cluster))
            && detail.contains("ORACLE_RATE_LIMIT_HEARTBEATS"),
        "names the cluster and the setting to raise: {detail}"
    );
    // One heartbeat every 500 ms: Retry-After rounds up to whole seconds.
    assert_eq!(retry_after(&refused), 1);

    let other = app
        .send(
            Method::POST,
            "/v1/clusters/another-cluster/heartbeats",
            Some(json!({ "silo": "a@1" })),
        )
        .await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "another cluster has its own bucket"
    );

    app.clock.advance_ms(499);
    assert_eq!(
        app.try_heartbeat("a@1", json!({})).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    app.clock.advance_ms(1);
    app.heartbeat("a@1", json!({})).await;
}

#[tokio::test]
async fn placements_count_the_grains_of_a_batch_and_edges_the_edges_of_a_report() {
    let rates = Rates {
        placements: 5,
        edges: 3,
        ..Rates::DEFAULT
    };
    let app = TestApp::builder(Backend::Memory)
        .limits(limits(MAX_CONCURRENT_REQUESTS))
        .rates(rates)
        .build()
        .await;
    let limited = |kind: &str| format!("oracle_rate_limited_total{{kind=\"{kind}\"}}");
    let before = (
        app.metric(&limited("placements")).await,
        app.metric(&limited("edges")).await,
    );
    app.heartbeat("a@1", json!({})).await;
    let batch = |grains: std::ops::Range<u32>| {
        let placements: Vec<Value> = grains
            .map(|i| json!({ "grain": format!("user/{i}") }))
            .collect();
        json!({ "placements": placements })
    };

    assert_eq!(
        app.post("/placements/batch", batch(0..3)).await.status,
        StatusCode::OK
    );
    // Two grains left in the bucket: three more are refused, two are not.
    let refused = app.post("/placements/batch", batch(3..6)).await;
    assert!(refused.problem(StatusCode::TOO_MANY_REQUESTS)["detail"]
        .as_str()
        .unwrap()
        .contains("ORACLE_RATE_LIMIT_PLACEMENTS"));
    assert_eq!(retry_after(&refused), 1);
    assert_eq!(
        app.post("/placements/batch", batch(3..5)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        app.post("/placements", json!({ "grain": "user/5" }))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // A batch larger than the bucket goes through once the bucket is full, and is paid back
    // before anything else is admitted: 8 grains at 5/s leave 3 of debt.
    app.clock.advance_ms(1_000);
    assert_eq!(
        app.post("/placements/batch", batch(10..18)).await.status,
        StatusCode::OK
    );
    let in_debt = app.post("/placements", json!({ "grain": "user/5" })).await;
    assert_eq!(in_debt.status, StatusCode::TOO_MANY_REQUESTS);
    app.clock.advance_ms(799);
    assert_eq!(
        app.post("/placements", json!({ "grain": "user/5" }))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    app.clock.advance_ms(1);
    app.place("user/5").await;

    let edges = |n: u32| {
        let edges: Vec<Value> = (0..n)
            .map(|i| json!({ "from": format!("user/{i}"), "to": "user/hub", "count": 1 }))
            .collect();
        json!({ "edges": edges })
    };
    assert_eq!(
        app.post("/edges", edges(2)).await.status,
        StatusCode::ACCEPTED
    );
    let refused = app.post("/edges", edges(2)).await;
    assert!(refused.problem(StatusCode::TOO_MANY_REQUESTS)["detail"]
        .as_str()
        .unwrap()
        .contains("ORACLE_RATE_LIMIT_EDGES"));
    assert_eq!(
        app.post("/edges", edges(1)).await.status,
        StatusCode::ACCEPTED
    );

    assert!(app.metric(&limited("placements")).await > before.0);
    assert!(app.metric(&limited("edges")).await > before.1);
    let metrics = app.send(Method::GET, "/metrics", None).await;
    let text = metrics.body.as_str().unwrap();
    assert!(
        !text.lines().any(
            |line| line.starts_with("oracle_rate_limited_total") && line.contains(&app.cluster)
        ),
        "no cluster label on the rate-limit metric"
    );
}

/// A heartbeat shed at the concurrency limit never reached the store: its silo's silence is this
/// replica's doing. So a replica that sheds counts silence again from then, and declares no silo
/// dead for what it refused; a silo that stays silent still dies a whole TTL later.
#[tokio::test]
async fn a_replica_that_sheds_a_heartbeat_declares_no_silo_dead_for_that_silence() {
    let app = TestApp::builder(Backend::Memory)
        .limits(limits(1))
        .rates(Rates::DEFAULT)
        .build()
        .await;
    app.heartbeat("busy@1", json!({})).await;
    let (held, gate) = hold_a_placement(&app).await;

    // Silent past its TTL, then its heartbeat is shed.
    app.clock.advance_ms(2 * TTL_MS);
    let shed = app.post("/heartbeats", json!({ "silo": "busy@1" })).await;
    assert_eq!(shed.status, StatusCode::SERVICE_UNAVAILABLE);
    gate.send(true).unwrap();
    held.await.unwrap();

    assert_eq!(
        app.oracle.members.sweep().await.unwrap(),
        0,
        "nothing judged across the refusal"
    );
    assert_eq!(app.get("/silos/busy@1").await.body["status"], "active");
    app.clock.advance_ms(TTL_MS);
    assert_eq!(
        app.oracle.members.sweep().await.unwrap(),
        1,
        "a whole TTL after it"
    );
}
