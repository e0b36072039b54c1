//! Credentials: the authorisation matrix over every route, the life of a key on both stores,
//! open mode, and what logs never show.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::{header, Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::{unique_cluster, Backend, TestApp, ADMIN_TOKEN};

/// What each operation asks, as the issue defines the scopes. Kept here by hand, so that the
/// routes' own declarations (which the server enforces) are checked against it, and so that a new
/// route fails this test until someone decides what it asks.
const EXPECTED: &[(&str, &str, &str)] = &[
    ("post", "/v1/clusters/{cluster}/heartbeats", "silo"),
    ("get", "/v1/clusters/{cluster}/silos", "read"),
    ("get", "/v1/clusters/{cluster}/silos/{silo}", "read"),
    ("delete", "/v1/clusters/{cluster}/silos/{silo}", "operator"),
    (
        "post",
        "/v1/clusters/{cluster}/silos/{silo}/drain",
        "operator",
    ),
    ("post", "/v1/clusters/{cluster}/placements", "silo"),
    ("post", "/v1/clusters/{cluster}/placements/batch", "silo"),
    ("post", "/v1/clusters/{cluster}/placements/preview", "read"),
    ("get", "/v1/clusters", "admin"),
    ("get", "/v1/clusters/{cluster}/distribution", "read"),
    ("get", "/v1/clusters/{cluster}/policy", "read"),
    ("put", "/v1/clusters/{cluster}/policy", "operator"),
    ("get", "/v1/clusters/{cluster}/pools/{pool}", "read"),
    ("put", "/v1/clusters/{cluster}/pools/{pool}", "operator"),
    (
        "post",
        "/v1/clusters/{cluster}/pools/{pool}/connections",
        "silo",
    ),
    ("get", "/v1/clusters/{cluster}/activations", "read"),
    ("get", "/v1/clusters/{cluster}/activations/{grain}", "read"),
    (
        "delete",
        "/v1/clusters/{cluster}/activations/{grain}",
        "silo",
    ),
    ("get", "/v1/clusters/{cluster}/migrations", "read"),
    (
        "post",
        "/v1/clusters/{cluster}/migrations/{id}/complete",
        "silo",
    ),
    (
        "post",
        "/v1/clusters/{cluster}/migrations/{id}/fail",
        "silo",
    ),
    ("get", "/v1/clusters/{cluster}/rebalancer", "read"),
    (
        "post",
        "/v1/clusters/{cluster}/rebalancer/cycles",
        "operator",
    ),
    (
        "post",
        "/v1/clusters/{cluster}/rebalancer/sessions",
        "operator",
    ),
    (
        "post",
        "/v1/clusters/{cluster}/rebalancer/suspend",
        "operator",
    ),
    (
        "post",
        "/v1/clusters/{cluster}/rebalancer/resume",
        "operator",
    ),
    ("post", "/v1/clusters/{cluster}/edges", "silo"),
    ("get", "/v1/clusters/{cluster}/repartitioner", "read"),
    (
        "post",
        "/v1/clusters/{cluster}/repartitioner/rounds",
        "operator",
    ),
    ("post", "/v1/clusters/{cluster}/keys", "admin"),
    ("get", "/v1/clusters/{cluster}/keys", "admin"),
    ("delete", "/v1/clusters/{cluster}/keys/{id}", "admin"),
    ("get", "/healthz", "public"),
    ("get", "/readyz", "public"),
    ("get", "/metrics", "public"),
];

/// How the published document declares an operation's access.
fn declared(operation: &Value) -> String {
    match operation["security"].as_array() {
        None => "public".to_owned(),
        Some(requirements) => {
            let roles = requirements[0]["bearer"].as_array().unwrap();
            match roles.as_slice() {
                [] => "read".to_owned(),
                [role] => role.as_str().unwrap().to_owned(),
                more => panic!("more than one role: {more:?}"),
            }
        }
    }
}

/// A concrete path for a template, with valid values for every parameter.
fn concrete(template: &str, cluster: &str) -> String {
    template
        .replace("{cluster}", cluster)
        .replace("{silo}", "10.0.0.5:11111@1")
        .replace("{grain}", "user/alice")
        .replace("{pool}", "frontend")
        .replace("{id}", "1")
}

