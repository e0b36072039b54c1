//! The `webhook` strategy's fences: only allowed hosts are written into a policy or called, no
//! redirect is followed, and an answer larger than the cap is not read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use placement_oracle::cluster::ClusterName;
use placement_oracle::oracle::MAX_WEBHOOK_ANSWER_BYTES as MAX_ANSWER_BYTES;
use placement_oracle::placement::webhook_hosts::WebhookHosts;
use placement_oracle::policy::Policy;
use serde_json::{json, Value};

use crate::helpers::{Backend, TestApp};
use crate::strategies::three_orleans_silos;
use crate::views::previews_then_a_placement_find_the_same_lighter_silo;

/// Where `user/bob` goes when the fallback (`hash_based`) decides among the three Orleans silos.
const HASHED: &str = "10.0.0.2:11111@1";
/// Where an endpoint that picks the last candidate sends it (candidates go out in id order).
const LAST: &str = "10.0.1.1:11111@1";

/// A local endpoint on a real socket answering every POST with `answer` (given the question),
/// and counting the calls it got.
async fn endpoint<F>(answer: F) -> (String, Arc<AtomicUsize>)
where
    F: Fn(Value) -> Response + Clone + Send + Sync + 'static,
{
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/choose",
        axum::routing::post(move |axum::Json(question): axum::Json<Value>| {
            let answer = answer.clone();
            counted.fetch_add(1, Ordering::SeqCst);
            async move { answer(question) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{address}/choose"), calls)
}

/// The last candidate's id, what a working endpoint answers here.
fn last_candidate(question: &Value) -> Value {
    question["candidates"].as_array().unwrap().last().unwrap()["silo"].clone()
}

/// A policy placing `user` by the webhook at `url`, falling back to `hash_based`; the timeout is
/// the longest allowed, so only the fence under test can make the fallback decide.
fn webhook_policy(url: &str) -> Value {
    json!({ "grain_types": { "user": { "strategy": "webhook",
        "options": { "webhook": { "url": url, "timeout_ms": 2000, "fallback": "hash_based" } } } } })
}

/// Places `user/bob` and returns the silo and the rule that decided.
async fn place_bob(app: &TestApp) -> (String, String) {
    let reply = app
        .post(
            "/placements",
            json!({ "grain": "user/bob", "explain": true }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    (
        reply.body["silo"].as_str().unwrap().to_owned(),
        reply.body["explanation"]["rule"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

const FORBIDDEN: &str = "oracle_webhook_calls_total{outcome=\"forbidden\"}";
const TOO_LARGE: &str = "oracle_webhook_calls_total{outcome=\"too_large\"}";

async fn a_policy_naming_a_host_not_allowed_is_refused_and_nothing_is_stored(backend: Backend) {
    let app = TestApp::new(backend).await;
    let first = app
        .put_policy(Some("*"), json!({ "default_strategy": "random" }))
        .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);

    let mut refused = webhook_policy("http://169.254.169.254/latest/meta-data/");
    refused["options"] = json!({ "webhook": { "url": "http://127.0.0.1.evil.example/" } });
    refused["default_strategy"] = json!("webhook");
    let reply = app.put_policy(Some("*"), refused).await;
    assert_eq!(
        reply.invalid_fields(),
        [
            "options.webhook.url",
            "grain_types.user.options.webhook.url"
        ]
    );
    let messages = reply.body["errors"].to_string();
    for said in [
        "127.0.0.1.evil.example",
        "169.254.169.254",
        "ORACLE_WEBHOOK_ALLOWED_HOSTS",
    ] {
        assert!(messages.contains(said), "{said} in {messages}");
    }

    let stored = app.get("/policy").await;
    assert_eq!(stored.status, StatusCode::OK);
    assert_eq!(stored.body["version"], first.body["version"]);
    assert_eq!(stored.body["policy"]["default_strategy"], "random");
    assert_eq!(stored.body["policy"]["grain_types"], json!({}));
}

async fn an_admin_allow_list_without_loopback_refuses_a_local_endpoint(backend: Backend) {
    let hosts = WebhookHosts::parse("hook.internal:9000", false).unwrap();
    let app = TestApp::builder(backend).webhook_hosts(hosts).build().await;
    let reply = app
        .put_policy(Some("*"), webhook_policy("http://127.0.0.1:9000/choose"))
        .await;
    assert_eq!(
        reply.invalid_fields(),
        ["grain_types.user.options.webhook.url"]
    );
    // Not even the cluster was created.
    assert_eq!(app.get("/policy").await.status, StatusCode::NOT_FOUND);
    // The listed host is accepted, on its port only.
    let listed = app
        .put_policy(
            Some("*"),
            webhook_policy("http://hook.internal:9000/choose"),
        )
        .await;
    assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
    let other_port = app
        .put_policy(
            Some("*"),
            webhook_policy("http://hook.internal:9001/choose"),
        )
        .await;
    assert_eq!(
        other_port.invalid_fields(),
        ["grain_types.user.options.webhook.url"]
    );
}

/// A policy stored before the list (or by a replica configured differently) is checked again
/// before each call: its endpoint is not called and the fallback decides.
async fn a_stored_webhook_whose_host_is_not_allowed_is_not_called(backend: Backend) {
    let (url, calls) =
        endpoint(|q| axum::Json(json!({ "silo": last_candidate(&q) })).into_response()).await;
    let hosts = WebhookHosts::parse("hook.internal", false).unwrap();
    let app = TestApp::builder(backend).webhook_hosts(hosts).build().await;
    let forbidden_before = app.metric(FORBIDDEN).await;
    let policy: Policy = serde_json::from_value(webhook_policy(&url)).unwrap();
    let cluster = ClusterName::parse(&app.cluster).unwrap();
    app.store
        .put_policy(&cluster, &policy, None)
        .await
        .unwrap()
        .unwrap();
    three_orleans_silos(&app).await;
    assert_eq!(
        place_bob(&app).await,
        (HASHED.to_owned(), "hash".to_owned())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the endpoint was called");
    assert!(
        app.metric(FORBIDDEN).await > forbidden_before,
        "counted as forbidden"
    );
}

/// A preview of a webhook type calls nothing: its fallback decides. And a tallying fallback's
/// decision is taken back like any other (it once stayed, as the webhook strategy itself does
/// not tally), so fifty previews leave later placements as they were.
async fn a_preview_of_a_webhook_type_calls_nothing_and_leaves_no_tally(backend: Backend) {
    let (url, calls) =
        endpoint(|q| axum::Json(json!({ "silo": last_candidate(&q) })).into_response()).await;
    let app = TestApp::new(backend).await;
    let policy = json!({ "grain_types": { "user": { "strategy": "webhook",
        "options": { "webhook": { "url": url, "timeout_ms": 2000, "fallback": "activation_count" } } } } });
    previews_then_a_placement_find_the_same_lighter_silo(&app, policy).await;
    let preview = app
        .post("/placements/preview", json!({ "grain": "user/x" }))
        .await;
    assert_eq!(preview.body["strategy"], "webhook", "{}", preview.body);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a preview called the endpoint"
    );
}

for_each_store!(
    a_policy_naming_a_host_not_allowed_is_refused_and_nothing_is_stored,
    an_admin_allow_list_without_loopback_refuses_a_local_endpoint,
    a_stored_webhook_whose_host_is_not_allowed_is_not_called,
    a_preview_of_a_webhook_type_calls_nothing_and_leaves_no_tally,
);

#[tokio::test]
async fn a_redirect_is_not_followed_and_the_fallback_decides() {
    let (target, redirected_calls) =
        endpoint(|q| axum::Json(json!({ "silo": last_candidate(&q) })).into_response()).await;
    let (url, calls) = endpoint(move |_| {
        (
            StatusCode::TEMPORARY_REDIRECT,
            [(header::LOCATION, target.clone())],
        )
            .into_response()
    })
    .await;
    let app = TestApp::new(Backend::Memory).await;
    three_orleans_silos(&app).await;
    let reply = app.put_policy(Some("*"), webhook_policy(&url)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(
        place_bob(&app).await,
        (HASHED.to_owned(), "hash".to_owned())
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(
        redirected_calls.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
}

/// `{"silo": <last candidate>, "padding": "xxx…"}` with `padding` bytes of padding, whole (with a
/// Content-Length) or streamed in chunks without one.
fn padded_answer(question: &Value, padding: usize, streamed: bool) -> Response {
    let head = format!("{{\"silo\":{},\"padding\":\"", last_candidate(question));
    if !streamed {
        let body = format!("{head}{}\"}}", "x".repeat(padding));
        return ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    let mut chunks = vec![head.into_bytes()];
    chunks.extend(std::iter::repeat_n(vec![b'x'; 4096], padding / 4096));
    chunks.push(b"\"}".to_vec());
    let stream =
        futures_util::stream::iter(chunks.into_iter().map(Ok::<_, std::convert::Infallible>));
    (
        [(header::CONTENT_TYPE, "application/json")],
        axum::body::Body::from_stream(stream),
    )
        .into_response()
}

#[tokio::test]
async fn an_answer_over_the_size_cap_is_not_read_and_the_fallback_decides() {
    let too_large_before = TestApp::new(Backend::Memory).await.metric(TOO_LARGE).await;
    for streamed in [false, true] {
        // Under the cap the same answer decides, so only its size makes the difference.
        for (padding, expected) in [
            (4096, (LAST, "webhook")),
            (4 * MAX_ANSWER_BYTES, (HASHED, "hash")),
        ] {
            let (url, calls) = endpoint(move |q| padded_answer(&q, padding, streamed)).await;
            let app = TestApp::new(Backend::Memory).await;
            three_orleans_silos(&app).await;
            let reply = app.put_policy(Some("*"), webhook_policy(&url)).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            assert_eq!(
                place_bob(&app).await,
                (expected.0.to_owned(), expected.1.to_owned()),
                "{padding} bytes of padding, streamed: {streamed}"
            );
            assert_eq!(calls.load(Ordering::SeqCst), 1);
        }
    }
    let app = TestApp::new(Backend::Memory).await;
    assert!(
        app.metric(TOO_LARGE).await >= too_large_before + 2.0,
        "both counted as too_large"
    );
}
