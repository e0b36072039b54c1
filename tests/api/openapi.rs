//! The committed spec (`openapi/openapi.json`) is what the code serves; clients generate from it.

use axum::http::StatusCode;

use crate::helpers::{Backend, TestApp};

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