/// Every route of the router (read from the document it publishes) × no credential, another
/// cluster's key, a silo key, an operator key and the admin token.
#[tokio::test]
async fn every_route_answers_each_credential_as_its_scope_says() {
    let app = TestApp::builder(Backend::Memory)
        .credentials(Duration::from_secs(60))
        .build()
        .await;
    let cluster = app.cluster.clone();
    let (_, silo) = app.issue_key(&cluster, &["silo"]).await;
    let (_, operator) = app.issue_key(&cluster, &["operator"]).await;
    let (_, other) = app
        .issue_key(&unique_cluster(), &["silo", "operator"])
        .await;

    let spec = placement_oracle::http::openapi();
    let mut routes = BTreeMap::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            routes.insert((method.clone(), path.clone()), declared(operation));
        }
    }
    let expected: BTreeMap<(String, String), String> = EXPECTED
        .iter()
        .map(|(m, p, a)| ((m.to_string(), p.to_string()), a.to_string()))
        .collect();
    assert_eq!(
        routes, expected,
        "the routes and their declared access differ from what this test expects: a new route \
         needs a line in EXPECTED, and a route's `security(...)` must match it"
    );

    let credentials: [(&str, Option<&str>); 5] = [
        ("no credential", None),
        ("another cluster's key", Some(&other)),
        ("silo key", Some(&silo)),
        ("operator key", Some(&operator)),
        ("admin token", Some(ADMIN_TOKEN)),
    ];
    let mut wrong = Vec::new();
    for ((method, template), access) in &expected {
        let uri = concrete(template, &cluster);
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        let body = matches!(method, Method::POST | Method::PUT).then(|| json!({}));
        for (who, credential) in credentials {
            let allowed = matches!(
                (access.as_str(), who),
                ("public", _)
                    | (_, "admin token")
                    | ("read", "silo key" | "operator key")
                    | ("silo", "silo key")
                    | ("operator", "operator key")
            );
            let reply = app
                .send_as(credential, method.clone(), &uri, body.clone())
                .await;
            let status = reply.status;
            let ok = if allowed {
                status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN
            } else if who == "no credential" {
                status == StatusCode::UNAUTHORIZED
                    && reply.headers.get(header::WWW_AUTHENTICATE).is_some()
            } else {
                status == StatusCode::FORBIDDEN
            };
            let is_problem = status.is_success()
                || reply.headers[header::CONTENT_TYPE]
                    .to_str()
                    .unwrap()
                    .starts_with("application/problem+json");
            if !ok || !is_problem {
                wrong.push(format!(
                    "{method} {template} with {who}: {status} {}",
                    reply.body
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

async fn a_key_lives_from_issue_to_revocation(backend: Backend) {
    let app = TestApp::builder(backend)
        .credentials(Duration::from_secs(60))
        .build()
        .await;
    let keys = app.path("/keys");
    let issued = app
        .send_as(
            Some(ADMIN_TOKEN),
            Method::POST,
            &keys,
            Some(json!({"scopes": ["silo", "silo"], "label": "frontend silos"})),
        )
        .await;
    assert_eq!(issued.status, StatusCode::CREATED, "{}", issued.body);
    let key = issued.body["key"].as_str().unwrap().to_owned();
    let id = issued.body["id"].as_str().unwrap().to_owned();
    assert!(key.starts_with(&format!("pok_{id}_")), "{key}");
    assert_eq!(
        issued.body["scopes"],
        json!(["silo"]),
        "duplicates are dropped"
    );
    assert_eq!(issued.body["starts_with"], json!(format!("pok_{id}_")));

    let listed = app
        .send_as(Some(ADMIN_TOKEN), Method::GET, &keys, None)
        .await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.body["keys"].as_array().unwrap().len(), 1);
    assert_eq!(listed.body["keys"][0]["id"], json!(id));
    assert_eq!(listed.body["keys"][0]["label"], json!("frontend silos"));
    assert!(
        !listed.body.to_string().contains(&key[21..]),
        "the list never shows a key"
    );

    let beat = json!({"silo": "10.0.0.5:11111@1"});
    let heartbeats = app.path("/heartbeats");
    let reply = app
        .send_as(Some(&key), Method::POST, &heartbeats, Some(beat.clone()))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let reply = app
        .send_as(Some(&key), Method::HEAD, &app.path("/silos"), None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "HEAD asks what GET asks");
    // The last hex digit changed (to one it is not).
    let last = if key.ends_with('0') { '1' } else { '0' };
    let mistyped = format!("{}{last}", &key[..key.len() - 1]);
    let reply = app
        .send_as(
            Some(&mistyped),
            Method::POST,
            &heartbeats,
            Some(beat.clone()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        reply.body["type"],
        json!("urn:placement-oracle:problem:unauthenticated")
    );

    let revoke = app.path(&format!("/keys/{id}"));
    let reply = app
        .send_as(Some(ADMIN_TOKEN), Method::DELETE, &revoke, None)
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    let reply = app
        .send_as(Some(&key), Method::POST, &heartbeats, Some(beat))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNAUTHORIZED,
        "revoked through this replica: refused at once, whatever the cache's TTL"
    );
    let reply = app
        .send_as(Some(ADMIN_TOKEN), Method::DELETE, &revoke, None)
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    let reply = app
        .send_as(
            Some(ADMIN_TOKEN),
            Method::DELETE,
            &app.path("/keys/%00"),
            None,
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::NOT_FOUND,
        "an id no key could have"
    );
    let listed = app
        .send_as(Some(ADMIN_TOKEN), Method::GET, &keys, None)
        .await;
    assert_eq!(listed.body["keys"], json!([]));
}

async fn bad_key_requests_are_refused_naming_the_field(backend: Backend) {
    let app = TestApp::builder(backend)
        .credentials(Duration::from_secs(60))
        .build()
        .await;
    let keys = app.path("/keys");
    for (body, field) in [
        (json!({"scopes": []}), "scopes"),
        (json!({"scopes": ["root"]}), "scopes[0]"),
        (
            json!({"scopes": ["silo"], "label": "x".repeat(201)}),
            "label",
        ),
        (json!({"scopes": ["silo"], "secret": "mine"}), "secret"),
    ] {
        let reply = app
            .send_as(Some(ADMIN_TOKEN), Method::POST, &keys, Some(body.clone()))
            .await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        let fields: Vec<&str> = reply.body["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["field"].as_str().unwrap())
            .collect();
        assert!(fields.contains(&field), "{body}: {}", reply.body);
    }
    let reply = app
        .send_as(
            Some("not-the-admin-token-at-all-0000"),
            Method::GET,
            &keys,
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
}

async fn a_cluster_holds_at_most_a_hundred_keys(backend: Backend) {
    let app = TestApp::builder(backend)
        .credentials(Duration::from_secs(60))
        .build()
        .await;
    for _ in 0..100 {
        app.issue_key(&app.cluster, &["silo"]).await;
    }
    let reply = app
        .send_as(
            Some(ADMIN_TOKEN),
            Method::POST,
            &app.path("/keys"),
            Some(json!({"scopes": ["silo"]})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.body);
    assert_eq!(
        reply.body["type"],
        json!("urn:placement-oracle:problem:key-limit-reached")
    );
    // Another cluster is not held back by this one's keys.
    app.issue_key(&unique_cluster(), &["silo"]).await;
}

for_each_store!(
    a_key_lives_from_issue_to_revocation,
    bad_key_requests_are_refused_naming_the_field,
    a_cluster_holds_at_most_a_hundred_keys,
);

/// Replicas share keys through the store: a key issued through one works on another, and a key
/// revoked through one stops working on a replica that does not keep keys (TTL 0) at once.
#[tokio::test]
async fn keys_work_across_replicas_and_revocation_reaches_them() {
    let (_database, a, b) = TestApp::two_replicas().await;
    let a = a
        .sibling()
        .seed(1)
        .credentials(Duration::from_secs(60))
        .build()
        .await;
    let b = b
        .sibling()
        .seed(2)
        .credentials(Duration::ZERO)
        .build()
        .await;
    let (id, key) = a.issue_key(&a.cluster, &["silo"]).await;
    let beat = json!({"silo": "10.0.0.5:11111@1"});
    for replica in [&a, &b] {
        let reply = replica
            .send_as(
                Some(&key),
                Method::POST,
                &replica.path("/heartbeats"),
                Some(beat.clone()),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    let reply = a
        .send_as(
            Some(ADMIN_TOKEN),
            Method::DELETE,
            &a.path(&format!("/keys/{id}")),
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    for replica in [&a, &b] {
        let reply = replica
            .send_as(
                Some(&key),
                Method::POST,
                &replica.path("/heartbeats"),
                Some(beat.clone()),
            )
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);
    }
}

/// With `ORACLE_KEY_HASH_SECRET`, the admin token can change and the keys still work; without
/// it, keys are hashed under the admin token and a new token invalidates them; set to the old
/// token, it keeps the keys issued before it was set.
#[tokio::test]
async fn a_new_admin_token_keeps_keys_only_with_a_key_hash_secret() {
    use placement_oracle::oracle::AdminCredentials;
    use placement_oracle::secret::Secret;

    let hash_secret = Secret::new("a-key-hash-secret-0123456789abcdef");
    let ttl = Duration::from_secs(60);
    let plain = TestApp::new(Backend::Memory).await;
    let with = |token: &str, key_hash_secret: Option<&Secret>| {
        plain
            .sibling()
            .admin(AdminCredentials {
                admin_token: Secret::new(token),
                key_hash_secret: key_hash_secret.cloned(),
                key_cache_ttl: ttl,
            })
            .build()
    };
    let before = with(ADMIN_TOKEN, Some(&hash_secret)).await;
    let (_, key) = before.issue_key(&before.cluster, &["silo"]).await;
    const NEW_TOKEN: &str = "a-new-admin-token-fedcba9876543210";
    let beat = json!({"silo": "10.0.0.5:11111@1"});
    let kept = with(NEW_TOKEN, Some(&hash_secret)).await;
    let reply = kept
        .send_as(
            Some(&key),
            Method::POST,
            &kept.path("/heartbeats"),
            Some(beat.clone()),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let lost = with(NEW_TOKEN, None).await;
    let reply = lost
        .send_as(
            Some(&key),
            Method::POST,
            &lost.path("/heartbeats"),
            Some(beat),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.body);

    // Keys issued without a hash secret survive a rotation whose hash secret is the old token.
    let unsecreted = with(ADMIN_TOKEN, None).await;
    let (_, old_key) = unsecreted.issue_key(&unsecreted.cluster, &["silo"]).await;
    let migrated = with(NEW_TOKEN, Some(&Secret::new(ADMIN_TOKEN))).await;
    let reply = migrated
        .send_as(
            Some(&old_key),
            Method::POST,
            &migrated.path("/heartbeats"),
            Some(json!({"silo": "10.0.0.6:11111@1"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
}

/// Without an admin token nothing asks for a credential, and no key can be issued.
#[tokio::test]
async fn open_mode_asks_for_nothing_and_issues_no_keys() {
    let app = TestApp::new(Backend::Memory).await;
    app.heartbeat("10.0.0.5:11111@1", json!({})).await;
    let reply = app.post("/keys", json!({"scopes": ["silo"]})).await;
    assert_eq!(reply.status, StatusCode::CONFLICT);
    assert_eq!(
        reply.body["type"],
        json!("urn:placement-oracle:problem:open-mode")
    );
}

/// `serve` refuses a non-loopback address in open mode, saying how to set a token.
#[tokio::test]
async fn open_mode_refuses_to_serve_on_a_public_address() {
    let mut config = placement_oracle::config::Config::defaults();
    config.admin_token = None;
    config.admin_token_file = None;
    config.insecure_open = false;
    let store = crate::helpers::memory_store(&placement_oracle::clock::ManualClock::starting_at(
        crate::helpers::START_MS,
    ));
    let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let refused = placement_oracle::serve(config, store, listener, async {})
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("ORACLE_ADMIN_TOKEN"), "{refused}");
    assert!(refused.contains("--insecure-open"), "{refused}");
}

/// A request's logs name its caller by key id, and never show the key or the admin token.
#[tokio::test]
async fn logs_name_the_key_and_never_show_a_secret() {
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let app = TestApp::builder(Backend::Memory)
        .credentials(Duration::from_secs(60))
        .build()
        .await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (id, key) = app.issue_key(&app.cluster, &["silo"]).await;
    let reply = app
        .send_as(
            Some(&key),
            Method::POST,
            &app.path("/heartbeats"),
            Some(json!({"silo": "10.0.0.5:11111@1"})),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains(&format!("key:{id}")), "{logs}");
    assert!(logs.contains("cluster key issued"), "{logs}");
    assert!(
        !logs.contains(&key[21..]),
        "a key's secret reached the logs:\n{logs}"
    );
    assert!(
        !logs.contains(ADMIN_TOKEN),
        "the admin token reached the logs:\n{logs}"
    );
}
