//! The committed spec (`openapi/openapi.json`) is what the code serves; clients generate from it.

use axum::http::StatusCode;
use serde_json::Value;

use crate::helpers::{Backend, TestApp, ADMIN_TOKEN};

const COMMITTED: &str = "openapi/openapi.json";

#[test]
fn the_committed_openapi_document_matches_the_code() {
    let generated = serde_json::to_string_pretty(placement_oracle::http::openapi()).unwrap() + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(COMMITTED);
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{COMMITTED} is out of date with the code. Regenerate it with\n\n    \
         cargo run -- openapi > {COMMITTED}\n\n(or UPDATE_OPENAPI=1 cargo test openapi) and commit the result."
    );
}

#[test]
fn every_operation_has_one_tag_a_summary_and_documented_errors() {
    let spec = placement_oracle::http::openapi();
    for (path, item) in spec["paths"].as_object().unwrap() {
        assert!(
            !path.contains('*'),
            "{path}: OpenAPI has no wildcard segments"
        );
        for (method, operation) in item.as_object().unwrap() {
            let tags = operation["tags"].as_array().map_or(0, Vec::len);
            assert_eq!(tags, 1, "{method} {path} needs exactly one tag");
            assert!(
                operation["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{method} {path} needs a summary"
            );
            if path.starts_with("/v1/") {
                let responses = operation["responses"].as_object().unwrap();
                assert!(
                    responses
                        .keys()
                        .any(|status| status.starts_with('4') || status.starts_with('5')),
                    "{method} {path} documents no error response"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_spec_and_swagger_ui_are_served() {
    let app = TestApp::new(Backend::Memory).await;
    let spec = app
        .send(axum::http::Method::GET, "/openapi.json", None)
        .await;
    assert_eq!(spec.status, StatusCode::OK);
    assert!(spec.body["paths"]["/v1/clusters/{cluster}/placements"].is_object());
    let ui = app
        .send(axum::http::Method::GET, "/swagger-ui/", None)
        .await;
    assert_eq!(ui.status, StatusCode::OK);
    assert!(ui.body.as_str().unwrap().contains("swagger-ui"));
}

/// An oracle in open mode asks no credential, and its served document says so: every requirement
/// has the empty alternative ("no authentication") and no operation lists 401 or 403. An oracle
/// with an admin token serves the published document unchanged.
#[tokio::test]
async fn the_served_spec_tells_whether_credentials_are_required() {
    let published = placement_oracle::http::openapi();
    let open = TestApp::new(Backend::Memory).await;
    let served = open
        .send(axum::http::Method::GET, "/openapi.json", None)
        .await
        .body;
    let mut guarded = 0;
    for (path, item) in published["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Some(requirements) = operation["security"].as_array() else {
                continue;
            };
            guarded += 1;
            let open_operation = &served["paths"][path][method];
            let open_requirements = open_operation["security"].as_array().unwrap();
            assert_eq!(
                &open_requirements[..requirements.len()],
                &requirements[..],
                "{method} {path}: the scopes are still named"
            );
            assert!(
                open_requirements.contains(&serde_json::json!({})),
                "{method} {path}: open mode makes the credential optional"
            );
            for status in ["401", "403"] {
                assert!(operation["responses"][status].is_object());
                assert!(
                    open_operation["responses"][status].is_null(),
                    "{method} {path}: open mode never answers {status}"
                );
            }
        }
    }
    assert!(guarded > 25, "the cluster routes declare their credentials");

    let configured = TestApp::builder(Backend::Memory)
        .credentials(std::time::Duration::from_secs(60))
        .build()
        .await;
    let served = configured
        .send(axum::http::Method::GET, "/openapi.json", None)
        .await
        .body;
    assert_eq!(&served, published);
}

/// The spec's own examples, run in the order a person trying the API in Swagger UI would: each
/// request is built from the published examples only (bodies, path, query and header parameters),
/// and each succeeds.
#[tokio::test]
async fn the_specs_examples_work_when_tried_in_order() {
    use axum::http::Method;

    // As an operator would try it: with the admin token in Swagger UI's Authorize dialog.
    let app = TestApp::builder(Backend::Memory)
        .credentials(std::time::Duration::from_secs(60))
        .build()
        .await;
    let spec = placement_oracle::http::openapi();
    let steps: [(Method, &str); 30] = [
        (Method::POST, "/v1/clusters/{cluster}/keys"),
        (Method::GET, "/v1/clusters/{cluster}/keys"),
        (Method::POST, "/v1/clusters/{cluster}/heartbeats"),
        (Method::GET, "/v1/clusters/{cluster}/silos"),
        (Method::GET, "/v1/clusters/{cluster}/silos/{silo}"),
        (Method::POST, "/v1/clusters/{cluster}/placements"),
        (Method::POST, "/v1/clusters/{cluster}/placements/batch"),
        (Method::POST, "/v1/clusters/{cluster}/placements/preview"),
        (Method::GET, "/v1/clusters"),
        (Method::GET, "/v1/clusters/{cluster}/distribution"),
        (Method::GET, "/v1/clusters/{cluster}/activations/{grain}"),
        (Method::GET, "/v1/clusters/{cluster}/activations"),
        (Method::GET, "/v1/clusters/{cluster}/policy"),
        (Method::PUT, "/v1/clusters/{cluster}/policy"),
        (Method::PUT, "/v1/clusters/{cluster}/pools/{pool}"),
        (Method::GET, "/v1/clusters/{cluster}/pools/{pool}"),
        (Method::GET, "/v1/clusters/{cluster}/migrations"),
        (Method::GET, "/v1/clusters/{cluster}/rebalancer"),
        (Method::POST, "/v1/clusters/{cluster}/rebalancer/cycles"),
        (Method::POST, "/v1/clusters/{cluster}/rebalancer/suspend"),
        (Method::POST, "/v1/clusters/{cluster}/rebalancer/resume"),
        (Method::POST, "/v1/clusters/{cluster}/rebalancer/sessions"),
        (Method::POST, "/v1/clusters/{cluster}/edges"),
        (Method::GET, "/v1/clusters/{cluster}/repartitioner"),
        (Method::POST, "/v1/clusters/{cluster}/repartitioner/rounds"),
        (
            Method::POST,
            "/v1/clusters/{cluster}/pools/{pool}/connections",
        ),
        (Method::DELETE, "/v1/clusters/{cluster}/activations/{grain}"),
        (Method::POST, "/v1/clusters/{cluster}/silos/{silo}/drain"),
        (Method::DELETE, "/v1/clusters/{cluster}/silos/{silo}"),
        (Method::GET, "/healthz"),
    ];
    let tried: usize = spec["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    assert_eq!(
        tried,
        steps.len() + 5,
        "every operation is tried but /readyz, /metrics, completing or failing a migration \
         (which needs one that a rebalancer or a drain issued) and revoking a key (which needs \
         the id of one just issued)"
    );
    for (method, template) in steps {
        let operation = &spec["paths"][template][method.as_str().to_lowercase()];
        let mut path = template.to_owned();
        let mut query = Vec::new();
        let mut request = axum::http::Request::builder()
            .method(method.clone())
            .header("authorization", format!("Bearer {ADMIN_TOKEN}"));
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            let name = parameter["name"].as_str().unwrap();
            let example = &parameter["example"];
            let text = match example {
                Value::String(text) => text.clone(),
                Value::Null if parameter["required"] == true => {
                    panic!("{method} {template}: required parameter {name} has no example")
                }
                Value::Null => continue,
                other => other.to_string(),
            };
            let encoded = form_urlencoded::byte_serialize(text.as_bytes()).collect::<String>();
            match parameter["in"].as_str().unwrap() {
                "path" => path = path.replace(&format!("{{{name}}}"), &encoded),
                "query" => query.push(format!("{name}={encoded}")),
                "header" => request = request.header(name, text),
                other => panic!("parameter in {other}"),
            }
        }
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let body = match operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
            .as_str()
        {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap();
                let example = spec["components"]["schemas"][name]["example"].clone();
                assert!(
                    !example.is_null(),
                    "{method} {template}: {name} has no example"
                );
                request = request.header("content-type", "application/json");
                axum::body::Body::from(example.to_string())
            }
            None => axum::body::Body::empty(),
        };
        let reply = app
            .send_request(request.uri(&path).body(body).unwrap())
            .await;
        assert!(
            reply.status.is_success(),
            "{method} {path} with the spec's examples: {} {}",
            reply.status,
            reply.body
        );
    }
}

/// `placement-oracle openapi | head`: a reader that stops early closes the pipe, and the command
/// ends quietly (it used to panic on the closed pipe).
#[test]
fn printing_the_spec_into_a_pipe_closed_early_ends_quietly() {
    use std::io::Read;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_placement-oracle"))
        .arg("openapi")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run the binary");
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The pipe is closed here, with most of the spec unread.
    let out = child.wait_with_output().unwrap();
    assert_eq!(&first[..1], b"{");
    assert!(
        out.status.success(),
        "{}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
