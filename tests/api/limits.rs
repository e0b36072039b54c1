//! Load shedding: a replica at ORACLE_MAX_CONCURRENT_REQUESTS answers 503 at once.

use std::time::Duration;

use axum::http::{header, Method, StatusCode};
use placement_oracle::Limits;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};

use crate::helpers::{Reply, TestApp};

fn limits(max_concurrent_requests: usize) -> Limits {
    Limits {
        request_timeout: Duration::from_secs(30),
        body_limit_bytes: 1 << 20,
        max_concurrent_requests,
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

#[tokio::test]
async fn a_replica_at_its_concurrency_limit_sheds_requests_at_once_but_never_health_checks() {
    let app = TestApp::limited(limits(1));
    app.heartbeat("a@1", json!({})).await;
    let (url, mut questions, gate) = gated_webhook().await;
    let policy = json!({ "grain_types": { "user": {
        "strategy": "webhook",
        "options": { "webhook": { "url": url, "timeout_ms": 2_000, "fallback": "hash_based" } }
    } } });
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );

    // One placement in flight: it waits for the webhook, which waits for the gate.
    let held = tokio::spawn({
        let app = app.clone();
        async move {
            app.post("/placements", json!({ "grain": "user/held" }))
                .await
        }
    });
    questions
        .recv()
        .await
        .expect("the held placement asks the webhook");

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

    let metrics = app.send(Method::GET, "/metrics", None).await;
    let text = metrics.body.as_str().unwrap();
    assert!(text.contains("oracle_requests_shed_total"), "{text}");
    assert!(
        text.contains(r#"http_requests_total{method="POST",route="/v1/clusters/{cluster}/placements",status="503"}"#),
        "shed requests are counted by route like any answer"
    );
}
