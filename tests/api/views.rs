//! What operators' tools read, on both stores: the clusters list, a cluster's distribution over
//! its silos, placement previews that register nothing, and the live page's assets.

use std::collections::BTreeSet;

use axum::http::{header, Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{Backend, TestApp};

async fn clusters_are_listed_in_name_order_page_by_page(backend: Backend) {
    // Each test has a store of its own (a database of its own on Postgres): these are all its
    // clusters.
    let app = TestApp::new(backend).await;
    let mut names: Vec<String> = (0..5).map(|i| format!("{}-{i}", app.cluster)).collect();
    names.reverse();
    for name in &names {
        let reply = app
            .send(
                Method::POST,
                &format!("/v1/clusters/{name}/heartbeats"),
                Some(json!({ "silo": "a@1" })),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    names.sort();

    let mut pages = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = app
            .send(Method::GET, &format!("/v1/clusters?limit=2{cursor}"), None)
            .await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.body);
        let listed: Vec<String> = serde_json::from_value(page.body["clusters"].clone()).unwrap();
        pages.push(listed);
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(
        pages,
        [&names[0..2], &names[2..4], &names[4..5]],
        "every cluster once, in byte order, two a page; the last page says it is the last"
    );

    let bad = app
        .send(Method::GET, "/v1/clusters?cursor=Not%20A%20Name", None)
        .await;
    assert_eq!(bad.invalid_fields(), ["cursor"]);
    let bad = app.send(Method::GET, "/v1/clusters?limit=0", None).await;
    assert_eq!(bad.invalid_fields(), ["limit"]);
}

async fn the_distribution_counts_each_silos_grains_and_the_open_migrations(backend: Backend) {
    let app = TestApp::new(backend).await;
    for silo in ["a@1", "b@1"] {
        app.heartbeat(silo, json!({ "cpu_usage": 10.0 })).await;
    }
    for i in 0..6 {
        let reply = app
            .post(
                "/placements",
                json!({ "grain": format!("user/{i}"), "hint": if i < 4 { "a@1" } else { "b@1" } }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    // A silo that joins later holds nothing yet, and is listed all the same.
    app.heartbeat("c@1", json!({ "cpu_usage": 10.0 })).await;

    let quiet = app.get("/distribution").await;
    assert_eq!(quiet.status, StatusCode::OK, "{}", quiet.body);
    assert_eq!(
        quiet.body,
        json!({
            "cluster": app.cluster,
            "activations": 6,
            "silos": [
                { "silo": "a@1", "activations": 4, "migrating_out": 0, "migrating_in": 0 },
                { "silo": "b@1", "activations": 2, "migrating_out": 0, "migrating_in": 0 },
                { "silo": "c@1", "activations": 0, "migrating_out": 0, "migrating_in": 0 },
            ],
            "migrations": [],
        })
    );

    // Draining a moves its four grains to b and c.
    let drained = app.post("/silos/a@1/drain", json!({})).await;
    assert_eq!(drained.status, StatusCode::OK, "{}", drained.body);
    let moving = app.get("/distribution").await.body;
    let shares = &moving["silos"];
    assert_eq!(moving["activations"], 6, "nothing moved yet: {moving}");
    assert_eq!(shares[0]["migrating_out"], 4, "{moving}");
    let arriving: u64 = (1..3)
        .map(|i| shares[i]["migrating_in"].as_u64().unwrap())
        .sum();
    assert_eq!(arriving, 4, "{moving}");
    let flows = moving["migrations"].as_array().unwrap();
    assert!(flows.iter().all(|f| f["from"] == "a@1"), "{moving}");
    assert_eq!(
        flows
            .iter()
            .map(|f| f["count"].as_u64().unwrap())
            .sum::<u64>(),
        4
    );

    let unknown = app
        .send(
            Method::GET,
            "/v1/clusters/no-such-cluster-here/distribution",
            None,
        )
        .await;
    unknown.problem(StatusCode::NOT_FOUND);
}

async fn a_preview_decides_and_explains_but_registers_nothing(backend: Backend) {
    let app = TestApp::new(backend).await;
    app.heartbeat("a@1", json!({ "cpu_usage": 80.0, "activation_count": 10 }))
        .await;
    app.heartbeat(
        "b@1",
        json!({ "cpu_usage": 5.0, "activation_count": 10, "grain_types": ["user"] }),
    )
    .await;
    app.heartbeat("c@1", json!({ "status": "joining" })).await;

    let preview = app
        .post("/placements/preview", json!({ "grain": "user/alice" }))
        .await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
    let body = &preview.body;
    assert_eq!(body["grain"], "user/alice");
    assert_eq!(body["strategy"], "resource_optimized");
    assert_eq!(body["registers"], true);
    assert_eq!(body["existing"], Value::Null);
    let explanation = &body["explanation"];
    assert_eq!(explanation["candidates"], json!(["a@1", "b@1"]));
    let scores = explanation["scores"].as_array().unwrap();
    let lowest = scores
        .iter()
        .min_by(|x, y| {
            x["score"]
                .as_f64()
                .partial_cmp(&y["score"].as_f64())
                .unwrap()
        })
        .unwrap();
    assert_eq!(
        body["silo"], lowest["silo"],
        "the lowest score decides: {body}"
    );
    assert_eq!(explanation["excluded"][0]["silo"], "c@1");

    // Nothing was registered: the directory has no entry, and a placement decides afresh.
    app.get("/activations/user/alice")
        .await
        .problem(StatusCode::NOT_FOUND);
    let placed = app.place("user/alice").await;
    assert_eq!(placed["outcome"], "placed");

    // Once it exists, the preview names the activation a placement would answer.
    let again = app
        .post("/placements/preview", json!({ "grain": "user/alice" }))
        .await
        .body;
    assert_eq!(again["existing"]["silo"], placed["silo"], "{again}");
    assert_eq!(again["existing"]["epoch"], placed["epoch"], "{again}");

    // A type only `a` hosts, by another strategy named in the call.
    let order = app
        .post(
            "/placements/preview",
            json!({ "grain": "order/1", "strategy": "hash_based", "requesting_silo": "b@1" }),
        )
        .await
        .body;
    assert_eq!(order["silo"], "a@1", "{order}");
    assert_eq!(order["strategy"], "hash_based");
    assert_eq!(order["explanation"]["rule"], "hash");

    let stateless = app
        .post(
            "/placements/preview",
            json!({ "grain": "user/w", "strategy": "stateless_worker", "requesting_silo": "a@1" }),
        )
        .await
        .body;
    assert_eq!(stateless["registers"], false, "{stateless}");
    assert_eq!(stateless["existing"], Value::Null);

    let invalid = app
        .post("/placements/preview", json!({ "grain": "" }))
        .await;
    assert_eq!(invalid.invalid_fields(), ["grain"]);
    let unknown_cluster = app
        .send(
            Method::POST,
            "/v1/clusters/no-such-cluster-here/placements/preview",
            Some(json!({ "grain": "user/x" })),
        )
        .await;
    unknown_cluster.problem(StatusCode::NOT_FOUND);
}

/// Two silos, `a` lighter than `b` for `activation_count`; fifty previews of `user` grains under
/// `policy`, each deciding `a`; then a real `activation_count` placement, which still lands on
/// `a`. Had the previews been tallied on `a`, the lighter silo would by then be `b`.
pub async fn previews_then_a_placement_find_the_same_lighter_silo(app: &TestApp, policy: Value) {
    assert_eq!(
        app.put_policy(Some("*"), policy).await.status,
        StatusCode::OK
    );
    app.heartbeat("a@1", json!({ "recent_activation_count": 0 }))
        .await;
    app.heartbeat("b@1", json!({ "recent_activation_count": 1 }))
        .await;
    for i in 0..50 {
        let preview = app
            .post(
                "/placements/preview",
                json!({ "grain": format!("user/{i}") }),
            )
            .await;
        assert_eq!(preview.status, StatusCode::OK, "{}", preview.body);
        assert_eq!(preview.body["silo"], "a@1", "{}", preview.body);
    }
    let placed = app
        .post(
            "/placements",
            json!({ "grain": "order/1", "strategy": "activation_count" }),
        )
        .await;
    assert_eq!(placed.body["silo"], "a@1", "{}", placed.body);
}

/// A tallying strategy counts each decision until the silo's next heartbeat; a preview's is
/// taken back at once.
async fn previews_leave_no_tally_behind(backend: Backend) {
    let app = TestApp::new(backend).await;
    let policy = json!({ "default_strategy": "activation_count" });
    previews_then_a_placement_find_the_same_lighter_silo(&app, policy).await;
}

for_each_store!(
    clusters_are_listed_in_name_order_page_by_page,
    the_distribution_counts_each_silos_grains_and_the_open_migrations,
    a_preview_decides_and_explains_but_registers_nothing,
    previews_leave_no_tally_behind,
);

#[tokio::test]
async fn the_live_page_is_served_with_its_assets_and_a_strict_content_policy() {
    let app = TestApp::new(Backend::Memory).await;
    let redirect = app.send(Method::GET, "/ui", None).await;
    assert_eq!(redirect.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(redirect.headers[header::LOCATION], "/ui/");
    for (path, kind) in [
        ("/ui/", "text/html"),
        ("/ui/app.js", "text/javascript"),
        ("/ui/style.css", "text/css"),
    ] {
        let reply = app.send(Method::GET, path, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        let content_type = reply.headers[header::CONTENT_TYPE].to_str().unwrap();
        assert!(content_type.starts_with(kind), "{path}: {content_type}");
        let policy = reply.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(policy.contains("script-src 'self'"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert_eq!(reply.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
    app.send(Method::GET, "/ui/nothing.js", None)
        .await
        .problem(StatusCode::NOT_FOUND);
}

/// The page shows what silos wrote (ids, roles, grain ids): the script builds every node itself
/// and sets text and attributes, never markup.
#[test]
fn the_page_script_never_writes_markup() {
    let script = include_str!("../../src/http/ui/app.js");
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
        "new Function",
    ] {
        assert!(!script.contains(sink), "app.js uses {sink}");
    }
    assert!(
        script.contains("createTextNode"),
        "text goes in as text nodes"
    );
}

/// Every element the script looks up by id is on the page or made by the script, so a renamed
/// element cannot silently blank a panel.
#[test]
fn every_element_the_page_script_looks_up_exists() {
    let html = include_str!("../../src/http/ui/index.html");
    // One space between words, none after an opening parenthesis: calls split over lines read
    // as on one.
    let script = include_str!("../../src/http/ui/app.js")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace("( ", "(");
    let script = script.as_str();
    let ids_in = |text: &str, open: &str, close: char| -> BTreeSet<String> {
        text.split(open)
            .skip(1)
            .filter_map(|rest| rest.split(close).next())
            .filter(|id| !id.is_empty() && !id.contains(' '))
            .map(str::to_owned)
            .collect()
    };
    let mut defined = ids_in(html, "id=\"", '"');
    defined.extend(ids_in(script, "id: \"", '"'));
    let mut wanted = ids_in(script, "getElementById(\"", '"');
    wanted.extend(ids_in(script, "fill(\"", '"'));
    wanted.extend(ids_in(script, "querySelector(\"#", ' '));
    assert!(wanted.len() > 10, "the lookups were found: {wanted:?}");
    let missing: Vec<&String> = wanted.difference(&defined).collect();
    assert!(
        missing.is_empty(),
        "looked up but never defined: {missing:?}"
    );
}
